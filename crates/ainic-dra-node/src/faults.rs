//! Kill points for tests: with `AINIC_DRA_FAULT=<point>[@<n>]` in its
//! environment, the process aborts (no clean-up, like `kill -9`) the `n`th
//! time (default: the first) it reaches that point; at a task point
//! ([`Point::TASKS`], [`fail`]) the task reaching it panics instead, which
//! the supervisor must notice. The end-to-end tests
//! use it to prove that a crash between any two steps of prepare and
//! unprepare, down to the steps of each durable write, leaves nothing
//! behind once the agent restarts and the kubelet retries.
//!
//! Only in builds with debug assertions (the test builds): a release build
//! ignores the variable and [`hit`] compiles to nothing.

#[cfg(debug_assertions)]
use std::sync::OnceLock;
#[cfg(debug_assertions)]
use std::sync::atomic::{AtomicU32, Ordering};

/// Environment variable naming the kill point.
pub const ENV: &str = "AINIC_DRA_FAULT";

/// Places worth a crash: the steps of prepare and unprepare and of the
/// durable writes they make (a CDI spec, a checkpoint append, a checkpoint
/// compaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Claim read and planned; nothing written yet.
    PrepareBeforeCdi,
    /// CDI spec written; checkpoint not yet.
    PrepareAfterCdi,
    /// Checkpoint written; the kubelet has not got the answer.
    PrepareAfterCheckpoint,
    /// Unprepare started; nothing removed yet.
    UnprepareBeforeCdi,
    /// CDI spec removed; checkpoint still lists the claim.
    UnprepareAfterCdi,
    /// Checkpoint entry removed; the kubelet has not got the answer.
    UnprepareAfterCheckpoint,
    /// A CDI spec's temp file is written, not yet renamed over the spec.
    CdiTempWritten,
    /// The checkpoint's temp file is created, empty.
    CheckpointTempCreated,
    /// The checkpoint's temp file is written, not yet fsynced.
    CheckpointTempWritten,
    /// The checkpoint's temp file is fsynced, not yet renamed.
    CheckpointTempSynced,
    /// Records are appended to the checkpoint journal, not yet fsynced.
    JournalWritten,
    /// The appended records are fsynced; the waiters are not yet told.
    JournalSynced,
    /// A netdev move is recorded; the netdev has not left the host.
    AttachAfterRecord,
    /// The netdev is in the pod, configured; the move is not yet marked
    /// done.
    AttachAfterMove,
    /// The netdev is home again; the checkpoint still records the move.
    DetachBeforeForget,
    /// The refresh loop's periodic tick (a task point: it panics).
    RefreshTick,
}

impl Point {
    /// Every point, for sweeps.
    pub const ALL: [Point; 9] = [
        Point::PrepareBeforeCdi,
        Point::PrepareAfterCdi,
        Point::PrepareAfterCheckpoint,
        Point::UnprepareBeforeCdi,
        Point::UnprepareAfterCdi,
        Point::UnprepareAfterCheckpoint,
        Point::CdiTempWritten,
        Point::JournalWritten,
        Point::JournalSynced,
    ];
    /// The steps of a checkpoint compaction (journal rewritten through a
    /// temp file). Armed, one of them makes every checkpoint write a
    /// compaction, so a sweep reaches it ([`compaction_armed`]).
    pub const COMPACTION: [Point; 3] = [
        Point::CheckpointTempCreated,
        Point::CheckpointTempWritten,
        Point::CheckpointTempSynced,
    ];

    /// The points of exclusive netdev mode's moves (the pod sandbox
    /// hooks), swept by the netdev test.
    pub const NETDEV: [Point; 3] = [
        Point::AttachAfterRecord,
        Point::AttachAfterMove,
        Point::DetachBeforeForget,
    ];

    /// The points where a long-lived task panics ([`fail`]).
    pub const TASKS: [Point; 1] = [Point::RefreshTick];

    /// The value of [`ENV`] that selects this point.
    pub fn name(self) -> &'static str {
        match self {
            Point::PrepareBeforeCdi => "prepare-before-cdi",
            Point::PrepareAfterCdi => "prepare-after-cdi",
            Point::PrepareAfterCheckpoint => "prepare-after-checkpoint",
            Point::UnprepareBeforeCdi => "unprepare-before-cdi",
            Point::UnprepareAfterCdi => "unprepare-after-cdi",
            Point::UnprepareAfterCheckpoint => "unprepare-after-checkpoint",
            Point::CdiTempWritten => "cdi-temp-written",
            Point::CheckpointTempCreated => "checkpoint-temp-created",
            Point::CheckpointTempWritten => "checkpoint-temp-written",
            Point::CheckpointTempSynced => "checkpoint-temp-synced",
            Point::JournalWritten => "journal-written",
            Point::JournalSynced => "journal-synced",
            Point::AttachAfterRecord => "attach-after-record",
            Point::AttachAfterMove => "attach-after-move",
            Point::DetachBeforeForget => "detach-before-forget",
            Point::RefreshTick => "refresh-tick",
        }
    }
}

/// `point[@n]` as (point, n); `None` when malformed.
pub fn parse(value: &str) -> Option<(&str, u32)> {
    match value.split_once('@') {
        None => Some((value, 1)),
        Some((point, n)) => Some((point, n.parse().ok().filter(|n| *n > 0)?)),
    }
}

#[cfg(debug_assertions)]
fn armed() -> &'static Option<(String, u32)> {
    static ARMED: OnceLock<Option<(String, u32)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let value = std::env::var(ENV).ok().filter(|v| !v.is_empty())?;
        match parse(&value) {
            Some((point, n))
                if Point::ALL
                    .iter()
                    .chain(&Point::COMPACTION)
                    .chain(&Point::NETDEV)
                    .chain(&Point::TASKS)
                    .any(|p| p.name() == point) =>
            {
                Some((point.to_string(), n))
            }
            // A test that names no real point would test nothing: stop it.
            _ => {
                eprintln!(
                    "ainic-dra: {ENV}={value:?} is not <point>[@<n>] (n >= 1) with a known point"
                );
                std::process::abort();
            }
        }
    })
}

/// Whether a compaction step ([`Point::COMPACTION`]) is armed: then every
/// checkpoint write compacts. Always `false` in release builds.
pub fn compaction_armed() -> bool {
    #[cfg(debug_assertions)]
    if let Some((armed, _)) = armed() {
        return Point::COMPACTION.iter().any(|p| p.name() == armed);
    }
    false
}

/// Aborts the process if `point` is the armed one and this is its `n`th hit.
#[inline]
pub fn hit(point: Point) {
    if reached(point) {
        eprintln!("ainic-dra: fault injection: aborting at {}", point.name());
        std::process::abort();
    }
}

/// Panics if `point` is the armed one and this is its `n`th hit: the task
/// reaching it dies, the process does not.
#[inline]
pub fn fail(point: Point) {
    if reached(point) {
        panic!("fault injection at {}", point.name());
    }
}

/// Whether `point` is the armed one and this is its `n`th hit. Always
/// `false` in release builds.
#[inline]
fn reached(point: Point) -> bool {
    #[cfg(debug_assertions)]
    if let Some((armed, n)) = armed()
        && armed == point.name()
    {
        static HITS: AtomicU32 = AtomicU32::new(0);
        return HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n;
    }
    let _ = point;
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_with_or_without_a_count() {
        assert_eq!(parse("cdi-temp-written"), Some(("cdi-temp-written", 1)));
        assert_eq!(parse("cdi-temp-written@3"), Some(("cdi-temp-written", 3)));
        assert_eq!(parse("cdi-temp-written@0"), None);
        assert_eq!(parse("cdi-temp-written@x"), None);
    }
}
