//! Hand-built inventories for unit tests of the node agent (no sysfs).

use dra_model::sample;
use topology::{FunctionKind, Inventory, NicFunction, PciAddress};

/// An AINIC PF on `bus` with netdev `eth<i>`, RDMA device `ionic_<i>` and
/// verbs/umad/issm char devices numbered `i`; link and port up.
pub fn pf(i: u8, bus: u8) -> NicFunction {
    let address = PciAddress {
        domain: 0,
        bus,
        device: 0,
        function: 0,
    };
    let kind = FunctionKind::Pf {
        total_vfs: Some(8),
        vfs: vec![],
    };
    sample::plain_function(address, kind, format!("eth{i}"), u32::from(i))
}

/// Two PFs (`pf-0000-0c-00-0`, `pf-0000-0d-00-0`) and `rdma_cm`.
pub fn inventory() -> Inventory {
    Inventory {
        nics: vec![pf(0, 0x0c), pf(1, 0x0d)],
        gpus: vec![],
        links: vec![],
        rdma_cm: Some(sample::rdma_cm()),
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
