//! Crash points for tests: with `AINIC_DRA_FAULT=<point>` in its
//! environment, the process aborts (no cleanup, like `kill -9`) the first
//! time it reaches that point. Used by the end-to-end tests to prove that a
//! crash anywhere in prepare/unprepare leaves nothing behind after a restart.
//! Unset (always, in production) it costs one comparison.

/// Environment variable naming the crash point.
pub const ENV: &str = "AINIC_DRA_FAULT";

/// Places in prepare and unprepare where a crash is worth testing.
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
}

impl Point {
    /// The value of [`ENV`] that selects this point.
    pub fn name(self) -> &'static str {
        match self {
            Point::PrepareBeforeCdi => "prepare-before-cdi",
            Point::PrepareAfterCdi => "prepare-after-cdi",
            Point::PrepareAfterCheckpoint => "prepare-after-checkpoint",
            Point::UnprepareBeforeCdi => "unprepare-before-cdi",
            Point::UnprepareAfterCdi => "unprepare-after-cdi",
        }
    }
}

/// The crash point chosen for this process, read once at start.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    armed: Option<String>,
}

impl Faults {
    /// Reads [`ENV`].
    pub fn from_env() -> Self {
        Self {
            armed: std::env::var(ENV).ok().filter(|v| !v.is_empty()),
        }
    }

    /// Aborts the process if `point` is the armed one.
    pub fn hit(&self, point: Point) {
        if self.armed.as_deref() == Some(point.name()) {
            eprintln!("ainic-dra: fault injection: aborting at {}", point.name());
            std::process::abort();
        }
    }
}
