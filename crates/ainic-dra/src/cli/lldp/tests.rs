//! The LLDP command as the agent runs it: no shell, a time limit, and an
//! absent program said once.

use std::sync::{Arc, Mutex};

use clap::Parser;

use super::*;
use crate::cli::slices::ModelArgs;

#[test]
fn shell_syntax_is_refused_and_words_become_arguments() {
    let cmd = LldpCommand::parse("  lldpcli -f json0   show neighbors ").unwrap();
    assert_eq!(cmd.argv, ["lldpcli", "-f", "json0", "show", "neighbors"]);
    for bad in [
        "lldpcli -f json0 show neighbors | jq .",
        "lldpcli show neighbors > /tmp/x",
        "cat $HOME/lldp.json",
        "sh -c 'lldpcli -f json0 show neighbors'",
        "lldpcli; reboot",
    ] {
        let error = LldpCommand::parse(bad).unwrap_err();
        assert!(error.contains("without a shell"), "{bad}: {error}");
    }
    assert!(LldpCommand::parse("   ").is_err());
}

#[test]
fn the_program_runs_directly_and_its_output_is_returned() {
    // `$HOME` reaches the program as is: no shell expands it.
    let cmd = LldpCommand::parse("echo HOME=$HOME");
    assert!(cmd.is_err(), "refused, not expanded");
    let out = LldpCommand::parse("echo -n neighbours").unwrap().run();
    assert_eq!(out.unwrap(), "neighbours");
}

#[test]
fn a_program_that_hangs_is_killed_at_the_time_limit() {
    let cmd = LldpCommand::parse("sleep 30")
        .unwrap()
        .with_timeout(Duration::from_millis(200));
    let started = Instant::now();
    let error = cmd.run().unwrap_err();
    assert!(matches!(error, LldpError::Timeout { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not waited out"
    );
}

#[test]
fn a_failure_names_the_command_and_its_status() {
    let error = LldpCommand::parse("false").unwrap().run().unwrap_err();
    assert!(error.to_string().contains("\"false\" failed"), "{error}");
}

/// Log lines written while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    model: ModelArgs,
}

#[test]
fn an_absent_program_is_said_once_for_every_rebuild_of_the_model() {
    let args = Wrapper::try_parse_from(["x", "--lldp-command", "/nonexistent/lldpcli -f json0"])
        .unwrap()
        .model;
    let log = logged(|| {
        for _ in 0..3 {
            // What the agent does at start and at each node label change.
            args.clone().config("node-a", Default::default()).unwrap();
        }
    });
    let said = log.matches("is not installed").count();
    assert_eq!(said, 1, "{log}");
}
