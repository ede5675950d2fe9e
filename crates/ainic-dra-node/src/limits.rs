//! The process's open-file limit (`RLIMIT_NOFILE`). Container runtimes
//! often start a process with a soft limit far below the hard one (1024
//! against 1048576): the agent raises its soft limit to the hard one at
//! start, so sockets, watches and checkpoint writes are not the first to
//! run out; the HTTP endpoint sizes its connection cap from what it got
//! (`crate::http::server::Limits::for_nofile`).

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The open-file limits after [`raise_nofile`]: `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nofile {
    /// The soft limit in force.
    pub soft: Option<u64>,
    /// The hard limit.
    pub hard: Option<u64>,
}

/// The process's open-file limits now.
pub fn nofile() -> Nofile {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    Nofile {
        soft: current,
        hard: maximum,
    }
}

/// Raises the soft open-file limit to the hard limit; the limits in force
/// afterwards. A refusal (which an unprivileged process never gets for
/// this) is logged and the old limits kept.
pub fn raise_nofile() -> Nofile {
    let before = nofile();
    if before.soft == before.hard {
        return before;
    }
    let raised = Rlimit {
        current: before.hard,
        maximum: before.hard,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::debug!(from = ?before.soft, to = ?before.hard, "open-file soft limit raised to the hard limit");
            nofile()
        }
        Err(error) => {
            tracing::warn!(soft = ?before.soft, hard = ?before.hard, %error, "cannot raise the open-file soft limit to the hard limit; keeping it");
            before
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        // Lowering the soft limit is always allowed, and this test binary
        // runs with far more than it needs.
        let start = nofile();
        let low = start.soft.map_or(4096, |s| s.min(4096));
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(low),
                maximum: start.hard,
            },
        )
        .unwrap();
        let after = raise_nofile();
        assert_eq!(after.soft, start.hard);
        assert_eq!(after, nofile());
    }
}
