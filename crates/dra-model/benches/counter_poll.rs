//! One counter health poll of a node with 8 PFs × 256 VFs (issue 33): what
//! the node agent does every refresh interval besides its report. It reads
//! the error counters of the PFs' ports and netdevs (the default seven
//! counters; never the VFs', which share their PF's port) and judges them
//! ([`CounterMonitor::observe`]). The `sriov_node` tree is rendered on
//! tmpfs (`/dev/shm`) when there is one, as sysfs lives in memory.
//!
//! Besides criterion's wall time per poll, the CPU time per poll (user +
//! system, this thread's `schedstat`) over 2,000 polls is printed: a poll
//! is one thread doing file reads, so the two agree unless the machine is
//! busy (then the CPU time is the figure to trust).
//!
//! `cargo bench -p dra-model --bench counter_poll`

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dra_model::health::{CounterMonitor, HealthPolicy};
use testkit::fixture::sriov_node;
use topology::{CounterPlan, CounterReading, DiscoveryConfig, discover, read_counters};

fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("a temp dir")
}

/// CPU time this thread has run so far (`/proc/thread-self/schedstat`,
/// nanoseconds, user and system alike); `None` where the kernel has none.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Polls 2,000 times, one every 10 s of the monitor's clock, and prints
/// the CPU time of one.
fn print_cpu_per_poll(root: &Path, plan: &CounterPlan, monitor: &mut CounterMonitor) {
    const POLLS: u32 = 2_000;
    let Some(start) = cpu_time() else {
        println!("cpu per poll: not measured (no /proc/thread-self/schedstat)");
        return;
    };
    for i in 0..POLLS {
        let readings = read_counters(root, plan);
        monitor.observe(Duration::from_secs(10 * u64::from(i)), plan, &readings);
    }
    let spent = cpu_time().unwrap_or(start) - start;
    println!(
        "cpu per poll: {:?} (user + system, mean of {POLLS} polls of {} files)",
        spent / POLLS,
        plan.counters.len()
    );
}

fn bench_poll(c: &mut Criterion) {
    let root = temp_root();
    sriov_node(8, 256)
        .render(root.path())
        .expect("the benchmark node renders");
    let inventory = discover(root.path(), &DiscoveryConfig::default()).expect("discovery runs");
    assert_eq!(inventory.nics.len(), 8 * 257);
    let policy = HealthPolicy::default();
    let plan = CounterPlan::new(&inventory, &policy.counter_names());
    assert_eq!(
        plan.counters.len(),
        8 * 7,
        "six port counters and carrier_changes per PF"
    );
    let readings = read_counters(root.path(), &plan);
    assert!(
        readings
            .iter()
            .all(|r| matches!(r, CounterReading::Value(_)))
    );
    print_cpu_per_poll(root.path(), &plan, &mut CounterMonitor::new(policy.clone()));

    let mut group = c.benchmark_group("counter_poll");
    group.bench_function("read_8pf_x_256vf", |b| {
        b.iter(|| read_counters(black_box(root.path()), &plan))
    });
    let mut monitor = CounterMonitor::new(policy.clone());
    let mut now = Duration::ZERO;
    group.bench_function("judge_8pf", |b| {
        b.iter(|| {
            now += Duration::from_secs(10);
            monitor.observe(now, &plan, black_box(&readings))
        })
    });
    let mut monitor = CounterMonitor::new(policy);
    let mut now = Duration::ZERO;
    group.bench_function("read_and_judge_8pf_x_256vf", |b| {
        b.iter(|| {
            now += Duration::from_secs(10);
            let readings = read_counters(black_box(root.path()), &plan);
            monitor.observe(now, &plan, &readings)
        })
    });
    group.finish();
}

criterion_group!(benches, bench_poll);
criterion_main!(benches);
