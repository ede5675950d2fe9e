//! The `ainic-dra-controller` binary at its edge: the flags the chart
//! passes, and a start that cannot read its kubeconfig failing with one
//! line that names it.

use std::process::Command;

fn controller() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra-controller"))
}

#[test]
fn help_lists_the_flags_the_chart_passes() {
    let out = controller().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--driver-name",
        "--tenant-label",
        "--feature-gates",
        "--kubernetes-version",
        "--webhook-addr",
        "--webhook-secret",
        "--webhook-configuration",
        "--webhook-hosts",
        "--log",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn an_unreadable_kubeconfig_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let out = controller()
        .args(["--namespace", "ainic-system", "--identity", "replica-0"])
        .arg("--kubeconfig")
        .arg(&missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("ainic-dra-controller: ") && last.contains("no-such-kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn a_bad_feature_gate_is_refused_before_starting() {
    let out = controller()
        .args(["--namespace", "n", "--identity", "i"])
        .args(["--feature-gates", "NoSuchGate=true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("NoSuchGate"), "{stderr}");
}
