//! A pause after each failed accept. tonic's server loop logs a failed
//! accept and asks for the next connection at once; when the process is
//! out of file descriptors (EMFILE) the listening socket stays readable,
//! so that loop would spin a core until a descriptor frees. [`Backoff`]
//! wraps the stream of accepted connections: after an error it yields
//! nothing for a while, from [`FIRST`] doubling up to [`MAX`], and back
//! to no wait after the next success.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Sleep;
use tokio_stream::Stream;

/// The wait after the first failure of a run.
pub const FIRST: Duration = Duration::from_millis(5);
/// The longest wait.
pub const MAX: Duration = Duration::from_secs(1);

/// `inner`'s items, with a pause after each error.
pub struct Backoff<S> {
    inner: S,
    pause: Option<Pin<Box<Sleep>>>,
    next: Duration,
}

impl<S> Backoff<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pause: None,
            next: FIRST,
        }
    }
}

impl<S, T> Stream for Backoff<S>
where
    S: Stream<Item = io::Result<T>> + Unpin,
{
    type Item = io::Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(pause) = self.pause.as_mut() {
            ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let item = ready!(Pin::new(&mut self.inner).poll_next(cx));
        match &item {
            Some(Err(error)) => {
                let wait = self.next;
                if wait == FIRST {
                    tracing::warn!(%error, "cannot accept a connection on a kubelet socket; retrying with backoff");
                }
                self.next = (wait * 2).min(MAX);
                self.pause = Some(Box::pin(tokio::time::sleep(wait)));
            }
            Some(Ok(_)) => self.next = FIRST,
            None => {}
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio_stream::StreamExt;

    use super::*;

    /// Fails every accept, as a listener in a process out of descriptors.
    struct Failing(Arc<AtomicUsize>);

    impl Stream for Failing {
        type Item = io::Result<()>;

        fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Some(Err(io::Error::from_raw_os_error(24)))) // EMFILE
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_consumer_that_retries_at_once_is_slowed_to_a_few_tries_a_second() {
        let tries = Arc::new(AtomicUsize::new(0));
        let mut incoming = Backoff::new(Failing(tries.clone()));
        // What tonic's accept loop does: log and ask again, with no wait.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline && tries.load(Ordering::Relaxed) < 1000 {
            assert!(incoming.next().await.unwrap().is_err());
        }
        let tried = tries.load(Ordering::Relaxed);
        // 5 ms doubling to 1 s: 8 tries in the first 1.3 s, then one a second.
        assert!((10..30).contains(&tried), "{tried} accepts in 10 s");
    }
}
