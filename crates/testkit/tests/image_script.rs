//! `scripts/image build` run from a test (the real-node tests build the
//! agent's image that way) gives its cargo call no variable that cargo set
//! for the test: with them, ring's build script reran and the release
//! build was made again inside the test.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

/// What cargo sets for a test of a package with a build script.
const SET_FOR_A_TEST: [(&str, &str); 8] = [
    ("CARGO_PKG_NAME", "ainic-dra"),
    ("CARGO_PKG_VERSION", "0.1.0"),
    ("CARGO_MANIFEST_DIR", "/src/crates/ainic-dra"),
    ("CARGO_MANIFEST_PATH", "/src/crates/ainic-dra/Cargo.toml"),
    ("CARGO_BIN_EXE_ainic-dra", "/src/target/debug/ainic-dra"),
    ("CARGO_CRATE_NAME", "realnode"),
    ("CARGO_PRIMARY_PACKAGE", "1"),
    ("OUT_DIR", "/src/target/debug/build/ainic-dra-0/out"),
];

#[test]
fn the_image_build_gives_cargo_none_of_what_cargo_set_for_a_test() {
    let tmp = tempfile::tempdir().unwrap();
    // A `cargo` that writes down its environment and fails, so the
    // script stops before it builds anything.
    let dump = tmp.path().join("env");
    let cargo = tmp.path().join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nenv > \"$ENV_DUMP\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let out = Command::new(testkit::testbed::repo_root().join("scripts/image"))
        .arg("build")
        .envs(SET_FOR_A_TEST)
        .env("PATH", format!("{}:{path}", tmp.path().display()))
        .env("ENV_DUMP", &dump)
        .env("CARGO_TARGET_DIR", tmp.path().join("target"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the fake cargo fails the build");
    assert!(said.contains("failed with exit status 3"), "{said}");
    let given = std::fs::read_to_string(&dump).expect("the script ran cargo");
    let names: Vec<&str> = (given.lines())
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    for (name, _) in SET_FOR_A_TEST {
        assert!(!names.contains(&name), "cargo was given {name}");
    }
    for kept in ["CARGO_TARGET_DIR", "PATH", "AINIC_DRA_PACK_RELOCS"] {
        assert!(names.contains(&kept), "cargo was not given {kept}");
    }
}
