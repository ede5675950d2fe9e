//! Tests that need a network namespace of their own (to make links and
//! addresses without touching the host's): an outer test re-runs one
//! ignored inner test of the same binary under `unshare -n`.

use std::process::Command;

/// The variable set for the inner test, which it checks so that it never
/// runs in the host's namespace.
pub const INNER_VAR: &str = "AINIC_NETNS_INNER";

/// Runs the ignored test `inner` (its full path) of this test binary in a
/// new network namespace and fails unless it ran and passed. Fails rather
/// than skips where no namespace can be made: the test command runs as
/// root, and a missing one would hide that the inner test never ran.
pub fn run_inner(inner: &str) {
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "cannot create a network namespace with `unshare -n` (run the tests as root)"
    );
    let output =
        (this_exe_inside(["--exact", inner, "--ignored", "--test-threads=1"]).output()).unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("1 passed"), "inner test did not run: {text}");
}

/// This executable with `args`, to run in a new network namespace
/// (`unshare -n`), with [`INNER_VAR`] set so that it knows it is inside.
pub fn this_exe_inside<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new("unshare");
    command.arg("-n").arg(std::env::current_exe().unwrap());
    command.args(args).env(INNER_VAR, "1");
    command
}

/// Whether this is the inner run (see [`run_inner`], [`this_exe_inside`]).
pub fn is_inner() -> bool {
    std::env::var(INNER_VAR).as_deref() == Ok("1")
}
