//! The accept loop under failure and abuse, on paused time with in-memory
//! connections: no sockets, no waiting.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, watch};

use super::*;
use crate::http::metrics::Metrics;
use crate::plugin::registration::Registration;

fn state() -> HttpState {
    let (_, registration) = watch::channel(Registration::Registered);
    HttpState {
        metrics: Arc::new(Metrics::default()),
        registration,
        published: watch::channel(None).1,
    }
}

const LIMITS: Limits = Limits {
    max_connections: 4,
    header_timeout: Duration::from_secs(5),
    max_lifetime: Duration::from_secs(60),
};

/// Fails every accept as a process out of descriptors does; counts the
/// tries and stops answering after [`Failing::GIVE_UP`] (a loop that
/// never waits would otherwise never yield).
struct Failing(Arc<AtomicUsize>);

impl Failing {
    const GIVE_UP: usize = 1000;
}

impl Accept for Failing {
    type Conn = DuplexStream;

    async fn accept(&mut self) -> io::Result<DuplexStream> {
        if self.0.fetch_add(1, Ordering::Relaxed) >= Self::GIVE_UP {
            std::future::pending::<()>().await;
        }
        Err(io::Error::from_raw_os_error(24)) // EMFILE
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_accept_backs_off_instead_of_spinning() {
    let tries = Arc::new(AtomicUsize::new(0));
    let state = state();
    let metrics = state.metrics.clone();
    let server = tokio::spawn(run(Failing(tries.clone()), state, LIMITS));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let tried = tries.load(Ordering::Relaxed);
    // 5 ms doubling to 1 s: 8 tries in the first 1.3 s, then one a second.
    assert!(
        (10..30).contains(&tried),
        "{tried} accepts in 10 s (a spinning loop makes {})",
        Failing::GIVE_UP
    );
    assert!(
        metrics
            .encode()
            .contains(&format!("ainic_dra_http_accept_errors_total {tried}")),
        "{}",
        metrics.encode()
    );
    server.abort();
}

/// Hands out the server ends of in-memory connections the test makes.
struct Connections(mpsc::Receiver<DuplexStream>);

impl Accept for Connections {
    type Conn = DuplexStream;

    async fn accept(&mut self) -> io::Result<DuplexStream> {
        match self.0.recv().await {
            Some(conn) => Ok(conn),
            None => std::future::pending().await,
        }
    }
}

async fn connect(to: &mpsc::Sender<DuplexStream>) -> DuplexStream {
    let (client, server) = tokio::io::duplex(4096);
    to.send(server).await.unwrap();
    client
}

/// Whether the server closed `client`: a read gives EOF at once.
async fn closed(client: &mut DuplexStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), client.read(&mut byte)).await,
        Ok(Ok(0))
    )
}

async fn get(client: &mut DuplexStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    client.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_idle_connections_is_capped_and_a_newcomer_is_served() {
    let (to, from) = mpsc::channel(1);
    let state = state();
    let metrics = state.metrics.clone();
    let server = tokio::spawn(run(Connections(from), state, LIMITS));
    let mut idle = Vec::new();
    for _ in 0..3 * LIMITS.max_connections {
        idle.push(connect(&to).await);
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut open = 0;
    for client in &mut idle {
        if !closed(client).await {
            open += 1;
        }
    }
    assert_eq!(open, LIMITS.max_connections, "only the newest stay open");
    let mut probe = connect(&to).await;
    let answer = get(&mut probe, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let evicted = 2 * LIMITS.max_connections + 1;
    assert!(
        metrics.encode().contains(&format!(
            "ainic_dra_http_connections_evicted_total {evicted}"
        )),
        "{}",
        metrics.encode()
    );
    server.abort();
}

#[tokio::test(start_paused = true)]
async fn slow_or_silent_clients_are_dropped_after_the_header_timeout() {
    let (to, from) = mpsc::channel(1);
    let server = tokio::spawn(run(Connections(from), state(), LIMITS));
    let mut silent = connect(&to).await;
    let mut slow = connect(&to).await;
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    // One header byte a second: always something, never the end.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        slow.write_all(b"X").await.unwrap();
    }
    assert!(!closed(&mut silent).await && !closed(&mut slow).await);
    tokio::time::sleep(LIMITS.header_timeout).await;
    assert!(closed(&mut silent).await, "a silent client is dropped");
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest).await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || rest.starts_with("HTTP/1.1 408"),
        "a slow client is dropped: {rest}"
    );
    server.abort();
}

#[test]
fn the_cap_takes_a_quarter_of_the_descriptors_within_bounds() {
    assert_eq!(Limits::for_nofile(Some(64)).max_connections, 16);
    assert_eq!(Limits::for_nofile(Some(1 << 20)).max_connections, 32);
    assert_eq!(Limits::for_nofile(None).max_connections, 32);
    assert_eq!(Limits::for_nofile(Some(4)).max_connections, 2);
}
