//! End to end: the real `ainic-dra node` binary, the kubelet simulator over
//! the real sockets, claims served by the API server stand-in, and the
//! bundled `mi300x-8gpu-8nic` topology.

mod node_support;

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};
use testkit::kubelet::ClaimRef;

use node_support::{DRIVER, NODE, World, nic_config};

const PF0: &str = "pf-0000-04-00-0";
const PF1: &str = "pf-0000-24-00-0";

fn spec_of(world: &World, claim: &ClaimRef) -> Value {
    let path = world
        .dirs()
        .cdi
        .join(format!("ainic.amd.com-{}.json", claim.uid));
    let text = std::fs::read_to_string(&path).unwrap();
    // What a runtime does: parse and validate with the CDI library.
    container_device_interface::spec::read_spec(&path, 0).expect("spec passes CDI validation");
    serde_json::from_str(&text).unwrap()
}

/// The environment of the spec's first device.
fn env_of(spec: &Value) -> Vec<String> {
    spec["devices"][0]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_claim_round_trip_over_v1() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    assert_eq!(kubelet.info.name, DRIVER);
    assert!(
        kubelet
            .info
            .endpoint
            .ends_with("plugins/ainic.amd.com/dra.sock")
    );
    assert_eq!(
        kubelet.info.supported_versions,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
    );

    let claim = world.claim("exclusive", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let result = &answer.claims[&claim.uid];
    assert_eq!(result.error, "");
    assert_eq!(result.devices.len(), 1);
    let device = &result.devices[0];
    assert_eq!(
        (device.pool_name.as_str(), device.device_name.as_str()),
        (NODE, PF0)
    );
    assert_eq!(device.request_names, ["nic"]);
    assert_eq!(
        device.cdi_device_ids,
        [
            format!("amd.com/ainic={}-{PF0}", claim.uid),
            format!("ainic.amd.com/metadata={}_nic", claim.uid)
        ]
    );
    assert_eq!(device.share_id, None);

    let spec = spec_of(&world, &claim);
    let nodes = &spec["devices"][0]["containerEdits"]["deviceNodes"];
    assert_eq!(nodes[0]["path"], "/dev/infiniband/uverbs0");
    assert_eq!(
        nodes.as_array().unwrap().len(),
        1,
        "no umad/issm unless asked"
    );
    let env = env_of(&spec);
    assert!(env.contains(&"NCCL_IB_HCA==ionic_0".to_string()), "{env:?}");
    assert!(env.contains(&"AINIC_NETDEVS=enp4s0".to_string()), "{env:?}");
    assert!(
        env.contains(&"AINIC_PCI_ADDRESSES=0000:04:00.0".to_string()),
        "{env:?}"
    );
    assert_eq!(world.checkpoint_claims(), std::slice::from_ref(&claim.uid));

    let undone = kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(undone.claims[&claim.uid].error, "");
    assert!(world.cdi_files().is_empty());
    assert!(world.checkpoint_claims().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_device_claim_with_umad_config_and_v1beta1() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim(
        "pair",
        &[
            ("nics", DRIVER, NODE, PF0),
            ("nics", DRIVER, NODE, PF1),
            ("gpu", "gpu.amd.com", NODE, "gpu-0"),
        ],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    );
    let answer = kubelet
        .prepare_v1beta1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let result = &answer.claims[&claim.uid];
    assert_eq!(result.error, "");
    let names: Vec<&str> = result
        .devices
        .iter()
        .map(|d| d.device_name.as_str())
        .collect();
    assert_eq!(names, [PF0, PF1], "only this driver's devices");
    let spec = spec_of(&world, &claim);
    assert_eq!(spec["devices"].as_array().unwrap().len(), 2);
    let nodes = spec["devices"][1]["containerEdits"]["deviceNodes"].to_string();
    assert!(
        nodes.contains("/dev/infiniband/uverbs1") && nodes.contains("/dev/infiniband/umad1"),
        "{nodes}"
    );
    assert!(env_of(&spec).contains(&"NCCL_IB_HCA==ionic_0,ionic_1".to_string()));

    let undone = kubelet
        .unprepare_v1beta1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(undone.claims[&claim.uid].error, "");
    assert!(world.cdi_files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_claim_is_prepared_once_for_two_pods() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim("shared", &[("nic", DRIVER, NODE, PF0)], json!([]));
    world.api.clear_requests();
    let pod_a = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let pod_b = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(pod_a, pod_b, "both pods get the same CDI devices");
    let gets = world
        .api
        .requests()
        .iter()
        .filter(|r| r.resource == "resourceclaims" && r.subresource.is_none())
        .count();
    assert_eq!(gets, 1, "the second pod is answered from the checkpoint");
    assert_eq!(world.claim_specs().len(), 1);
    // The kubelet unprepares once, after the last pod is gone; the claim may be deleted by then.
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty());
}

/// A burst of prepares, each reading its claim from the API server, opens
/// about `API_REQUESTS_IN_FLIGHT` new connections to it, not one per
/// claim (each idle connection kept its buffers for 90 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_prepares_opens_a_bounded_number_of_api_connections() {
    use ainic_dra_daemon::client::API_REQUESTS_IN_FLIGHT;
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claims: Vec<ClaimRef> = (0..64)
        .map(|i| {
            let pf = format!("pf-0000-{:02x}-00-0", 0x04 + 0x20 * (i % 8));
            let result = json!({"request": "nic", "driver": DRIVER, "pool": NODE,
                "device": pf, "adminAccess": true});
            world.seed(
                serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": format!("burst-{i}")},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [result]}}},
                }))
                .unwrap(),
            )
        })
        .collect();
    let before = world.api.connections();
    let calls: Vec<_> = claims
        .iter()
        .map(|c| {
            let (kubelet, c) = (kubelet.clone(), c.clone());
            tokio::spawn(async move { kubelet.prepare_v1(&[c]).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.unwrap().unwrap();
        assert!(
            answer.claims.values().all(|c| c.error.is_empty()),
            "{answer:?}"
        );
    }
    // Twice the limit: a request's turn ends when its response headers
    // arrive, so a connection still reading a body (or holding a watch the
    // agent starts meanwhile) can make the next request open another.
    // Without the limit this was 38-63; with it 8-9 here.
    let opened = world.api.connections() - before;
    assert!(
        opened <= 2 * API_REQUESTS_IN_FLIGHT,
        "{opened} connections opened for 64 prepares"
    );
    kubelet.unprepare_v1(&claims).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_claims_get_their_own_error_and_do_not_fail_the_batch() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let good = world.claim("good", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let other_node = world.claim("elsewhere", &[("nic", DRIVER, "node-b", PF0)], json!([]));
    let other_driver = world.claim(
        "gpu-only",
        &[("gpu", "gpu.amd.com", NODE, "gpu-0")],
        json!([]),
    );
    let unknown_field = world.claim(
        "typo",
        &[("nic", DRIVER, NODE, PF1)],
        json!([nic_config("FromClaim", json!({"umda": true}))]),
    );
    let netdev = world.claim(
        "netdev",
        &[("nic", DRIVER, NODE, PF1)],
        json!([nic_config("FromClaim", json!({"mode": "netdev"}))]),
    );
    let unallocated = {
        let claim = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "pending"},
            "spec": {"devices": {"requests": []}},
        }))
        .unwrap();
        world.seed(claim)
    };
    let mut stale = good.clone();
    stale.uid = "00000000-0000-0000-0000-000000000000".into();
    stale.name = "good".into();

    let all = [
        &good,
        &other_node,
        &other_driver,
        &unknown_field,
        &netdev,
        &unallocated,
    ];
    let claims: Vec<ClaimRef> = all.iter().map(|c| (*c).clone()).collect();
    let answer = kubelet.prepare_v1(&claims).await.unwrap();
    let error = |c: &ClaimRef| answer.claims[&c.uid].error.clone();
    assert_eq!(error(&good), "");
    assert!(
        error(&other_node).contains("in pool node-a"),
        "{}",
        error(&other_node)
    );
    assert!(
        error(&other_driver).contains("no device of driver ainic.amd.com"),
        "{}",
        error(&other_driver)
    );
    assert!(
        error(&unknown_field).contains("unknown field `umda`"),
        "{}",
        error(&unknown_field)
    );
    assert!(
        error(&netdev).contains("exclusive netdev mode: the claim is reserved for 0 pods"),
        "{}",
        error(&netdev)
    );
    assert!(
        error(&unallocated).contains("is not allocated"),
        "{}",
        error(&unallocated)
    );
    assert_eq!(
        world.cdi_files(),
        [
            format!("ainic.amd.com-{}.json", good.uid),
            format!("ainic.amd.com_metadata_{}_nic.json", good.uid)
        ],
        "only the good claim's spec and metadata"
    );

    let answer = kubelet.prepare_v1(&[stale.clone()]).await.unwrap();
    assert!(
        answer.claims[&stale.uid]
            .error
            .contains("but the kubelet asked for UID")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_share_of_a_shared_nic_gets_its_own_cdi_device() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let share = |request: &str, id: &str, bw: &str| {
        json!({"request": request, "driver": DRIVER, "pool": NODE, "device": PF0,
               "shareID": id, "consumedCapacity": {"ainic.amd.com/bandwidth": bw}})
    };
    let claim = world.seed(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "shares"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [
                share("a", "4f0c2a8e", "100G"),
                share("b", "9b1d7e33", "50G"),
            ]}}},
        }))
        .unwrap(),
    );
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let result = &answer.claims[&claim.uid];
    assert_eq!(result.error, "");
    let shares: Vec<Option<&str>> = result
        .devices
        .iter()
        .map(|d| d.share_id.as_deref())
        .collect();
    assert_eq!(shares, [Some("4f0c2a8e"), Some("9b1d7e33")]);
    assert_ne!(
        result.devices[0].cdi_device_ids,
        result.devices[1].cdi_device_ids
    );
    let spec = spec_of(&world, &claim);
    let env = spec["devices"][1]["containerEdits"]["env"].to_string();
    assert!(
        env.contains("AINIC_SHARE_ID=9b1d7e33") && env.contains("AINIC_CONSUMED_BANDWIDTH=50G"),
        "{env}"
    );
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty());
}

/// `status.devices` of claim `name` in the API server stand-in.
fn status_devices(world: &World, name: &str) -> Vec<serde_json::Value> {
    let claims: Vec<ResourceClaim> = world.api.list();
    let claim = claims
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap();
    let status = serde_json::to_value(claim.status).unwrap();
    status["devices"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_status_names_the_prepared_device_until_unprepare() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim("status", &[("nic", DRIVER, NODE, PF0)], json!([]));
    kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let mut devices = vec![];
    for _ in 0..400 {
        devices = status_devices(&world, "status");
        if !devices.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0]["device"], PF0);
    assert_eq!(devices[0]["conditions"][0]["type"], "Ready");
    assert_eq!(devices[0]["networkData"]["interfaceName"], "enp4s0");
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    for _ in 0..400 {
        if status_devices(&world, "status").is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!(
        "status left after unprepare: {:?}",
        status_devices(&world, "status")
    );
}
