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
/// `attempts` tries in total, each delay spread by up to `jitter_percent`
/// either way so that the agents of a whole cluster, failing together when
/// the API server does, do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Cap on any delay.
    pub max: Duration,
    /// Total tries, the first included (at least 1).
    pub attempts: u32,
    /// Spread of each delay, in percent of it (0 for exact delays).
    pub jitter_percent: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            attempts: 8,
            jitter_percent: 20,
        }
    }
}

impl Backoff {
    /// The delay after failed attempt number `failed` (1-based), jittered.
    pub fn delay(&self, failed: u32) -> Duration {
        let factor = 2u32.saturating_pow(failed.saturating_sub(1));
        self.jittered(self.initial.saturating_mul(factor).min(self.max))
    }

    /// `delay` moved by a random amount within `jitter_percent` of it.
    pub fn jittered(&self, delay: Duration) -> Duration {
        spread(delay, self.jitter_percent, random())
    }
}

/// `delay` scaled into `[1 - percent/100, 1 + percent/100)` by `random`.
fn spread(delay: Duration, percent: u32, random: u64) -> Duration {
    if percent == 0 {
        return delay;
    }
    let span = u64::from(percent.min(100)) * 2;
    // Per mille of the delay, from (1000 - 10·percent) up to (1000 + 10·percent).
    let per_mille = 1000 - u64::from(percent.min(100)) * 10 + random % (span * 10);
    let nanos = delay.as_nanos().saturating_mul(u128::from(per_mille)) / 1000;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A random number from the standard library's randomly keyed hasher: good
/// enough to spread retries, and no dependency for it.
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
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
            jitter_percent: 0,
        };
        let delays: Vec<u128> = (1..=5).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        assert_eq!(b.delay(200), Duration::from_millis(500));
    }

    #[test]
    fn jitter_stays_within_its_percent_and_varies() {
        let second = Duration::from_secs(1);
        assert_eq!(spread(second, 20, 0), Duration::from_millis(800));
        assert_eq!(spread(second, 20, 399), Duration::from_millis(1199));
        assert_eq!(spread(second, 20, 400), Duration::from_millis(800));
        let b = Backoff::default();
        let seen: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| b.jittered(second)).collect();
        assert!(seen.len() > 1, "the delays are spread: {seen:?}");
        assert!(
            seen.iter().all(|d| (800..1200).contains(&d.as_millis())),
            "{seen:?}"
        );
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
