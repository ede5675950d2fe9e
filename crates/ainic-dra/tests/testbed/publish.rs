//! Publishing, judged by the real API server: every slice of every bundled
//! topology passes its validation and keeps every field (gates off and
//! with the 1.37 defaults); real agents with the chart's identity publish
//! them and write nothing at rest, across resyncs and restarts.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use testkit::testbed::{Testbed, UpOptions, Version, wait};

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
    let shapes: [&[&str]; 4] = [
        &["--kubernetes-version", "1.34"],
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
        let n = accepted(
            &client,
            topology,
            &format!("old-{topology}"),
            &["--kubernetes-version", "1.34"],
        )
        .await;
        assert!(n > 0, "{topology} built no slice");
    }
}

#[tokio::test]
async fn a_1_34_server_with_the_gates_on_keeps_counters_beside_their_devices() {
    let gates = "DRAConsumableCapacity=true,DRAPartitionableDevices=true,DRADeviceTaints=true";
    let bed = tokio::task::spawn_blocking(move || {
        Testbed::up(&UpOptions {
            version: Some(Version::V1_34),
            feature_gates: Some(gates.into()),
            ..UpOptions::default()
        })
    })
    .await
    .unwrap();
    let client = bed.client().await;
    let mut families = 0;
    for (topology, _) in testkit::fixture::bundled() {
        let flags = ["--kubernetes-version", "1.34", "--feature-gates", gates];
        accepted(&client, topology, &format!("gated-{topology}"), &flags).await;
        let slices = expected_slices(topology, "n", &flags);
        families += (slices.iter())
            .filter(|s| s.spec.shared_counters.is_some() && s.spec.devices.is_some())
            .count();
    }
    assert!(families > 0, "no bundled topology has a PF with VFs");
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

/// A loopback address with a free port, for an agent's `--http-addr`.
fn free_http_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

async fn publish_at_rest(node: &str, topology: &str, model: &[&str]) {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    let http = free_http_addr();
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

#[tokio::test]
async fn an_agent_learns_the_servers_release_and_publishes_its_defaults_untold() {
    // No gate and no version: from the 1.37 server the agent takes 1.37's
    // defaults, so one PF is shared and the others come with their VFs
    // through counters in a slice of their own.
    let model = ["--shared-pfs", "enp194s0"];
    let want = expected_slices("sriov-vfs", "pub-untold", &model);
    let devices = || want.iter().flat_map(|s| s.spec.devices.iter().flatten());
    assert!(devices().any(|d| d.allow_multiple_allocations == Some(true)));
    assert!(devices().any(|d| d.consumes_counters.is_some()));
    assert!((want.iter()).any(|s| s.spec.shared_counters.is_some() && s.spec.devices.is_none()));
    publish_at_rest("pub-untold", "sriov-vfs", &model).await;
}

/// Lines of `log` that contain `text`.
fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

#[tokio::test]
async fn a_1_34_server_that_drops_gated_fields_gets_slices_without_them_once() {
    // The 1.34 testbed runs with 1.34's defaults: consumable capacity and
    // partitionable devices off. The agent is told to use both.
    let bed = Testbed::shared(Version::V1_34);
    install_chart(bed).await;
    let client = bed.client().await;
    let http = free_http_addr();
    let node = "old-drops";
    let told = [
        "--feature-gates",
        "DRAConsumableCapacity=true,DRAPartitionableDevices=true",
        "--shared-pfs",
        "enp194s0",
    ];
    let mut flags = vec!["--resync-interval", "1", "--http-addr", &http];
    flags.extend_from_slice(&told);
    let agent = NodeAgent::start(bed, node, "sriov-vfs", &BTreeMap::new(), &flags).await;
    let asked = expected_slices(
        "sriov-vfs",
        node,
        &[&told[..], &["--kubernetes-version", "1.34"]].concat(),
    );
    assert!(
        asked
            .iter()
            .any(|s| s.spec.shared_counters.is_some() && s.spec.devices.is_some())
    );
    let without = expected_slices(
        "sriov-vfs",
        node,
        &["--kubernetes-version", "1.34", "--shared-pfs", "enp194s0"],
    );
    let slices = published(&client, &agent, without.len()).await;
    for (got, want) in slices.iter().zip(&without) {
        assert_eq!(got.spec.devices, want.spec.devices, "{node}: devices");
        assert_eq!(got.spec.shared_counters, None);
    }
    let before = versions(&slices);
    wait::until("two resyncs", wait::DEADLINE, || async {
        let n = unchanged_syncs(&http).await;
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} unchanged syncs"))
        }
    })
    .await;
    assert_eq!(
        versions(&pool_slices(&client, support::DRIVER, node).await),
        before
    );
    let metrics = http_get(&format!("http://{http}/metrics")).await;
    for (field, gate) in [
        (
            "spec.devices[].allowMultipleAllocations",
            "DRAConsumableCapacity",
        ),
        ("spec.sharedCounters", "DRAPartitionableDevices"),
    ] {
        let line =
            format!("ainic_dra_slice_fields_dropped_total{{field=\"{field}\",gate=\"{gate}\"}} 1");
        let log = agent.log();
        assert!(
            metrics.contains(&line),
            "{line} not in\n{metrics}\nlog:\n{}",
            support::tail(&log, 20)
        );
        assert_eq!(
            lines_with(&log, &format!("drops {field} from resource slices")),
            1,
            "{}",
            support::tail(&log, 20)
        );
    }
    // What was dropped was found by dry runs: no slice ever carried it.
    let creates = metrics
        .lines()
        .find(|l| l.starts_with("ainic_dra_slice_writes_total{op=\"create\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<usize>().ok());
    assert_eq!(creates, Some(without.len()), "{metrics}");
}
