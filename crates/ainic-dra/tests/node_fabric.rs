//! Tenant fencing fails closed (issue 29 item 1), end to end: the real
//! `ainic-dra node` against the API stand-in, with the fabric config file
//! broken, missing, fixed and broken again while it runs, and the Node
//! unreadable at start. Every version of every ResourceSlice the stand-in
//! ever stored is checked: a fenced NIC never appears without its tenant,
//! not even for one publish.

mod node_support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use testkit::apiserver::{ApiServer, Fault, Verb};

use node_support::{Agent, DRIVER, NODE, World, http_get};

/// Every NIC of node-a is team-a's, but the first one is team-b's.
const GOOD: &str =
    "nodes:\n  node-a:\n    tenant: team-a\n    nics:\n      \"0000:04:00.0\": {tenant: team-b}\n";

/// The same, and one bad entry for another node (line 7).
const BAD_ENTRY: &str = "nodes:\n  node-a:\n    tenant: team-a\n    nics:\n      \"0000:04:00.0\": {tenant: team-b}\n  node-b:\n    tenant: Team_C\n";

/// Flags that make the agent read its fabric config every second.
const POLL: [&str; 2] = ["--fabric-config-poll-interval", "1"];

fn tenant(device: &Device) -> Option<&str> {
    let attributes = device.attributes.as_ref()?;
    let attribute = attributes.get(&format!("{DRIVER}/tenant"))?;
    attribute.string.as_deref()
}

/// Every stored version of every slice: each device carries a tenant.
fn assert_never_unfenced(api: &ApiServer) {
    let history = api.history::<ResourceSlice>();
    for (kind, slice) in history.iter().filter(|(kind, _)| *kind != "DELETED") {
        for device in slice.spec.devices.iter().flatten() {
            assert!(
                tenant(device).is_some(),
                "{kind} slice {:?} (generation {}) published {} without a tenant",
                slice.metadata.name,
                slice.spec.pool.generation,
                device.name
            );
        }
    }
}

/// The tenant of each device published now, by device name.
fn published(api: &ApiServer) -> Vec<(String, String)> {
    let slices: Vec<ResourceSlice> = api.list();
    let mut out: Vec<(String, String)> = (slices.iter())
        .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .map(|d| (d.name.clone(), tenant(d).unwrap_or_default().to_string()))
        .collect();
    out.sort();
    out
}

/// Polls `done` every 50 ms; panics with `what` and the agent's log
/// after a minute (a hang guard, not a speed limit).
async fn wait_until(agent: &Agent, what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..1200 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(&agent.log).unwrap_or_default();
    panic!("gave up waiting until {what}; agent log:\n{log}");
}

async fn metric(agent: &Agent, line: &str) -> bool {
    http_get(&agent.http, "/metrics")
        .await
        .1
        .lines()
        .any(|l| l == line)
}

/// How many syncs the agent's publisher finished, whatever their result.
async fn syncs(agent: &Agent) -> f64 {
    let text = http_get(&agent.http, "/metrics").await.1;
    let samples = text
        .lines()
        .filter(|l| l.starts_with("ainic_dra_slice_syncs_total{"));
    samples
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The Events posted about node-a with `reason`.
fn events(api: &ApiServer, reason: &str) -> Vec<Event> {
    let all: Vec<Event> = api.list();
    all.into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Node") && r.name.as_deref() == Some(NODE)
            })
        })
        .collect()
}

fn write(path: &Path, text: &str) {
    // Whole at once, as the kubelet swaps a ConfigMap's files.
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// All eight NICs of the topology: the first team-b's, the rest team-a's.
fn fenced_as_configured(team_first: &str) -> Vec<(String, String)> {
    let mut want: Vec<(String, String)> = ["04", "24", "44", "64", "84", "a4", "c4", "e4"]
        .iter()
        .map(|bus| (format!("pf-0000-{bus}-00-0"), "team-a".to_string()))
        .collect();
    want[0].1 = team_first.to_string();
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_entry_publishes_nothing_until_fixed_then_the_last_good_config_stays() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let fabric = world.tmp.path().join("fabric.yaml");
    let flags = |extra: &'static [&'static str]| {
        let mut all = vec!["--fabric-config", fabric.to_str().unwrap()];
        all.extend(POLL);
        all.extend(extra);
        all
    };

    // A run with a good file publishes every NIC fenced.
    write(&fabric, GOOD);
    let agent = world.start_agent_with(None, &flags(&[]));
    wait_until(&agent, "the NICs are published", async || {
        published(&world.api) == fenced_as_configured("team-b")
    })
    .await;
    drop(agent);

    // Restarted with one bad entry among good ones: no valid config in
    // this process, so no NIC's fencing is known: nothing is published.
    write(&fabric, BAD_ENTRY);
    let agent = world.start_agent_with(None, &flags(&[]));
    let _kubelet = world.register().await;
    wait_until(&agent, "the restarted agent published", async || {
        syncs(&agent).await >= 1.0
    })
    .await;
    assert_never_unfenced(&world.api);
    assert_eq!(published(&world.api), [], "the slices are withdrawn");
    let (status, why) = http_get(&agent.http, "/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains(fabric.to_str().unwrap())
            && why.contains("nodes.node-b.tenant")
            && why.contains("line 7")
            && why.contains("publishing no devices"),
        "{why}"
    );
    assert!(metric(&agent, "ainic_dra_fabric_config_valid 0").await);
    assert!(metric(&agent, "ainic_dra_devices_withheld 1").await);
    wait_until(&agent, "a Warning Event is on the Node", async || {
        !events(&world.api, "FabricConfigInvalid").is_empty()
    })
    .await;
    let warning = &events(&world.api, "FabricConfigInvalid")[0];
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let node: Node = world.api.get(None, NODE).unwrap();
    assert_eq!(warning.regarding.as_ref().unwrap().uid, node.metadata.uid);
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("nodes.node-b.tenant") && l.contains("line 7")),
        "{log}"
    );

    // Fixed while running: published fenced, ready, said so.
    write(&fabric, GOOD);
    wait_until(&agent, "the fixed file is published", async || {
        published(&world.api) == fenced_as_configured("team-b")
    })
    .await;
    wait_until(&agent, "the agent is ready", async || {
        http_get(&agent.http, "/readyz").await.0 == 200
    })
    .await;
    assert!(metric(&agent, "ainic_dra_fabric_config_valid 1").await);
    assert!(metric(&agent, "ainic_dra_devices_withheld 0").await);
    wait_until(&agent, "a Normal Event says it is over", async || {
        !events(&world.api, "ConfigValid").is_empty()
    })
    .await;

    // Broken again: the last good config stays in force.
    write(&fabric, "nodes:\n  node-a:\n    tenantt: team-a\n");
    wait_until(&agent, "the second bad file is seen", async || {
        metric(&agent, "ainic_dra_fabric_config_errors_total 2").await
    })
    .await;
    let (status, why) = http_get(&agent.http, "/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains("tenantt") && why.contains("keeping the last valid"),
        "{why}"
    );
    assert_eq!(published(&world.api), fenced_as_configured("team-b"));

    // A good edit while running takes effect without a restart.
    write(&fabric, &GOOD.replace("team-b", "team-c"));
    wait_until(&agent, "the edit is published", async || {
        published(&world.api) == fenced_as_configured("team-c")
    })
    .await;
    assert_never_unfenced(&world.api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_publishes_nothing_until_it_appears() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let fabric = world.tmp.path().join("fabric.yaml");
    let mut flags = vec!["--fabric-config", fabric.to_str().unwrap()];
    flags.extend(POLL);
    let agent = world.start_agent_with(None, &flags);
    let _kubelet = world.register().await;
    wait_until(&agent, "the agent published", async || {
        syncs(&agent).await >= 1.0
    })
    .await;
    assert_never_unfenced(&world.api);
    assert_eq!(published(&world.api), [], "nothing is published");
    assert!(metric(&agent, "ainic_dra_devices_withheld 1").await);
    let (status, why) = http_get(&agent.http, "/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains("fabric.yaml") && why.contains("No such file"),
        "{why}"
    );

    write(&fabric, GOOD);
    wait_until(&agent, "the new file is published", async || {
        published(&world.api) == fenced_as_configured("team-b")
    })
    .await;
    assert_never_unfenced(&world.api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_at_start_does_not_lose_the_node_tenant_label() {
    use kube::api::{Api, Patch, PatchParams};
    let world = World::new("mi300x-8gpu-8nic").await;
    let nodes: Api<Node> = Api::all(world.api.client());
    let label = serde_json::json!({"metadata": {"labels": {"ainic.amd.com/tenant": "team-a"}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    // The agent's first reads of its Node fail (the API server restarts):
    // its first GETs, and its watch of the Node for a few seconds more.
    // 500, which the client does not retry on its own (it retries 503s
    // up to 15 times).
    let api = &world.api;
    api.inject(Fault::status(500).on(Verb::Get).resource("nodes").times(3));
    api.inject(
        Fault::status(500)
            .on(Verb::Watch)
            .resource("nodes")
            .times(5),
    );
    let agent = world.start_agent(None);
    wait_until(&agent, "the NICs are published", async || {
        published(&world.api).len() == 8
    })
    .await;
    assert_never_unfenced(&world.api);
    assert!(published(&world.api).iter().all(|(_, t)| t == "team-a"));
    wait_until(&agent, "the whole outage was met", async || {
        world.api.pending_faults() == 0
    })
    .await;
    assert_never_unfenced(&world.api);
}
