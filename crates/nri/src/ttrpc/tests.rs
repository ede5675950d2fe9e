use super::*;
use crate::mux;
use tokio::net::UnixStream;

#[test]
fn the_header_is_length_stream_type_flags() {
    let bytes = encode(3, TYPE_REQUEST, b"abc");
    assert_eq!(
        bytes,
        [&[0, 0, 0, 3, 0, 0, 0, 3, 1, 0][..], b"abc"].concat()
    );
}

#[tokio::test]
async fn a_message_cut_anywhere_is_read_whole() {
    let (tx, rx) = mpsc::channel(16);
    let mut reader = Reader::new(rx);
    let mut wire = encode(1, TYPE_RESPONSE, b"first");
    wire.extend(encode(3, TYPE_RESPONSE, b"second"));
    for chunk in wire.chunks(4) {
        tx.send(chunk.to_vec()).await.unwrap();
    }
    drop(tx);
    let first = reader.next().await.unwrap().unwrap();
    assert_eq!((first.stream, &first.payload[..]), (1, &b"first"[..]));
    let second = reader.next().await.unwrap().unwrap();
    assert_eq!((second.stream, &second.payload[..]), (3, &b"second"[..]));
    assert!(reader.next().await.unwrap().is_none());
}

#[tokio::test]
async fn an_oversized_or_cut_off_message_is_a_protocol_error() {
    let (tx, rx) = mpsc::channel(4);
    let mut reader = Reader::new(rx);
    let mut header = ((MAX_MESSAGE + 1) as u32).to_be_bytes().to_vec();
    header.extend([0, 0, 0, 1, 1, 0]);
    tx.send(header).await.unwrap();
    assert!(matches!(reader.next().await, Err(TtrpcError::Protocol(_))));

    let (tx, rx) = mpsc::channel(4);
    let mut reader = Reader::new(rx);
    tx.send(encode(1, TYPE_REQUEST, b"whole")[..12].to_vec())
        .await
        .unwrap();
    drop(tx);
    assert!(matches!(reader.next().await, Err(TtrpcError::Protocol(_))));
}

/// Echoes `Echo.Say`, a long payload (over 100 bytes) 50 ms late; every
/// other method is unimplemented.
struct Echo;

impl Service for Echo {
    async fn call(&self, service: &str, method: &str, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        if (service, method) != ("Echo", "Say") {
            return Err(Status::new(code::UNIMPLEMENTED, format!("method {method}")));
        }
        if payload.len() > 100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(payload)
    }
}

/// A prost message holding bytes, for the client's generic call.
#[derive(Clone, PartialEq, Message)]
struct Bytes {
    #[prost(bytes = "vec", tag = "1")]
    value: Vec<u8>,
}

fn pair() -> (Client, Conn) {
    let (a, b) = UnixStream::pair().unwrap();
    let client_conn = mux::split(a, &[7]).pop().unwrap();
    let server_conn = mux::split(b, &[7]).pop().unwrap();
    (Client::new(client_conn), server_conn)
}

#[tokio::test]
async fn calls_are_answered_on_their_stream_even_out_of_order() {
    let (client, server) = pair();
    tokio::spawn(serve(server, Arc::new(Echo)));
    let second = Duration::from_secs(5);
    // The slow call is sent first and answered last; it is also longer
    // than the 4096 bytes of a first mux frame.
    let slow = Bytes {
        value: vec![9; 5000],
    };
    let fast = Bytes { value: vec![1] };
    let (a, b) = tokio::join!(
        client.call::<_, Bytes>("Echo", "Say", &slow, second),
        client.call::<_, Bytes>("Echo", "Say", &fast, second),
    );
    assert_eq!(a.unwrap(), slow);
    assert_eq!(b.unwrap(), fast);
}

#[tokio::test]
async fn an_unserved_method_answers_unimplemented() {
    let (client, server) = pair();
    tokio::spawn(serve(server, Arc::new(Echo)));
    let err = client
        .call::<_, Bytes>("Echo", "Shout", &Bytes::default(), Duration::from_secs(5))
        .await
        .unwrap_err();
    match err {
        TtrpcError::Status { status, .. } => assert_eq!(status.code, code::UNIMPLEMENTED),
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_closed_connection_fails_pending_calls() {
    let (client, server) = pair();
    drop(server);
    let err = client
        .call::<_, Bytes>("Echo", "Say", &Bytes::default(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, TtrpcError::Closed), "{err}");
    // A call after the close fails at once, not after its timeout.
    let later = client
        .call::<_, Bytes>("Echo", "Say", &Bytes::default(), Duration::from_secs(3600))
        .await;
    assert!(matches!(later, Err(TtrpcError::Closed)));
}

#[tokio::test]
async fn client_streams_are_odd_and_increasing() {
    let (a, b) = UnixStream::pair().unwrap();
    let client = Client::new(mux::split(a, &[2]).pop().unwrap());
    let server = mux::split(b, &[2]).pop().unwrap();
    let mut reader = Reader::new(server.incoming);
    let timeout = Duration::from_millis(10);
    for _ in 0..3 {
        let _ = client
            .call::<_, Bytes>("S", "M", &Bytes::default(), timeout)
            .await;
    }
    let mut streams = Vec::new();
    for _ in 0..3 {
        let frame = reader.next().await.unwrap().unwrap();
        assert_eq!(frame.kind, TYPE_REQUEST);
        let request = Request::decode(&frame.payload[..]).unwrap();
        assert_eq!(
            (request.service.as_str(), request.method.as_str()),
            ("S", "M")
        );
        assert_eq!(request.timeout_nano, 10_000_000);
        streams.push(frame.stream);
    }
    assert_eq!(streams, [1, 3, 5]);
}

/// Holds every call until released, counting how many run at once.
#[derive(Default)]
struct Gate {
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    open: tokio::sync::Notify,
    released: std::sync::atomic::AtomicBool,
}

impl Service for Gate {
    async fn call(&self, _: &str, _: &str, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        while !self.released.load(SeqCst) {
            let opened = self.open.notified();
            if self.released.load(SeqCst) {
                break;
            }
            opened.await;
        }
        self.running.fetch_sub(1, SeqCst);
        Ok(payload)
    }
}

#[tokio::test]
async fn calls_in_flight_are_bounded_and_the_rest_wait_their_turn() {
    use std::sync::atomic::Ordering::SeqCst;
    let (client, server) = pair();
    let gate = Arc::new(Gate::default());
    tokio::spawn(serve(server, gate.clone()));
    let client = Arc::new(client);
    let calls: Vec<_> = (0..3 * MAX_CALLS_IN_FLIGHT)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let message = Bytes {
                    value: vec![i as u8],
                };
                let timeout = Duration::from_secs(60);
                client
                    .call::<_, Bytes>("Gate", "Hold", &message, timeout)
                    .await
            })
        })
        .collect();
    // Wait until the server holds all it will take.
    let held = async {
        while gate.running.load(SeqCst) < MAX_CALLS_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .expect("the server took its calls in flight within a minute");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        gate.running.load(SeqCst),
        MAX_CALLS_IN_FLIGHT,
        "the rest wait"
    );
    gate.released.store(true, SeqCst);
    gate.open.notify_waiters();
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(
            call.await.unwrap().unwrap().value,
            [i as u8],
            "every call answered"
        );
    }
    assert_eq!(gate.most.load(SeqCst), MAX_CALLS_IN_FLIGHT);
}
