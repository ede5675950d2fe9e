//! Polling for the state a test waits on: the real control plane acts
//! asynchronously (scheduler, controllers, agents), so tests wait for a
//! condition with a generous deadline and fail with what they last saw.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for the control plane before failing.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Calls `probe` every 100 ms until it returns `Ok(value)`; after
/// `deadline`, panics with `what` and the last `Err` it returned.
pub async fn until<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if start.elapsed() > deadline => {
                panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
