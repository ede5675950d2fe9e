use super::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn list(pairs: &[(&str, &str)]) -> HeaderList {
    pairs
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn grpc_request(authority: &str, path: &str) -> HeaderList {
    list(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("user-agent", "grpc-go/1.82.1"),
        ("te", "trailers"),
    ])
}

/// Splits a byte stream back into frames: (type, flags, stream, payload).
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
        out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

/// What a server decoding `out` (after the preface) sees: each header
/// block's list, in order, with the frames' flags.
fn server_view(out: &[u8]) -> Vec<(u8, HeaderList)> {
    assert_eq!(&out[..PREFACE.len()], PREFACE, "preface passes first");
    let mut decoder = loona_hpack::Decoder::new();
    let mut blocks = Vec::new();
    let mut block = Vec::new();
    let mut first_flags = 0;
    for (kind, flags, _, payload) in frames(&out[PREFACE.len()..]) {
        match kind {
            HEADERS => {
                first_flags = flags;
                let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                block = payload[skip..].to_vec();
            }
            CONTINUATION => block.extend_from_slice(&payload),
            _ => continue,
        }
        if flags & END_HEADERS != 0 {
            blocks.push((first_flags, decoder.decode(&block).unwrap()));
        }
    }
    blocks
}

fn rewrite_all(input: &[u8]) -> Vec<u8> {
    let mut rewriter = Rewriter::new(super::super::accept_any_authority as fn(&mut HeaderList));
    let mut out = Vec::new();
    rewriter.feed(input, &mut out);
    rewriter.take_held(&mut out);
    out
}

/// A client connection as grpc-go writes it: preface, SETTINGS, then the
/// requests' header blocks from one encoder (dynamic table in use, so the
/// second request refers to entries the first one added) and DATA frames.
fn client_stream(requests: &[HeaderList]) -> Vec<u8> {
    let mut encoder = loona_hpack::Encoder::new();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]));
    for (i, headers) in requests.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let block = encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
        bytes.extend(frame(HEADERS, END_HEADERS, stream, &block));
        bytes.extend(frame(0x0, END_STREAM, stream, b"\0\0\0\0\x02\x08\x01"));
    }
    bytes
}

#[test]
fn a_socket_path_authority_is_served_as_localhost_and_nothing_else_changes() {
    let path = "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fainic.amd.com-reg.sock";
    let sent = [
        grpc_request(path, "/pluginregistration.Registration/GetInfo"),
        grpc_request(
            path,
            "/pluginregistration.Registration/NotifyRegistrationStatus",
        ),
    ];
    let out = rewrite_all(&client_stream(&sent));
    let seen = server_view(&out);
    assert_eq!(seen.len(), 2);
    for ((_, got), want) in seen.iter().zip(&sent) {
        let mut want = want.clone();
        want[3].1 = b"localhost".to_vec();
        assert_eq!(got, &want);
    }
}

#[test]
fn a_well_formed_request_reaches_the_server_with_the_same_headers() {
    let sent = [
        grpc_request(
            "localhost",
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        ),
        grpc_request(
            "localhost",
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        ),
        grpc_request("127.0.0.1:8080", "/x"),
    ];
    let seen = server_view(&rewrite_all(&client_stream(&sent)));
    let got: Vec<HeaderList> = seen.into_iter().map(|(_, h)| h).collect();
    assert_eq!(got, sent);
}

#[test]
fn frames_other_than_headers_pass_byte_for_byte() {
    let input = client_stream(&[grpc_request("localhost", "/a")]);
    let out = rewrite_all(&input);
    let keep = |bytes: &[u8]| -> Vec<_> {
        frames(&bytes[PREFACE.len()..])
            .into_iter()
            .filter(|f| f.0 != HEADERS)
            .collect()
    };
    assert_eq!(keep(&out), keep(&input));
}

#[test]
fn bytes_arriving_one_at_a_time_give_the_same_output() {
    let path = "%2Frun%2Fx.sock";
    let input = client_stream(&[grpc_request(path, "/a"), grpc_request(path, "/b")]);
    let whole = rewrite_all(&input);
    let mut rewriter = Rewriter::new(super::super::accept_any_authority as fn(&mut HeaderList));
    let mut out = Vec::new();
    for byte in &input {
        rewriter.feed(std::slice::from_ref(byte), &mut out);
    }
    assert_eq!(out, whole);
}

#[test]
fn continuation_padding_and_priority_are_followed() {
    let mut encoder = loona_hpack::Encoder::new();
    let sent = grpc_request("%2Fa.sock", "/a");
    let block = encoder.encode(sent.iter().map(|(n, v)| (&n[..], &v[..])));
    let (head, tail) = block.split_at(7);
    // PADDED | PRIORITY | END_STREAM, pad length 3, priority 5 bytes.
    let mut payload = vec![3, 0, 0, 0, 0, 16];
    payload.extend_from_slice(head);
    payload.extend_from_slice(&[0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 1, &payload));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, tail));
    let out = rewrite_all(&input);
    let seen = server_view(&out);
    let mut want = sent.clone();
    want[3].1 = b"localhost".to_vec();
    assert_eq!(seen, vec![(PRIORITY | END_STREAM | END_HEADERS, want)]);
    let written = frames(&out[PREFACE.len()..]);
    assert_eq!(&written[0].3[..5], &[0, 0, 0, 0, 16], "priority kept");
}

#[test]
fn a_block_larger_than_one_frame_is_written_as_headers_and_continuations() {
    let big = "v".repeat(40_000);
    let sent = list(&[(":method", "POST"), (":path", "/a"), ("x-big", &big)]);
    let out = rewrite_all(&client_stream(std::slice::from_ref(&sent)));
    let written = frames(&out[PREFACE.len()..]);
    let kinds: Vec<u8> = written.iter().map(|f| f.0).collect();
    assert_eq!(kinds, [0x4, HEADERS, CONTINUATION, CONTINUATION, 0x0]);
    assert!(written.iter().all(|f| f.3.len() <= MAX_FRAME));
    assert_eq!(server_view(&out)[0].1, sent);
}

#[test]
fn an_hpack_error_hands_the_server_the_clients_own_bytes() {
    let mut input = PREFACE.to_vec();
    // Index 70 refers to an empty dynamic table.
    input.extend(frame(HEADERS, END_HEADERS, 1, &[0x80 | 70]));
    input.extend(frame(0x0, END_STREAM, 1, b"data"));
    assert_eq!(rewrite_all(&input), input);
}

#[test]
fn a_continuation_out_of_place_hands_over_the_rest_untouched() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(CONTINUATION, END_HEADERS, 1, b"\x82"));
    input.extend(client_stream(&[grpc_request("%2Fx", "/a")])[PREFACE.len()..].to_vec());
    assert_eq!(rewrite_all(&input), input);
}

#[test]
fn an_unfinished_block_at_the_end_of_the_stream_is_handed_over() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, b"\x82"));
    input.extend(&frame(CONTINUATION, END_HEADERS, 1, b"\x84")[..5]);
    assert_eq!(rewrite_all(&input), input);
}
