//! One DRA device from one NIC function: attributes, capacities, taints,
//! counter consumption.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Counter, Device, DeviceAttribute, DeviceCounterConsumption, DeviceTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use topology::{FunctionKind, NicFunction};

use crate::capacity;
use crate::config::ModelConfig;
use crate::fabric::FabricFacts;
use crate::gates::FeatureGate;
use crate::health::Level;
use crate::index::InventoryIndex;
use crate::names::{self, attr};
use crate::plan::Published;

/// Everything a device is built from besides the function itself.
pub(crate) struct DeviceContext<'a> {
    pub config: &'a ModelConfig,
    pub index: &'a InventoryIndex<'a>,
    pub fabric: Option<&'a FabricFacts>,
}

/// Builds the device; pushes to `warnings` what had to be cut.
pub(crate) fn build_device(
    p: &Published<'_>,
    ctx: &DeviceContext<'_>,
    warnings: &mut Vec<String>,
) -> Device {
    let nic = p.nic;
    let name = names::device_name(nic);
    let mut attrs = Attributes {
        driver: ctx.config.driver(),
        map: BTreeMap::new(),
        device: name.clone(),
        warnings,
    };
    standard_attributes(&mut attrs, nic);
    identity_attributes(&mut attrs, nic);
    topology_attributes(&mut attrs, nic, ctx);
    attrs.boolean(attr::SHARED, p.shared);
    if ctx.config.options().extended_resources && !p.shared {
        let name = if nic.is_pf() {
            crate::names::EXTENDED_NIC
        } else {
            crate::names::EXTENDED_VNIC
        };
        attrs.string(attr::EXTENDED_RESOURCE, name);
    }
    let (binding, failure) = sticky_conditions(p, ctx).unzip();
    let taints = ctx
        .config
        .gate(FeatureGate::DraDeviceTaints)
        .then(|| health_taint(nic, ctx))
        .flatten();
    Device {
        name,
        attributes: Some(attrs.map),
        capacity: Some(capacity::capacities(
            nic,
            ctx.index.parent(nic),
            ctx.config,
            p.shared,
        ))
        .filter(|c| !c.is_empty()),
        allow_multiple_allocations: p.shared.then_some(true),
        consumes_counters: p.consumes.as_ref().map(|(set, n)| {
            vec![DeviceCounterConsumption {
                counter_set: set.clone(),
                counters: BTreeMap::from([(
                    names::COUNTER_FUNCTIONS.to_string(),
                    Counter {
                        value: Quantity(n.to_string()),
                    },
                )]),
                ..DeviceCounterConsumption::default()
            }]
        }),
        taints: taints.map(|t| vec![t]),
        binding_conditions: binding,
        binding_failure_conditions: failure,
        ..Device::default()
    }
}

/// The binding and failure conditions of a sticky shared PF: shared,
/// `--sticky-tenants`, `DRADeviceBindingConditions` on, and no configured
/// tenant (none, or the controller's binding).
fn sticky_conditions(
    p: &Published<'_>,
    ctx: &DeviceContext<'_>,
) -> Option<(Vec<String>, Vec<String>)> {
    let sticky = p.shared
        && ctx.config.options().sticky_tenants
        && ctx.config.gate(FeatureGate::DraDeviceBindingConditions)
        && ctx
            .fabric
            .is_none_or(|f| f.tenant.is_none() || f.tenant_bound);
    let driver = ctx.config.driver();
    sticky.then(|| {
        (
            vec![names::qualified(driver, names::CONDITION_TENANT_BOUND)],
            vec![names::qualified(driver, names::CONDITION_TENANT_CONFLICT)],
        )
    })
}

/// Attribute map under construction; string values are cut to the API limit.
struct Attributes<'a, 'w> {
    driver: &'a str,
    map: BTreeMap<String, DeviceAttribute>,
    device: String,
    warnings: &'w mut Vec<String>,
}

impl Attributes<'_, '_> {
    fn key(&self, id: &str) -> String {
        names::qualified(self.driver, id)
    }
    fn put(&mut self, key: String, value: DeviceAttribute) {
        self.map.insert(key, value);
    }
    fn string_at(&mut self, key: String, value: &str) {
        let mut v = value.to_string();
        if v.len() > crate::validate::MAX_VALUE_LENGTH {
            let mut cut = crate::validate::MAX_VALUE_LENGTH;
            while !v.is_char_boundary(cut) {
                cut -= 1;
            }
            v.truncate(cut);
            self.warnings
                .push(format!("{}: attribute {key} cut to 64 bytes", self.device));
        }
        self.put(
            key,
            DeviceAttribute {
                string: Some(v),
                ..Default::default()
            },
        );
    }
    fn string(&mut self, id: &str, value: &str) {
        let key = self.key(id);
        self.string_at(key, value);
    }
    fn int(&mut self, id: &str, value: i64) {
        let key = self.key(id);
        self.put(
            key,
            DeviceAttribute {
                int: Some(value),
                ..Default::default()
            },
        );
    }
    fn boolean(&mut self, id: &str, value: bool) {
        let key = self.key(id);
        self.put(
            key,
            DeviceAttribute {
                bool: Some(value),
                ..Default::default()
            },
        );
    }
}

fn standard_attributes(a: &mut Attributes<'_, '_>, nic: &NicFunction) {
    a.string_at(names::ATTR_PCIE_ROOT.into(), &nic.location.root);
    a.string_at(names::ATTR_PCI_BUS_ID.into(), &nic.address.to_string());
    if let Some(numa) = nic.location.numa_node {
        a.put(
            names::ATTR_NUMA_NODE_STD.into(),
            DeviceAttribute {
                int: Some(numa.into()),
                ..Default::default()
            },
        );
        a.int(attr::NUMA_NODE, numa.into());
    }
}

fn identity_attributes(a: &mut Attributes<'_, '_>, nic: &NicFunction) {
    a.string(attr::TYPE, if nic.is_pf() { "pf" } else { "vf" });
    a.string(attr::PCI_VENDOR_ID, &format!("{:04x}", nic.ids.vendor));
    a.string(attr::PCI_DEVICE_ID, &format!("{:04x}", nic.ids.device));
    if let Some(p) = &nic.product_name {
        a.string(attr::PRODUCT_NAME, p);
    }
    if let Some(net) = nic.netdevs.first() {
        a.string(attr::IF_NAME, &net.name);
        if let Some(mac) = &net.mac {
            a.string(attr::MAC, mac);
        }
        if let Some(mtu) = net.mtu {
            a.int(attr::MTU, mtu.into());
        }
        if let Some(speed) = net.speed_mbps {
            a.int(attr::LINK_SPEED_GBPS, (speed / 1000) as i64);
        }
    }
    if let Some(rdma) = nic.rdma.first() {
        a.string(attr::RDMA_DEVICE, &rdma.name);
        if let Some(fw) = &rdma.firmware_version {
            a.string(attr::FIRMWARE_VERSION, fw);
        }
    }
    if let FunctionKind::Vf { physfn, index } = nic.kind {
        a.string(attr::PHYSFN, &physfn.to_string());
        a.int(attr::VF_INDEX, index.into());
    }
}

fn topology_attributes(a: &mut Attributes<'_, '_>, nic: &NicFunction, ctx: &DeviceContext<'_>) {
    if let Some(switch) = nic.location.switch {
        a.string(attr::PCIE_SWITCH, &switch.to_string());
    }
    if let Some((gpu, affinity)) = ctx.index.nearest_gpu(nic.address) {
        a.string(attr::NEAREST_GPU, &gpu.to_string());
        a.string(attr::GPU_AFFINITY, affinity.as_str());
        if let Some(pairing) = &ctx.config.options().gpu_pairing_attribute {
            a.string_at(pairing.clone(), &gpu.to_string());
        }
    }
    if let Some(f) = ctx.fabric {
        a.int(attr::RAIL, f.rail.into());
        a.string(attr::FABRIC, &f.fabric);
        if let Some(leaf) = &f.leaf_switch {
            a.string(attr::LEAF_SWITCH, leaf);
        }
        if let Some(tenant) = &f.tenant {
            a.string(attr::TENANT, tenant);
        }
    }
}

/// The reason a function is unhealthy: its link or an RDMA port is down.
/// A VF without a netdev or RDMA device of its own follows `pf`, its parent.
pub(crate) fn down_reason(nic: &NicFunction, pf: Option<&NicFunction>) -> Option<&'static str> {
    let link_down = nic.netdevs.iter().any(|n| {
        matches!(
            n.operstate.as_deref(),
            Some("down" | "lowerlayerdown" | "notpresent")
        )
    });
    if link_down {
        return Some("link-down");
    }
    let port_down = nic.rdma.iter().flat_map(|r| &r.ports).any(|p| {
        p.state
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case("ACTIVE"))
    });
    if port_down {
        return Some("rdma-port-down");
    }
    match nic.kind {
        FunctionKind::Vf { .. } if nic.netdevs.is_empty() && nic.rdma.is_empty() => {
            pf.and_then(|pf| down_reason(pf, None))
        }
        _ => None,
    }
}

/// The taint of an unhealthy or degraded function: its link or RDMA port
/// down (`unhealthy`, NoSchedule) first, else its PF's counter verdict
/// (`unhealthy`, NoSchedule; `degraded`, effect None where the release has
/// it, else no taint). The value says why: `link-down`, `rdma-port-down`,
/// or the counter (`symbol_error`).
fn health_taint(nic: &NicFunction, ctx: &DeviceContext<'_>) -> Option<DeviceTaint> {
    let taint = |key, value: &str, effect: &str| DeviceTaint {
        key: names::qualified(ctx.config.driver(), key),
        value: Some(names::label_value(value)),
        effect: effect.to_string(),
        time_added: None,
    };
    if let Some(reason) = down_reason(nic, ctx.index.parent(nic)) {
        return Some(taint(names::TAINT_UNHEALTHY, reason, "NoSchedule"));
    }
    let pf = match nic.kind {
        FunctionKind::Vf { physfn, .. } => physfn,
        FunctionKind::Pf { .. } => nic.address,
    };
    let verdict = ctx.config.health().get(&pf)?;
    match verdict.level {
        Level::Unhealthy => Some(taint(
            names::TAINT_UNHEALTHY,
            &verdict.counter,
            "NoSchedule",
        )),
        Level::Degraded if ctx.config.gates().release().taint_effect_none() => {
            Some(taint(names::TAINT_DEGRADED, &verdict.counter, "None"))
        }
        Level::Degraded | Level::Healthy => None,
    }
}
