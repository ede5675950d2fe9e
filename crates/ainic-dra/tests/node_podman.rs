//! A real container runtime consumes CDI specs written by the agent: the
//! container sees the NIC's device nodes and the RDMA environment, and
//! exactly what it was given when it uses one request of a claim or
//! several claims, and reads its request's device metadata (KEP-5304).
//!
//! Needs root and podman with runc (`apt-get install podman runc
//! busybox-static`, done by `.ci/run`). Without them this test FAILS: it
//! does not skip. Podman 4.3 reads specs only from `/etc/cdi` and
//! `/var/run/cdi`, so the spec is copied there for the run and removed after.

mod node_support;

use std::path::Path;

use serde_json::json;

use testkit::kubelet::ClaimRef;

use node_support::{DRIVER, Installed, NODE, World, nic_config, podman_run, podman_sh};

/// `env; ls -l /dev/infiniband` in a container given the CDI devices `ids`.
fn run_with_devices(world: &World, ids: &[String]) -> String {
    podman_run(world, ids, &[])
}

/// Copies the specs of `claim` (its devices' and its metadata's) where
/// podman reads specs, until dropped.
fn install_spec(world: &World, claim: &ClaimRef) -> Vec<Installed> {
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    let files = world.cdi_files();
    let mine = files.iter().filter(|f| f.contains(&claim.uid));
    mine.map(|file| {
        let installed = Installed(Path::new("/var/run/cdi").join(file));
        std::fs::copy(world.dirs().cdi.join(file), &installed.0).unwrap();
        installed
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_container_sees_the_devices_and_env_of_a_prepared_claim() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim(
        "podman",
        &[("nic", DRIVER, NODE, "pf-0000-04-00-0")],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    );
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let result = &answer.claims[&claim.uid];
    assert_eq!(result.error, "");
    let cdi_id = result.devices[0].cdi_device_ids[0].clone();

    let installed = install_spec(&world, &claim);

    let stdout = run_with_devices(&world, &[cdi_id]);
    for line in [
        "NCCL_IB_HCA==ionic_0",
        "AINIC_RDMA_DEVICES=ionic_0",
        "AINIC_NETDEVS=enp4s0",
        "AINIC_PCI_ADDRESSES=0000:04:00.0",
        "AINIC_DEVICES=pf-0000-04-00-0",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{stdout}"
        );
    }
    // Character devices with the numbers sysfs gave: uverbs0 231:192,
    // umad0 231:0 (asked for), rdma_cm 10:58; no issm0 (not asked for).
    let ls: Vec<&str> = stdout.lines().filter(|l| l.starts_with('c')).collect();
    let has = |major_minor: &str, name: &str| {
        ls.iter()
            .any(|l| l.contains(major_minor) && l.ends_with(name))
    };
    assert!(has("231, 192", "uverbs0"), "{ls:?}");
    assert!(has("231,   0", "umad0") || has("231, 0", "umad0"), "{ls:?}");
    assert!(
        has("10,  58", "rdma_cm") || has("10, 58", "rdma_cm"),
        "{ls:?}"
    );
    assert!(!stdout.contains("issm0"), "{stdout}");

    drop(installed);
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty());
}

/// The `KEY=VALUE` lines of `env` output whose key starts with `prefix`.
fn vars<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found: Vec<&str> = stdout.lines().filter(|l| l.starts_with(prefix)).collect();
    found.sort();
    found
}

/// The verbs devices a container got.
fn verbs(stdout: &str) -> Vec<&str> {
    let mut found: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with('c'))
        .filter_map(|l| l.rsplit(' ').next())
        .filter(|name| name.starts_with("uverbs"))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_sees_what_it_was_given_by_request_and_across_claims() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let two_rails = world.claim(
        "two-rails",
        &[
            ("rail0", DRIVER, NODE, "pf-0000-04-00-0"),
            ("rail1", DRIVER, NODE, "pf-0000-24-00-0"),
        ],
        json!([]),
    );
    let other = world.claim(
        "other",
        &[("nic", DRIVER, NODE, "pf-0000-44-00-0")],
        json!([]),
    );
    let claims = [two_rails.clone(), other.clone()];
    let answer = kubelet.prepare_v1(&claims).await.unwrap();
    // The CDI IDs the kubelet hands a container using `request` of `claim`
    // (all requests when `None`).
    let ids = |claim: &ClaimRef, request: Option<&str>| -> Vec<String> {
        answer.claims[&claim.uid]
            .devices
            .iter()
            .filter(|d| request.is_none_or(|r| d.request_names.iter().any(|n| n == r)))
            .flat_map(|d| d.cdi_device_ids.clone())
            .collect()
    };
    let _specs = (
        install_spec(&world, &two_rails),
        install_spec(&world, &other),
    );

    // One request of a two-request claim: only that request's NIC.
    let out = run_with_devices(&world, &ids(&two_rails, Some("rail1")));
    assert_eq!(
        vars(&out, "NCCL_IB_HCA="),
        ["NCCL_IB_HCA==ionic_1"],
        "{out}"
    );
    assert_eq!(
        vars(&out, "AINIC_PCI_ADDRESSES="),
        ["AINIC_PCI_ADDRESSES=0000:24:00.0"]
    );
    assert_eq!(
        vars(&out, "AINIC_NIC_"),
        ["AINIC_NIC_PF_0000_24_00_0=rdma=ionic_1,netdev=enp36s0,pci=0000:24:00.0"]
    );
    assert_eq!(verbs(&out), ["uverbs1"], "{out}");

    // Two claims in one container: one AINIC_NIC_ variable per NIC given,
    // from both claims, and their verbs devices.
    let mut both = ids(&two_rails, Some("rail0"));
    both.extend(ids(&other, None));
    let out = run_with_devices(&world, &both);
    assert_eq!(
        vars(&out, "AINIC_NIC_"),
        [
            "AINIC_NIC_PF_0000_04_00_0=rdma=ionic_0,netdev=enp4s0,pci=0000:04:00.0",
            "AINIC_NIC_PF_0000_44_00_0=rdma=ionic_2,netdev=enp68s0,pci=0000:44:00.0",
        ],
        "{out}"
    );
    assert_eq!(verbs(&out), ["uverbs0", "uverbs2"], "{out}");

    kubelet.unprepare_v1(&claims).await.unwrap();
    assert!(world.cdi_files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_reads_its_requests_device_metadata_read_only() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    // A claim made from a pod's template names the pod's claim.
    let claim: k8s_openapi::api::resource::v1::ResourceClaim = serde_json::from_value(json!({
        "metadata": {
            "namespace": "default",
            "name": "train-0-nic-x7k2p",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "nic"},
        },
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "rail", "driver": DRIVER, "pool": NODE, "device": "pf-0000-04-00-0"},
        ]}}},
    }))
    .unwrap();
    let claim = world.seed(claim);
    // The publisher has to have built the attributes the file carries.
    // A time limit, not a count of tries: each try is a prepare and an
    // unprepare, slow on a loaded machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let answer = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the metadata never carried the published attributes"
        );
        let answer = kubelet
            .prepare_v1(std::slice::from_ref(&claim))
            .await
            .unwrap();
        let text = std::fs::read_to_string(
            (world.dirs().metadata).join(format!("{}/rail/metadata.json", claim.uid)),
        )
        .unwrap();
        if text.contains("pciBusID") {
            break answer;
        }
        kubelet
            .unprepare_v1(std::slice::from_ref(&claim))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let ids = answer.claims[&claim.uid].devices[0].cdi_device_ids.clone();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let _specs = install_spec(&world, &claim);
    let path = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nic/rail/ainic.amd.com-metadata.json";
    let out = podman_sh(
        &world,
        &ids,
        &[],
        &format!("cat {path}; echo x >> {path} 2>/dev/null && echo WRITABLE || echo READ-ONLY"),
    );
    assert!(out.trim_end().ends_with("READ-ONLY"), "{out}");
    let objects: Vec<serde_json::Value> =
        serde_json::Deserializer::from_str(out.trim_end().trim_end_matches("READ-ONLY"))
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{e}: {out}"));
    let versions: Vec<&str> = objects
        .iter()
        .map(|o| o["apiVersion"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        [
            "metadata.resource.k8s.io/v1beta1",
            "metadata.resource.k8s.io/v1alpha1"
        ]
    );
    let newest = &objects[0];
    assert_eq!(newest["kind"], "DeviceMetadata");
    assert_eq!(newest["metadata"]["uid"], claim.uid.as_str());
    assert_eq!(newest["podClaimName"], "nic");
    let device = &newest["requests"][0]["devices"][0];
    assert_eq!(newest["requests"][0]["name"], "rail");
    assert_eq!(
        (device["driver"].as_str(), device["pool"].as_str()),
        (Some(DRIVER), Some(NODE))
    );
    assert_eq!(device["name"], "pf-0000-04-00-0");
    assert_eq!(
        device["attributes"]["resource.kubernetes.io/pciBusID"]["string"],
        "0000:04:00.0"
    );
    assert_eq!(device["networkData"]["interfaceName"], "enp4s0");

    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty(), "{:?}", world.cdi_files());
    assert!(!world.dirs().metadata.join(&claim.uid).exists());
}
