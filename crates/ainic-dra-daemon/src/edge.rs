//! What each ainic-dra binary (`ainic-dra`, `ainic-dra-controller`) does at
//! its edge, the same way: logs to stderr through one filter, prints a
//! failed command's error as one line, and ends with its exit status.
//! `anyhow` is the binaries' error type; this is where it ends.

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

/// An error that ends the program with a specific exit status (the default
/// for other errors is 1). `simulate` uses 2 (invalid input) and 3 (cannot
/// be allocated).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// Process exit status.
    pub code: u8,
    /// The one line printed on stderr.
    pub message: String,
}

/// Sends `tracing` output to stderr, filtered by `filter` (`warn` when it
/// does not parse).
pub fn init_logging(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Prints a failed command's error as one line, prefixed by the binary's
/// `name`, and maps it to an exit status.
pub fn exit_code(name: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let code = err.downcast_ref::<Exit>().map_or(1, |e| e.code);
            eprintln!("{name}: {}", one_line(&err));
            ExitCode::from(code)
        }
    }
}

/// The error and its causes joined on one line: `what failed: why: root cause`.
/// A cause that its parent's message already ends with (errors that both
/// print and chain their source) is said once.
fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain().map(ToString::to_string) {
        if parts.last().is_some_and(|last| last.ends_with(&cause)) {
            continue;
        }
        parts.push(cause);
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_its_parent_already_says_is_said_once() {
        let root = std::io::Error::other("disk full");
        let err = anyhow::Error::new(root)
            .context("write /x: disk full")
            .context("prepare claim a");
        assert_eq!(one_line(&err), "prepare claim a: write /x: disk full");
    }

    #[test]
    fn exit_picks_its_status() {
        let err = anyhow::Error::new(Exit {
            code: 3,
            message: "cannot be allocated".into(),
        });
        assert_eq!(exit_code("t", Err(err)), ExitCode::from(3));
        assert_eq!(exit_code("t", Err(anyhow::anyhow!("x"))), ExitCode::from(1));
    }
}
