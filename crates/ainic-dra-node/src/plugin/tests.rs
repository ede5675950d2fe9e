use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::watch;

use super::claims::FakeClaims;
use super::*;
use crate::addresses::{self, Addresses};
use crate::checkpoint;
use crate::fixtures::{self, claim, nic_config};

const D: &str = "ainic.amd.com";
const PF0: &str = "pf-0000-0c-00-0";
const PF1: &str = "pf-0000-0d-00-0";

struct Harness {
    driver: Arc<Driver>,
    claims: Arc<FakeClaims>,
    inventory: watch::Sender<Arc<Inventory>>,
    attributes: watch::Sender<Option<Arc<crate::metadata::DeviceAttributes>>>,
    _dir: tempfile::TempDir,
    cdi_dir: PathBuf,
    state_dir: PathBuf,
    plugin_dir: PathBuf,
    metadata_dir: PathBuf,
}

fn harness() -> Harness {
    harness_with(None)
}

fn harness_with(status: Option<tokio::sync::mpsc::UnboundedSender<status::StatusJob>>) -> Harness {
    harness_of(status, false)
}

fn harness_of(
    status: Option<tokio::sync::mpsc::UnboundedSender<status::StatusJob>>,
    with_metadata: bool,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let cdi_dir = dir.path().join("cdi");
    let state_dir = dir.path().join("state");
    let plugin_dir = dir.path().join("plugin");
    let metadata_dir = dir.path().join("metadata");
    let claims = Arc::new(FakeClaims::default());
    let (inventory_tx, inventory) = watch::channel(Arc::new(fixtures::inventory()));
    let (attributes_tx, attributes) = watch::channel(None);
    let cdi = CdiDir::open(&cdi_dir).unwrap();
    let metadata = with_metadata.then(|| MetadataParts {
        files: MetadataFiles::new(D, &metadata_dir, &plugin_dir, cdi.clone()),
        write: true,
        attributes,
        addresses: Addresses::uncached(addresses::kernel_lookup()),
    });
    let driver = Arc::new(Driver::new(DriverParts {
        scope: Scope {
            driver: D.into(),
            pool: "node-a".into(),
        },
        claims: claims.clone(),
        inventory,
        store: Arc::new(CheckpointStore::open(&state_dir).unwrap()),
        cdi,
        dev: cdi::DevRoots::mounted_at(&dir.path().join("dev")),
        metrics: Arc::new(Metrics::default()),
        status,
        metadata,
        sandboxes: None,
    }));
    Harness {
        driver,
        claims,
        inventory: inventory_tx,
        attributes: attributes_tx,
        _dir: dir,
        cdi_dir,
        state_dir,
        plugin_dir,
        metadata_dir,
    }
}

fn r(name: &str, uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        uid: uid.into(),
        name: name.into(),
    }
}

fn cdi_files(h: &Harness) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&h.cdi_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn prepare_writes_spec_and_checkpoint_and_is_idempotent() {
    let h = harness();
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    let first = h.driver.prepare(&[r("a", "u1")]).await;
    let devices = first["u1"].clone().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].cdi_ids, ["amd.com/ainic=u1-pf-0000-0c-00-0"]);
    assert_eq!(devices[0].requests, ["nic"]);
    assert_eq!(cdi_files(&h), ["ainic.amd.com-u1.json"]);
    let on_disk = checkpoint::read(&h.state_dir).unwrap();
    assert_eq!(on_disk.claims["u1"].devices, devices);

    // A second prepare (another pod of a shared claim) answers from the
    // checkpoint: same result, no new GET.
    let gets = h.claims.gets();
    let second = h.driver.prepare(&[r("a", "u1")]).await;
    assert_eq!(second["u1"], first["u1"]);
    assert_eq!(h.claims.gets(), gets);
}

#[tokio::test]
async fn one_bad_claim_does_not_fail_the_others() {
    let h = harness();
    h.claims
        .put(claim("good", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    h.claims.put(claim(
        "bad",
        "u2",
        &[("nic", D, "node-a", PF1)],
        json!([nic_config("FromClaim", json!({"bogus": 1}))]),
    ));
    let out = h
        .driver
        .prepare(&[r("good", "u1"), r("bad", "u2"), r("gone", "u3")])
        .await;
    assert!(out["u1"].is_ok());
    assert!(
        out["u2"]
            .as_ref()
            .unwrap_err()
            .contains("unknown field `bogus`")
    );
    assert!(
        out["u3"]
            .as_ref()
            .unwrap_err()
            .contains("ns/gone not found")
    );
    assert_eq!(cdi_files(&h), ["ainic.amd.com-u1.json"]);
}

/// Issue 29 item 6: a claim could change the netdev addresses its
/// DeviceClass pinned; prepare now refuses it, naming the claim and the
/// field, and prepares nothing.
#[tokio::test]
async fn prepare_refuses_a_claim_changing_a_netdev_field_its_class_pinned() {
    let h = harness();
    let config = json!([
        nic_config(
            "FromClass",
            json!({"mode": "netdev", "netdev": {"addresses": ["10.10.0.2/24"]}})
        ),
        nic_config(
            "FromClaim",
            json!({"netdev": {"addresses": ["10.10.0.66/24"]}})
        ),
    ]);
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], config));
    let out = h.driver.prepare(&[r("a", "u1")]).await;
    let err = out["u1"].as_ref().unwrap_err();
    assert!(
        err.contains("ns/a")
            && err.contains("sets netdev.addresses to [\"10.10.0.66/24\"]")
            && err.contains("DeviceClass pins netdev.addresses to [\"10.10.0.2/24\"]"),
        "{err}"
    );
    assert!(cdi_files(&h).is_empty(), "{:?}", cdi_files(&h));
}

#[tokio::test]
async fn unprepare_needs_only_the_checkpoint_and_is_idempotent() {
    let h = harness();
    h.claims.put(claim(
        "a",
        "u1",
        &[("nic", D, "node-a", PF0), ("nic", D, "node-a", PF1)],
        json!([]),
    ));
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    h.claims.delete("ns", "a");
    let gets = h.claims.gets();
    assert_eq!(h.driver.unprepare(&[r("a", "u1")]).await["u1"], Ok(()));
    assert_eq!(h.driver.unprepare(&[r("a", "u1")]).await["u1"], Ok(()));
    assert_eq!(h.claims.gets(), gets, "unprepare never reads the API");
    assert!(cdi_files(&h).is_empty());
    let on_disk = checkpoint::read(&h.state_dir).unwrap();
    assert!(on_disk.claims.is_empty());
}

#[tokio::test]
async fn concurrent_prepares_of_one_claim_do_the_work_once() {
    let h = Arc::new(harness());
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.driver.prepare(&[r("a", "u1")]).await })
        })
        .collect();
    let mut results = vec![];
    for c in calls {
        results.push(c.await.unwrap());
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(h.claims.gets(), 1);
}

fn with_admin_access(
    mut c: k8s_openapi::api::resource::v1::ResourceClaim,
) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let results = c.status.as_mut().unwrap().allocation.as_mut().unwrap();
    for r in results
        .devices
        .as_mut()
        .unwrap()
        .results
        .iter_mut()
        .flatten()
    {
        r.admin_access = Some(true);
    }
    c
}

#[tokio::test]
async fn an_exclusive_device_is_never_prepared_for_two_claims() {
    let h = harness();
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    h.claims
        .put(claim("b", "u2", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    let out = h.driver.prepare(&[r("b", "u2")]).await;
    let err = out["u2"].as_ref().unwrap_err();
    assert!(err.contains(PF0) && err.contains("ns/a (u1)"), "{err}");
    assert_eq!(
        cdi_files(&h),
        ["ainic.amd.com-u1.json"],
        "b's spec was removed"
    );
    assert!(h.driver.parts.store.get("u2").is_none());

    // A monitor with admin access may open it beside its user.
    h.claims.put(with_admin_access(claim(
        "mon",
        "u3",
        &[("nic", D, "node-a", PF0)],
        json!([]),
    )));
    assert!(h.driver.prepare(&[r("mon", "u3")]).await["u3"].is_ok());

    // Once a is unprepared, b gets the device.
    assert!(h.driver.unprepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert!(h.driver.prepare(&[r("b", "u2")]).await["u2"].is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claims_for_one_exclusive_device_at_once_get_it_once() {
    for round in 0..20 {
        let h = harness();
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        h.claims
            .put(claim(&a, "u1", &[("nic", D, "node-a", PF0)], json!([])));
        h.claims
            .put(claim(&b, "u2", &[("nic", D, "node-a", PF0)], json!([])));
        let out = h.driver.prepare(&[r(&a, "u1"), r(&b, "u2")]).await;
        assert_eq!(out.values().filter(|o| o.is_ok()).count(), 1, "{out:?}");
        assert_eq!(cdi_files(&h).len(), 1);
    }
}

#[tokio::test]
async fn the_sweep_unprepares_claims_that_are_gone_and_keeps_the_rest() {
    let h = harness();
    // Admin access, so that four claims can hold two devices at once.
    let claims = [
        ("kept", "u1", PF0),
        ("gone", "u2", PF1),
        ("recreated", "u3", PF0),
        ("moved", "u4", PF1),
    ];
    for (name, uid, pf) in claims {
        let c = claim(name, uid, &[("nic", D, "node-a", pf)], json!([]));
        h.claims.put(with_admin_access(c));
        assert!(h.driver.prepare(&[r(name, uid)]).await[uid].is_ok());
    }
    h.claims.delete("ns", "gone");
    h.claims.put(claim(
        "recreated",
        "u9",
        &[("nic", D, "node-a", PF0)],
        json!([]),
    ));
    h.claims.put(claim(
        "moved",
        "u4",
        &[("nic", D, "node-b", PF1)],
        json!([]),
    ));
    assert_eq!(h.driver.sweep_orphans().await, 3);
    assert_eq!(cdi_files(&h), ["ainic.amd.com-u1.json"]);
    let left: Vec<String> = h.driver.parts.store.snapshot().claims.into_keys().collect();
    assert_eq!(left, ["u1"]);
    let metrics = h.driver.parts.metrics.encode();
    assert!(
        metrics.contains("ainic_dra_orphaned_claims_reclaimed_total 3"),
        "{metrics}"
    );
    assert_eq!(h.driver.sweep_orphans().await, 0, "nothing left to reclaim");
}

#[tokio::test]
async fn a_stopping_agent_waits_for_the_sweeps_unprepare_and_starts_no_other() {
    let h = harness();
    for (name, uid, pf) in [("first", "u1", PF0), ("second", "u2", PF1)] {
        h.claims
            .put(claim(name, uid, &[("nic", D, "node-a", pf)], json!([])));
        assert!(h.driver.prepare(&[r(name, uid)]).await[uid].is_ok());
        h.claims.delete("ns", name);
    }
    // The first orphan's unprepare waits here, its lock held.
    let first = h.driver.claim_lock("u1");
    let held = first.lock().await;
    let sweep = tokio::spawn({
        let driver = h.driver.clone();
        async move { driver.sweep_orphans().await }
    });
    while h.driver.sweeping.try_lock().is_ok() {
        tokio::task::yield_now().await;
    }
    let drain = tokio::spawn({
        let driver = h.driver.clone();
        async move { driver.drain(Duration::from_secs(30)).await }
    });
    tokio::task::yield_now().await;
    drop(held);
    assert!(drain.await.unwrap(), "drained within the deadline");
    let left: Vec<String> = h.driver.parts.store.snapshot().claims.into_keys().collect();
    assert_eq!(
        left,
        ["u2"],
        "the unprepare under way ended before the drain, no other began"
    );
    assert_eq!(sweep.await.unwrap(), 1);
    let left = h.driver.parts.store.snapshot().claims.len();
    assert_eq!(left, 1, "the sweep stopped once the agent drained");
}

#[tokio::test]
async fn a_drained_agent_sweeps_nothing_and_asks_the_api_server_nothing() {
    let h = harness();
    h.claims
        .put(claim("gone", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("gone", "u1")]).await["u1"].is_ok());
    h.claims.delete("ns", "gone");
    assert!(h.driver.drain(Duration::from_secs(5)).await);
    let gets = h.claims.gets();
    assert_eq!(h.driver.sweep_orphans().await, 0);
    assert_eq!(
        h.claims.gets(),
        gets,
        "the sweep read a claim after the drain"
    );
    assert!(h.driver.parts.store.get("u1").is_some());
}

#[test]
fn a_claim_the_api_server_cannot_answer_for_is_not_an_orphan() {
    let scope = Scope {
        driver: D.into(),
        pool: "node-a".into(),
    };
    let unanswered = Err(claims::ClaimFetchError::Api {
        namespace: "ns".into(),
        name: "c".into(),
        message: "connection refused".into(),
    });
    assert_eq!(sweep::orphan_reason(&unanswered, "u1", &scope), None);
    let here = Ok(claim("c", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    assert_eq!(sweep::orphan_reason(&here, "u1", &scope), None);
    let mut unallocated = claim("c", "u1", &[("nic", D, "node-a", PF0)], json!([]));
    unallocated.status = None;
    assert!(sweep::orphan_reason(&Ok(unallocated), "u1", &scope).is_some());
}

/// The CDI spec file of claim `uid`, parsed.
fn spec_of(h: &Harness, uid: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(h.cdi_dir.join(cdi::file_name(uid))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `(path, minor)` of every device node in a spec.
fn nodes_of(spec: &serde_json::Value) -> Vec<(String, u64)> {
    let mut out = vec![];
    let mut edits: Vec<&serde_json::Value> = vec![&spec["containerEdits"]];
    edits.extend(
        spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["containerEdits"]),
    );
    for e in edits {
        for n in e["deviceNodes"].as_array().into_iter().flatten() {
            out.push((
                n["path"].as_str().unwrap().to_string(),
                n["minor"].as_u64().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

/// What a driver reload does to the first NIC: new char device numbers
/// (`uverbs7`, `umad7`) and a udev-renamed RDMA device.
fn renumber_first_nic(h: &Harness) {
    h.inventory.send_modify(|inventory| {
        let rdma = &mut Arc::make_mut(inventory).nics[0].rdma[0];
        rdma.name = "rocep12s0".into();
        let uverbs = rdma.uverbs.as_mut().unwrap();
        uverbs.path = "/dev/infiniband/uverbs7".into();
        uverbs.minor = 199;
        rdma.umad[0].path = "/dev/infiniband/umad7".into();
        rdma.umad[0].minor = 7;
    });
}

#[tokio::test]
async fn a_repeated_prepare_rebuilds_the_spec_from_todays_device_numbers() {
    let h = harness();
    h.claims.put(claim(
        "a",
        "u1",
        &[("nic", D, "node-a", PF0)],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    ));
    let first = h.driver.prepare(&[r("a", "u1")]).await["u1"]
        .clone()
        .unwrap();
    let before = nodes_of(&spec_of(&h, "u1"));
    assert!(
        before.contains(&("/dev/infiniband/uverbs0".into(), 192)),
        "{before:?}"
    );

    renumber_first_nic(&h);
    let again = h.driver.prepare(&[r("a", "u1")]).await["u1"]
        .clone()
        .unwrap();
    assert_eq!(again, first, "same CDI IDs: the names do not change");
    let spec = spec_of(&h, "u1");
    let after = nodes_of(&spec);
    assert!(
        after.contains(&("/dev/infiniband/uverbs7".into(), 199)),
        "{after:?}"
    );
    assert!(
        after.contains(&("/dev/infiniband/umad7".into(), 7)),
        "umad kept: {after:?}"
    );
    assert!(
        !after
            .iter()
            .any(|(p, _)| p.ends_with("uverbs0") || p.ends_with("umad0"))
    );
    let env = spec["devices"][0]["containerEdits"]["env"].to_string();
    assert!(env.contains("NCCL_IB_HCA==rocep12s0"), "{env}");

    // The checkpoint records what to rebuild the spec from, not the spec
    // (issue 34: nothing derivable is stored).
    let on_disk = checkpoint::read(&h.state_dir).unwrap();
    let recorded = &on_disk.claims["u1"];
    assert_eq!(recorded.cdi_spec, "");
    let identity = recorded.devices[0].identity.as_ref().unwrap();
    assert_eq!(identity.pci_address, "0000:0c:00.0");
    let metrics = h.driver.parts.metrics.encode();
    assert!(
        metrics.contains("ainic_dra_cdi_specs_rebuilt_total 1"),
        "{metrics}"
    );
    // Nothing changed since: nothing rebuilt again.
    assert_eq!(h.driver.refresh_all().await, Refreshed::default());
}

#[tokio::test]
async fn a_prepared_claim_whose_device_is_gone_fails_naming_it() {
    let h = harness();
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF1)], json!([])));
    h.claims
        .put(claim("b", "u2", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("a", "u1"), r("b", "u2")]).await["u1"].is_ok());

    // VFs re-created or the NIC unplugged: PF1 is gone; PF0 lost its RDMA device.
    h.inventory.send_modify(|inventory| {
        let inventory = Arc::make_mut(inventory);
        inventory.nics.retain(|n| n.address.bus != 0x0d);
        inventory.nics[0].rdma.clear();
    });
    let refreshed = h.driver.refresh_all().await;
    assert_eq!(refreshed.failed.len(), 2, "{refreshed:?}");
    let out = h.driver.prepare(&[r("a", "u1"), r("b", "u2")]).await;
    let gone = out["u1"].as_ref().unwrap_err();
    assert!(
        gone.contains(PF1) && gone.contains("0000:0d:00.0"),
        "{gone}"
    );
    let no_verbs = out["u2"].as_ref().unwrap_err();
    assert!(
        no_verbs.contains(PF0) && no_verbs.contains("no RDMA device"),
        "{no_verbs}"
    );
    assert!(
        cdi_files(&h).is_empty(),
        "no spec names a device from the past"
    );

    // The kubelet can still unprepare them; nothing is left.
    let out = h.driver.unprepare(&[r("a", "u1"), r("b", "u2")]).await;
    assert!(out.values().all(|o| o.is_ok()), "{out:?}");
    assert!(h.driver.parts.store.snapshot().claims.is_empty());
}

#[tokio::test]
async fn an_entry_without_identity_is_kept_only_while_its_numbers_hold() {
    let h = harness();
    let inventory = fixtures::inventory();
    let attached = [cdi::AttachedDevice {
        device: PF0.into(),
        request: "nic".into(),
        nic: inventory.nics[0].clone(),
        umad: false,
        issm: false,
        share: None,
        netdev_gate: None,
    }];
    let spec = cdi::build(
        "u1",
        &attached,
        inventory.rdma_cm.as_ref(),
        &h.driver.parts.dev,
    )
    .unwrap();
    // As an agent before identities were recorded wrote it.
    let record = PreparedClaim {
        namespace: "ns".into(),
        name: "a".into(),
        devices: vec![PreparedDevice {
            requests: vec!["nic".into()],
            pool: "node-a".into(),
            device: PF0.into(),
            share_id: None,
            admin_access: false,
            cdi_ids: spec.device_ids.clone(),
            identity: None,
            netdev: None,
        }],
        cdi_file: spec.file_name.clone(),
        cdi_spec: spec.content.clone(),
        metadata_specs: Default::default(),
        metadata_files: Default::default(),
        metadata: Default::default(),
    };
    h.driver.parts.store.insert("u1", record).await.unwrap();
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert_eq!(
        cdi_files(&h),
        ["ainic.amd.com-u1.json"],
        "spec rewritten as recorded"
    );

    renumber_first_nic(&h);
    let out = h.driver.prepare(&[r("a", "u1")]).await;
    let err = out["u1"].as_ref().unwrap_err();
    assert!(
        err.contains("/dev/infiniband/uverbs0") && err.contains("231:192"),
        "{err}"
    );
    assert!(cdi_files(&h).is_empty());
}

#[tokio::test]
async fn a_prepare_dropped_by_the_kubelet_finishes_and_the_retry_finds_it() {
    let h = harness();
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    let held = h.claims.hold();
    {
        let claims = [r("a", "u1")];
        let call = h.driver.prepare(&claims);
        tokio::pin!(call);
        tokio::select! {
            _ = &mut call => panic!("prepare finished while its GET was held"),
            () = held.started.notified() => {}
        }
        // The kubelet's deadline drops the call here, mid-way.
    }
    held.release.add_permits(2);
    let retry = h.driver.prepare(&[r("a", "u1")]).await;
    assert!(retry["u1"].is_ok(), "{retry:?}");
    assert_eq!(
        h.claims.gets(),
        1,
        "the dropped call's work finished; the retry answered from the checkpoint"
    );
    let on_disk = checkpoint::read(&h.state_dir).unwrap();
    assert_eq!(
        on_disk,
        h.driver.parts.store.snapshot(),
        "memory and disk agree"
    );
    assert_eq!(cdi_files(&h), ["ainic.amd.com-u1.json"]);
}

#[tokio::test]
async fn prepares_and_unprepares_report_the_claim_status_in_order() {
    let (tx, mut jobs) = tokio::sync::mpsc::unbounded_channel();
    let h = harness_with(Some(tx));
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert!(h.driver.unprepare(&[r("a", "u1")]).await["u1"].is_ok());
    drop(h);
    match jobs.recv().await {
        Some(status::StatusJob::Prepared { claim, devices }) => {
            assert_eq!(claim.uid, "u1");
            assert_eq!(devices[0].device, PF0);
        }
        other => panic!("{other:?}"),
    }
    // A repeated prepare reports again (idempotent: heals a lost write).
    assert!(matches!(
        jobs.recv().await,
        Some(status::StatusJob::Prepared { .. })
    ));
    assert!(matches!(
        jobs.recv().await,
        Some(status::StatusJob::Unprepared { .. })
    ));
    assert!(jobs.recv().await.is_none());
}

#[tokio::test]
async fn the_status_writer_applies_ready_entries_then_none() {
    let claims = Arc::new(FakeClaims::default());
    let (tx, jobs) = tokio::sync::mpsc::unbounded_channel();
    let device = PreparedDevice {
        requests: vec!["nic".into()],
        pool: "node-a".into(),
        device: PF0.into(),
        share_id: None,
        admin_access: false,
        cdi_ids: vec![format!("amd.com/ainic=u1-{PF0}")],
        identity: None,
        netdev: None,
    };
    tx.send(status::StatusJob::Prepared {
        claim: r("a", "u1"),
        devices: vec![device.clone()],
    })
    .unwrap();
    // Prepared then unprepared within one burst: only the last is written.
    tx.send(status::StatusJob::Prepared {
        claim: r("b", "u2"),
        devices: vec![device],
    })
    .unwrap();
    tx.send(status::StatusJob::Unprepared {
        claim: r("b", "u2"),
    })
    .unwrap();
    drop(tx);
    let scope = Scope {
        driver: D.into(),
        pool: "node-a".into(),
    };
    let (_inventory_tx, inventory) = watch::channel(Arc::new(fixtures::inventory()));
    let addresses = Addresses::uncached(addresses::kernel_lookup());
    status::run(jobs, claims.clone(), scope, inventory, addresses).await;
    let applied = claims.applied();
    assert_eq!(applied.len(), 2);
    let (key, first) = &applied[0];
    assert_eq!(key, "ns/a");
    assert_eq!(
        first["metadata"]["uid"], "u1",
        "a recreated claim is not written"
    );
    let entry = &first["status"]["devices"][0];
    assert_eq!(entry["driver"], D);
    assert_eq!(entry["device"], PF0);
    assert_eq!(entry["conditions"][0]["type"], "Ready");
    assert_eq!(entry["networkData"]["interfaceName"], "eth0");
    assert_eq!(applied[1].0, "ns/b");
    assert_eq!(applied[1].1["status"]["devices"], json!([]));
}

#[tokio::test]
async fn device_metadata_is_mounted_per_request_and_goes_with_the_claim() {
    let h = harness_of(None, true);
    let rail = k8s_openapi::api::resource::v1::DeviceAttribute {
        int: Some(3),
        ..Default::default()
    };
    let attrs = crate::metadata::DeviceAttributes::from_iter([(
        PF1.to_string(),
        std::collections::BTreeMap::from([("ainic.amd.com/rail".to_string(), rail)]),
    )]);
    h.attributes.send_replace(Some(Arc::new(attrs)));
    let mut two = claim(
        "two",
        "u1",
        &[("a/fast", D, "node-a", PF0), ("b", D, "node-a", PF1)],
        json!([]),
    );
    two.metadata.annotations = Some(
        [(
            crate::metadata::POD_CLAIM_NAME.to_string(),
            "nics".to_string(),
        )]
        .into(),
    );
    h.claims.put(two);
    let devices = h.driver.prepare(&[r("two", "u1")]).await["u1"]
        .clone()
        .unwrap();
    // Each request's first device carries its mount, after the device's own.
    assert_eq!(
        devices[0].cdi_ids,
        [
            "amd.com/ainic=u1-pf-0000-0c-00-0",
            "ainic.amd.com/metadata=u1_a"
        ]
    );
    assert_eq!(devices[1].cdi_ids[1], "ainic.amd.com/metadata=u1_b");
    let file = h.metadata_dir.join("u1/b/metadata.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let first: serde_json::Value = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(first["podClaimName"], "nics");
    let device = &first["requests"][0]["devices"][0];
    assert_eq!(
        (&first["requests"][0]["name"], &device["name"]),
        (&json!("b"), &json!(PF1))
    );
    assert_eq!(device["attributes"]["ainic.amd.com/rail"]["int"], 3);
    let sub = h.metadata_dir.join("u1/a/metadata.json");
    assert!(std::fs::read_to_string(sub).unwrap().contains("\"a/fast\""));
    assert_eq!(
        cdi_files(&h),
        [
            "ainic.amd.com-u1.json",
            "ainic.amd.com_metadata_u1_a.json",
            "ainic.amd.com_metadata_u1_b.json"
        ]
    );
    // The record names the metadata; its content is not kept (issue 34).
    let record = h.driver.parts.store.get("u1").unwrap();
    assert_eq!(record.metadata.requests, ["a", "b"]);
    assert_eq!(record.metadata.pod_claim_name.as_deref(), Some("nics"));
    assert!(record.metadata_files.is_empty());
    assert_eq!(record.metadata_specs.len(), 2, "the specs, small, are kept");
    // A repeated prepare answers the same from the checkpoint.
    let again = h.driver.prepare(&[r("two", "u1")]).await["u1"]
        .clone()
        .unwrap();
    assert_eq!(again, devices);
    // A reboot empties the CDI dir (tmpfs): the recorded specs come back
    // with the claim's, before the kubelet is served.
    for file in cdi_files(&h) {
        std::fs::remove_file(h.cdi_dir.join(file)).unwrap();
    }
    // A power cut may also lose metadata files (not fsynced: the
    // checkpoint holds them): one gone, one left empty by the rename.
    let a = h.metadata_dir.join("u1/a/metadata.json");
    let before = std::fs::read_to_string(&a).unwrap();
    std::fs::remove_dir_all(a.parent().unwrap()).unwrap();
    std::fs::write(&file, "").unwrap();
    h.driver.refresh_all().await;
    assert_eq!(cdi_files(&h).len(), 3, "{:?}", cdi_files(&h));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), before);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    // A file cut short (one document of two) is written whole again.
    let cut = text.find("\n{").unwrap() + 1;
    std::fs::write(&file, &text[..cut]).unwrap();
    h.driver.refresh_all().await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    // A claim refused at the checkpoint leaves no metadata behind.
    h.claims
        .put(claim("late", "u2", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("late", "u2")]).await["u2"].is_err());
    assert!(!h.metadata_dir.join("u2").exists());

    assert!(h.driver.unprepare(&[r("two", "u1")]).await["u1"].is_ok());
    assert!(cdi_files(&h).is_empty(), "{:?}", cdi_files(&h));
    assert!(!h.metadata_dir.join("u1").exists());
}

/// A damaged metadata file is written again from today's attributes, and
/// only that one; before the devices are published, a check of the agent
/// leaves it to the kubelet's next prepare instead of waiting (start-up
/// checks every claim in turn) or writing it without attributes.
#[tokio::test]
async fn only_damaged_metadata_files_are_rebuilt_and_not_before_the_devices_are_published() {
    let h = harness_of(None, true);
    let rail = |n: i64| {
        let value = k8s_openapi::api::resource::v1::DeviceAttribute {
            int: Some(n),
            ..Default::default()
        };
        let rails = [("ainic.amd.com/rail".to_string(), value)];
        Arc::new(crate::metadata::DeviceAttributes::from_iter(
            [PF0, PF1].map(|d| (d.to_string(), rails.clone().into())),
        ))
    };
    h.attributes.send_replace(Some(rail(3)));
    h.claims.put(claim(
        "two",
        "u1",
        &[("a", D, "node-a", PF0), ("b", D, "node-a", PF1)],
        json!([]),
    ));
    assert!(h.driver.prepare(&[r("two", "u1")]).await["u1"].is_ok());
    let file = |request: &str| (h.metadata_dir).join(format!("u1/{request}/metadata.json"));
    let a = std::fs::read_to_string(file("a")).unwrap();
    // Not yet published (an agent starting): the check leaves it.
    h.attributes.send_replace(None);
    std::fs::write(file("b"), b"\xff\xfe not text").unwrap();
    h.driver.refresh_all().await;
    assert_eq!(std::fs::read(file("b")).unwrap(), b"\xff\xfe not text");
    // The kubelet's prepare (after a reboot: the files are on tmpfs) is
    // refused and retried rather than writing b without its attributes,
    // which would then pass for whole.
    let refused = h.driver.prepare(&[r("two", "u1")]).await["u1"].clone();
    let error = refused.unwrap_err();
    assert!(error.contains("not published yet"), "{error}");
    assert_eq!(std::fs::read(file("b")).unwrap(), b"\xff\xfe not text");
    // Published, with another value: the kubelet's prepare rebuilds b alone.
    h.attributes.send_replace(Some(rail(4)));
    assert!(h.driver.prepare(&[r("two", "u1")]).await["u1"].is_ok());
    let b = std::fs::read_to_string(file("b")).unwrap();
    assert!(b.contains("\"int\": 4"), "{b}");
    assert_eq!(
        std::fs::read_to_string(file("a")).unwrap(),
        a,
        "a was whole"
    );
}

/// Claims recorded by an agent before issue 34 carry their metadata's
/// content in the checkpoint: it is still what they are restored from, and
/// what unprepare removes.
#[tokio::test]
async fn metadata_recorded_with_its_content_by_an_older_agent_is_restored_and_removed() {
    let h = harness_of(None, true);
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    let spec_name = "ainic.amd.com_metadata_u1_nic.json";
    let (spec, file) = as_an_older_agent_wrote_it(&h, spec_name);
    let text = std::fs::read_to_string(h.metadata_dir.join("u1/nic/metadata.json")).unwrap();
    std::fs::remove_dir_all(h.metadata_dir.join("u1")).unwrap();
    let mut record = h.driver.parts.store.get("u1").unwrap();
    record.metadata = Default::default();
    record.metadata_specs = [(spec_name.to_string(), spec.clone())].into();
    record.metadata_files = [("nic".to_string(), text.clone())].into();
    h.driver.parts.store.insert("u1", record).await.unwrap();
    std::fs::remove_file(h.cdi_dir.join(spec_name)).unwrap();
    h.driver.refresh_all().await;
    assert_eq!(
        std::fs::read_to_string(h.cdi_dir.join(spec_name)).unwrap(),
        spec
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    assert!(h.driver.unprepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert!(cdi_files(&h).is_empty(), "{:?}", cdi_files(&h));
    assert!(!h.plugin_dir.join("dra-device-metadata/u1").exists());
    assert!(!h.metadata_dir.join("u1").exists());
}

/// The recorded spec `spec_name` of claim u1 as an agent before
/// `--metadata-dir` wrote it, mounting its file from the plugin directory:
/// the spec's text, and that file's path (not written).
fn as_an_older_agent_wrote_it(h: &Harness, spec_name: &str) -> (String, PathBuf) {
    as_written_in(h, spec_name, &h.plugin_dir.join("dra-device-metadata"))
}

/// The recorded spec `spec_name` of claim u1 as if its files were written
/// under `dir`: the spec's text, and that file's path (not written).
fn as_written_in(h: &Harness, spec_name: &str, dir: &std::path::Path) -> (String, PathBuf) {
    let spec = std::fs::read_to_string(h.cdi_dir.join(spec_name)).unwrap();
    let spec = spec.replace(
        &h.metadata_dir.display().to_string(),
        &dir.display().to_string(),
    );
    assert!(spec.contains(&dir.display().to_string()), "{spec}");
    (spec, dir.join("u1/nic/metadata.json"))
}

/// Claims prepared before `--metadata-dir` keep their files in the plugin
/// directory, where their recorded specs mount them from (a container
/// restarted in their pod gets the spec again): a lost file comes back
/// there, not in the metadata directory, and unprepare removes it.
#[tokio::test]
async fn metadata_files_of_claims_prepared_in_the_plugin_directory_stay_there() {
    let h = harness_of(None, true);
    let legacy = h.plugin_dir.join("dra-device-metadata");
    files_stay_where_the_recorded_spec_mounts_them(&h, &legacy).await;
}

/// A claim prepared before `--metadata-dir` changed: the same, in the
/// former directory.
#[tokio::test]
async fn metadata_files_of_claims_prepared_in_a_former_metadata_dir_stay_there() {
    let h = harness_of(None, true);
    let former = h.metadata_dir.with_file_name("former-metadata");
    files_stay_where_the_recorded_spec_mounts_them(&h, &former).await;
}

async fn files_stay_where_the_recorded_spec_mounts_them(h: &Harness, dir: &std::path::Path) {
    h.attributes.send_replace(Some(Arc::default()));
    h.claims
        .put(claim("a", "u1", &[("nic", D, "node-a", PF0)], json!([])));
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    let spec_name = "ainic.amd.com_metadata_u1_nic.json";
    let (spec, file) = as_written_in(h, spec_name, dir);
    std::fs::remove_dir_all(h.metadata_dir.join("u1")).unwrap();
    let mut record = h.driver.parts.store.get("u1").unwrap();
    record.metadata_specs = [(spec_name.to_string(), spec.clone())].into();
    h.driver.parts.store.insert("u1", record).await.unwrap();
    // A reboot: the CDI spec and the file are gone.
    std::fs::remove_file(h.cdi_dir.join(spec_name)).unwrap();
    assert!(h.driver.prepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert_eq!(
        std::fs::read_to_string(h.cdi_dir.join(spec_name)).unwrap(),
        spec
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"uid\": \"u1\""), "{text}");
    assert!(!h.metadata_dir.join("u1").exists());
    assert!(h.driver.unprepare(&[r("a", "u1")]).await["u1"].is_ok());
    assert!(cdi_files(h).is_empty(), "{:?}", cdi_files(h));
    assert!(!dir.join("u1").exists());
}

/// Issue 29 item 7: the pod's name for a claim is an annotation, which
/// the API server does not validate, and it went into the path where the
/// metadata is mounted in the container (`../..` climbed out of it).
#[tokio::test]
async fn a_pod_claim_name_that_is_no_dns_name_is_refused_and_nothing_written() {
    let h = harness_of(None, true);
    h.attributes.send_replace(Some(Arc::default()));
    let mut evil = claim("evil", "u1", &[("nic", D, "node-a", PF0)], json!([]));
    evil.metadata.annotations = Some(
        [(
            crate::metadata::POD_CLAIM_NAME.to_string(),
            "../../../../etc/cron.d".to_string(),
        )]
        .into(),
    );
    h.claims.put(evil);
    let outcome = h.driver.prepare(&[r("evil", "u1")]).await;
    let error = outcome["u1"].clone().unwrap_err();
    assert!(
        error.contains("annotation resource.kubernetes.io/pod-claim-name \"../../../../etc/cron.d\" is not a DNS subdomain"),
        "{error}"
    );
    assert!(cdi_files(&h).is_empty(), "{:?}", cdi_files(&h));
    assert!(!h.metadata_dir.join("u1").exists());
    let on_disk = checkpoint::read(&h.state_dir).unwrap();
    assert!(on_disk.claims.is_empty());
}

#[tokio::test]
async fn a_fabric_partition_claim_is_prepared_with_nothing_to_attach() {
    let h = harness_of(None, true);
    h.claims.put(claim(
        "job-a",
        "u1",
        &[("fabric", D, "fabric/pod-a", "pod-a")],
        json!([]),
    ));
    let out = h.driver.prepare(&[r("job-a", "u1")]).await;
    assert_eq!(out["u1"].as_ref().unwrap(), &Vec::<PreparedDevice>::new());
    assert!(cdi_files(&h).is_empty());
    assert!(h.driver.parts.store.get("u1").is_none());
    assert!(h.driver.unprepare(&[r("job-a", "u1")]).await["u1"].is_ok());
    // A pool of another node is still refused.
    h.claims.put(claim(
        "elsewhere",
        "u2",
        &[("nic", D, "node-b", PF0)],
        json!([]),
    ));
    let err = h.driver.prepare(&[r("elsewhere", "u2")]).await["u2"]
        .clone()
        .unwrap_err();
    assert!(err.contains("no device of driver"), "{err}");
}
