//! The node agent at rest on the large SR-IOV node (8 PFs × 256 VFs,
//! rendered on tmpfs): the CPU time it takes over a quiet minute, read
//! from `/proc/<pid>/stat`, and its RSS. Run three times: rediscovering
//! every refresh interval (`--full-rescan-interval 10`, the behaviour
//! before kernel events drove it), the cheap rescan every refresh interval
//! (`--rescan-interval 10`), and the defaults (events; the cheap rescan
//! every 600 s, a full one every 3600 s). Prints; asserts nothing.
//!
//! `cargo bench -p ainic-dra --bench idle` (env `IDLE_BENCH_SECONDS`,
//! default 60). With `AGENT_BENCH_WRAPPER="heaptrack -o FILE"` only the
//! default run, under heaptrack: the agent outlives the killed wrapper;
//! `kill -KILL` it then, and what heaptrack reports as leaked is the heap
//! the agent held at rest.

use std::path::Path;
use std::time::Duration;

use testkit::kubelet::KubeletSim;

mod support;

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

async fn idle(sysfs: &Path, seconds: u64, extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let (_api, kubeconfig) = support::api_with_node(tmp.path()).await;
    let registry = tmp.path().join("registry");
    let _tmpfs = support::tmpfs_dirs(tmp.path());
    let mut command = support::agent_command(tmp.path(), sysfs, &kubeconfig, extra, true);
    let mut agent = command.spawn().unwrap();
    let _kubelet = KubeletSim::register_driver(&registry, "ainic.amd.com")
        .await
        .unwrap();
    // Let start-up and the first publish settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = cpu_ticks(agent.id());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let used = cpu_ticks(agent.id()) - before;
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let share = used as f64 / ticks_per_second / seconds as f64 * 100.0;
    println!(
        "agent {extra:?}: {:.2} s of CPU over {seconds} s at rest = {share:.2} % of one core; RSS {}",
        used as f64 / ticks_per_second,
        support::rss(agent.id())
    );
    let _ = agent.kill();
    let _ = agent.wait();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let seconds = std::env::var("IDLE_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let shm = Path::new("/dev/shm");
    let root = match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    testkit::fixture::sriov_node(8, 256)
        .render(root.path())
        .unwrap();
    // Under a profiler (see support::agent_command) only the default run,
    // so that one profile is written.
    if std::env::var_os("AGENT_BENCH_WRAPPER").is_none() {
        idle(root.path(), seconds, &["--full-rescan-interval", "10"]).await;
        idle(root.path(), seconds, &["--rescan-interval", "10"]).await;
    }
    idle(root.path(), seconds, &[]).await;
}
