//! `--lldp-command`: the program that prints the node's LLDP neighbours
//! (`lldpcli -f json0 show neighbors`). It is run directly, a program and
//! its arguments split at whitespace, with no shell: the agent's image has
//! none, and a shell would turn the flag into a script. Shell syntax is
//! refused when the flag is parsed, so a value written for `sh -c` stops
//! the agent at start with the reason instead of failing at every rebuild.
//!
//! A run waits at most [`TIMEOUT`] (then the program is killed) and keeps
//! at most [`MAX_OUTPUT`] bytes of what it prints. A program that is not
//! installed is reported once per process, not at every model rebuild.
//! Callers run it off the async workers: it blocks until the program ends.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one run may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The most output kept; LLDP data of a node is a few kilobytes.
pub const MAX_OUTPUT: u64 = 4 << 20;
/// Characters a shell would interpret: refused in the flag.
const SHELL_SYNTAX: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?', '[', ']', '#', '~',
    '{', '}',
];

/// Why the LLDP program gave no neighbours.
#[derive(Debug, thiserror::Error)]
pub enum LldpError {
    /// The program is not installed (or not on `PATH`).
    #[error("LLDP program {program:?} is not installed or not on PATH")]
    Absent {
        /// The program.
        program: String,
    },
    /// It could not be started for another reason.
    #[error("cannot run LLDP command {command:?}: {source}")]
    Spawn {
        /// The whole command.
        command: String,
        /// What failed.
        source: std::io::Error,
    },
    /// It did not end in time and was killed.
    #[error("LLDP command {command:?} did not finish within {timeout:?}; killed it")]
    Timeout {
        /// The whole command.
        command: String,
        /// How long it had.
        timeout: Duration,
    },
    /// It ended with a failure status.
    #[error("LLDP command {command:?} failed with {status}: {stderr}")]
    Failed {
        /// The whole command.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The start of what it printed on stderr.
        stderr: String,
    },
    /// It printed something that is not UTF-8.
    #[error("LLDP command {command:?} printed non-UTF-8 output")]
    NotText {
        /// The whole command.
        command: String,
    },
}

/// A validated `--lldp-command`.
#[derive(Clone, Debug)]
pub struct LldpCommand {
    argv: Vec<String>,
    timeout: Duration,
    /// Set once the program was found absent, shared by every clone.
    absence_reported: Arc<AtomicBool>,
}

impl LldpCommand {
    /// Parses the flag: a program and its arguments, separated by
    /// whitespace, with no shell syntax.
    pub fn parse(value: &str) -> Result<LldpCommand, String> {
        if let Some(c) = value.chars().find(|c| SHELL_SYNTAX.contains(c)) {
            return Err(format!(
                "{value:?} contains {c:?}: the LLDP command runs without a shell (the image has none); give a program and its arguments, e.g. \"lldpcli -f json0 show neighbors\""
            ));
        }
        let argv: Vec<String> = value.split_whitespace().map(str::to_string).collect();
        if argv.is_empty() {
            return Err("the LLDP command is empty".to_string());
        }
        Ok(LldpCommand {
            argv,
            timeout: TIMEOUT,
            absence_reported: Arc::default(),
        })
    }

    /// The same command with another time limit (tests: a short one).
    #[cfg(test)]
    pub fn with_timeout(mut self, timeout: Duration) -> LldpCommand {
        self.timeout = timeout;
        self
    }

    /// The command as given, for messages.
    pub fn display(&self) -> String {
        self.argv.join(" ")
    }

    /// Whether this is the first time the program is found absent (to
    /// say so once).
    pub fn first_absence(&self) -> bool {
        !self.absence_reported.swap(true, Ordering::Relaxed)
    }

    /// Runs the program and returns what it printed on stdout. Blocks up
    /// to the time limit.
    pub fn run(&self) -> Result<String, LldpError> {
        let command = self.display();
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => LldpError::Absent {
                    program: self.argv[0].clone(),
                },
                _ => LldpError::Spawn {
                    command: command.clone(),
                    source,
                },
            })?;
        // Read both pipes on threads of their own: a program that fills
        // one pipe would otherwise never end.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = match wait(&mut child, self.timeout) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                // Off the runtime (see `wait`); reaps what was just killed.
                #[allow(clippy::disallowed_methods)]
                let _ = child.wait();
                return Err(LldpError::Timeout {
                    command,
                    timeout: self.timeout,
                });
            }
        };
        let out = stdout.join().unwrap_or_default();
        if !status.success() {
            let err = stderr.join().unwrap_or_default();
            let err = String::from_utf8_lossy(&err);
            let stderr = err.lines().next().unwrap_or_default().to_string();
            return Err(LldpError::Failed {
                command,
                status,
                stderr,
            });
        }
        String::from_utf8(out).map_err(|_| LldpError::NotText { command })
    }
}

/// Reads `pipe` to its end (at most [`MAX_OUTPUT`] bytes) on a thread.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut out);
        }
        out
    })
}

/// Waits for `child` to end, at most `timeout`; its status, or `None`.
/// Polls with growing pauses: the program is expected to take
/// milliseconds, and this runs seldom (start, node label changes).
fn wait(child: &mut std::process::Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        // The LLDP command runs off the async workers (the model is built
        // on a blocking thread), so a short sleep here blocks no task.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests;
