//! `ainic-dra topo` and `ainic-dra discover` as a user runs them: the JSON
//! shape of `topo -o json`, and one clear stderr line with a non-zero exit
//! for a missing sysfs root or an unknown topology.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

fn ainic(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(args)
        .env_remove("AINIC_DRA_LOG")
        .output()
        .expect("run ainic-dra")
}

/// Stderr of a failed run, checked to be exactly one line.
fn one_error_line(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn topo_json_has_exactly_gpus_nics_and_typed_links() {
    let out = ainic(&["topo", "--topology", "nested-switches", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let keys: BTreeSet<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(keys, BTreeSet::from(["gpus", "nics", "links"]));
    let bdfs = |key: &str| -> Vec<String> {
        doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let (gpus, nics) = (bdfs("gpus"), bdfs("nics"));
    assert_eq!(gpus, ["0000:05:00.0", "0000:09:00.0"]);
    assert_eq!(nics.len(), 4);
    let links = doc["links"].as_array().unwrap();
    assert_eq!(links.len(), gpus.len() * nics.len());
    for link in links {
        let keys: BTreeSet<&str> = link
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys, BTreeSet::from(["gpu", "nic", "type"]));
        assert!(gpus.contains(&link["gpu"].as_str().unwrap().to_string()));
        assert!(nics.contains(&link["nic"].as_str().unwrap().to_string()));
        let class = link["type"].as_str().unwrap();
        assert!(
            ["PIX", "PXB", "PHB", "NODE", "SYS"].contains(&class),
            "{class}"
        );
    }
    let class_of = |gpu: &str, nic: &str| {
        links
            .iter()
            .find(|l| l["gpu"] == gpu && l["nic"] == nic)
            .map(|l| l["type"].as_str().unwrap().to_string())
    };
    assert_eq!(
        class_of("0000:05:00.0", "0000:06:00.0").as_deref(),
        Some("PIX")
    );
    assert_eq!(
        class_of("0000:05:00.0", "0000:0a:00.0").as_deref(),
        Some("PXB")
    );
    assert_eq!(
        class_of("0000:09:00.0", "0000:0c:00.0").as_deref(),
        Some("PHB")
    );
}

#[test]
fn missing_sysfs_root_is_one_line_without_repeats() {
    for cmd in ["topo", "discover"] {
        let out = ainic(&[cmd, "--sysfs-root", "/nonexistent-ainic-root"]);
        assert_eq!(out.status.code(), Some(1));
        let line = one_error_line(&out);
        assert!(line.contains("/nonexistent-ainic-root"), "{line}");
        // Each cause is said once, not echoed by the next one in the chain.
        assert_eq!(line.matches("does not exist").count(), 1, "{line}");
    }
}

#[test]
fn unknown_topology_names_the_bundled_ones() {
    for cmd in ["topo", "discover"] {
        let out = ainic(&[cmd, "--topology", "no-such-topology"]);
        assert_eq!(out.status.code(), Some(1));
        let line = one_error_line(&out);
        assert!(line.contains("\"no-such-topology\""), "{line}");
        assert!(line.contains("mi300x-8gpu-8nic"), "{line}");
    }
}

#[test]
fn a_source_is_required() {
    let out = ainic(&["topo"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--sysfs-root"), "{stderr}");
}
