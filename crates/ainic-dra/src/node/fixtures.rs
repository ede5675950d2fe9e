//! Hand-built inventories for unit tests of the node agent (no sysfs).

use topology::{
    CharDevice, FunctionKind, Inventory, Netdev, NicFunction, PciAddress, PciIds, PcieLink,
    PcieLocation, RdmaDevice, RdmaPort,
};

fn char_dev(path: String, major: u32, minor: u32) -> CharDevice {
    CharDevice { path, major, minor }
}

/// An AINIC PF on `bus` with netdev `eth<i>`, RDMA device `ionic_<i>` and
/// verbs/umad/issm char devices numbered `i`; link and port up.
pub fn pf(i: u8, bus: u8) -> NicFunction {
    let address = PciAddress {
        domain: 0,
        bus,
        device: 0,
        function: 0,
    };
    NicFunction {
        address,
        kind: FunctionKind::Pf {
            total_vfs: Some(8),
            vfs: vec![],
        },
        ids: PciIds {
            vendor: 0x1dd8,
            device: 0x1002,
            subsystem_vendor: Some(0x1dd8),
            subsystem_device: Some(0x5201),
            class: 0x020000,
        },
        product_name: Some("Pollara 400".into()),
        driver: Some("ionic".into()),
        location: PcieLocation {
            root: "pci0000:00".into(),
            bridges: vec![],
            switch: None,
            numa_node: Some(0),
        },
        local_cpus: None,
        pcie_link: PcieLink {
            speed_gts: None,
            width: None,
        },
        netdevs: vec![Netdev {
            name: format!("eth{i}"),
            mac: None,
            mtu: Some(9000),
            speed_mbps: Some(400_000),
            operstate: Some("up".into()),
        }],
        rdma: vec![RdmaDevice {
            name: format!("ionic_{i}"),
            firmware_version: None,
            ports: vec![RdmaPort {
                number: 1,
                state: Some("ACTIVE".into()),
                phys_state: Some("LinkUp".into()),
                rate: None,
                link_layer: Some("Ethernet".into()),
            }],
            uverbs: Some(char_dev(
                format!("/dev/infiniband/uverbs{i}"),
                231,
                192 + u32::from(i),
            )),
            umad: vec![char_dev(
                format!("/dev/infiniband/umad{i}"),
                231,
                u32::from(i),
            )],
            issm: vec![char_dev(
                format!("/dev/infiniband/issm{i}"),
                231,
                64 + u32::from(i),
            )],
        }],
    }
}

/// Two PFs (`pf-0000-0c-00-0`, `pf-0000-0d-00-0`) and `rdma_cm`.
pub fn inventory() -> Inventory {
    Inventory {
        nics: vec![pf(0, 0x0c), pf(1, 0x0d)],
        gpus: vec![],
        links: vec![],
        rdma_cm: Some(char_dev("/dev/infiniband/rdma_cm".into(), 10, 58)),
        warnings: vec![],
    }
}

/// An allocated claim `ns/<name>` with `uid` and one result per
/// `(request, driver, pool, device)`, and the given allocation config.
pub fn claim(
    name: &str,
    uid: &str,
    results: &[(&str, &str, &str, &str)],
    config: serde_json::Value,
) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let results: Vec<serde_json::Value> = results
        .iter()
        .map(|(request, driver, pool, device)| {
            serde_json::json!({"request": request, "driver": driver, "pool": pool, "device": device})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},
    }))
    .expect("valid ResourceClaim")
}

/// A NicConfig allocation config entry from `source` for all requests.
pub fn nic_config(source: &str, fields: serde_json::Value) -> serde_json::Value {
    let mut params =
        serde_json::json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig"});
    params
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    serde_json::json!({"source": source, "opaque": {"driver": "ainic.amd.com", "parameters": params}})
}
