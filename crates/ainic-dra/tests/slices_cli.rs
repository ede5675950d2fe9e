//! `ainic-dra slices` and `ainic-dra deviceclasses` as a user runs them:
//! output that parses as Kubernetes objects and passes the validator, gates
//! from `--feature-gates`, and bad fabric input reported by file and field
//! while slices are still printed with the defaults.

use std::process::{Command, Output};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use serde::Deserialize;

fn ainic(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(args)
        .env_remove("AINIC_DRA_LOG")
        .output()
        .expect("run ainic-dra")
}

fn slices_json(args: &[&str]) -> (Vec<ResourceSlice>, String) {
    let mut all = vec!["slices", "--node-name", "node-a", "-o", "json"];
    all.extend_from_slice(args);
    let out = ainic(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let slices: Vec<ResourceSlice> =
        serde_json::from_slice(&out.stdout).expect("a JSON list of slices");
    let release = (args.iter().position(|a| *a == "--kubernetes-version"))
        .map(|i| args[i + 1].parse().unwrap())
        .unwrap_or(dra_model::Release::OLDEST);
    let violations = dra_model::validate::check_pool_for(&slices, release);
    assert!(violations.is_empty(), "{violations:#?}");
    (slices, stderr)
}

fn attr(
    slices: &[ResourceSlice],
    device: &str,
    key: &str,
) -> Option<k8s_openapi::api::resource::v1::DeviceAttribute> {
    slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find(|d| d.name == device)
        .and_then(|d| d.attributes.as_ref()?.get(key).cloned())
}

#[test]
fn sriov_topology_publishes_vfs_by_default_and_pf_with_counters_when_partitionable() {
    let (plain, _) = slices_json(&["--topology", "sriov-vfs"]);
    let names: Vec<String> = plain
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .map(|d| d.name.clone())
        .collect();
    assert!(!names.contains(&"pf-0000-44-00-0".to_string()), "{names:?}");
    assert!(
        names.contains(&"pf-0000-c2-00-0".to_string()),
        "PF without VFs: {names:?}"
    );
    assert!(
        names.iter().filter(|n| n.starts_with("vf-")).count() == 6,
        "{names:?}"
    );

    let (gated, _) = slices_json(&[
        "--topology",
        "sriov-vfs",
        "--feature-gates",
        "DRAPartitionableDevices=true",
    ]);
    assert!(gated.iter().any(|s| s.spec.shared_counters.is_some()));
    assert!(attr(&gated, "pf-0000-44-00-0", "ainic.amd.com/type").is_some());
    // 1.34 keeps a family's counters beside its devices; 1.37 (where the
    // gate is on by default) in a slice of their own.
    let beside = |slices: &[ResourceSlice]| {
        (slices.iter()).any(|s| s.spec.shared_counters.is_some() && s.spec.devices.is_some())
    };
    assert!(beside(&gated));
    let (newest, _) = slices_json(&["--topology", "sriov-vfs", "--kubernetes-version", "1.37"]);
    assert!(!beside(&newest));
    assert!(newest.iter().any(|s| s.spec.shared_counters.is_some()));
    assert!(attr(&newest, "pf-0000-44-00-0", "ainic.amd.com/type").is_some());
}

#[test]
fn yaml_output_is_one_document_per_slice() {
    let out = ainic(&[
        "slices",
        "--topology",
        "mi300x-8gpu-8nic",
        "--node-name",
        "node-a",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<ResourceSlice> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| ResourceSlice::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].spec.devices.as_ref().unwrap().len(), 8);
}

#[test]
fn fabric_sources_set_rail_fabric_and_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric.yaml");
    std::fs::write(
        &fabric,
        "nodes:\n  node-a:\n    fabric: pod-a\n    nics:\n      \"0000:04:00.0\": {rail: 5}\n",
    )
    .unwrap();
    let lldp = dir.path().join("lldp.json");
    std::fs::write(
        &lldp,
        r#"{"lldp":[{"interface":[{"name":"enp4s0","chassis":[{"name":[{"value":"leaf-3"}]}]}]}]}"#,
    )
    .unwrap();
    let (slices, _) = slices_json(&[
        "--topology",
        "mi300x-8gpu-8nic",
        "--fabric-config",
        fabric.to_str().unwrap(),
        "--lldp-json",
        lldp.to_str().unwrap(),
    ]);
    let get = |k: &str| attr(&slices, "pf-0000-04-00-0", k).unwrap();
    assert_eq!(get("ainic.amd.com/rail").int, Some(5));
    assert_eq!(get("ainic.amd.com/fabric").string.as_deref(), Some("pod-a"));
    assert_eq!(
        get("ainic.amd.com/leafSwitch").string.as_deref(),
        Some("leaf-3")
    );
}

/// Issue 29 item 7: the LLDP command ran through `sh -c`, and the agent's
/// image has no shell. Here the agent's PATH holds a fake `lldpcli` and
/// nothing else: it must be run directly.
#[test]
fn the_lldp_command_runs_without_a_shell() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let json = dir.path().join("lldp.json");
    std::fs::write(
        &json,
        r#"{"lldp":[{"interface":[{"name":"enp4s0","chassis":[{"name":[{"value":"leaf-7"}]}]}]}]}"#,
    )
    .unwrap();
    // The fake execs cat itself (its #! line names an absolute path,
    // found without PATH); the agent gets no `sh` on its PATH.
    let fake = bin.join("lldpcli");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh
exec /bin/cat {}
",
            json.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["slices", "--node-name", "node-a", "-o", "json"])
        .args(["--topology", "mi300x-8gpu-8nic"])
        .args(["--lldp-command", "lldpcli -f json0 show neighbors"])
        .env_remove("AINIC_DRA_LOG")
        .env("PATH", &bin)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let slices: Vec<ResourceSlice> = serde_json::from_slice(&out.stdout).unwrap();
    let leaf = attr(&slices, "pf-0000-04-00-0", "ainic.amd.com/leafSwitch");
    assert_eq!(
        leaf.and_then(|a| a.string).as_deref(),
        Some("leaf-7"),
        "{stderr}"
    );

    // Shell syntax stops the command line at once, with the reason.
    let piped = ainic(&[
        "slices",
        "--node-name",
        "node-a",
        "--topology",
        "mi300x-8gpu-8nic",
        "--lldp-command",
        "lldpcli -f json0 show neighbors | cat",
    ]);
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !piped.status.success() && stderr.contains("without a shell"),
        "{stderr}"
    );
}

/// Issue 29 item 1: a bad fabric config was logged and the slices built
/// with fabric defaults, dropping every tenant the file set. Now it is an
/// error naming the file, the entry and its line.
#[test]
fn a_bad_fabric_config_is_an_error_naming_file_entry_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric.yaml");
    std::fs::write(
        &fabric,
        "nodes:\n  node-a:\n    tenant: team-a\n    leafswich: leaf-9\n",
    )
    .unwrap();
    let out = ainic(&[
        "slices",
        "--topology",
        "mi300x-8gpu-8nic",
        "--node-name",
        "node-a",
        "--fabric-config",
        fabric.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no slices printed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(fabric.to_str().unwrap())
            && stderr.contains("nodes.node-a")
            && stderr.contains("leafswich")
            && stderr.contains("line 4"),
        "{stderr}"
    );
}

#[test]
fn unknown_feature_gate_is_named() {
    let out = ainic(&[
        "slices",
        "--topology",
        "sriov-vfs",
        "--node-name",
        "n",
        "--feature-gates",
        "DRADeviceTaint=true",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DRADeviceTaint"), "{stderr}");
}

#[test]
fn deviceclasses_prints_the_shipped_classes() {
    let out = ainic(&["deviceclasses"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<String> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| DeviceClass::deserialize(d).unwrap().metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        ["ainic-pf", "ainic-vf", "ainic-shared", "ainic-fabric"]
    );
}

/// Sticky tenant binding (use case 4): the shared PF carries the binding
/// and failure conditions only with `--sticky-tenants`, binding conditions
/// on (1.36+ by default; off in 1.34) and no tenant from the config.
#[test]
fn sticky_conditions_only_with_binding_conditions_on_and_no_configured_tenant() {
    const SHARED: &str = "pf-0000-04-00-0";
    let conditions = |extra: &[&str]| -> Vec<(String, Vec<String>, Vec<String>)> {
        let mut args = vec![
            "--topology",
            "mi300x-8gpu-8nic",
            "--shared-pfs",
            "0000:04:00.0",
        ];
        args.extend_from_slice(extra);
        let (slices, _) = slices_json(&args);
        (slices.iter().flat_map(|s| s.spec.devices.iter().flatten()))
            .filter(|d| d.binding_conditions.is_some() || d.binding_failure_conditions.is_some())
            .map(|d| {
                let of = |c: &Option<Vec<String>>| c.clone().unwrap_or_default();
                (
                    d.name.clone(),
                    of(&d.binding_conditions),
                    of(&d.binding_failure_conditions),
                )
            })
            .collect()
    };
    let on = conditions(&["--kubernetes-version", "1.37", "--sticky-tenants"]);
    assert_eq!(
        on,
        [(
            SHARED.to_string(),
            vec!["ainic.amd.com/tenant-bound".to_string()],
            vec!["ainic.amd.com/tenant-conflict".to_string()]
        )]
    );
    assert!(conditions(&["--kubernetes-version", "1.37"]).is_empty());
    let gates = "DRAConsumableCapacity=true";
    let old = [
        "--kubernetes-version",
        "1.34",
        "--feature-gates",
        gates,
        "--sticky-tenants",
    ];
    assert!(
        conditions(&old).is_empty(),
        "binding conditions are off in 1.34"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fabric.yaml");
    std::fs::write(
        &config,
        "nodes:\n  node-a:\n    nics:\n      \"0000:04:00.0\": { tenant: team-a }\n",
    )
    .unwrap();
    let fenced = [
        "--kubernetes-version",
        "1.37",
        "--sticky-tenants",
        "--fabric-config",
        config.to_str().unwrap(),
    ];
    assert!(
        conditions(&fenced).is_empty(),
        "a configured tenant is not sticky"
    );
}
