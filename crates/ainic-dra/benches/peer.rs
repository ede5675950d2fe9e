//! Our agent beside a peer kubelet plugin, the upstream DRA example driver
//! (kubernetes-sigs/dra-example-driver, built from its source outside this
//! repository: `scripts/build-peer`), in one run: same API server
//! stand-in, same disk, same kubelet simulator, rounds alternating. Times
//! the unprepare of 100 claims in one call with 0, 10 and 1,000 claims
//! already prepared on each (issue 34 item 1), and prints each one's start
//! → registered and RSS. Asserts nothing.
//!
//! `PEER_BENCH_BIN=<dra-example-kubeletplugin> cargo bench -p ainic-dra
//! --bench peer` (env `PEER_BENCH_ROUNDS`, default 5; `PEER_BENCH_LEVELS`,
//! default `0,10,1000`; `AGENT_BENCH_BIN` runs another build of ours;
//! `PREPARE_BENCH_NETDEVS=1` runs both where our node's netdevs exist).
//!
//! The peer's unprepare makes no API call; its prepare reads each claim,
//! as ours does. It cannot publish its slices to the stand-in (its Go
//! client sends protobuf bodies, which the stand-in does not read) and
//! keeps retrying with a growing backoff; the claims it is given need no
//! slice. Its client's watch-list is turned off
//! (`KUBE_FEATURE_WatchListClient=false`): the stand-in sends no
//! initial-events bookmark.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::apiserver::ApiServer;
use testkit::kubelet::{ClaimRef, DraPluginClient, KubeletSim};

mod support;
mod timing;
use support::NODE;
use timing::{prepare_ok, report, seed_claim, settle, unprepare_ok};

/// One of the two plugins: its client and what its claims are allocated.
struct Plugin {
    name: &'static str,
    driver: &'static str,
    devices: &'static [&'static str],
    /// Added to claim numbers: the two plugins' claims are apart.
    offset: usize,
    kubelet: DraPluginClient,
    process: Child,
}

impl Plugin {
    /// Seeds `n` claims (numbers `first`…) allocated this plugin's devices.
    fn claims(&self, api: &ApiServer, first: usize, n: usize) -> Vec<ClaimRef> {
        let device = |i: usize| self.devices[i % self.devices.len()];
        (first..first + n)
            .map(|i| seed_claim(api, (self.driver, NODE, device(i)), self.offset + i, true))
            .collect()
    }
}

const PEERS: &[&str] = &[
    "gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7",
];

/// Starts our agent in `dir` and waits for its registration.
async fn start_ours(dir: &Path, kubeconfig: &Path) -> Plugin {
    let sysfs = dir.join("sys");
    let yaml = testkit::fixture::bundled_by_name("mi300x-8gpu-8nic").unwrap();
    let topology = testkit::fixture::Topology::from_yaml(yaml).unwrap();
    topology.render(&sysfs).unwrap();
    timing::add_netdevs(&sysfs);
    let mut command = support::agent_command(dir, &sysfs, kubeconfig, &[], true);
    let started = Instant::now();
    let process = command.spawn().unwrap();
    let kubelet = register(&dir.join("registry"), timing::DRIVER, started).await;
    Plugin {
        name: "ours",
        driver: timing::DRIVER,
        devices: &timing::DEVICES,
        offset: 0,
        kubelet,
        process,
    }
}

/// Starts the peer `binary` in `dir` and waits for its registration.
async fn start_peer(binary: &str, dir: &Path, kubeconfig: &Path) -> Plugin {
    let registry = dir.join("registry");
    std::fs::create_dir_all(&registry).unwrap();
    let started = Instant::now();
    let process = Command::new(binary)
        .env("KUBE_FEATURE_WatchListClient", "false")
        .env("NODE_NAME", NODE)
        .args(["--node-name", NODE, "--device-profile", "gpu"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cdi-root")
        .arg(dir.join("cdi"))
        .arg("--kubelet-plugins-directory-path")
        .arg(dir.join("plugins"))
        .arg("--kubelet-registrar-directory-path")
        .arg(&registry)
        // Its defaults (5 QPS, burst 10) would throttle the claims' reads.
        .args(["--num-devices", "8", "--kube-api-qps", "1000"])
        .args(["--kube-api-burst", "1000"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the peer {binary}: {e}"));
    let kubelet = register(&registry, "gpu.example.com", started).await;
    Plugin {
        name: "peer",
        driver: "gpu.example.com",
        devices: PEERS,
        offset: 100_000_000,
        kubelet,
        process,
    }
}

async fn register(registry: &Path, driver: &str, started: Instant) -> DraPluginClient {
    // Polled every millisecond: the real kubelet is told by inotify.
    let poll = Duration::from_millis(1);
    let kubelet = KubeletSim::register_driver_polling(registry, driver, poll)
        .await
        .unwrap();
    println!(
        "{driver}: registered with the kubelet after {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    kubelet
}

/// Unprepare of 100 in one call on each plugin, rounds alternating, with
/// `level` claims held by each; `label` names the lines printed.
async fn at_level(
    api: &ApiServer,
    plugins: &[Plugin],
    (label, level): (&str, usize),
    rounds: usize,
    next: &mut usize,
) {
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); plugins.len()];
    for _ in 0..rounds {
        for (plugin, samples) in plugins.iter().zip(&mut times) {
            let claims = plugin.claims(api, *next, 100);
            *next += 100;
            prepare_ok(&plugin.kubelet, &claims).await;
            settle(api).await;
            let start = Instant::now();
            unprepare_ok(&plugin.kubelet, &claims).await;
            samples.push(start.elapsed());
        }
    }
    let p50s: Vec<Duration> = (plugins.iter().zip(times))
        .map(|(p, samples)| {
            report(
                &format!(
                    "{label}{level} prepared, {}: unprepare 100 in one call",
                    p.name
                ),
                samples,
            )
        })
        .collect();
    println!(
        "{label}{level} prepared: ours / peer = {:.2}",
        p50s[0].as_secs_f64() / p50s[1].as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    timing::in_netns_if_asked();
    let Ok(peer) = std::env::var("PEER_BENCH_BIN") else {
        println!(
            "peer: not run: PEER_BENCH_BIN names no peer plugin (scripts/build-peer builds one)"
        );
        return;
    };
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let rounds: usize = env("PEER_BENCH_ROUNDS", "5")
        .parse()
        .expect("PEER_BENCH_ROUNDS");
    let levels: Vec<usize> = (env("PEER_BENCH_LEVELS", "0,10,1000").split(','))
        .map(|l| l.trim().parse().expect("PEER_BENCH_LEVELS"))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let (api, kubeconfig) = support::api_with_node(tmp.path()).await;
    let (ours_dir, peer_dir) = (tmp.path().join("ours"), tmp.path().join("peer"));
    for dir in [&ours_dir, &peer_dir] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let _tmpfs = (
        support::tmpfs_dirs(&ours_dir),
        support::tmpfs_dirs(&peer_dir),
    );
    let plugins = vec![
        start_ours(&ours_dir, &kubeconfig).await,
        start_peer(&peer, &peer_dir, &kubeconfig).await,
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;
    for p in &plugins {
        println!(
            "{} RSS at rest after start: {}",
            p.name,
            support::rss(p.process.id())
        );
    }
    timing::fsync_floor(tmp.path());
    let mut next = 1_000_000;
    at_level(&api, &plugins, ("warm-up, ", 0), 3, &mut next).await;
    let mut held = 0;
    for level in levels {
        for plugin in &plugins {
            for first in (held..level).step_by(100) {
                let claims = plugin.claims(&api, 3_000_000 + first, (level - first).min(100));
                prepare_ok(&plugin.kubelet, &claims).await;
            }
        }
        held = held.max(level);
        settle(&api).await;
        at_level(&api, &plugins, ("", level), rounds, &mut next).await;
    }
    for p in &plugins {
        let rss = support::rss(p.process.id());
        println!("{} RSS after the runs: {rss}", p.name);
    }
}

impl Drop for Plugin {
    /// A failed round leaves neither process running (the peer would retry
    /// its slices for ever).
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
