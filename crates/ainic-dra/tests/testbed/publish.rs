//! Publishing, judged by the real API server: every slice of every bundled
//! topology passes its validation and keeps every field (gates off and
//! with the 1.37 defaults); real agents with the chart's identity publish
//! them and write nothing at rest, across resyncs and restarts.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use testkit::testbed::{Testbed, Version, wait};

use crate::support::{
    self, GATES_1_37, NodeAgent, expected_slices, install_chart, pool_slices, published,
};

/// JSON paths of `sent` that are missing or different in `stored`: fields
/// the API server dropped or changed. Fields it added (defaults) are fine.
fn changed_paths(sent: &Value, stored: &Value, path: &str, out: &mut Vec<String>) {
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => changed_paths(value, other, &here, out),
                    None if value.is_null() => {}
                    None => out.push(here),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                changed_paths(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        _ => out.push(path.to_string()),
    }
}

/// Dry-run creates every slice `ainic-dra slices` builds for `topology`
/// with `flags`; returns how many the server accepted unchanged.
async fn accepted(client: &kube::Client, topology: &str, node: &str, flags: &[&str]) -> usize {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let slices = expected_slices(topology, node, flags);
    for slice in &slices {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let stored = api.create(&params, slice).await.unwrap_or_else(|e| {
            panic!("the API server refuses slice {name} of {topology} with {flags:?}: {e}")
        });
        let mut lost = Vec::new();
        changed_paths(
            &serde_json::to_value(&slice.spec).unwrap(),
            &serde_json::to_value(&stored.spec).unwrap(),
            "spec",
            &mut lost,
        );
        assert!(
            lost.is_empty(),
            "the API server dropped or changed fields of slice {name} ({topology}, {flags:?}): {lost:?}"
        );
    }
    slices.len()
}

#[tokio::test]
async fn every_bundled_topology_publishes_slices_the_api_server_accepts() {
    let bed = Testbed::shared(Version::V1_37);
    let client = bed.client().await;
    let shapes: [&[&str]; 3] = [
        &[],
        &["--feature-gates", GATES_1_37, "--shared-pfs", "*"],
        &[
            "--feature-gates",
            GATES_1_37,
            "--pf-queue-pairs",
            "16384",
            "--vf-queue-pairs",
            "1024",
            "--gpu-pairing-attribute",
            "gpu.amd.com/pciAddr",
        ],
    ];
    let mut total = 0;
    for (topology, _) in testkit::fixture::bundled() {
        for (i, flags) in shapes.iter().enumerate() {
            let n = accepted(&client, topology, &format!("acc-{topology}-{i}"), flags).await;
            assert!(n > 0, "{topology} with {flags:?} built no slice");
            total += n;
        }
    }
    eprintln!("the API server accepted {total} slices unchanged");
}

#[tokio::test]
async fn the_oldest_supported_api_server_accepts_every_bundled_topology() {
    let bed = Testbed::shared(Version::V1_34);
    assert!(
        bed.git_version().starts_with("v1.34."),
        "{}",
        bed.git_version()
    );
    let client = bed.client().await;
    for (topology, _) in testkit::fixture::bundled() {
        let n = accepted(&client, topology, &format!("old-{topology}"), &[]).await;
        assert!(n > 0, "{topology} built no slice");
    }
}

/// `ainic_dra_slice_syncs_total{result="unchanged"}` of an agent, from
/// its `/metrics`.
async fn unchanged_syncs(http: &str) -> u64 {
    let body = http_get(&format!("http://{http}/metrics")).await;
    body.lines()
        .filter(|l| l.contains("slice_syncs_total") && l.contains("result=\"unchanged\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A plain HTTP GET over a TCP socket (the agent's metrics endpoint).
async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let Ok(mut stream) = tokio::net::TcpStream::connect(host).await else {
        return String::new();
    };
    let request = format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    body
}

fn versions(slices: &[ResourceSlice]) -> BTreeMap<String, String> {
    slices
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap_or_default(),
                s.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn publish_at_rest(node: &str, topology: &str, model: &[&str]) {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http = format!("127.0.0.1:{port}");
    let mut flags = vec!["--resync-interval", "1", "--http-addr", &http];
    flags.extend_from_slice(model);
    let mut agent = NodeAgent::start(bed, node, topology, &BTreeMap::new(), &flags).await;
    let want = expected_slices(topology, node, model);
    let slices = published(&client, &agent, want.len()).await;
    for (got, want) in slices.iter().zip(&want) {
        assert_eq!(got.spec.devices, want.spec.devices, "{node}: devices");
        assert_eq!(got.spec.shared_counters, want.spec.shared_counters);
    }
    let before = versions(&slices);

    // Two resyncs that find nothing to do write nothing.
    let after_syncs = wait::until("two resyncs", wait::DEADLINE, || async {
        let n = unchanged_syncs(&http).await;
        if n >= 2 {
            Ok(n)
        } else {
            Err(format!("{n} unchanged syncs"))
        }
    })
    .await;
    assert!(after_syncs >= 2);
    assert_eq!(
        versions(&pool_slices(&client, support::DRIVER, node).await),
        before
    );

    // Nor does a restart.
    agent.spawn(&flags);
    wait::until("a sync after the restart", wait::DEADLINE, || async {
        let n = unchanged_syncs(&http).await;
        if n >= 1 {
            Ok(())
        } else {
            Err(format!(
                "{n} unchanged syncs; {}",
                support::tail(&agent.log(), 5)
            ))
        }
    })
    .await;
    assert_eq!(
        versions(&pool_slices(&client, support::DRIVER, node).await),
        before,
        "the restarted agent rewrote slices; log:\n{}",
        support::tail(&agent.log(), 20)
    );
}

#[tokio::test]
async fn an_agent_publishes_with_the_charts_identity_and_writes_nothing_at_rest() {
    publish_at_rest("pub-mi300x", "mi300x-8gpu-8nic", &[]).await;
}

#[tokio::test]
async fn an_agent_publishes_the_1_37_defaults_and_writes_nothing_at_rest() {
    publish_at_rest(
        "pub-sriov",
        "sriov-vfs",
        &["--feature-gates", GATES_1_37, "--shared-pfs", "*"],
    )
    .await;
}
