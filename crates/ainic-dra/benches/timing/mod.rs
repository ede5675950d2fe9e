//! What the prepare benchmarks share: claims seeded into the API server
//! stand-in, the kubelet's calls, percentiles and the fsync floor.

use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;
use testkit::apiserver::ApiServer;
use testkit::kubelet::{ClaimRef, DraPluginClient};

/// Our driver's name.
pub const DRIVER: &str = "ainic.amd.com";

/// The PFs of the bundled `mi300x-8gpu-8nic` node, which our claims name.
pub const DEVICES: [&str; 8] = [
    "pf-0000-04-00-0",
    "pf-0000-24-00-0",
    "pf-0000-44-00-0",
    "pf-0000-64-00-0",
    "pf-0000-84-00-0",
    "pf-0000-a4-00-0",
    "pf-0000-c4-00-0",
    "pf-0000-e4-00-0",
];

/// Seeds claim `bench-<i>` allocated `device` of `driver` in pool `node`;
/// `admin`: with admin access, so that more claims than the node has
/// devices can be prepared at once (our agent refuses a second exclusive
/// claim on one device; the prepare path is the same).
pub fn seed_claim(
    api: &ApiServer,
    (driver, node, device): (&str, &str, &str),
    i: usize,
    admin: bool,
) -> ClaimRef {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": format!("bench-{i}")},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "nic", "driver": driver, "pool": node, "device": device,
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

/// Prints n, p50, p99 and max of `samples`; returns the p50.
pub fn report(what: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p50 = percentile(&samples, 0.50);
    println!(
        "{what}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3,
    );
    p50
}

/// The floor of a durable prepare on this disk: a small file written,
/// fsynced and renamed into place, as the checkpoint is, in `dir`. Printed
/// beside the figures, because this cost varies by machine and by hour.
pub fn fsync_floor(dir: &std::path::Path) -> Duration {
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
    report("write + fsync + rename of 2 KiB here (the floor)", samples)
}

/// Prepares `claims` in one call; every claim must succeed.
pub async fn prepare_ok(kubelet: &DraPluginClient, claims: &[ClaimRef]) {
    let answer = kubelet.prepare_v1(claims).await.unwrap();
    assert!(
        answer.claims.values().all(|c| c.error.is_empty()),
        "{answer:?}"
    );
    assert_eq!(answer.claims.len(), claims.len());
}

/// Unprepares `claims` in one call; every claim must succeed.
pub async fn unprepare_ok(kubelet: &DraPluginClient, claims: &[ClaimRef]) {
    let answer = kubelet.unprepare_v1(claims).await.unwrap();
    assert!(
        answer.claims.values().all(|c| c.error.is_empty()),
        "{answer:?}"
    );
    assert_eq!(answer.claims.len(), claims.len());
}

/// Waits until the API server stand-in has heard nothing about claims for
/// half a second: the status writes of the claims just prepared (one per
/// claim, thousands at the larger levels) would otherwise still be queued
/// while the first rounds are timed, and those would measure that backlog.
/// Other requests (a driver retrying its slices) do not count.
pub async fn settle(api: &ApiServer) {
    let claims = || {
        let requests = api.requests();
        requests
            .iter()
            .filter(|r| r.resource == "resourceclaims")
            .count()
    };
    let mut seen = claims();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = claims();
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// `PREPARE_BENCH_NETDEVS=1` runs the bench in a network namespace of its
/// own (`unshare -n`) where the node's netdevs exist, each up with an
/// address, as on a node: the agent's device metadata and claim status
/// then read real addresses. Without it, the fixture's netdevs are not
/// there and asking for their addresses is cheaper than on a node. Call
/// first: in the outer run it waits for the inner one and exits with its
/// status; in the inner run, and without the variable, it returns.
pub fn in_netns_if_asked() {
    if std::env::var("PREPARE_BENCH_NETDEVS").as_deref() != Ok("1") || testkit::netns::is_inner() {
        return;
    }
    let args = std::env::args_os().skip(1);
    let status = (testkit::netns::this_exe_inside(args).status())
        .expect("unshare runs (run the bench as root)");
    std::process::exit(status.code().unwrap_or(1));
}

/// In the namespace of [`in_netns_if_asked`], brings loopback up and makes
/// each netdev of the sysfs tree at `sysfs` (one end of a veth pair, up,
/// with an address); elsewhere does nothing.
pub fn add_netdevs(sysfs: &std::path::Path) {
    if !testkit::netns::is_inner() {
        return;
    }
    let ip = |args: &[&str]| {
        let status = std::process::Command::new("ip").args(args).status();
        assert!(status.is_ok_and(|s| s.success()), "ip {args:?} failed");
    };
    ip(&["link", "set", "lo", "up"]);
    let mut names: Vec<String> = std::fs::read_dir(sysfs.join("class/net"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for (i, name) in names.iter().enumerate() {
        let peer = format!("peer{i}");
        ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        ip(&["addr", "add", &format!("10.9.{i}.2/24"), "dev", name]);
        ip(&["link", "set", name, "up"]);
    }
    println!("in a network namespace of its own, with netdevs {names:?}");
}
