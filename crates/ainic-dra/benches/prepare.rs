//! NodePrepareResources latency over the real socket: the release binary
//! as the agent, claims served by the API server stand-in, the kubelet
//! simulator as client. Prints p50/p99; asserts nothing.
//!
//! `cargo bench -p ainic-dra --bench prepare` (env `PREPARE_BENCH_ROUNDS`
//! to change the number of single-claim rounds, default 300;
//! `PREPARE_BENCH_LOAD=0` skips the runs with 10, 1,000 and 10,000 claims
//! already prepared, `PREPARE_BENCH_LEVELS=10,1000` picks other numbers;
//! `AGENT_BENCH_BIN` runs another build of the agent;
//! `PREPARE_BENCH_NETDEVS=1` runs it where the node's netdevs exist, in a
//! network namespace of its own).

use std::time::{Duration, Instant};

use testkit::apiserver::ApiServer;
use testkit::kubelet::{ClaimRef, DraPluginClient, KubeletSim};

mod support;
mod timing;
use support::NODE;
use timing::{DEVICES, DRIVER, fsync_floor, prepare_ok, report, settle, unprepare_ok};

/// A claim allocated one of the node's PFs (`admin`: with admin access).
fn seed_claim(api: &ApiServer, i: usize, admin: bool) -> ClaimRef {
    let device = DEVICES[i % DEVICES.len()];
    timing::seed_claim(api, (DRIVER, NODE, device), i, admin)
}

async fn single(api: &ApiServer, kubelet: &DraPluginClient, rounds: usize, offset: usize) {
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let claim = seed_claim(api, offset + i, false);
        let start = Instant::now();
        prepare_ok(kubelet, std::slice::from_ref(&claim)).await;
        samples.push(start.elapsed());
        unprepare_ok(kubelet, &[claim]).await;
    }
    report("one claim per call", samples);
}

/// The parts of a prepare that are not the agent's work: a call naming no
/// claim (the gRPC round trip over the socket, client and server), and a
/// call for a claim already prepared (answered from memory: no GET, no
/// write).
async fn transport(api: &ApiServer, kubelet: &DraPluginClient, rounds: usize) {
    let mut empty = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        prepare_ok(kubelet, &[]).await;
        empty.push(start.elapsed());
    }
    report("a call naming no claim", empty);
    let claim = seed_claim(api, 5_000_000, false);
    prepare_ok(kubelet, std::slice::from_ref(&claim)).await;
    let mut again = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        prepare_ok(kubelet, std::slice::from_ref(&claim)).await;
        again.push(start.elapsed());
    }
    report("a claim prepared already (no GET, no write)", again);
    unprepare_ok(kubelet, &[claim]).await;
}

async fn concurrent(api: &ApiServer, kubelet: &DraPluginClient, rounds: usize, offset: usize) {
    let mut totals = Vec::new();
    let mut per_claim = Vec::new();
    for round in 0..rounds {
        let claims: Vec<ClaimRef> = (0..100)
            .map(|i| seed_claim(api, offset + round * 100 + i, true))
            .collect();
        let start = Instant::now();
        let calls: Vec<_> = claims
            .iter()
            .map(|c| {
                let kubelet = kubelet.clone();
                let c = c.clone();
                tokio::spawn(async move {
                    let t = Instant::now();
                    prepare_ok(&kubelet, &[c]).await;
                    t.elapsed()
                })
            })
            .collect();
        for call in calls {
            per_claim.push(call.await.unwrap());
        }
        totals.push(start.elapsed());
        unprepare_ok(kubelet, &claims).await;
    }
    report("100 concurrent calls, total", totals);
    report("100 concurrent calls, per claim", per_claim);
}

/// Prepares claims (admin access, 100 per call) until `held` has `level`.
async fn hold(api: &ApiServer, kubelet: &DraPluginClient, held: &mut Vec<ClaimRef>, level: usize) {
    while held.len() < level {
        let batch: Vec<ClaimRef> = (held.len()..level.min(held.len() + 100))
            .map(|i| seed_claim(api, 3_000_000 + i, true))
            .collect();
        prepare_ok(kubelet, &batch).await;
        held.extend(batch);
    }
}

/// What one claim's change costs with `level` claims already prepared:
/// prepare and unprepare of one claim, and unprepare of 100 in one call.
async fn under_load(
    api: &ApiServer,
    kubelet: &DraPluginClient,
    levels: &[usize],
    journal: &std::path::Path,
) {
    let mut held = Vec::new();
    let mut next = 4_000_000;
    for &level in levels {
        hold(api, kubelet, &mut held, level).await;
        settle(api).await;
        // Live records plus the dead ones not yet compacted away.
        let bytes = std::fs::metadata(journal).map_or(0, |m| m.len());
        println!(
            "{level} prepared: checkpoint journal {bytes} B, {} B per claim held",
            bytes / level as u64
        );
        let (mut prepares, mut unprepares) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            let claim = seed_claim(api, next, true);
            next += 1;
            let start = Instant::now();
            prepare_ok(kubelet, std::slice::from_ref(&claim)).await;
            prepares.push(start.elapsed());
            let start = Instant::now();
            unprepare_ok(kubelet, &[claim]).await;
            unprepares.push(start.elapsed());
        }
        report(&format!("{level} prepared: prepare one"), prepares);
        report(&format!("{level} prepared: unprepare one"), unprepares);
        let mut batches = Vec::new();
        for _ in 0..5 {
            let claims: Vec<ClaimRef> = (0..100).map(|i| seed_claim(api, next + i, true)).collect();
            next += 100;
            prepare_ok(kubelet, &claims).await;
            settle(api).await;
            let start = Instant::now();
            unprepare_ok(kubelet, &claims).await;
            batches.push(start.elapsed());
        }
        report(
            &format!("{level} prepared: unprepare 100 in one call"),
            batches,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    timing::in_netns_if_asked();
    let rounds: usize = std::env::var("PREPARE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = tmp.path().join("sys");
    let yaml = testkit::fixture::bundled_by_name("mi300x-8gpu-8nic").unwrap();
    testkit::fixture::Topology::from_yaml(yaml)
        .unwrap()
        .render(&sysfs)
        .unwrap();
    timing::add_netdevs(&sysfs);
    let (api, kubeconfig) = support::api_with_node(tmp.path()).await;
    let registry = tmp.path().join("registry");
    // Extra agent flags, e.g. `--device-metadata=false` to see its cost.
    let extra = std::env::var("PREPARE_BENCH_AGENT_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    // The CDI directory on tmpfs, as on a node (`/var/run/cdi`): written at
    // every prepare, never synced; on the disk it would add its pages to
    // the checkpoint's sync (ext4 writes them out first).
    let _tmpfs = support::tmpfs_dirs(tmp.path());
    let mut command = support::agent_command(tmp.path(), &sysfs, &kubeconfig, &extra, false);
    let started = Instant::now();
    let mut agent = command.spawn().unwrap();
    // Polled every millisecond: the real kubelet is told by inotify.
    let poll = Duration::from_millis(1);
    let kubelet = KubeletSim::register_driver_polling(&registry, DRIVER, poll)
        .await
        .unwrap();
    let registered = started.elapsed();
    while api
        .list::<k8s_openapi::api::resource::v1::ResourceSlice>()
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!(
        "agent start: registered with the kubelet after {:.1} ms, slices published after {:.1} ms",
        registered.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64() * 1e3
    );

    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "agent RSS at rest after start: {}",
        support::rss(agent.id())
    );

    fsync_floor(tmp.path());
    // Warm-up: connections, caches, the first checkpoint file.
    single(&api, &kubelet, 20, 1_000_000).await;
    single(&api, &kubelet, rounds, 0).await;
    transport(&api, &kubelet, rounds).await;
    concurrent(&api, &kubelet, 10, 2_000_000).await;

    // The agent gives freed heap back after a quiet second (ainic_dra_daemon::memory).
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "agent RSS after the runs, quiet: {}",
        support::rss(agent.id())
    );
    if std::env::var("PREPARE_BENCH_LOAD").as_deref() != Ok("0") {
        let levels: Vec<usize> = std::env::var("PREPARE_BENCH_LEVELS")
            .unwrap_or_else(|_| "10,1000,10000".into())
            .split(',')
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let journal = tmp.path().join("state/checkpoint.journal");
        under_load(&api, &kubelet, &levels, &journal).await;
    }
    let _ = agent.kill();
    let _ = agent.wait();
}
