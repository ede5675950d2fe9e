//! `GetPreferredAllocation` on the bundled topologies, `Allocate` with
//! device specs and with CDI, and the config checks at start.

use std::path::Path;
use std::sync::Arc;

use dra_model::classic::ClassicConfig;
use kubelet_api::deviceplugin::v1beta1 as dp;
use testkit::fake_kubelet_dp::DevicePluginClient;
use topology::{Inventory, PciAddress};

use super::{NIC, VNIC, first_list, fixture, node, plain_node};

fn preference(
    available: &[dp::Device],
    size: i32,
    must: &[&str],
) -> dp::PreferredAllocationRequest {
    dp::PreferredAllocationRequest {
        container_requests: vec![dp::ContainerPreferredAllocationRequest {
            available_device_i_ds: available.iter().map(|d| d.id.clone()).collect(),
            must_include_device_i_ds: must.iter().map(|s| s.to_string()).collect(),
            allocation_size: size,
        }],
    }
}

async fn prefer(
    client: &mut DevicePluginClient,
    devices: &[dp::Device],
    size: i32,
    must: &[&str],
) -> Vec<String> {
    let answer = client
        .get_preferred_allocation(preference(devices, size, must))
        .await
        .unwrap();
    answer
        .into_inner()
        .container_responses
        .remove(0)
        .device_i_ds
}

fn nic_of<'a>(inv: &'a Inventory, id: &str) -> &'a topology::NicFunction {
    inv.nic(id.parse::<PciAddress>().unwrap()).unwrap()
}

#[tokio::test]
async fn preferred_allocation_on_the_mi300x_node() {
    let node = node(
        fixture("mi300x-8gpu-8nic", 2),
        ClassicConfig::default(),
        false,
    )
    .await
    .unwrap();
    let inv = Arc::clone(&node.inventory.borrow());
    let mut nic = node.client(NIC, 1).await;
    let (_, nics) = first_list(&mut nic).await;
    let two = prefer(&mut nic, &nics, 2, &[]).await;
    assert_eq!(two, ["0000:04:00.0", "0000:24:00.0"]);
    let (a, b) = (nic_of(&inv, &two[0]), nic_of(&inv, &two[1]));
    assert_eq!(a.location.numa_node, b.location.numa_node);
    assert_ne!(a.location.switch, b.location.switch);
    // A must-include NIC on socket 1 pulls the partner there.
    let with = prefer(&mut nic, &nics, 2, &["0000:c4:00.0"]).await;
    assert_eq!(with, ["0000:84:00.0", "0000:c4:00.0"]);

    let mut vnic = node.client(VNIC, 1).await;
    let (_, vfs) = first_list(&mut vnic).await;
    let four = prefer(&mut vnic, &vfs, 4, &[]).await;
    assert_eq!(
        four,
        [
            "0000:04:00.1",
            "0000:24:00.1",
            "0000:44:00.1",
            "0000:64:00.1"
        ]
    );
    let parents: std::collections::BTreeSet<_> = four
        .iter()
        .map(|id| match nic_of(&inv, id).kind {
            topology::FunctionKind::Vf { physfn, .. } => physfn,
            topology::FunctionKind::Pf { .. } => panic!("{id} is not a VF"),
        })
        .collect();
    assert_eq!(parents.len(), 4);
    assert!(
        four.iter()
            .all(|id| nic_of(&inv, id).location.numa_node == Some(0))
    );
    node.stop().await;
}

#[tokio::test]
async fn one_numa_node_wins_over_distinct_pfs_on_the_sriov_node() {
    let node = node(fixture("sriov-vfs", 0), ClassicConfig::default(), false)
        .await
        .unwrap();
    let mut vnic = node.client(VNIC, 1).await;
    let (_, vfs) = first_list(&mut vnic).await;
    assert_eq!(vfs.len(), 6);
    // Socket 0 has four VFs of one PF; socket 1 two of another.
    let two = prefer(&mut vnic, &vfs, 2, &[]).await;
    assert_eq!(two, ["0000:44:00.1", "0000:44:00.2"]);
    let bad = vnic
        .get_preferred_allocation(preference(&vfs, 7, &[]))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    node.stop().await;
}

async fn allocate(
    client: &mut DevicePluginClient,
    ids: &[&str],
) -> Result<dp::ContainerAllocateResponse, tonic::Status> {
    let request = dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    };
    Ok(client
        .allocate(request)
        .await?
        .into_inner()
        .container_responses
        .remove(0))
}

#[tokio::test]
async fn allocate_gives_rdma_char_devices_and_env() {
    let node = plain_node().await;
    let mut nic = node.client(NIC, 1).await;
    let got = allocate(&mut nic, &["0000:24:00.0", "0000:04:00.0"])
        .await
        .unwrap();
    assert_eq!(
        got.envs["PCIDEVICE_AMD_COM_NIC"],
        "0000:04:00.0,0000:24:00.0"
    );
    assert_eq!(got.envs["NCCL_IB_HCA"], "=ionic_0,ionic_1");
    assert_eq!(got.envs["AINIC_NETDEVS"], "enp4s0,enp36s0");
    let paths: Vec<&str> = got
        .devices
        .iter()
        .map(|d| d.container_path.as_str())
        .collect();
    assert!(paths.contains(&"/dev/infiniband/rdma_cm"), "{paths:?}");
    assert_eq!(
        paths
            .iter()
            .filter(|p| p.starts_with("/dev/infiniband/uverbs"))
            .count(),
        2
    );
    assert!(got.cdi_devices.is_empty());
    let wrong = allocate(&mut nic, &["0000:04:00.1"]).await.unwrap_err();
    assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
    node.stop().await;
}

#[tokio::test]
async fn with_cdi_allocate_names_devices_of_a_written_spec() {
    let node = node(
        fixture("mi300x-8gpu-8nic", 0),
        ClassicConfig::default(),
        true,
    )
    .await
    .unwrap();
    let mut nic = node.client(NIC, 1).await;
    let got = allocate(&mut nic, &["0000:44:00.0"]).await.unwrap();
    assert!(got.devices.is_empty());
    let names: Vec<&str> = got.cdi_devices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "amd.com/ainic=classic-rdma-cm",
            "amd.com/ainic=classic-pf-0000-44-00-0"
        ]
    );
    assert_eq!(got.envs["PCIDEVICE_AMD_COM_NIC"], "0000:44:00.0");
    let spec_path = node
        .dir
        .path()
        .join("cdi")
        .join(crate::classic::cdi::FILE_NAME);
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_path).unwrap()).unwrap();
    assert_eq!(spec["kind"], "amd.com/ainic");
    let defined: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    for name in &names {
        assert!(
            defined.contains(&name.trim_start_matches("amd.com/ainic=")),
            "{name} not in {defined:?}"
        );
    }
    let before = std::fs::read(&spec_path).unwrap();
    let _dir = node.stop().await;
    assert_eq!(
        std::fs::read(&spec_path).unwrap(),
        before,
        "the spec outlives the agent: restarting containers still need it"
    );
}

#[tokio::test]
async fn overlapping_config_is_a_startup_error_naming_the_devices() {
    let config = ClassicConfig::from_yaml(
        "dra:\n  pciAddresses: [\"0000:44:00.0\", \"0000:c4:00.0\"]\n",
        Path::new("split.yaml"),
    )
    .unwrap();
    let err = match node(fixture("mi300x-8gpu-8nic", 0), config, false).await {
        Ok(_) => panic!("started with an overlapping config"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("0000:44:00.0 (amd.com/nic, dra)"), "{err}");
    assert!(err.contains("0000:c4:00.0 (amd.com/nic, dra)"), "{err}");
}

#[tokio::test]
async fn devices_left_to_dra_are_not_offered() {
    let config = ClassicConfig::from_yaml(
        "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8:1002\"], netdevs: [enp4s0, enp36s0]}\ndra:\n  pciIds: [\"1dd8:1002\"]\n  netdevs: [enp68s0]\n",
        Path::new("split.yaml"),
    )
    .unwrap();
    let node = node(fixture("mi300x-8gpu-8nic", 0), config, false)
        .await
        .unwrap();
    let (_, devices) = first_list(&mut node.client(NIC, 1).await).await;
    let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["0000:04:00.0", "0000:24:00.0"]);
    node.stop().await;
}
