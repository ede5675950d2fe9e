//! Unary ttrpc over one multiplexed connection: what NRI's two
//! connections speak.
//!
//! A ttrpc message is a 10-byte header (payload length and stream ID as
//! big-endian `u32`s, a type byte, a flags byte) and a protobuf payload:
//! a `Request` (type 1) names service and method and carries the call's
//! message, the `Response` (type 2) on the same stream carries a status
//! and the reply. Clients number their streams with odd, increasing IDs.
//!
//! Written here rather than taken from the `ttrpc` crate: NRI runs ttrpc
//! inside its own multiplexer, which no crate provides, so the crate would
//! only save this file's framing while bringing a second protobuf stack
//! (or a system `protoc` at build time for its prost flavour, which the
//! project avoids), nix 0.26, crossbeam and vsock support into the node
//! agent. NRI needs unary calls only.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use prost::Message;
use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};

use crate::mux::{Conn, Trunk};

/// The largest ttrpc payload.
pub const MAX_MESSAGE: usize = 4 << 20;
const HEADER: usize = 10;
const TYPE_REQUEST: u8 = 1;
const TYPE_RESPONSE: u8 = 2;

/// gRPC status codes ttrpc uses that this crate sets or reads.
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// A handler's own failure.
    pub const UNKNOWN: i32 = 2;
    /// A request that cannot be decoded.
    pub const INVALID_ARGUMENT: i32 = 3;
    /// The method is not served (NRI then falls back to `StateChange`).
    pub const UNIMPLEMENTED: i32 = 12;
}

/// ttrpc's request envelope.
#[derive(Clone, PartialEq, Message)]
pub struct Request {
    /// Full service name (`nri.pkg.api.v1alpha1.Plugin`).
    #[prost(string, tag = "1")]
    pub service: String,
    /// Method name (`Configure`).
    #[prost(string, tag = "2")]
    pub method: String,
    /// The call's message.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline, in nanoseconds from sending (0: none).
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    /// Metadata pairs.
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// A metadata pair.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// ttrpc's response envelope.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    /// The outcome; none or code 0 is success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The reply message.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status` without details.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Status {
    /// gRPC code ([`code`]).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong.
    #[prost(string, tag = "2")]
    pub message: String,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }
}

/// Why a call or a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum TtrpcError {
    /// The connection or its socket closed.
    #[error("the NRI connection closed")]
    Closed,
    /// Writing to the socket failed.
    #[error("writing to the NRI socket failed: {0}")]
    Write(#[from] std::io::Error),
    /// The peer broke the protocol.
    #[error("NRI protocol error: {0}")]
    Protocol(String),
    /// The peer answered with a failure status.
    #[error("{method}: the runtime answered code {} ({})", .status.code, .status.message)]
    Status {
        /// The method called.
        method: String,
        /// Its answer.
        status: Status,
    },
    /// No answer in time.
    #[error("{method}: no answer within {timeout:?}")]
    Timeout {
        /// The method called.
        method: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// One ttrpc message off a connection.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Stream ID.
    pub stream: u32,
    /// Message type (1 request, 2 response, 3 data).
    pub kind: u8,
    /// The protobuf payload.
    pub payload: Vec<u8>,
}

/// Encodes one ttrpc message.
pub fn encode(stream: u32, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(payload);
    out
}

/// Reads whole ttrpc messages from a connection's payload stream.
pub struct Reader {
    incoming: mpsc::Receiver<Vec<u8>>,
    buffer: Vec<u8>,
}

impl Reader {
    /// Reads messages from `incoming`.
    pub fn new(incoming: mpsc::Receiver<Vec<u8>>) -> Reader {
        Reader {
            incoming,
            buffer: Vec::new(),
        }
    }

    /// The next message; `None` once the connection closed between
    /// messages.
    pub async fn next(&mut self) -> Result<Option<Frame>, TtrpcError> {
        loop {
            if let Some(frame) = self.take()? {
                return Ok(Some(frame));
            }
            match self.incoming.recv().await {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None if self.buffer.is_empty() => return Ok(None),
                None => return Err(TtrpcError::Protocol("closed inside a message".into())),
            }
        }
    }

    fn take(&mut self) -> Result<Option<Frame>, TtrpcError> {
        if self.buffer.len() < HEADER {
            return Ok(None);
        }
        let b = &self.buffer;
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(TtrpcError::Protocol(format!(
                "message of {len} bytes exceeds the {MAX_MESSAGE}-byte limit"
            )));
        }
        if b.len() < HEADER + len {
            return Ok(None);
        }
        let frame = Frame {
            stream: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            kind: b[8],
            payload: b[HEADER..HEADER + len].to_vec(),
        };
        self.buffer.drain(..HEADER + len);
        Ok(Some(frame))
    }
}

/// A service a connection serves: answers `method` of `service` with the
/// encoded reply or a failure status.
pub trait Service: Send + Sync + 'static {
    /// Handles one call.
    fn call(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
    ) -> impl Future<Output = Result<Vec<u8>, Status>> + Send;
}

/// Most calls served at once on one connection. A runtime sends a hook per
/// pod sandbox event, each answered in milliseconds; past this many the
/// connection is not read until one ends, so a runtime (or anything on
/// its socket) flooding calls cannot grow tasks and memory without bound.
pub const MAX_CALLS_IN_FLIGHT: usize = 32;

/// Serves `service` on `conn` until the connection closes; each call runs
/// in a task of its own, so a slow hook does not hold up the others, at
/// most [`MAX_CALLS_IN_FLIGHT`] at once.
pub async fn serve<S: Service>(conn: Conn, service: Arc<S>) -> Result<(), TtrpcError> {
    let id = conn.id;
    let trunk = conn.trunk;
    let mut reader = Reader::new(conn.incoming);
    let in_flight = Arc::new(Semaphore::new(MAX_CALLS_IN_FLIGHT));
    while let Some(frame) = reader.next().await? {
        if frame.kind != TYPE_REQUEST {
            tracing::debug!(
                kind = frame.kind,
                "nri: non-request message on a served connection"
            );
            continue;
        }
        let permit = in_flight.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        let (service, trunk) = (service.clone(), trunk.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let response = answer(&*service, &frame.payload).await;
            let message = encode(frame.stream, TYPE_RESPONSE, &response.encode_to_vec());
            if let Err(e) = trunk.send(id, &message).await {
                tracing::warn!(error = %e, "nri: cannot send a reply");
            }
        });
    }
    Ok(())
}

async fn answer<S: Service>(service: &S, payload: &[u8]) -> Response {
    let request = match Request::decode(payload) {
        Ok(r) => r,
        Err(e) => {
            return Response {
                status: Some(Status::new(code::INVALID_ARGUMENT, e.to_string())),
                payload: Vec::new(),
            };
        }
    };
    match service
        .call(&request.service, &request.method, request.payload)
        .await
    {
        Ok(reply) => Response {
            status: Some(Status::new(code::OK, "")),
            payload: reply,
        },
        Err(status) => Response {
            status: Some(status),
            payload: Vec::new(),
        },
    }
}

/// Calls waiting for their answer; `None` once the connection closed, so
/// a later call fails at once instead of waiting out its timeout.
type Pending = Arc<Mutex<Option<HashMap<u32, oneshot::Sender<Response>>>>>;

/// The calling side of a connection.
pub struct Client {
    id: u32,
    trunk: Trunk,
    next_stream: AtomicU32,
    pending: Pending,
}

impl Client {
    /// A client on `conn`; starts the task that reads its answers.
    pub fn new(conn: Conn) -> Client {
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        tokio::spawn(read_answers(Reader::new(conn.incoming), pending.clone()));
        Client {
            id: conn.id,
            trunk: conn.trunk,
            next_stream: AtomicU32::new(1),
            pending,
        }
    }

    /// Calls `service`/`method` with `message`, waiting at most `timeout`.
    pub async fn call<M: Message, R: Message + Default>(
        &self,
        service: &str,
        method: &str,
        message: &M,
        timeout: Duration,
    ) -> Result<R, TtrpcError> {
        let stream = self.next_stream.fetch_add(2, Ordering::Relaxed);
        let request = Request {
            service: service.to_string(),
            method: method.to_string(),
            payload: message.encode_to_vec(),
            timeout_nano: timeout.as_nanos() as i64,
            metadata: Vec::new(),
        };
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().await.as_mut() {
            Some(pending) => pending.insert(stream, tx),
            None => return Err(TtrpcError::Closed),
        };
        let bytes = encode(stream, TYPE_REQUEST, &request.encode_to_vec());
        self.trunk.send(self.id, &bytes).await?;
        let response = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return Err(TtrpcError::Closed),
            Err(_) => {
                if let Some(pending) = self.pending.lock().await.as_mut() {
                    pending.remove(&stream);
                }
                let method = method.to_string();
                return Err(TtrpcError::Timeout { method, timeout });
            }
        };
        match response.status {
            Some(status) if status.code != code::OK => Err(TtrpcError::Status {
                method: method.to_string(),
                status,
            }),
            _ => R::decode(&response.payload[..])
                .map_err(|e| TtrpcError::Protocol(format!("{method}: undecodable answer: {e}"))),
        }
    }
}

async fn read_answers(mut reader: Reader, pending: Pending) {
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "nri: reading answers failed");
                break;
            }
        };
        if frame.kind != TYPE_RESPONSE {
            continue;
        }
        let waiting = pending
            .lock()
            .await
            .as_mut()
            .and_then(|p| p.remove(&frame.stream));
        let Some(tx) = waiting else {
            tracing::debug!(stream = frame.stream, "nri: answer to no pending call");
            continue;
        };
        match Response::decode(&frame.payload[..]) {
            Ok(response) => {
                let _ = tx.send(response);
            }
            Err(e) => tracing::warn!(error = %e, "nri: undecodable answer"),
        }
    }
    // Dropping the senders fails every pending call with `Closed`, and
    // later calls fail at once.
    pending.lock().await.take();
}

#[cfg(test)]
mod tests;
