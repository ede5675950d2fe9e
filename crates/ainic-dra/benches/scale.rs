//! Scale (issue 35): the fabric controller on the testbed's real control
//! plane (1.37) with `SCALE_NODES` fake nodes (default 500), each with the
//! slice `ainic-dra slices` publishes for the 8-GPU/8-NIC MI300X node, its
//! NICs in fabric partition `part-<i / SCALE_PARTITION>` (default 32 nodes
//! a partition). Starts the real `ainic-dra controller` and prints:
//! - start → every node labelled with its partition;
//! - its peak RSS (VmHWM) and CPU time, at each stage;
//! - at rest for `SCALE_REST_SECONDS` (default 65: one resync): the API
//!   server's requests by verb and resource from its own
//!   `apiserver_request_total`, and the writes the controller's passes say
//!   they made (the controller resyncs every `SCALE_REST_SECONDS` less
//!   5 s, at most 60 s: a pass comes at most a second and a pass's time
//!   after its resync is due, so at least one falls in the window);
//! - one node moved to another partition (its slice republished, as its
//!   agent would): time until its label says so, and until the
//!   partition's device counts it;
//! - `SCALE_MOVE_PERCENT` (default 5) of the nodes moved at once: time
//!   until every one is labelled anew.
//! - agents at rest: with the controller stopped, the API server's requests
//!   in `SCALE_AGENT_REST_SECONDS` (default 600) without agents, then in as
//!   long with `SCALE_AGENTS` (default 8) real node agents (`ainic-dra
//!   node`, fake sysfs) on the first nodes, started with the extra flags in
//!   `SCALE_AGENT_FLAGS` (e.g. `--watch-timeout 270 --resync-interval 360`
//!   to see ten times as many of their periodic requests in a window;
//!   `SCALE_AGENT_BIN` runs another build of the agent; `SCALE_AGENT_LOGS`
//!   keeps their logs in a directory, at level `SCALE_AGENT_LOG`).
//!
//! Asserts only correctness: every node's label and every partition
//! device's node count as the slices say, after each stage, and no write
//! at rest (none by the controller's passes, none to slices, claims, Nodes
//! or Events, by the controller or by the agents). CI runs it at 500 nodes
//! (debug build, 10 s at rest, 4 agents).
//!
//! `cargo bench -p ainic-dra --bench scale`; with `SCALE_OUT=FILE` it also
//! appends the figures as one JSON line (scripts/scale runs the sizes and
//! draws the curves).

mod agents;
mod cluster;
mod fabric;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agents::Agent;
use cluster::{append_line, env_or, in_chunks};
use dra_model::partitions::label_value;
use fabric::{
    Controller, NAMESPACE, STAGE_LIMIT, fill, in_fabric, node_name, partition, reflected,
    starting_labels,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version, cluster as bed_cluster};

/// Republishes `slice` (a new pool generation) with its devices in `fabric`.
async fn move_node(api: &Api<ResourceSlice>, slice: &mut ResourceSlice, fabric: &str) {
    in_fabric(slice, fabric);
    slice.spec.pool.generation += 1;
    let patch = json!({"spec": {"pool": slice.spec.pool, "devices": slice.spec.devices}});
    let name = slice.metadata.name.as_deref().unwrap();
    (api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await)
        .unwrap_or_else(|e| panic!("cannot republish slice {name}: {e}"));
}

/// The API server's `apiserver_request_total`, by verb and resource.
async fn requests(client: &kube::Client) -> BTreeMap<(String, String), u64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let labels: BTreeMap<&str, &str> = (labels.split("\","))
            .filter_map(|pair| pair.split_once("=\""))
            .map(|(k, v)| (k, v.trim_end_matches('"')))
            .collect();
        let key = (labels["verb"].to_string(), labels["resource"].to_string());
        *out.entry(key).or_default() += value.parse::<f64>().unwrap() as u64;
    }
    out
}

/// `after - before` per verb and resource, without the unchanged and
/// none below zero (two windows' counts are compared too).
fn delta(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
) -> BTreeMap<(String, String), u64> {
    (after.iter())
        .map(|(key, n)| {
            let was = before.get(key).copied().unwrap_or(0);
            (key.clone(), n.saturating_sub(was))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Whether a pass of the controller reads or writes `resource` (its
/// Lease aside). Nothing else reads or writes these at rest: the testbed
/// runs no node lifecycle controller, and the fake nodes no kubelet.
fn ours(resource: &str) -> bool {
    matches!(
        resource,
        "resourceslices" | "resourceclaims" | "nodes" | "events"
    )
}

/// Writes to what the controller or the agents write, in `requests`.
fn our_writes(requests: &BTreeMap<(String, String), u64>) -> Vec<(&(String, String), &u64)> {
    (requests.iter())
        .filter(|((verb, resource), _)| {
            !matches!(verb.as_str(), "GET" | "LIST" | "WATCH") && ours(resource)
        })
        .collect()
}

/// The API server's requests in `window` without agents, then in as long
/// with `sample` real agents on the first nodes (after each published and
/// its own writes' echoes settled).
async fn agents_at_rest(
    bed: &Testbed,
    client: &kube::Client,
    sample: usize,
    window: Duration,
) -> [BTreeMap<(String, String), u64>; 2] {
    let before = requests(client).await;
    tokio::time::sleep(window).await;
    let without = delta(&before, &requests(client).await);
    let flags = std::env::var("SCALE_AGENT_FLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let daemonset = format!("{NAMESPACE}/ainic-dra-node");
    let mut agents: Vec<Agent> = (0..sample)
        .map(|i| Agent::start(bed, &node_name(i), &daemonset, &flags))
        .collect();
    for agent in &mut agents {
        agent.published(STAGE_LIMIT).await;
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = requests(client).await;
    tokio::time::sleep(window).await;
    let with = delta(&before, &requests(client).await);
    for agent in &mut agents {
        agent.assert_running();
    }
    [without, with]
}

/// What a sample of agents asked of the API server at rest.
struct AgentsAtRest {
    sample: usize,
    window: Duration,
    /// Requests to what agents read or write, beyond those without them.
    requests: u64,
    per_agent_hour: f64,
}

/// The agents' stage (none when `SCALE_AGENTS` is 0): prints what they
/// asked and asserts they wrote nothing.
async fn agents_stage(bed: &Testbed, client: &kube::Client, count: usize) -> Option<AgentsAtRest> {
    let sample = env_or("SCALE_AGENTS", 8).min(count);
    if sample == 0 {
        return None;
    }
    let window = Duration::from_secs(env_or("SCALE_AGENT_REST_SECONDS", 600) as u64);
    let [without, with] = agents_at_rest(bed, client, sample, window).await;
    let by_agents = delta(&without, &with);
    let requests: u64 = (by_agents.iter())
        .filter(|((_, resource), _)| agents_touch(resource))
        .map(|(_, n)| n)
        .sum();
    let per_agent_hour = requests as f64 / sample as f64 * 3600.0 / window.as_secs_f64();
    println!(
        "{sample} agents at rest {} s: {requests} requests more than without them ({per_agent_hour:.2} an agent an hour; {:.2}/s at {count} nodes, {:.2}/s at 5,000); by verb and resource: {by_agents:?}; without agents: {without:?}",
        window.as_secs(),
        per_agent_hour * count as f64 / 3600.0,
        per_agent_hour * 5000.0 / 3600.0,
    );
    let writes = our_writes(&with);
    assert!(writes.is_empty(), "writes with agents at rest: {writes:?}");
    Some(AgentsAtRest {
        sample,
        window,
        requests,
        per_agent_hour,
    })
}

/// Whether an agent reads or writes `resource`: its slices, Node,
/// DaemonSet, claims and Events, and `/version` (no resource).
fn agents_touch(resource: &str) -> bool {
    ours(resource) || matches!(resource, "daemonsets" | "")
}

/// Passes the controller logged, and the writes they say they made.
fn passes(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap();
    let mut count = 0;
    let mut writes = 0;
    // A line still being written has no end yet: left for the next read.
    let whole = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
    for line in whole.lines().filter(|l| l.contains("pass done")) {
        count += 1;
        for key in ["labels: ", "slices: ", "events: ", "tenant_writes: "] {
            let at = (line.find(key))
                .unwrap_or_else(|| panic!("no {key:?} in the controller's pass line: {line}"))
                + key.len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            writes += digits.parse::<u64>().unwrap();
        }
    }
    (count, writes)
}

#[tokio::main]
async fn main() {
    let count = env_or("SCALE_NODES", 500);
    let per = env_or("SCALE_PARTITION", 32);
    let rest = Duration::from_secs(env_or("SCALE_REST_SECONDS", 65) as u64);
    let move_percent = env_or("SCALE_MOVE_PERCENT", 5);
    assert!(
        per >= 2 && count > per && rest >= Duration::from_secs(10),
        "SCALE_NODES={count} SCALE_PARTITION={per} SCALE_REST_SECONDS={}: at least two partitions of two nodes, and ten seconds at rest",
        rest.as_secs()
    );
    let options = UpOptions {
        version: Some(Version::V1_37),
        no_scheduler: true,
        ..UpOptions::default()
    };
    let bed = tokio::task::spawn_blocking(move || Testbed::up(&options))
        .await
        .unwrap();
    let client = bed.client().await;
    bed_cluster::namespace(&client, NAMESPACE).await;
    let filling = Instant::now();
    let mut own = fill(&client, count, per).await;
    let partitions = count.div_ceil(per);
    println!(
        "{count} nodes in {partitions} partitions of {per} filled in {:.1} s",
        filling.elapsed().as_secs_f64()
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mut want = starting_labels(count, per);

    let log = bed.dir().join("scale-controller.log");
    // Not `rest` itself: passes come every resync plus up to a second
    // (the loop's tick) plus the pass, and a window as long as the
    // resync could fall between two of them.
    let resync = (rest - Duration::from_secs(5)).min(Duration::from_secs(60));
    let controller = Controller::start(&bed, &log, resync);
    let start = reflected("start", &nodes, &slices, &want).await;
    let (start_cpu, start_peak) = (controller.cpu_seconds(), controller.peak_mib());
    println!(
        "start → {count} nodes labelled: {:.2} s; CPU {start_cpu:.2} s; peak RSS {start_peak:.1} MiB",
        start.as_secs_f64()
    );

    // At rest: nothing changes; the bench itself sends nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (before, passes_before, cpu_before) = (
        requests(&client).await,
        passes(&log),
        controller.cpu_seconds(),
    );
    tokio::time::sleep(rest).await;
    let (after, passes_after, cpu_after) = (
        requests(&client).await,
        passes(&log),
        controller.cpu_seconds(),
    );
    let at_rest = delta(&before, &after);
    let rest_cpu = cpu_after - cpu_before;
    let rest_rss = controller.rss_mib();
    println!(
        "at rest {} s: {} passes, {} writes by them; CPU {rest_cpu:.2} s; RSS {rest_rss:.1} MiB; API requests (verb resource count): {at_rest:?}",
        rest.as_secs(),
        passes_after.0 - passes_before.0,
        passes_after.1 - passes_before.1,
    );

    let pass_writes = passes_after.1 - passes_before.1;
    assert!(
        passes_after.0 > passes_before.0,
        "no resync pass in {rest:?} at rest: nothing was checked"
    );
    assert_eq!(pass_writes, 0, "the controller's passes wrote at rest");
    let writes = our_writes(&at_rest);
    assert!(writes.is_empty(), "writes at rest: {writes:?}");

    // One node changes partition.
    let (moved, to) = (1.min(count - 1), partition(per, per));
    move_node(&slices, &mut own[moved], &to).await;
    want.insert(node_name(moved), label_value(&to));
    let one = reflected("one node moved", &nodes, &slices, &want).await;
    println!(
        "one node moved: labelled anew in {:.2} s",
        one.as_secs_f64()
    );

    // A share of the nodes change partition at once.
    let step = (100 / move_percent.max(1)).max(1);
    let cpu_before = controller.cpu_seconds();
    let moving: Vec<usize> = (2..count).step_by(step).collect();
    let mut moves = Vec::new();
    for (i, slice) in own.iter_mut().enumerate() {
        if moving.contains(&i) {
            let to = partition((i + per) % (partitions * per), per);
            want.insert(node_name(i), label_value(&to));
            let slices = &slices;
            moves.push(async move { move_node(slices, slice, &to).await });
        }
    }
    let started = Instant::now();
    in_chunks(moves).await;
    let sent = started.elapsed();
    let many = sent + reflected("many nodes moved", &nodes, &slices, &want).await;
    let many_cpu = controller.cpu_seconds() - cpu_before;
    let peak = controller.peak_mib();
    println!(
        "{} nodes moved at once: all labelled anew {:.2} s after the first republish; CPU {many_cpu:.2} s; peak RSS {peak:.1} MiB",
        moving.len(),
        many.as_secs_f64()
    );

    // Agents at rest: the controller's requests out of the counts.
    drop(controller);
    let agents = agents_stage(&bed, &client, count).await;

    if let Ok(out) = std::env::var("SCALE_OUT") {
        let reads_at_rest: u64 = (at_rest.iter())
            .filter(|((verb, _), _)| matches!(verb.as_str(), "GET" | "LIST"))
            .filter(|((_, resource), _)| ours(resource))
            .map(|(_, n)| n)
            .sum();
        let line: Value = json!({
            "nodes": count, "partition": per,
            "start_s": start.as_secs_f64(), "start_cpu_s": start_cpu,
            "rest_s": rest.as_secs(), "rest_cpu_s": rest_cpu, "rest_rss_mib": rest_rss,
            "rest_pass_writes": pass_writes,
            "rest_api_reads": reads_at_rest,
            "one_move_s": one.as_secs_f64(),
            "moved": moving.len(), "many_move_s": many.as_secs_f64(), "many_move_cpu_s": many_cpu,
            "peak_rss_mib": peak,
            "agents": agents.map(|a| json!({
                "sample": a.sample, "rest_s": a.window.as_secs(),
                "flags": std::env::var("SCALE_AGENT_FLAGS").unwrap_or_default(),
                "requests": a.requests, "per_agent_hour": a.per_agent_hour,
            })),
        });
        append_line(&out, &line);
    }
}
