//! End to end: the real `ainic-dra node --device-plugin` binary on the
//! bundled `mi300x-8gpu-8nic` topology, a fake kubelet for the device plugin
//! API, and the API server stand-in receiving the DRA ResourceSlices; checks
//! that the classic and DRA paths split the NICs and never share one.

mod node_support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kubelet_api::deviceplugin::v1beta1 as dp;
use testkit::fake_kubelet_dp::FakeKubelet;

use node_support::{Agent, NODE, World, wait_exit};

const WAIT: Duration = Duration::from_secs(30);

/// Starts the agent with the classic path on, plus `extra` flags.
fn start_agent(world: &World, plugins: &Path, extra: &[&str]) -> Agent {
    let mut flags = vec![
        "--device-plugin",
        "--device-plugin-dir",
        plugins.to_str().unwrap(),
    ];
    flags.extend_from_slice(extra);
    world.start_agent_with(None, &flags)
}

/// Devices in the node's published ResourceSlices, once there are slices.
async fn published_devices(world: &World) -> Vec<String> {
    for _ in 0..1500 {
        let slices: Vec<ResourceSlice> = world.api.list();
        if !slices.is_empty() {
            let mut names: Vec<String> = slices
                .iter()
                .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
                .collect();
            names.sort();
            return names;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no ResourceSlice published");
}

async fn listed(kubelet: &FakeKubelet, resource: &str) -> Vec<String> {
    let r = kubelet
        .wait_for_registration(resource, 1, WAIT)
        .await
        .unwrap();
    let mut client = kubelet.dial(&r.endpoint).await.unwrap();
    let mut stream = client
        .list_and_watch(dp::Empty {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    first.devices.into_iter().map(|d| d.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_path_takes_the_nics_and_prefers_two_on_one_numa_node() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let stale: ResourceSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-a-ainic.amd.com-old"},
        "spec": {
            "driver": "ainic.amd.com",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "pf-0000-04-00-0"}],
        },
    }))
    .unwrap();
    world.api.seed(&stale);
    let plugins = world.tmp.path().join("device-plugins");
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = start_agent(&world, &plugins, &[]);
    let nics = listed(&kubelet, "amd.com/nic").await;
    assert_eq!(nics.len(), 8);
    // Nothing is left to DRA by default: the slice an earlier DRA-only
    // agent published for these NICs is withdrawn.
    let mut gone = false;
    for _ in 0..1500 {
        if world.api.list::<ResourceSlice>().is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "DRA still publishes NICs the classic path offers");

    let r = kubelet
        .wait_for_registration("amd.com/nic", 1, WAIT)
        .await
        .unwrap();
    let mut client = kubelet.dial(&r.endpoint).await.unwrap();
    let request = dp::PreferredAllocationRequest {
        container_requests: vec![dp::ContainerPreferredAllocationRequest {
            available_device_i_ds: nics,
            must_include_device_i_ds: vec![],
            allocation_size: 2,
        }],
    };
    let answer = client
        .get_preferred_allocation(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.container_responses[0].device_i_ds,
        ["0000:04:00.0", "0000:24:00.0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_config_gives_each_nic_to_exactly_one_path() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    let config = world.tmp.path().join("split.yaml");
    std::fs::write(
        &config,
        "resources:\n  - name: amd.com/nic\n    selectors:\n      pciIds: [\"1dd8:1002\"]\n      pciAddresses: [\"0000:04:00.0\", \"0000:24:00.0\", \"0000:44:00.0\", \"0000:64:00.0\"]\ndra:\n  pciAddresses: [\"0000:84:00.0\", \"0000:a4:00.0\", \"0000:c4:00.0\", \"0000:e4:00.0\"]\n",
    )
    .unwrap();
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = start_agent(
        &world,
        &plugins,
        &["--device-plugin-config", config.to_str().unwrap()],
    );
    let classic = listed(&kubelet, "amd.com/nic").await;
    assert_eq!(
        classic,
        [
            "0000:04:00.0",
            "0000:24:00.0",
            "0000:44:00.0",
            "0000:64:00.0"
        ]
    );
    let dra = published_devices(&world).await;
    assert_eq!(
        dra,
        [
            "pf-0000-84-00-0",
            "pf-0000-a4-00-0",
            "pf-0000-c4-00-0",
            "pf-0000-e4-00-0"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_config_stops_the_agent_naming_the_devices() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    let config = world.tmp.path().join("overlap.yaml");
    std::fs::write(&config, "dra:\n  pciAddresses: [\"0000:84:00.0\"]\n").unwrap();
    let mut agent = start_agent(
        &world,
        &plugins,
        &["--device-plugin-config", config.to_str().unwrap()],
    );
    let status = wait_exit(&mut agent).await;
    assert!(!status.success());
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("0000:84:00.0 (amd.com/nic, dra)"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_file_is_rejected_naming_file_and_field() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    let config = world.tmp.path().join("bad.yaml");
    std::fs::write(
        &config,
        "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8\"]}\n",
    )
    .unwrap();
    let mut agent = start_agent(
        &world,
        &plugins,
        &["--device-plugin-config", config.to_str().unwrap()],
    );
    let status = wait_exit(&mut agent).await;
    assert!(!status.success());
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        log.contains("bad.yaml") && log.contains("resources[0].selectors.pciIds[0]"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabric_rails_steer_the_preferred_pair() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    // NICs 04 and 24 share rail 0; 44 and 64 have rails of their own.
    let fabric = world.tmp.path().join("fabric.yaml");
    std::fs::write(
        &fabric,
        "nodes:\n  node-a:\n    nics:\n      \"0000:04:00.0\": {rail: 0}\n      \"0000:24:00.0\": {rail: 0}\n      \"0000:44:00.0\": {rail: 2}\n      \"0000:64:00.0\": {rail: 3}\n",
    )
    .unwrap();
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = start_agent(
        &world,
        &plugins,
        &["--fabric-config", fabric.to_str().unwrap()],
    );
    let nics = listed(&kubelet, "amd.com/nic").await;
    let r = kubelet
        .wait_for_registration("amd.com/nic", 1, WAIT)
        .await
        .unwrap();
    let mut client = kubelet.dial(&r.endpoint).await.unwrap();
    let request = dp::PreferredAllocationRequest {
        container_requests: vec![dp::ContainerPreferredAllocationRequest {
            available_device_i_ds: nics,
            must_include_device_i_ds: vec![],
            allocation_size: 2,
        }],
    };
    let answer = client
        .get_preferred_allocation(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.container_responses[0].device_i_ds,
        ["0000:04:00.0", "0000:44:00.0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_switched_to_dra_refuses_a_classic_config_serving_the_same_names() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Patch, PatchParams};
    let world = World::new("mi300x-8gpu-8nic").await;
    let nodes: kube::Api<Node> = kube::Api::all(world.api.client());
    let label =
        serde_json::json!({"metadata": {"labels": {"ainic.amd.com/extended-resources": "dra"}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let plugins = world.tmp.path().join("device-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // The default classic config serves amd.com/nic and amd.com/vnic.
    let mut agent = start_agent(&world, &plugins, &[]);
    let status = wait_exit(&mut agent).await;
    assert!(!status.success());
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        log.contains("labelled ainic.amd.com/extended-resources=dra")
            && log.contains("amd.com/nic")
            && log.contains("remove"),
        "{log}"
    );
    assert!(
        world.api.list::<ResourceSlice>().is_empty(),
        "nothing published"
    );
}

/// Found on the real node (issue 30): Allocate named `/dev/infiniband/...`
/// whatever `--host-dev-root` said, so containerd failed every container of
/// a node whose RDMA devices live elsewhere ("lstat /dev/infiniband/rdma_cm:
/// no such file or directory"); the fake kubelet never looked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_names_device_nodes_by_the_hosts_own_dev_root() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    // The host's RDMA device nodes live below host-dev, as on the
    // testbed's real nodes (made from the tree's `dev` files).
    let host_dev = world.tmp.path().join("host-dev");
    std::fs::create_dir_all(host_dev.join("infiniband")).unwrap();
    for (name, numbers) in [("uverbs0", "231:192"), ("rdma_cm", "10:58")] {
        let node = host_dev.join("infiniband").join(name);
        let (major, minor) = numbers.split_once(':').unwrap();
        let made = std::process::Command::new("mknod")
            .arg(&node)
            .args(["c", major, minor])
            .status()
            .expect("mknod (needs root)");
        assert!(made.success(), "mknod {}", node.display());
    }
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = start_agent(
        &world,
        &plugins,
        &["--host-dev-root", host_dev.to_str().unwrap()],
    );
    let r = kubelet
        .wait_for_registration("amd.com/nic", 1, WAIT)
        .await
        .unwrap();
    let mut client = kubelet.dial(&r.endpoint).await.unwrap();
    let request = dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest {
            devices_ids: vec!["0000:04:00.0".into()],
        }],
    };
    let answer = client.allocate(request).await.unwrap().into_inner();
    let container = &answer.container_responses[0];
    assert_eq!(container.devices.len(), 2, "{container:?}");
    testkit::fake_kubelet_dp::check_device_specs(container).unwrap();
    for spec in &container.devices {
        assert!(
            spec.container_path.starts_with("/dev/infiniband/"),
            "{spec:?}"
        );
    }
}
