//! Capped exponential backoff, the sleeper it waits with, and which API
//! errors are worth retrying.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Waits between attempts. Tests inject one that only records.
pub trait Sleeper: Send + Sync {
    /// Waits for `duration`.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The real sleeper: `tokio::time::sleep`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Retry policy: `initial`, doubling per attempt up to `max`, at most
/// `attempts` tries in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Cap on any delay.
    pub max: Duration,
    /// Total tries, the first included (at least 1).
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            attempts: 8,
        }
    }
}

impl Backoff {
    /// The delay after failed attempt number `failed` (1-based).
    pub fn delay(&self, failed: u32) -> Duration {
        let factor = 2u32.saturating_pow(failed.saturating_sub(1));
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Whether an API error is transient: conflicts (someone else wrote, or our
/// view is stale), throttling, server errors, and transport failures.
pub fn is_retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 404 | 409 | 429 | 500..=599),
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) | kube::Error::InferConfig(_) => {
            false
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_and_is_capped() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(500),
            attempts: 10,
        };
        let delays: Vec<u128> = (1..=5).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        assert_eq!(b.delay(200), Duration::from_millis(500));
    }

    #[test]
    fn conflicts_and_server_errors_are_retryable_validation_is_not() {
        let api = |code| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        for code in [409, 429, 500, 503, 504] {
            assert!(is_retryable(&api(code)), "{code}");
        }
        for code in [400, 403, 422] {
            assert!(!is_retryable(&api(code)), "{code}");
        }
    }
}
