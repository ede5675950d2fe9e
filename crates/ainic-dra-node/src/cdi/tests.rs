use super::*;
use crate::fixtures;
use serde_json::Value;

fn attached(i: u8, bus: u8) -> AttachedDevice {
    AttachedDevice {
        device: format!("pf-0000-{bus:02x}-00-0"),
        request: "nic".into(),
        nic: fixtures::pf(i, bus),
        umad: false,
        issm: false,
        share: None,
        netdev_gate: None,
    }
}

fn parsed(spec: &ClaimSpec) -> Value {
    serde_json::from_str(&spec.content).unwrap()
}

const UID: &str = "7a1e9c2b-0000-4000-8000-000000000001";

#[test]
fn one_nic_gets_verbs_rdma_cm_and_nccl_env_at_the_lowest_version() {
    let dir = tempfile::tempdir().unwrap();
    let spec = build(
        UID,
        &[attached(0, 0x0c)],
        Some(&fixtures::inventory().rdma_cm.unwrap()),
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    assert_eq!(spec.file_name, format!("ainic.amd.com-{UID}.json"));
    assert_eq!(
        spec.device_ids,
        vec![format!("amd.com/ainic={UID}-pf-0000-0c-00-0")]
    );
    let v = parsed(&spec);
    // A device name starting with a digit needs 0.5.0; nothing here needs more.
    assert_eq!(v["cdiVersion"], "0.5.0");
    assert_eq!(v["kind"], "amd.com/ainic");
    let nodes = &v["devices"][0]["containerEdits"]["deviceNodes"];
    assert_eq!(
        nodes.as_array().unwrap().len(),
        1,
        "umad/issm only when asked"
    );
    assert_eq!(nodes[0]["path"], "/dev/infiniband/uverbs0");
    assert_eq!(nodes[0]["major"], 231);
    assert!(
        nodes[0].get("hostPath").is_none(),
        "no host node under this dev root"
    );
    let env: Vec<&str> = v["devices"][0]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(env.contains(&"NCCL_IB_HCA==ionic_0"), "{env:?}");
    assert!(env.contains(&"AINIC_NETDEVS=eth0"), "{env:?}");
    assert!(env.contains(&"AINIC_PCI_ADDRESSES=0000:0c:00.0"), "{env:?}");
    assert!(
        env.contains(&"AINIC_NIC_PF_0000_0C_00_0=rdma=ionic_0,netdev=eth0,pci=0000:0c:00.0"),
        "{env:?}"
    );
    assert!(
        v["containerEdits"].get("env").is_none(),
        "no claim-wide env"
    );
    assert_eq!(
        v["containerEdits"]["deviceNodes"][0]["path"],
        "/dev/infiniband/rdma_cm"
    );
}

#[test]
fn the_host_path_is_the_hosts_own_when_the_node_exists_where_the_agent_looks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("infiniband")).unwrap();
    std::fs::write(dir.path().join("infiniband/uverbs0"), b"").unwrap();
    let spec = build(
        "abc",
        &[attached(0, 0x0c)],
        None,
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    let v = parsed(&spec);
    assert_eq!(
        v["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"], "/dev/infiniband/uverbs0",
        "the runtime on the host reads it: not the agent's mount point"
    );
    assert_eq!(
        v["cdiVersion"], "0.5.0",
        "hostPath on a device node needs 0.5.0"
    );
}

#[test]
fn a_letter_first_name_without_host_paths_stays_at_0_3_0() {
    let dir = tempfile::tempdir().unwrap();
    let spec = build(
        "claim-a",
        &[attached(0, 0x0c)],
        None,
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    assert_eq!(parsed(&spec)["cdiVersion"], "0.3.0");
}

#[test]
fn umad_and_issm_when_asked_and_all_nics_in_the_env() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = attached(0, 0x0c);
    a.umad = true;
    a.issm = true;
    let spec = build(
        "abc",
        &[a, attached(1, 0x0d)],
        None,
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    let v = parsed(&spec);
    let paths: Vec<&str> = v["devices"][0]["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/dev/infiniband/uverbs0",
            "/dev/infiniband/umad0",
            "/dev/infiniband/issm0"
        ]
    );
    assert_eq!(
        v["devices"][1]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // One request: each of its devices carries the whole request's lists.
    for d in 0..2 {
        let env = v["devices"][d]["containerEdits"]["env"].to_string();
        assert!(env.contains("NCCL_IB_HCA==ionic_0,ionic_1"), "{env}");
    }
}

#[test]
fn each_request_lists_only_its_own_nics() {
    let dir = tempfile::tempdir().unwrap();
    let mut second = attached(1, 0x0d);
    second.request = "rail1".into();
    let spec = build(
        "abc",
        &[attached(0, 0x0c), second],
        None,
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    let v = parsed(&spec);
    let env = |d: usize| v["devices"][d]["containerEdits"]["env"].to_string();
    assert!(env(0).contains("NCCL_IB_HCA==ionic_0\""), "{}", env(0));
    assert!(
        env(0).contains("AINIC_DEVICES=pf-0000-0c-00-0\""),
        "{}",
        env(0)
    );
    assert!(env(1).contains("NCCL_IB_HCA==ionic_1\""), "{}", env(1));
    assert!(!env(0).contains("ionic_1") && !env(1).contains("ionic_0"));
}

#[test]
fn shares_of_one_nic_are_distinct_devices_with_their_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let share = |id: &str, bw: &str| {
        let mut d = attached(0, 0x0c);
        d.share = Some(Share {
            id: id.into(),
            consumed: BTreeMap::from([("bandwidth".to_string(), bw.to_string())]),
        });
        d
    };
    let spec = build(
        "abc",
        &[share("s1", "100G"), share("s2", "50G")],
        None,
        &DevRoots::mounted_at(dir.path()),
    )
    .unwrap();
    assert_eq!(
        spec.device_ids,
        [
            "amd.com/ainic=abc-pf-0000-0c-00-0-s1",
            "amd.com/ainic=abc-pf-0000-0c-00-0-s2"
        ]
    );
    let v = parsed(&spec);
    let env = v["devices"][1]["containerEdits"]["env"].to_string();
    assert!(
        env.contains("AINIC_SHARE_ID=s2") && env.contains("AINIC_CONSUMED_BANDWIDTH=50G"),
        "{env}"
    );
}

#[test]
fn a_nic_without_rdma_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = attached(0, 0x0c);
    d.nic.rdma.clear();
    let err = build("abc", &[d], None, &DevRoots::mounted_at(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pf-0000-0c-00-0") && err.contains("0000:0c:00.0"),
        "{err}"
    );
}

#[test]
fn an_invalid_name_is_caught_by_validation_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut device = attached(0, 0x0c);
    device.device = "bad name!".into();
    let err = build(UID, &[device], None, &DevRoots::mounted_at(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid"), "{err}");
}

#[test]
fn file_names_map_back_to_claims() {
    assert_eq!(claim_of_file(&file_name("u-1")), Some("u-1"));
    assert_eq!(claim_of_file("other.json"), None);
}

#[test]
fn a_claim_uid_that_is_not_a_uid_never_reaches_a_file_name() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        "../../etc/cron.d/x",
        "",
        "a/b",
        "..",
        ".hidden",
        "x y",
        &"a".repeat(65),
    ] {
        let err = build(
            bad,
            &[attached(0, 0x0c)],
            None,
            &DevRoots::mounted_at(dir.path()),
        )
        .unwrap_err();
        assert!(
            matches!(err, CdiError::BadClaimUid { .. }),
            "{bad:?}: {err}"
        );
    }
    assert!(
        build(
            UID,
            &[attached(0, 0x0c)],
            None,
            &DevRoots::mounted_at(dir.path())
        )
        .is_ok()
    );
}

/// Issue 31 item 5: a device in netdev mode is given its gate file, which
/// exists only while its netdev is in the pod, so the container cannot
/// start without its network; an RDMA-mode device gets no mount.
#[test]
fn a_netdev_mode_device_mounts_its_gate_file_and_an_rdma_one_nothing() {
    let gate = netdev_gate(Path::new("/var/run/cdi"), UID, "pf-0000-0c-00-0");
    let gated = AttachedDevice {
        netdev_gate: Some(gate.clone()),
        ..attached(0, 0x0c)
    };
    let dev = DevRoots::mounted_at(Path::new("/dev"));
    let spec = build(UID, &[gated, attached(1, 0x2c)], None, &dev).unwrap();
    let doc = parsed(&spec);
    let mounts = &doc["devices"][0]["containerEdits"]["mounts"];
    assert_eq!(mounts[0]["hostPath"], gate.display().to_string());
    assert_eq!(
        mounts[0]["containerPath"],
        "/run/ainic-dra/netdev-attached/pf-0000-0c-00-0"
    );
    assert!(doc["devices"][1]["containerEdits"]["mounts"].is_null());
    assert!(
        gate.file_name().unwrap().to_str().unwrap().starts_with('.'),
        "not a spec file the runtime would parse"
    );
}
