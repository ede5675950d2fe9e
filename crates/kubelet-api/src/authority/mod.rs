//! The kubelet's `:authority`, made acceptable to our HTTP/2 server.
//!
//! The kubelet's plugin manager dials a registration socket with grpc-go
//! and a bare socket path (`grpc.DialContext(ctx, "/var/lib/kubelet/
//! plugins_registry/x-reg.sock", …)`, no `WithAuthority`), so grpc-go sends
//! the percent-encoded path as the HTTP/2 `:authority`
//! (`%2Fvar%2Flib%2F…-reg.sock`). That is not a URI authority, and `h2`
//! (under tonic and hyper) resets such a stream with PROTOCOL_ERROR before
//! any handler runs: the kubelet could never register us. Its DRA client
//! (`unix:` target) and device manager (`WithAuthority("localhost")`) send
//! `localhost`; a 1.34 kubelet's fallback dial for the health stream sends a
//! path again.
//!
//! Why this way: neither tonic, hyper nor h2 has an option to relax the
//! check (h2 pull request 487 to do so stayed unmerged), and patching h2 means a fork
//! to keep in step by hand. So every connection on a unix socket we serve
//! goes through [`ServerConn`], which decodes each header block the client
//! sends ([`Rewriter`], HPACK by `loona-hpack`), replaces an `:authority`
//! that is not a valid URI authority with `localhost` ([`accept_any_authority`])
//! and hands h2 the same header list. A well-formed request reaches the
//! server with exactly the headers it carried. Only unix sockets are
//! wrapped: the agent serves no HTTP/2 over TCP, and any it ever does stays
//! strict. The NRI socket speaks ttrpc, not HTTP/2, and needs none of this.

mod rewriter;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

pub use rewriter::{HeaderList, MAX_BLOCK, Rewriter};

/// The value put in place of an `:authority` that is not one.
pub const REPLACEMENT: &[u8] = b"localhost";

/// The server-side edit: an `:authority` that does not parse as a URI
/// authority (a socket path, percent-encoded or not) becomes
/// [`REPLACEMENT`]; every other header stays as it is.
pub fn accept_any_authority(headers: &mut HeaderList) {
    for (name, value) in headers.iter_mut() {
        if name == b":authority" && http::uri::Authority::try_from(value.as_slice()).is_err() {
            tracing::debug!(
                authority = %String::from_utf8_lossy(value),
                "client sent a socket path as :authority; serving it as localhost"
            );
            *value = REPLACEMENT.to_vec();
        }
    }
}

/// How much is read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// A server-side connection whose incoming header blocks pass through
/// [`accept_any_authority`]; writes go straight to the socket.
pub struct ServerConn<S> {
    io: S,
    rewriter: Rewriter<fn(&mut HeaderList)>,
    /// Rewritten bytes not yet read by the server.
    ready: Vec<u8>,
    /// Offset of the first unread byte in `ready`.
    at: usize,
    eof: bool,
}

impl<S> ServerConn<S> {
    /// Wraps an accepted connection.
    pub fn new(io: S) -> Self {
        ServerConn {
            io,
            rewriter: Rewriter::new(accept_any_authority),
            ready: Vec::new(),
            at: 0,
            eof: false,
        }
    }

    /// The connection itself.
    pub fn get_ref(&self) -> &S {
        &self.io
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ServerConn<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.at);
                buf.put_slice(&this.ready[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.at = 0;
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
                this.rewriter.take_held(&mut this.ready);
            } else {
                this.rewriter.feed(read.filled(), &mut this.ready);
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ServerConn<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for ServerConn<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The edit a [`ClientConn`] applies to every header block it sends.
pub type ClientEdit = Box<dyn FnMut(&mut HeaderList) + Send>;

/// A client-side connection whose outgoing header blocks pass through an
/// edit: how a test double sends what grpc-go sends when it dials a bare
/// socket path (see [`grpc_go_authority`]), which tonic cannot (its URIs
/// must hold a valid authority).
pub struct ClientConn<S> {
    io: S,
    rewriter: Rewriter<ClientEdit>,
    /// Rewritten bytes not yet written to the socket.
    queued: Vec<u8>,
}

/// Bytes a [`ClientConn`] queues before it waits for the socket.
const QUEUE_LIMIT: usize = 64 * 1024;

impl<S> ClientConn<S> {
    /// Wraps a dialled connection; every request carries `authority`.
    pub fn with_authority(io: S, authority: String) -> Self {
        let edit: ClientEdit = Box::new(move |headers: &mut HeaderList| {
            for (name, value) in headers.iter_mut() {
                if name == b":authority" {
                    *value = authority.as_bytes().to_vec();
                }
            }
        });
        ClientConn {
            io,
            rewriter: Rewriter::new(edit),
            queued: Vec::new(),
        }
    }
}

impl<S: AsyncWrite + Unpin> ClientConn<S> {
    /// Writes what is queued; ready once the queue is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.queued.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.queued))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.queued.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientConn<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientConn<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.queued.len() >= QUEUE_LIMIT {
            ready!(this.poll_drain(cx))?;
        }
        this.rewriter.feed(buf, &mut this.queued);
        // Best effort now; poll_flush finishes the job.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.rewriter.take_held(&mut this.queued);
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// The `:authority` grpc-go sends for a target that is a bare socket path
/// (passthrough resolver, no `WithAuthority`): the path with every byte
/// outside letters, digits, `-_.~!$&'()*+,;=:[]@` as `%XX` (grpc-go's
/// `encodeAuthority`, the same in the grpc-go of kubelet 1.34 and 1.37).
pub fn grpc_go_authority(path: &str) -> String {
    let mut out = String::with_capacity(path.len() * 3);
    for byte in path.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]@".contains(&byte);
        if keep {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
