//! NodePrepareResources latency over the real socket: the release binary
//! as the agent, claims served by the API server stand-in, the kubelet
//! simulator as client. Prints p50/p99; asserts nothing.
//!
//! `cargo bench -p ainic-dra --bench prepare` (env `PREPARE_BENCH_ROUNDS`
//! to change the number of single-claim rounds, default 300;
//! `PREPARE_BENCH_LOAD=0` skips the runs with 10, 1,000 and 10,000 claims
//! already prepared, `PREPARE_BENCH_LEVELS=10,1000` picks other numbers;
//! `AGENT_BENCH_BIN` runs another build of the agent).

use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;
use testkit::apiserver::ApiServer;
use testkit::kubelet::{ClaimRef, DraPluginClient, KubeletSim};

mod support;
use support::NODE;

const DRIVER: &str = "ainic.amd.com";
const DEVICES: [&str; 8] = [
    "pf-0000-04-00-0",
    "pf-0000-24-00-0",
    "pf-0000-44-00-0",
    "pf-0000-64-00-0",
    "pf-0000-84-00-0",
    "pf-0000-a4-00-0",
    "pf-0000-c4-00-0",
    "pf-0000-e4-00-0",
];

/// A claim allocated one of the node's PFs. `admin`: with admin access, so
/// that more claims than the node has PFs can be prepared at once (the
/// agent refuses a second exclusive claim on one device); the prepare
/// path is the same.
fn seed_claim(api: &ApiServer, i: usize, admin: bool) -> ClaimRef {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": format!("bench-{i}")},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "nic", "driver": DRIVER, "pool": NODE, "device": DEVICES[i % DEVICES.len()],
             "adminAccess": admin}
        ]}}},
    }))
    .unwrap();
    let stored = api.seed(&claim);
    ClaimRef::new(
        "default",
        stored.metadata.name.as_deref().unwrap(),
        stored.metadata.uid.as_deref().unwrap(),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3,
    );
}

/// The floor of a durable prepare on this disk: a small file written,
/// fsynced and renamed into place, as the checkpoint is, in `dir`. Printed
/// beside the figures, because this cost varies by machine and by hour.
fn fsync_floor(dir: &std::path::Path) {
    use std::io::Write as _;
    let (tmp, path) = (dir.join("floor.tmp"), dir.join("floor"));
    let samples = (0..200)
        .map(|_| {
            let start = Instant::now();
            let mut file = std::fs::File::create(&tmp).unwrap();
            file.write_all(&[b'x'; 2048]).unwrap();
            file.sync_all().unwrap();
            std::fs::rename(&tmp, &path).unwrap();
            start.elapsed()
        })
        .collect();
    report("write + fsync + rename of 2 KiB here (the floor)", samples);
}

async fn prepare_ok(kubelet: &DraPluginClient, claims: &[ClaimRef]) {
    let answer = kubelet.prepare_v1(claims).await.unwrap();
    assert!(
        answer.claims.values().all(|c| c.error.is_empty()),
        "{answer:?}"
    );
}

async fn single(api: &ApiServer, kubelet: &DraPluginClient, rounds: usize, offset: usize) {
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let claim = seed_claim(api, offset + i, false);
        let start = Instant::now();
        prepare_ok(kubelet, std::slice::from_ref(&claim)).await;
        samples.push(start.elapsed());
        kubelet.unprepare_v1(&[claim]).await.unwrap();
    }
    report("one claim per call", samples);
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
        kubelet.unprepare_v1(&claims).await.unwrap();
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

/// Waits until the agent has sent the API server nothing for half a
/// second: the status writes of the claims just held (one per claim,
/// thousands at the larger levels) would otherwise still be queued while
/// the first rounds are timed, and those would measure that backlog.
async fn settle(api: &ApiServer) {
    let mut seen = api.requests().len();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = api.requests().len();
        if now == seen {
            return;
        }
        seen = now;
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
            kubelet.unprepare_v1(&[claim]).await.unwrap();
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
            kubelet.unprepare_v1(&claims).await.unwrap();
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
    let (api, kubeconfig) = support::api_with_node(tmp.path()).await;
    let registry = tmp.path().join("registry");
    let started = Instant::now();
    // Extra agent flags, e.g. `--device-metadata=false` to see its cost.
    let extra = std::env::var("PREPARE_BENCH_AGENT_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    // The CDI directory on tmpfs, as on a node (`/var/run/cdi`): written at
    // every prepare, never synced; on the disk it would add its pages to
    // the checkpoint's sync (ext4 writes them out first).
    let _cdi = support::cdi_on_tmpfs(tmp.path());
    let mut agent = support::start_agent(tmp.path(), &sysfs, &kubeconfig, &extra, false);
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
