//! What the fabric benchmarks (scale, placement) share: fake nodes in
//! fabric partitions on the testbed's real control plane, the real
//! `ainic-dra controller` as a child process, and the looks that say when
//! it has caught up (every node's partition label, every partition
//! device's node count).
//!
//! Each bench uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{agent_slices, fake_nodes, in_chunks};
use dra_model::partitions::{ATTR_NODE_COUNT, LABEL_PARTITION, label_value};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceAttribute, ResourceSlice};
use kube::Api;
use kube::api::{ListParams, PostParams};
use testkit::testbed::Testbed;

/// Our driver's name.
pub const DRIVER: &str = dra_model::names::DEFAULT_DRIVER;
/// The controller's namespace (its Lease).
pub const NAMESPACE: &str = "ainic-system";
/// The node whose slice is the template of every other's.
const TEMPLATE_NODE: &str = "scale-00000";
/// How long any stage may take before the bench gives up.
pub const STAGE_LIMIT: Duration = Duration::from_secs(900);
/// Linux reports CPU times in USER_HZ ticks, 100 a second.
const TICKS: f64 = 100.0;

/// The name of fake node `i`.
pub fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}

/// The fabric partition of node `i` at the start.
pub fn partition(i: usize, per: usize) -> String {
    format!("part-{:03}", i / per)
}

/// Each of `count` nodes' partition label at the start ([`partition`]).
pub fn starting_labels(count: usize, per: usize) -> BTreeMap<String, String> {
    (0..count)
        .map(|i| (node_name(i), label_value(&partition(i, per))))
        .collect()
}

/// Puts every device of `slice` in fabric `fabric`, behind one leaf switch.
pub fn in_fabric(slice: &mut ResourceSlice, fabric: &str) {
    for device in slice.spec.devices.iter_mut().flatten() {
        let attributes = device.attributes.get_or_insert_default();
        for (name, value) in [
            ("fabric", fabric),
            ("leafSwitch", &format!("{fabric}-leaf")),
        ] {
            let value = DeviceAttribute {
                string: Some(value.to_string()),
                ..DeviceAttribute::default()
            };
            attributes.insert(format!("{DRIVER}/{name}"), value);
        }
    }
}

/// Fake nodes and their slices, node `i` in [`partition`]`(i, per)`;
/// returns each node's slice as created.
pub async fn fill(client: &kube::Client, nodes: usize, per: usize) -> Vec<ResourceSlice> {
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    fake_nodes(client, &names).await;
    let template = serde_json::to_string(&agent_slices(TEMPLATE_NODE, &[])).unwrap();
    let slices: Vec<ResourceSlice> = (names.iter().enumerate())
        .map(|(i, name)| {
            let mut own: Vec<ResourceSlice> =
                serde_json::from_str(&template.replace(TEMPLATE_NODE, name)).unwrap();
            assert_eq!(own.len(), 1, "the bench expects one slice a node");
            let mut slice = own.remove(0);
            in_fabric(&mut slice, &partition(i, per));
            slice
        })
        .collect();
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let creates = slices.iter().map(|slice| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), slice).await.unwrap();
        }
    });
    in_chunks(creates.collect()).await;
    slices
}

/// The real controller, as a child process killed on drop.
pub struct Controller(Child);

impl Controller {
    /// Starts it with the testbed's admin kubeconfig, logging to `log`,
    /// resyncing every `resync`.
    pub fn start(bed: &Testbed, log: &Path, resync: Duration) -> Controller {
        let child = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
            .args(["--log", "info,ainic_dra_controller=debug", "controller"])
            .arg("--kubeconfig")
            .arg(bed.kubeconfig())
            .args(["--namespace", NAMESPACE, "--identity", "scale-bench"])
            .arg(format!("--resync-interval={}", resync.as_secs()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start ainic-dra controller");
        Controller(child)
    }

    /// A field of /proc/PID/status, in KiB.
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        (status.lines().find_map(|l| l.strip_prefix(field)))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in the controller's status"))
    }

    /// User and system CPU seconds so far.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap();
        // Fields after the command name (which may hold spaces), from the
        // state (field 3): utime and stime are fields 14 and 15.
        let after = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<u64> = (after.split_whitespace().skip(11).take(2))
            .map(|f| f.parse().unwrap())
            .collect();
        (fields[0] + fields[1]) as f64 / TICKS
    }

    /// Its peak RSS so far (VmHWM).
    pub fn peak_mib(&self) -> f64 {
        self.status_kib("VmHWM:") as f64 / 1024.0
    }

    /// Its RSS now.
    pub fn rss_mib(&self) -> f64 {
        self.status_kib("VmRSS:") as f64 / 1024.0
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Each node's partition label.
pub async fn labels(nodes: &Api<Node>) -> BTreeMap<String, String> {
    let list = nodes.list_metadata(&ListParams::default()).await.unwrap();
    (list.items.into_iter())
        .filter_map(|n| {
            let label = n.metadata.labels?.remove(LABEL_PARTITION)?;
            Some((n.metadata.name?, label))
        })
        .collect()
}

/// Nodes (by name) whose label differs from `want`, of those in `want`.
fn wrong(have: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> usize {
    (want.iter())
        .filter(|(node, label)| have.get(*node) != Some(*label))
        .count()
}

/// Polls `check` every `every` until it holds; how long that took.
pub async fn until(what: &str, every: Duration, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < STAGE_LIMIT,
            "{what}: not within {STAGE_LIMIT:?}"
        );
        tokio::time::sleep(every).await;
    }
    started.elapsed()
}

/// The node count each partition device says, by label value.
async fn device_counts(slices: &Api<ResourceSlice>) -> BTreeMap<String, i64> {
    let fields = format!("spec.driver={DRIVER}");
    let list = slices.list(&ListParams::default().fields(&fields)).await;
    let key = format!("{DRIVER}/{ATTR_NODE_COUNT}");
    (list.unwrap().items.into_iter())
        .filter(|s| s.spec.node_name.is_none())
        .flat_map(|s| s.spec.devices.unwrap_or_default())
        .filter_map(|d| Some((d.name, d.attributes?.get(&key)?.int?)))
        .collect()
}

/// The node count each partition should have, by label value.
fn want_counts(want: &BTreeMap<String, String>) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for label in want.values() {
        *counts.entry(label.clone()).or_default() += 1;
    }
    counts
}

/// Waits for every node in `want` to carry its label and every partition
/// device to count its nodes; how long the labels took.
pub async fn reflected(
    what: &str,
    nodes: &Api<Node>,
    slices: &Api<ResourceSlice>,
    want: &BTreeMap<String, String>,
) -> Duration {
    let took = until(what, Duration::from_millis(200), async || {
        wrong(&labels(nodes).await, want) == 0
    })
    .await;
    let counts = want_counts(want);
    // Each look lists every slice (95 MB at 5,000 nodes): once a second.
    until(what, Duration::from_secs(1), async || {
        device_counts(slices).await == counts
    })
    .await;
    took
}
