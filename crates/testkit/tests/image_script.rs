//! `scripts/image build` run from a test (the real-node tests build the
//! agent's image that way) gives its cargo call no variable that cargo set
//! for the test: with them, ring's build script reran and the release
//! build was made again inside the test.

use std::collections::BTreeMap;
use std::process::Command;

/// The environment `scripts/image` gives its cargo build when run in `env`.
fn cargo_env_of(env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let script = testkit::testbed::repo_root().join("scripts/image");
    let program = format!(
        "import importlib.machinery, importlib.util, json, os\n\
         loader = importlib.machinery.SourceFileLoader('image', {:?})\n\
         image = importlib.util.module_from_spec(importlib.util.spec_from_loader('image', loader))\n\
         loader.exec_module(image)\n\
         print(json.dumps(image.cargo_env(os.environ)))",
        script.display().to_string()
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(program)
        .env_clear()
        .envs(env.iter().copied())
        // No scripts/__pycache__ in the work tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON object")
}

#[test]
fn the_image_build_drops_what_cargo_set_for_a_test_and_keeps_the_rest() {
    let given = [
        ("CARGO_PKG_NAME", "ainic-dra"),
        ("CARGO_PKG_VERSION", "0.1.0"),
        ("CARGO_MANIFEST_DIR", "/src/crates/ainic-dra"),
        ("CARGO_MANIFEST_PATH", "/src/crates/ainic-dra/Cargo.toml"),
        ("CARGO_BIN_EXE_ainic-dra", "/src/target/debug/ainic-dra"),
        ("CARGO_CRATE_NAME", "realnode"),
        ("CARGO_PRIMARY_PACKAGE", "1"),
        ("OUT_DIR", "/src/target/debug/build/ainic-dra-0/out"),
        ("CARGO_HOME", "/cargo"),
        ("CARGO_TARGET_DIR", "/target"),
        ("RUSTFLAGS", "-C debuginfo=0"),
        ("PATH", "/usr/bin"),
    ];
    let env = cargo_env_of(&given);
    // Python may add its own (LC_CTYPE, when it coerces the C locale).
    let kept: Vec<&str> = (env.keys().map(String::as_str))
        .filter(|key| given.iter().any(|(k, _)| k == key))
        .collect();
    assert_eq!(
        kept,
        ["CARGO_HOME", "CARGO_TARGET_DIR", "PATH", "RUSTFLAGS"]
    );
}
