//! The sans-I/O part: HTTP/2 bytes a client sends in, the same bytes out
//! with every header block decoded, handed to an edit, and encoded again.
//!
//! Only HEADERS and CONTINUATION frames change; the preface and every other
//! frame pass through byte for byte, as they arrive. A header block is
//! decoded with the client's HPACK context (the dynamic table the client
//! built) and written back with literals that never enter a dynamic table,
//! so the server's decoder and the client's encoder never have to agree on
//! one: the header list the server sees is the client's, edited, and the
//! same list would have come out of the original bytes.
//!
//! Whatever this cannot follow (a HEADERS frame larger than
//! [`MAX_BLOCK`], CONTINUATION out of place, an HPACK error) switches the
//! connection to passing everything through untouched from that byte on:
//! the server then gives its own verdict on the client's own bytes.

use std::borrow::Cow;

/// Frame type HEADERS (RFC 9113 §6.2).
const HEADERS: u8 = 0x1;
/// Frame type CONTINUATION (RFC 9113 §6.10).
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Bytes of a frame header.
const FRAME_HEAD: usize = 9;
/// The client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// Largest frame payload written: the smallest SETTINGS_MAX_FRAME_SIZE a
/// server may announce, so every server takes it.
const MAX_FRAME: usize = 16_384;
/// Largest header block followed; a bigger one is passed through as is.
pub const MAX_BLOCK: usize = 256 * 1024;

/// A decoded header list; names and values as bytes.
pub type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

/// Where the byte stream stands.
enum State {
    /// Inside the client preface: this many bytes of it still to pass.
    Preface(usize),
    /// At a frame boundary.
    FrameHead,
    /// Inside a frame passed as is: this many payload bytes still to pass.
    Payload(usize),
    /// A HEADERS frame without END_HEADERS was read: its block so far,
    /// waiting for CONTINUATION frames.
    Block(Pending),
    /// Gave up on rewriting: every byte passes as is.
    Passthrough,
}

/// A header block being collected across frames.
struct Pending {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
    /// The frames as received, written out unchanged if rewriting fails.
    raw: Vec<u8>,
}

/// What one step over the input did.
enum Step {
    /// Consumed this many bytes (0: changed state, step again).
    Used(usize),
    /// Needs more bytes before it can go on.
    NeedMore,
}

/// Rewrites the header blocks of one client-to-server HTTP/2 byte stream.
pub struct Rewriter<F> {
    edit: F,
    decoder: loona_hpack::Decoder<'static>,
    input: Vec<u8>,
    state: State,
}

impl<F: FnMut(&mut HeaderList)> Rewriter<F> {
    /// A rewriter for a stream that starts with the client preface; `edit`
    /// sees and may change every header list, in order.
    pub fn new(edit: F) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        // The client's encoder may use no more than the server's
        // SETTINGS_HEADER_TABLE_SIZE, 4096 unless the server says otherwise
        // (hyper's does not).
        decoder.set_max_allowed_table_size(4096);
        Rewriter {
            edit,
            decoder,
            input: Vec::new(),
            state: State::Preface(PREFACE_LEN),
        }
    }

    /// Takes the next bytes the client sent and appends to `out` what the
    /// server should read; bytes of an incomplete header frame are held
    /// until the rest arrives.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut input = std::mem::take(&mut self.input);
        input.extend_from_slice(data);
        let mut at = 0;
        while at < input.len() {
            match self.step(&input[at..], out) {
                Step::Used(n) => at += n,
                Step::NeedMore => break,
            }
        }
        input.drain(..at);
        self.input = input;
    }

    /// Bytes held back, waiting for the rest of a frame: at the end of the
    /// stream they are handed over as they are.
    pub fn take_held(&mut self, out: &mut Vec<u8>) {
        self.give_up(out);
        out.append(&mut self.input);
    }

    /// Stops rewriting: what a collected block held goes out as received,
    /// and every later byte passes as is.
    fn give_up(&mut self, out: &mut Vec<u8>) {
        if let State::Block(pending) = std::mem::replace(&mut self.state, State::Passthrough) {
            out.extend_from_slice(&pending.raw);
        }
    }

    /// One step over `input`, the bytes not yet consumed.
    fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Step {
        match &mut self.state {
            State::Preface(left) | State::Payload(left) => {
                let n = (*left).min(input.len());
                out.extend_from_slice(&input[..n]);
                *left -= n;
                if *left == 0 {
                    self.state = State::FrameHead;
                }
                Step::Used(n)
            }
            State::Passthrough => {
                out.extend_from_slice(input);
                Step::Used(input.len())
            }
            State::FrameHead | State::Block(_) => self.frame(input, out),
        }
    }

    /// At a frame boundary: passes a frame through, or takes a header frame
    /// once it is whole.
    fn frame(&mut self, input: &[u8], out: &mut Vec<u8>) -> Step {
        if input.len() < FRAME_HEAD {
            return Step::NeedMore;
        }
        let len = usize::from(input[0]) << 16 | usize::from(input[1]) << 8 | usize::from(input[2]);
        let (kind, flags) = (input[3], input[4]);
        let stream = u32::from_be_bytes([input[5], input[6], input[7], input[8]]) & 0x7fff_ffff;
        let collecting = matches!(self.state, State::Block(_));
        // CONTINUATION must follow a header frame of the same stream, and
        // only CONTINUATION may: anything else is for the server to refuse.
        let in_order = (kind == CONTINUATION) == collecting;
        if !in_order || len > MAX_BLOCK && (kind == HEADERS || kind == CONTINUATION) {
            self.give_up(out);
            return Step::Used(0);
        }
        if kind != HEADERS && kind != CONTINUATION {
            out.extend_from_slice(&input[..FRAME_HEAD]);
            self.state = State::Payload(len);
            return Step::Used(FRAME_HEAD);
        }
        if input.len() < FRAME_HEAD + len {
            return Step::NeedMore;
        }
        let frame = &input[..FRAME_HEAD + len];
        let pending = match std::mem::replace(&mut self.state, State::FrameHead) {
            State::Block(mut pending) if pending.stream == stream => {
                pending.block.extend_from_slice(&frame[FRAME_HEAD..]);
                pending.raw.extend_from_slice(frame);
                pending
            }
            State::Block(pending) => {
                self.state = State::Block(pending);
                self.give_up(out);
                return Step::Used(0);
            }
            _ => match headers_frame(stream, flags, frame) {
                Some(pending) => pending,
                None => {
                    self.state = State::Passthrough;
                    return Step::Used(0);
                }
            },
        };
        self.finish_or_wait(pending, flags, out);
        Step::Used(frame.len())
    }

    /// Writes the block once its last frame is in, else waits for more.
    fn finish_or_wait(&mut self, pending: Pending, flags: u8, out: &mut Vec<u8>) {
        if flags & END_HEADERS == 0 {
            if pending.block.len() > MAX_BLOCK {
                out.extend_from_slice(&pending.raw);
                self.state = State::Passthrough;
            } else {
                self.state = State::Block(pending);
            }
            return;
        }
        let mut headers = HeaderList::new();
        let decoded = self.decoder.decode_with_cb(&pending.block, |name, value| {
            headers.push((Cow::into_owned(name), Cow::into_owned(value)));
        });
        if decoded.is_err() {
            out.extend_from_slice(&pending.raw);
            self.state = State::Passthrough;
            return;
        }
        (self.edit)(&mut headers);
        write_block(&pending, &encode(&headers), out);
    }
}

/// Reads a whole HEADERS frame: its flags, priority and block fragment;
/// `None` when its padding does not fit.
fn headers_frame(stream: u32, flags: u8, frame: &[u8]) -> Option<Pending> {
    let mut body = &frame[FRAME_HEAD..];
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(*body.first()?);
        body = &body[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(body.get(..5)?.try_into().ok()?);
        body = &body[5..];
    }
    let block = body.get(..body.len().checked_sub(pad)?)?.to_vec();
    Some(Pending {
        stream,
        flags,
        priority,
        block,
        raw: frame.to_vec(),
    })
}

/// HPACK: every field as a literal without indexing, with a literal name and
/// no Huffman coding (RFC 7541 §6.2.2).
fn encode(headers: &HeaderList) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(0x00);
        for text in [name, value] {
            // Writing into a Vec cannot fail.
            let _ = loona_hpack::encoder::encode_integer_into(text.len(), 7, 0, &mut block);
            block.extend_from_slice(text);
        }
    }
    block
}

/// Writes `block` as one HEADERS frame and as many CONTINUATION frames as
/// it needs, keeping the original's END_STREAM and priority.
fn write_block(pending: &Pending, block: &[u8], out: &mut Vec<u8>) {
    let priority = pending.priority.as_ref().map_or(&[][..], |p| &p[..]);
    let first = (MAX_FRAME - priority.len()).min(block.len());
    let mut chunks = vec![&block[..first]];
    chunks.extend(block[first..].chunks(MAX_FRAME));
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let mut flags = if last { END_HEADERS } else { 0 };
        let (kind, prefix) = if i == 0 {
            flags |= pending.flags & END_STREAM;
            if pending.priority.is_some() {
                flags |= PRIORITY;
            }
            (HEADERS, priority)
        } else {
            (CONTINUATION, &[][..])
        };
        let len = prefix.len() + chunk.len();
        out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
        out.extend_from_slice(&pending.stream.to_be_bytes());
        out.extend_from_slice(prefix);
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
#[path = "rewriter_tests.rs"]
mod tests;
