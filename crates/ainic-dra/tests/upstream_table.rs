//! Upstream's own allocator test tables judge `simulate`, release by
//! release: every case of `allocatortesting.TestAllocator` (and, from 1.36,
//! `TestLexicographicalAllocator`) of k8s.io/dynamic-resource-allocation
//! v0.34.4, v0.35.4, v0.36.6 and v0.37.2 is run with this crate's binary as
//! the allocator (`simulate --kubernetes-version 1.3x` with the case's own
//! gates), through `testbed/upstream-table/run 1.3x` (`go test` of a
//! verified copy of upstream's package with the release's glue file
//! added). Every case must pass; the cases the table skips (features
//! simulate has no gate for) and those the glue skips by name with a
//! reason (`notForSimulate` in `testbed/upstream-table-1.3x/simulate_test.go.in`:
//! input JSON cannot carry or the API server refuses) are counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// One table at a time: each runs a `simulate` per case, and two at once
/// on a small machine only slow each other down.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn every_case_of_upstreams_1_34_table_passes_through_simulate() {
    run_table("1.34");
}

#[test]
fn every_case_of_upstreams_1_35_table_passes_through_simulate() {
    run_table("1.35");
}

#[test]
fn every_case_of_upstreams_1_36_table_passes_through_simulate() {
    run_table("1.36");
}

#[test]
fn every_case_of_upstreams_1_37_table_passes_through_simulate() {
    run_table("1.37");
}

fn run_table(release: &str) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("testbed/upstream-table/run"))
        .arg(release)
        .arg("-json")
        .env("AINIC_DRA_BIN", env!("CARGO_BIN_EXE_ainic-dra"))
        .output()
        .expect("cannot run testbed/upstream-table/run (is go installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Per test: its last action and its output.
    let mut action: BTreeMap<String, String> = BTreeMap::new();
    let mut output: BTreeMap<String, String> = BTreeMap::new();
    for line in stdout.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(test) = event["Test"].as_str() else {
            continue;
        };
        match event["Action"].as_str() {
            Some("output") => {
                output
                    .entry(test.to_string())
                    .or_default()
                    .push_str(event["Output"].as_str().unwrap_or(""));
            }
            Some(a @ ("pass" | "fail" | "skip")) => {
                action.insert(test.to_string(), a.to_string());
            }
            _ => {}
        }
    }
    // The cases are the leaves: tests with no subtests of their own.
    let names: BTreeSet<&String> = action.keys().collect();
    let leaves: Vec<&String> = names
        .iter()
        .filter(|n| !names.iter().any(|m| m.starts_with(&format!("{n}/"))))
        .copied()
        .collect();
    let with = |a: &str| -> Vec<&String> {
        leaves
            .iter()
            .filter(|n| action[**n] == a)
            .copied()
            .collect()
    };
    let (passed, failed, skipped) = (with("pass"), with("fail"), with("skip"));
    let skipped_for = |prefix: &str| -> Vec<&String> {
        skipped
            .iter()
            .filter(|n| output.get(**n).is_some_and(|o| o.contains(prefix)))
            .copied()
            .collect()
    };
    let declined = skipped_for("not for simulate:");
    let known = skipped_for("known difference:");
    eprintln!(
        "upstream's {release} table: {} cases, {} passed, {} failed, {} skipped: {} for features simulate lacks, {} not for simulate {declined:?}, {} known differences {known:?}",
        leaves.len(),
        passed.len(),
        failed.len(),
        skipped.len(),
        skipped.len() - declined.len() - known.len(),
        declined.len(),
        known.len(),
    );
    let report: Vec<String> = failed
        .iter()
        .map(|n| format!("--- {n}\n{}", tail(&output[*n], 3000)))
        .collect();
    assert!(
        failed.is_empty(),
        "{} case(s) of upstream's {release} table fail through simulate: {failed:?}\n{}",
        failed.len(),
        report.join("\n")
    );
    assert!(
        out.status.success() && passed.len() > 100,
        "go test failed ({}) with {} cases passed:\n{}\n{}",
        out.status,
        passed.len(),
        tail(&stdout, 4000),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The last `n` characters of `text`.
fn tail(text: &str, n: usize) -> String {
    let skip = text.chars().count().saturating_sub(n);
    text.chars().skip(skip).collect()
}
