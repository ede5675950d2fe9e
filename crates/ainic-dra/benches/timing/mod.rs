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
