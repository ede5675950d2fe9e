//! Handing freed heap back to the kernel after bursts of work.
//!
//! A publish of a large pool or a burst of prepares needs several times
//! the heap the agent holds at rest (on the 8 PF × 256 VF node about
//! 120 MB at a publish against 55 MB before the fixes of 2026-12-02, see
//! docs/benchmarks.md). glibc's malloc keeps freed memory in its arenas,
//! one per thread that met contention, and returns only what lies at the
//! top of each heap: RSS stayed near the peak for the agent's life.
//!
//! Calls into glibc fix that, and nothing else does short of a different
//! allocator (the Rust ones that keep RSS low, mimalloc and jemalloc, are
//! C libraries built by `cc`; the agent ships none):
//! - [`tune`] at start: one arena for the whole process. `malloc_trim`
//!   can shrink only the main arena's top; a second arena kept its top
//!   (6 MB after a prepare burst on the 8-NIC node, read from smaps)
//!   because glibc raises the trim threshold to twice the largest mapped
//!   block freed so far. The agent's threads (two tokio workers, a few
//!   blocking ones) allocate little, so one arena's lock is cheap. Fixing
//!   the trim and mmap thresholds instead was tried and dropped: every
//!   prepare then mapped and unmapped its larger buffers anew, and its
//!   p50 went from about 1 ms to 7 ms.
//! - [`after_burst`], called where work ends (a publish, a prepare or
//!   unprepare call): once the agent has been quiet for [`QUIET`], the
//!   trimmer task calls `malloc_trim(0)`, which releases every free page
//!   of the heap.
//!
//! Both are process-wide because the heap is. On a libc other than glibc
//! they do nothing (musl's malloc gives memory back by itself). They are
//! the project's only `unsafe` blocks: `libc` declares the functions but
//! no crate wraps them safely.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::Notify;

use crate::Tasks;

/// How long the agent must be quiet after a burst before the trim.
pub const QUIET: Duration = Duration::from_secs(1);

/// The trimmer's wake-up; unset until [`spawn_trimmer`].
static BURSTS: OnceLock<Notify> = OnceLock::new();

/// One malloc arena (see the module docs). Call before threads start.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt only changes a malloc tunable; it is called before
    // the runtime starts threads, and a refused value leaves the default.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Releases the free pages of every malloc arena now.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes the arena locks itself and touches only
    // free chunks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Notes that a burst of work ended; the trimmer trims once the agent has
/// been quiet for [`QUIET`]. Nothing happens without a trimmer.
pub fn after_burst() {
    if let Some(bursts) = BURSTS.get() {
        bursts.notify_one();
    }
}

/// Starts the trimmer under `tasks` (once per process; a second call
/// starts nothing). It holds no state: restarted if it ever ends.
pub fn spawn_trimmer(tasks: &Tasks) {
    if BURSTS.set(Notify::new()).is_err() {
        return;
    }
    let bursts = BURSTS.get().expect("set above");
    tasks.spawn_restarting("heap trimmer", move || async move {
        loop {
            bursts.notified().await;
            while tokio::time::timeout(QUIET, bursts.notified()).await.is_ok() {}
            trim();
        }
    });
}
