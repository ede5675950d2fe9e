//! NRI's connection multiplexer: two ttrpc connections over one unix
//! socket (the "trunk").
//!
//! Every frame on the trunk is an 8-byte header, the connection ID and the
//! payload length as big-endian `u32`s, then the payload. The payload bytes
//! of one connection form a byte stream: frames are not message boundaries.
//! Connection 1 carries the runtime's calls to the plugin, connection 2 the
//! plugin's calls to the runtime; nothing is sent to open or close one, and
//! frames for a connection nobody opened are dropped.
//!
//! How a message is cut into frames matters to the Go peer: it reads each
//! connection through a 4096-byte buffer and cannot take a frame bigger
//! than that buffer while it is empty. So a message goes out as its first
//! 4096 bytes, then the rest in frames of at most [`MAX_PAYLOAD`] (the
//! shape Go's own buffered writer produces), and one frame never holds
//! bytes of two messages.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Mutex, mpsc};

/// The connection on which the runtime calls the plugin's services.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The connection on which the plugin calls the runtime's services.
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// The largest payload of one frame.
pub const MAX_PAYLOAD: usize = 10 + (4 << 20);
/// The most a first frame of a message may carry (the Go peer's buffer).
pub const FIRST_FRAME: usize = 4096;
/// Frames queued per connection before the trunk reader waits.
const QUEUE: usize = 256;

/// The sending side of the trunk, shared by every connection.
#[derive(Clone)]
pub struct Trunk {
    writer: Arc<Mutex<OwnedWriteHalf>>,
}

/// One multiplexed connection: its incoming payload chunks and the trunk
/// to write on.
pub struct Conn {
    /// The connection ID.
    pub id: u32,
    /// Payload chunks received for it, in order; closed when the trunk is.
    pub incoming: mpsc::Receiver<Vec<u8>>,
    /// Where its writes go.
    pub trunk: Trunk,
}

/// Splits `stream` into the connections `ids` and starts the task that
/// reads the trunk. The task ends, closing every connection's
/// [`Conn::incoming`], when the peer closes the socket or sends a frame
/// that cannot be read.
pub fn split(stream: UnixStream, ids: &[u32]) -> Vec<Conn> {
    let (reader, writer) = stream.into_split();
    let trunk = Trunk {
        writer: Arc::new(Mutex::new(writer)),
    };
    let mut senders = HashMap::new();
    let conns = ids
        .iter()
        .map(|&id| {
            let (tx, rx) = mpsc::channel(QUEUE);
            senders.insert(id, tx);
            Conn {
                id,
                incoming: rx,
                trunk: trunk.clone(),
            }
        })
        .collect();
    tokio::spawn(read_trunk(reader, senders));
    conns
}

async fn read_trunk(mut reader: OwnedReadHalf, senders: HashMap<u32, mpsc::Sender<Vec<u8>>>) {
    loop {
        let mut header = [0u8; 8];
        if let Err(e) = reader.read_exact(&mut header).await {
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                tracing::warn!(error = %e, "nri: reading the socket failed");
            }
            return;
        }
        let (id, len) = parse_header(header);
        if len > MAX_PAYLOAD {
            tracing::warn!(
                conn = id,
                len,
                "nri: frame larger than the protocol allows; closing"
            );
            return;
        }
        let mut payload = vec![0u8; len];
        if let Err(e) = reader.read_exact(&mut payload).await {
            tracing::warn!(error = %e, "nri: the socket closed inside a frame");
            return;
        }
        match senders.get(&id) {
            Some(tx) => {
                if tx.send(payload).await.is_err() {
                    tracing::debug!(conn = id, "nri: frame for a connection no longer read");
                }
            }
            None => tracing::debug!(conn = id, "nri: frame for an unopened connection dropped"),
        }
    }
}

/// The connection ID and payload length of a frame header.
pub fn parse_header(header: [u8; 8]) -> (u32, usize) {
    let id = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    (id, len as usize)
}

/// The frames that carry `message` on connection `id` (see the module
/// doc for the cut).
pub fn frames(id: u32, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 16);
    let (first, mut rest) = message.split_at(message.len().min(FIRST_FRAME));
    push_frame(&mut out, id, first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_PAYLOAD));
        push_frame(&mut out, id, chunk);
        rest = tail;
    }
    out
}

fn push_frame(out: &mut Vec<u8>, id: u32, payload: &[u8]) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

impl Trunk {
    /// Writes one whole message of connection `id`.
    pub async fn send(&self, id: u32, message: &[u8]) -> std::io::Result<()> {
        let bytes = frames(id, message);
        let mut writer = self.writer.lock().await;
        writer.write_all(&bytes).await?;
        writer.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_message_is_one_frame() {
        let bytes = frames(2, b"hello");
        assert_eq!(bytes, [&[0, 0, 0, 2, 0, 0, 0, 5][..], b"hello"].concat());
    }

    #[test]
    fn a_large_message_is_4096_bytes_then_the_rest() {
        let message = vec![7u8; 10_000];
        let bytes = frames(1, &message);
        assert_eq!(parse_header(bytes[..8].try_into().unwrap()), (1, 4096));
        let second = 8 + 4096;
        assert_eq!(
            parse_header(bytes[second..second + 8].try_into().unwrap()),
            (1, 10_000 - 4096)
        );
        assert_eq!(bytes.len(), 10_000 + 16);
    }

    #[test]
    fn a_message_past_the_payload_limit_is_cut_at_it() {
        let message = vec![1u8; FIRST_FRAME + MAX_PAYLOAD + 3];
        let bytes = frames(1, &message);
        let mut at = 0;
        let mut lens = Vec::new();
        while at < bytes.len() {
            let (_, len) = parse_header(bytes[at..at + 8].try_into().unwrap());
            lens.push(len);
            at += 8 + len;
        }
        assert_eq!(lens, [FIRST_FRAME, MAX_PAYLOAD, 3]);
    }

    #[tokio::test]
    async fn frames_reach_their_connection_and_unopened_ones_are_dropped() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut conns = split(a, &[1, 2]);
        let mut peer = b;
        let mut wire = frames(9, b"nobody");
        wire.extend(frames(2, b"two"));
        wire.extend(frames(1, b"one"));
        peer.write_all(&wire).await.unwrap();
        assert_eq!(conns[1].incoming.recv().await.unwrap(), b"two");
        assert_eq!(conns[0].incoming.recv().await.unwrap(), b"one");
        conns[0].trunk.send(1, b"back").await.unwrap();
        let mut got = [0u8; 12];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(got, *[&[0, 0, 0, 1, 0, 0, 0, 4][..], b"back"].concat());
        drop(peer);
        assert!(conns[0].incoming.recv().await.is_none());
    }
}
