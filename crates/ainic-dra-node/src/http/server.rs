//! The accept loop and connection handling of the agent's HTTP endpoint.
//! The agent runs on the host network, so whoever reaches the node may
//! connect: the endpoint must not let a flood of idle or slow (slowloris)
//! connections take the file descriptors the kubelet's sockets and the
//! checkpoint need, nor spin a core when accept fails.
//!
//! - At most [`Limits::max_connections`] connections are served; at the
//!   cap the oldest one is closed to make room, so a flood cannot lock a
//!   new client (the kubelet's probe) out, and holds no more descriptors
//!   than the cap.
//! - A connection must send each request's headers within
//!   [`Limits::header_timeout`] (also the idle time allowed between
//!   requests on a kept-alive connection), and lives at most
//!   [`Limits::max_lifetime`].
//! - A failing accept (EMFILE, ENFILE, ENOBUFS) waits before the next
//!   try, from [`BACKOFF_FIRST`] doubling up to [`BACKOFF_MAX`], instead
//!   of retrying at once while the listening socket stays readable.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::{HttpState, route};

/// The first wait after a failed accept.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(5);
/// The longest wait between failed accepts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How much the endpoint serves at once, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time allowed for a request's headers, and between requests.
    pub header_timeout: Duration,
    /// Longest life of one connection.
    pub max_lifetime: Duration,
}

impl Limits {
    /// The most connections ever served at once: probes and a scraper or
    /// two need a handful.
    pub(crate) const MAX_CONNECTIONS: usize = 32;

    /// Limits for a process allowed `soft` open files (`None`: no
    /// limit): at most a quarter of them for HTTP connections, so the
    /// rest stay for the kubelet's sockets, API connections and files.
    pub(crate) fn for_nofile(soft: Option<u64>) -> Limits {
        let quarter = soft.map_or(usize::MAX, |s| usize::try_from(s / 4).unwrap_or(usize::MAX));
        Limits {
            max_connections: quarter.clamp(2, Self::MAX_CONNECTIONS),
            header_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(60),
        }
    }
}

/// Where connections come from: a TCP listener, or a fake in tests.
pub(crate) trait Accept: Send + 'static {
    /// One accepted connection.
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection, or why none could be accepted.
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Conn>> + Send;
}

impl Accept for TcpListener {
    type Conn = TcpStream;

    async fn accept(&mut self) -> io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(stream, _)| stream)
    }
}

/// The waits between failed accepts: doubling while accept keeps failing,
/// back to the first after a success.
#[derive(Debug, Default)]
struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    /// The wait before the next accept after a failure; whether this
    /// failure starts a run of them (worth a warning: the rest are not).
    fn failed(&mut self) -> (Duration, bool) {
        let first = self.next.is_none();
        let wait = self.next.unwrap_or(BACKOFF_FIRST);
        self.next = Some((wait * 2).min(BACKOFF_MAX));
        (wait, first)
    }

    fn succeeded(&mut self) {
        self.next = None;
    }
}

/// The connections being served, oldest first, each with the sender that
/// closes it.
struct Open {
    max: usize,
    connections: VecDeque<oneshot::Sender<()>>,
}

impl Open {
    /// Makes room for one more connection, closing the oldest at the cap;
    /// the receiver that tells the new one to close, and whether one was
    /// closed.
    fn admit(&mut self) -> (oneshot::Receiver<()>, bool) {
        // A connection that ended dropped its receiver.
        self.connections.retain(|c| !c.is_closed());
        let mut evicted = false;
        while self.connections.len() >= self.max {
            if let Some(oldest) = self.connections.pop_front() {
                let _ = oldest.send(());
                evicted = true;
            }
        }
        let (close, closed) = oneshot::channel();
        self.connections.push_back(close);
        (closed, evicted)
    }
}

/// Serves `state` on connections from `acceptor` under `limits`, forever.
pub(crate) async fn run<A: Accept>(mut acceptor: A, state: HttpState, limits: Limits) {
    let mut backoff = Backoff::default();
    let mut open = Open {
        max: limits.max_connections.max(1),
        connections: VecDeque::new(),
    };
    loop {
        match acceptor.accept().await {
            Ok(conn) => {
                backoff.succeeded();
                let (closed, evicted) = open.admit();
                if evicted {
                    state.metrics.http_connection_evicted();
                }
                tokio::spawn(serve_connection(conn, state.clone(), limits, closed));
            }
            Err(error) => {
                state.metrics.http_accept_failed();
                let (wait, first) = backoff.failed();
                if first {
                    tracing::warn!(%error, "http endpoint cannot accept connections; retrying with backoff");
                } else {
                    tracing::debug!(%error, wait_ms = wait.as_millis(), "http accept failed again");
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Serves one connection until it ends, times out, or is closed to make
/// room.
async fn serve_connection<C>(io: C, state: HttpState, limits: Limits, closed: oneshot::Receiver<()>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(state);
    let service = service_fn(move |req: Request<Incoming>| {
        let response = route(&state, req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::select! {
        ended = conn => if let Err(error) = ended {
            tracing::debug!(%error, "http connection ended");
        },
        _ = closed => tracing::debug!("http connection closed to make room for a newer one"),
        () = tokio::time::sleep(limits.max_lifetime) => tracing::debug!("http connection closed: too old"),
    }
}

#[cfg(test)]
mod tests;
