//! Job placement (issue 35 items 3 and 4): the real kube-scheduler of the
//! testbed (1.37, with `GenericWorkload` and `DRAWorkloadResourceClaims`
//! on, for PodGroups) and the real `ainic-dra controller` on
//! `PLACE_NODES` fake nodes (default 512), each with the slice `ainic-dra
//! slices` publishes for the 8-GPU/8-NIC MI300X node, in fabric partitions
//! of `PLACE_PARTITION` nodes (default 64). In one run, on one cluster:
//! 1. **fabric job**: `PLACE_PODS` pods (default 512) of one PodGroup whose
//!    one claim asks for a partition with room for `PLACE_PODS / 8` nodes
//!    (a claim's `reservedFor` holds at most 256 pods, so a job this big
//!    needs the group to hold its claim), each pod with a NIC of its own;
//!    time from the first pod created to the last one bound;
//! 2. **plain job**: as many pods, each with a NIC of its own and nothing
//!    else; same time; the ratio of the two; then the same pods as one
//!    PodGroup (a gang, no partition claim), to tell what the gang costs
//!    from what the partition claim costs;
//! 3. **no partition fits**: a partition claim asking for one node more
//!    than a partition has; time until the controller's
//!    `NoFabricPartitionFits` Event on it;
//! 4. **fragmented**: every partition but one made nearly full by a filler
//!    claim (a pod holding all but `PLACE_SMALL_PODS / 8 - 1` of its
//!    nodes); then a job of `PLACE_SMALL_PODS` pods (default 64) sharing
//!    one partition claim for `PLACE_SMALL_PODS / 8` nodes: time to the
//!    last pod bound; once with the claim held by the pods (any release),
//!    once by their PodGroup.
//!
//! Each job is removed (pods deleted at once, their claims gone) before
//! the next. Asserts only correctness: every pod bound, the fabric job in
//! one partition, the small job in the one with room, the Event posted.
//!
//! `PLACE_PODS=0` skips items 1 and 2.
//!
//! `cargo bench -p ainic-dra --bench placement`; with `PLACE_OUT=FILE` it
//! also appends the figures as one JSON line (`scripts/scale run --bench
//! placement` runs the sizes).

mod cluster;
mod fabric;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cluster::{append_line, classes, env_or, in_chunks};
use dra_model::partitions::label_value;
use fabric::{Controller, NAMESPACE, fill, partition, reflected, starting_labels, until};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version, cluster as bed_cluster};

/// NICs (PFs) on each fake node: one pod each.
const NICS_PER_NODE: usize = 8;
/// The DeviceClasses the jobs ask for.
const NIC_CLASS: &str = "ainic-pf";
const FABRIC_CLASS: &str = "ainic-fabric";
/// Feature gates and API for PodGroups holding a claim (1.37).
const GATES: &str = "GenericWorkload=true,DRAWorkloadResourceClaims=true";
const RUNTIME_CONFIG: &str = "scheduling.k8s.io/v1beta1=true";

/// How a job's pods are kept in one partition.
enum Fabric<'a> {
    /// Not at all: a NIC each and nothing else.
    None,
    /// Not at all, but the pods are one PodGroup (a gang of all of them).
    Gang,
    /// A PodGroup (gang of all its pods) holding one claim from the
    /// template named here.
    Group(&'a str),
    /// One claim, named here, shared by every pod.
    Claim(&'a str),
}

/// The APIs of one namespace the bench uses.
struct Jobs {
    client: Client,
    namespace: String,
    pods: Api<Pod>,
    raw_pods: Api<DynamicObject>,
    groups: Api<DynamicObject>,
    claims: Api<ResourceClaim>,
}

impl Jobs {
    async fn new(client: &Client, namespace: &str) -> Jobs {
        bed_cluster::namespace(client, namespace).await;
        let group = GroupVersionKind::gvk("scheduling.k8s.io", "v1beta1", "PodGroup");
        let ns = |r: &ApiResource| Api::namespaced_with(client.clone(), namespace, r);
        Jobs {
            client: client.clone(),
            namespace: namespace.to_string(),
            pods: Api::namespaced(client.clone(), namespace),
            raw_pods: ns(&ApiResource::erase::<Pod>(&())),
            groups: ns(&ApiResource::from_gvk(&group)),
            claims: Api::namespaced(client.clone(), namespace),
        }
    }

    /// Creates the template `name`: one device of `class`, with room for
    /// `nodes` nodes when given.
    async fn template(&self, name: &str, class: &str, nodes: Option<usize>) {
        let api: Api<ResourceClaimTemplate> = Api::namespaced(self.client.clone(), &self.namespace);
        let template = json!({
            "metadata": {"name": name},
            "spec": {"spec": request(class, nodes, None)},
        });
        let template = serde_json::from_value(template).unwrap();
        api.create(&PostParams::default(), &template).await.unwrap();
    }

    /// Creates the claim `name`: one device of `class` with room for
    /// `nodes` nodes, matching `selector` when given.
    async fn claim(&self, name: &str, class: &str, nodes: usize, selector: Option<&str>) {
        let claim =
            json!({"metadata": {"name": name}, "spec": request(class, Some(nodes), selector)});
        let claim = serde_json::from_value(claim).unwrap();
        self.claims
            .create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|e| panic!("cannot create claim {name}: {e}"));
    }

    /// Creates the PodGroup `name`, a gang of `size`, holding one claim
    /// (`fabric`) from `template` for the whole group when given.
    async fn group(&self, name: &str, size: usize, template: Option<&str>) {
        let mut group = json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        });
        if let Some(template) = template {
            group["spec"]["resourceClaims"] =
                json!([{"name": "fabric", "resourceClaimTemplateName": template}]);
        }
        let group: DynamicObject = serde_json::from_value(group).unwrap();
        (self.groups.create(&PostParams::default(), &group).await)
            .unwrap_or_else(|e| panic!("cannot create PodGroup {name}: {e}"));
    }

    /// Creates pods `<prefix>-0000`…, each with a NIC from the template
    /// `nic` (when given) and kept in a partition as `fabric` says;
    /// returns when the first was sent.
    async fn pods(
        &self,
        prefix: &str,
        count: usize,
        nic: Option<&str>,
        fabric: &Fabric<'_>,
    ) -> Instant {
        let mut claims = Vec::new();
        if let Some(nic) = nic {
            claims.push(json!({"name": "nic", "resourceClaimTemplateName": nic}));
        }
        let mut group = Value::Null;
        match fabric {
            Fabric::None => {}
            Fabric::Gang => group = json!({"podGroupName": prefix}),
            Fabric::Group(template) => {
                claims.push(json!({"name": "fabric", "resourceClaimTemplateName": template}));
                group = json!({"podGroupName": prefix});
            }
            Fabric::Claim(claim) => {
                claims.push(json!({"name": "fabric", "resourceClaimName": claim}));
            }
        }
        let uses: Vec<Value> = (claims.iter())
            .map(|c| json!({"name": c["name"]}))
            .collect();
        let started = Instant::now();
        let creates = (0..count).map(|i| {
            let mut spec = json!({
                "resourceClaims": claims,
                "containers": [{"name": "main", "image": "bench", "resources": {"claims": uses}}],
            });
            if !group.is_null() {
                spec["schedulingGroup"] = group.clone();
            }
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{prefix}-{i:04}")}, "spec": spec});
            let pod: DynamicObject = serde_json::from_value(pod).unwrap();
            let api = self.raw_pods.clone();
            async move {
                (api.create(&PostParams::default(), &pod).await)
                    .unwrap_or_else(|e| panic!("cannot create a pod: {e}"));
            }
        });
        in_chunks(creates.collect()).await;
        started
    }

    /// Each bound pod's node, by pod name.
    async fn placed(&self) -> BTreeMap<String, String> {
        let list = self.pods.list(&ListParams::default()).await.unwrap();
        (list.items.into_iter())
            .filter_map(|p| Some((p.metadata.name?, p.spec?.node_name?)))
            .collect()
    }

    /// Waits until `count` pods are bound, polling every 100 ms; their
    /// nodes, and how long from `started`.
    async fn bound(
        &self,
        what: &str,
        count: usize,
        started: Instant,
    ) -> (BTreeMap<String, String>, Duration) {
        let mut placed = BTreeMap::new();
        until(what, Duration::from_millis(100), async || {
            placed = self.placed().await;
            placed.len() == count
        })
        .await;
        (placed, started.elapsed())
    }

    /// Deletes the pods at once (no kubelet would confirm a graceful
    /// delete), the PodGroups and the claims, and waits until every claim
    /// is gone: their devices are free again.
    async fn clear(&self) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let all = ListParams::default();
        self.pods.delete_collection(&now, &all).await.unwrap();
        self.groups.delete_collection(&now, &all).await.unwrap();
        self.claims.delete_collection(&now, &all).await.unwrap();
        let what = format!("the claims of namespace {} gone", self.namespace);
        until(&what, Duration::from_millis(500), async || {
            self.claims.list(&all).await.unwrap().items.is_empty()
        })
        .await;
    }

    /// How many times the scheduler found no node for a pod of this
    /// namespace (its `FailedScheduling` Events, repeats counted), and the
    /// most frequent reason given.
    async fn failed_scheduling(&self) -> (u64, String) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = events.list(&ListParams::default()).await.unwrap();
        let mut notes: BTreeMap<String, u64> = BTreeMap::new();
        for event in list.items {
            if event.reason.as_deref() != Some("FailedScheduling") {
                continue;
            }
            let times = event.series.map_or(1, |s| s.count.max(1) as u64);
            *notes.entry(event.note.unwrap_or_default()).or_default() += times;
        }
        let total = notes.values().sum();
        let most = (notes.into_iter()).max_by_key(|(_, n)| *n);
        (
            total,
            most.map(|(note, n)| format!("{n}× {note}"))
                .unwrap_or_default(),
        )
    }

    /// Waits for the controller's `NoFabricPartitionFits` Event on claim
    /// `name`; its note.
    async fn unfit_event(&self, name: &str) -> String {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut note = String::new();
        until(
            "the NoFabricPartitionFits Event",
            Duration::from_millis(100),
            async || {
                let list = events.list(&ListParams::default()).await.unwrap();
                let found = (list.items.into_iter()).find(|e| {
                    e.reason.as_deref() == Some("NoFabricPartitionFits")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                });
                note = found.and_then(|e| e.note).unwrap_or_default();
                !note.is_empty()
            },
        )
        .await;
        note
    }
}

/// What [`Jobs::failed_scheduling`] found, in words.
async fn retries(jobs: &Jobs) -> String {
    let (times, most) = jobs.failed_scheduling().await;
    if times == 0 {
        return "no pod found without a node on the way".into();
    }
    format!("{times} times a pod found no node on the way, most often: {most}")
}

/// A claim's spec: one device of `class`, with room for `nodes` nodes
/// when given, matching the CEL `selector` when given.
fn request(class: &str, nodes: Option<usize>, selector: Option<&str>) -> Value {
    let mut exactly = json!({"deviceClassName": class});
    if let Some(nodes) = nodes {
        exactly["capacity"] = json!({"requests": {"nodes": nodes.to_string()}});
    }
    if let Some(selector) = selector {
        exactly["selectors"] = json!([{"cel": {"expression": selector}}]);
    }
    json!({"devices": {"requests": [{"name": "device", "exactly": exactly}]}})
}

/// The partition labels of the nodes in `placed`.
fn partitions_of(
    placed: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    placed.values().map(|node| want[node].clone()).collect()
}

/// What one run measured.
struct Figures {
    fabric: Duration,
    plain: Duration,
    gang: Duration,
    unfit: Duration,
    fragmented: Duration,
    fragmented_group: Duration,
    controller_peak_mib: f64,
    controller_cpu_s: f64,
}

/// Items 1 and 2: the fabric job, then the plain job, then the plain job
/// as one PodGroup; their times.
async fn jobs(
    client: &Client,
    pods: usize,
    want: &BTreeMap<String, String>,
) -> (Duration, Duration, Duration) {
    let nodes = pods.div_ceil(NICS_PER_NODE);
    let fabric = Jobs::new(client, "job-fabric").await;
    fabric.template("own-nic", NIC_CLASS, None).await;
    fabric
        .template("partition", FABRIC_CLASS, Some(nodes))
        .await;
    fabric.group("job", pods, Some("partition")).await;
    let started = fabric
        .pods("job", pods, Some("own-nic"), &Fabric::Group("partition"))
        .await;
    let (placed, fabric_took) = fabric.bound("the fabric job bound", pods, started).await;
    let used = partitions_of(&placed, want);
    assert_eq!(
        used.len(),
        1,
        "the fabric job spread over partitions {used:?}"
    );
    println!(
        "fabric job: {pods} pods of one PodGroup in partition {used:?} on {} nodes, all bound {:.2} s after the first was sent; {}",
        placed.values().collect::<BTreeSet<_>>().len(),
        fabric_took.as_secs_f64(),
        retries(&fabric).await
    );
    fabric.clear().await;

    let mut took = vec![fabric_took];
    for (namespace, shape, what) in [
        (
            "job-plain",
            Fabric::None,
            "plain job: {pods} pods with a NIC each",
        ),
        (
            "job-gang",
            Fabric::Gang,
            "plain gang: {pods} pods with a NIC each, one PodGroup",
        ),
    ] {
        let plain = Jobs::new(client, namespace).await;
        plain.template("own-nic", NIC_CLASS, None).await;
        if matches!(shape, Fabric::Gang) {
            plain.group("plain", pods, None).await;
        }
        let started = plain.pods("plain", pods, Some("own-nic"), &shape).await;
        let (placed, plain_took) = plain.bound(namespace, pods, started).await;
        println!(
            "{}, on {} nodes, all bound {:.2} s after the first was sent; {}; fabric job / this = {:.2}",
            what.replace("{pods}", &pods.to_string()),
            placed.values().collect::<BTreeSet<_>>().len(),
            plain_took.as_secs_f64(),
            retries(&plain).await,
            fabric_took.as_secs_f64() / plain_took.as_secs_f64()
        );
        plain.clear().await;
        took.push(plain_took);
    }
    (took[0], took[1], took[2])
}

/// Item 3's second part: a claim no partition has room for; the time
/// until the controller says so.
async fn unfit(client: &Client, per: usize) -> Duration {
    let jobs = Jobs::new(client, "job-unfit").await;
    let started = Instant::now();
    jobs.claim("too-big", FABRIC_CLASS, per + 1, None).await;
    let note = jobs.unfit_event("too-big").await;
    let took = started.elapsed();
    println!(
        "a claim for {} nodes: the controller's Event {:.2} s after it was created: {note}",
        per + 1,
        took.as_secs_f64()
    );
    jobs.clear().await;
    took
}

/// Item 4: every partition but the last whole one nearly full, then a
/// small job, its claim held by its pods, then by its PodGroup; their
/// times, after checking each landed in the one with room.
async fn fragmented(
    client: &Client,
    small: usize,
    want: &BTreeMap<String, String>,
    per: usize,
) -> (Duration, Duration) {
    let nodes = small.div_ceil(NICS_PER_NODE);
    let count = want.len();
    let whole = count / per;
    let room = partition((whole - 1) * per, per);
    let fillers = Jobs::new(client, "fillers").await;
    let mut made = Vec::new();
    for p in 0..count.div_ceil(per) {
        let name = partition(p * per, per);
        if name == room {
            continue;
        }
        let size = per.min(count - p * per);
        // One node too few left for the job.
        let hold = size.saturating_sub(nodes - 1).max(1);
        let selector = format!(
            "device.attributes[\"{}\"].fabric == \"{name}\"",
            fabric::DRIVER
        );
        let claim = format!("filler-{p:03}");
        fillers
            .claim(&claim, FABRIC_CLASS, hold, Some(&selector))
            .await;
        fillers.pods(&claim, 1, None, &Fabric::Claim(&claim)).await;
        made.push(claim);
    }
    let started = Instant::now();
    fillers
        .bound("the fillers bound", made.len(), started)
        .await;
    println!(
        "{} partitions filled to within {} nodes of full in {:.1} s; {room} left empty",
        made.len(),
        nodes - 1,
        started.elapsed().as_secs_f64()
    );

    let mut took = Vec::new();
    for grouped in [false, true] {
        took.push(small_job(client, small, want, &room, grouped).await);
    }
    fillers.clear().await;
    (took[0], took[1])
}

/// Item 4's job: `small` pods, each with a NIC, sharing one partition
/// claim for `small / 8` nodes, held by the pods themselves or (`grouped`)
/// by their PodGroup; checks it landed in `room` and returns its time.
async fn small_job(
    client: &Client,
    small: usize,
    want: &BTreeMap<String, String>,
    room: &str,
    grouped: bool,
) -> Duration {
    let nodes = small.div_ceil(NICS_PER_NODE);
    let job = Jobs::new(
        client,
        if grouped {
            "job-small-group"
        } else {
            "job-small"
        },
    )
    .await;
    job.template("own-nic", NIC_CLASS, None).await;
    let fabric = if grouped {
        job.template("partition", FABRIC_CLASS, Some(nodes)).await;
        job.group("small", small, Some("partition")).await;
        Fabric::Group("partition")
    } else {
        job.claim("partition", FABRIC_CLASS, nodes, None).await;
        Fabric::Claim("partition")
    };
    let started = job.pods("small", small, Some("own-nic"), &fabric).await;
    let (placed, took) = job.bound("the small job bound", small, started).await;
    let used = partitions_of(&placed, want);
    assert_eq!(
        used,
        BTreeSet::from([label_value(room)]),
        "the small job did not land in the one partition with room"
    );
    let holder = if grouped {
        "their PodGroup"
    } else {
        "the pods"
    };
    println!(
        "fragmented: a job of {small} pods for {nodes} nodes, its claim held by {holder}, landed in {room}, all bound {:.2} s after the first was sent; {}",
        took.as_secs_f64(),
        retries(&job).await
    );
    job.clear().await;
    took
}

async fn up() -> Testbed {
    let options = UpOptions {
        version: Some(Version::V1_37),
        feature_gates: Some(GATES.into()),
        runtime_config: Some(RUNTIME_CONFIG.into()),
        ..UpOptions::default()
    };
    tokio::task::spawn_blocking(move || Testbed::up(&options))
        .await
        .unwrap()
}

#[tokio::main]
async fn main() {
    let count = env_or("PLACE_NODES", 512);
    let per = env_or("PLACE_PARTITION", 64);
    let pods = env_or("PLACE_PODS", 512);
    let small = env_or("PLACE_SMALL_PODS", 64);
    let (job_nodes, small_nodes) = (pods.div_ceil(NICS_PER_NODE), small.div_ceil(NICS_PER_NODE));
    assert!(
        count >= 2 * per && job_nodes <= per && (2..=per).contains(&small_nodes),
        "PLACE_NODES={count} PLACE_PARTITION={per} PLACE_PODS={pods} PLACE_SMALL_PODS={small}: two whole partitions at least, each job fitting one, the small one on two nodes at least"
    );
    let bed = up().await;
    let client = bed.client().await;
    classes(&client).await;
    bed_cluster::namespace(&client, NAMESPACE).await;
    let filling = Instant::now();
    fill(&client, count, per).await;
    println!(
        "{count} nodes in {} partitions of {per} filled in {:.1} s",
        count.div_ceil(per),
        filling.elapsed().as_secs_f64()
    );
    let want = starting_labels(count, per);
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let log = bed.dir().join("placement-controller.log");
    let controller = Controller::start(&bed, &log, Duration::from_secs(60));
    reflected("start", &nodes, &slices, &want).await;
    let cpu_before = controller.cpu_seconds();

    // PLACE_PODS=0 skips the big jobs (minutes at 5,000 nodes).
    let (fabric, plain, gang) = if pods > 0 {
        jobs(&client, pods, &want).await
    } else {
        Default::default()
    };
    let unfit = unfit(&client, per).await;
    let (fragmented, fragmented_group) = fragmented(&client, small, &want, per).await;
    let figures = Figures {
        fabric,
        plain,
        gang,
        unfit,
        fragmented,
        fragmented_group,
        controller_peak_mib: controller.peak_mib(),
        controller_cpu_s: controller.cpu_seconds() - cpu_before,
    };
    println!(
        "controller during the jobs: CPU {:.2} s, peak RSS {:.1} MiB",
        figures.controller_cpu_s, figures.controller_peak_mib
    );
    if let Ok(out) = std::env::var("PLACE_OUT") {
        let line = json!({
            "nodes": count, "partition": per, "pods": pods, "small_pods": small,
            "fabric_s": figures.fabric.as_secs_f64(), "plain_s": figures.plain.as_secs_f64(),
            "gang_s": figures.gang.as_secs_f64(),
            "ratio": figures.fabric.as_secs_f64() / figures.plain.as_secs_f64(),
            "unfit_s": figures.unfit.as_secs_f64(), "fragmented_s": figures.fragmented.as_secs_f64(),
            "fragmented_group_s": figures.fragmented_group.as_secs_f64(),
            "controller_cpu_s": figures.controller_cpu_s, "controller_peak_mib": figures.controller_peak_mib,
        });
        append_line(&out, &line);
    }
}
