//! Crash points for tests: with `AINIC_DRA_FAULT=<point>` in its
//! environment, the process aborts (no cleanup, like `kill -9`) the first
//! time it reaches that point. Used by the end-to-end tests to prove that a
//! crash anywhere in prepare/unprepare leaves nothing behind after a restart.
//! Only in builds with debug assertions (the test builds): a release build
//! ignores the variable and [`Faults::hit`] compiles to nothing.

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
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    armed: Option<String>,
}

impl Faults {
    /// Reads [`ENV`]; in a release build, nothing is armed.
    pub fn from_env() -> Self {
        let armed = std::env::var(ENV).ok().filter(|v| !v.is_empty());
        Self {
            armed: armed.filter(|_| cfg!(debug_assertions)),
        }
    }

    /// Aborts the process if `point` is the armed one.
    #[inline]
    pub fn hit(&self, point: Point) {
        #[cfg(debug_assertions)]
        if self.armed.as_deref() == Some(point.name()) {
            eprintln!("ainic-dra: fault injection: aborting at {}", point.name());
            std::process::abort();
        }
        #[cfg(not(debug_assertions))]
        let _ = point;
    }
}
