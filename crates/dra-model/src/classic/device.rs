//! The classic path's view of one NIC function: the kubelet device ID,
//! health and NUMA node that `ListAndWatch` reports, plus the placement facts
//! (PF, switch, rail, PCIe position) that `GetPreferredAllocation` scores.
//!
//! The device ID is the PCI address (`0000:0c:00.0`), as the SR-IOV device
//! plugin uses it, so the `PCIDEVICE_*` env and the IDs the kubelet
//! checkpoints agree and stay stable across reboots.

use std::collections::BTreeMap;

use topology::{FunctionKind, Inventory, NicFunction, PciAddress, PcieLocation};

/// Whether the kubelet may hand a device to new pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// Link up and RDMA port active (or not reported).
    Healthy,
    /// Link down, or an RDMA port not active, here or on the parent PF.
    Unhealthy,
}

impl Health {
    /// The string the device plugin API uses (`Healthy` / `Unhealthy`).
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy => "Unhealthy",
        }
    }
}

/// PF or VF, with the PF a VF belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRole {
    /// A physical function.
    Pf,
    /// A virtual function of `physfn`.
    Vf {
        /// The parent PF.
        physfn: PciAddress,
    },
}

/// One device as the classic path offers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicDevice {
    /// PCI address; its text form is the kubelet device ID.
    pub address: PciAddress,
    /// PF or VF.
    pub role: DeviceRole,
    /// Position in the PCIe tree (root, bridges, switch, NUMA node).
    pub location: PcieLocation,
    /// Rail: the ordinal of the (parent) PF among the node's PFs, unless
    /// fabric facts say otherwise.
    pub rail: u32,
    /// Current health.
    pub health: Health,
}

/// Per-PF facts every function of a card needs (rail, link state), read
/// once per inventory so building all views stays linear in its size.
#[derive(Clone, Debug, Default)]
pub struct PfFacts {
    /// PF address → (ordinal among the node's PFs, links up).
    pfs: BTreeMap<PciAddress, (u32, bool)>,
}

impl PfFacts {
    /// Reads the PFs of `inventory`.
    pub fn new(inventory: &Inventory) -> Self {
        let mut pfs: Vec<&NicFunction> = inventory.nics.iter().filter(|n| n.is_pf()).collect();
        pfs.sort_by_key(|n| n.address);
        let pfs = pfs
            .iter()
            .enumerate()
            .map(|(i, pf)| {
                let ordinal = u32::try_from(i).unwrap_or(u32::MAX);
                (pf.address, (ordinal, own_links_up(pf)))
            })
            .collect();
        PfFacts { pfs }
    }
}

impl ClassicDevice {
    /// Builds the view of `nic`, which must be a function of `inventory`.
    pub fn new(inventory: &Inventory, nic: &NicFunction) -> Self {
        Self::with_facts(&PfFacts::new(inventory), nic)
    }

    /// Builds the view of `nic` from the facts of its inventory's PFs.
    pub fn with_facts(facts: &PfFacts, nic: &NicFunction) -> Self {
        let (role, card) = match nic.kind {
            FunctionKind::Pf { .. } => (DeviceRole::Pf, nic.address),
            FunctionKind::Vf { physfn, .. } => (DeviceRole::Vf { physfn }, physfn),
        };
        let (rail, card_up) = facts.pfs.get(&card).copied().unwrap_or((0, true));
        let healthy = own_links_up(nic) && (role == DeviceRole::Pf || card_up);
        ClassicDevice {
            address: nic.address,
            role,
            location: nic.location.clone(),
            rail,
            health: if healthy {
                Health::Healthy
            } else {
                Health::Unhealthy
            },
        }
    }

    /// The kubelet device ID.
    pub fn id(&self) -> String {
        self.address.to_string()
    }

    /// The NUMA node the kubelet's topology manager sees, if known.
    pub fn numa_node(&self) -> Option<u32> {
        self.location.numa_node
    }

    /// The physical card: the PF itself, or a VF's parent.
    pub fn card(&self) -> PciAddress {
        match self.role {
            DeviceRole::Pf => self.address,
            DeviceRole::Vf { physfn } => physfn,
        }
    }
}

/// False when a netdev reports `down` or an RDMA port reports a state other
/// than `ACTIVE`; facts sysfs did not give count as fine.
fn own_links_up(nic: &NicFunction) -> bool {
    let netdevs_up = nic
        .netdevs
        .iter()
        .all(|n| n.operstate.as_deref() != Some("down"));
    let ports_active = nic
        .rdma
        .iter()
        .flat_map(|r| &r.ports)
        .all(|p| p.state.as_deref().is_none_or(|s| s == "ACTIVE"));
    netdevs_up && ports_active
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classic::testing::two_socket_node;

    fn view(inv: &Inventory, a: &str) -> ClassicDevice {
        let nic = inv.nic(a.parse().unwrap()).unwrap();
        ClassicDevice::new(inv, nic)
    }

    #[test]
    fn ids_rails_and_cards() {
        let inv = two_socket_node();
        let pf = view(&inv, "0000:2c:00.0");
        assert_eq!(pf.id(), "0000:2c:00.0");
        assert_eq!(pf.rail, 2);
        assert_eq!(pf.numa_node(), Some(0));
        let vf = view(&inv, "0000:9c:00.2");
        assert_eq!(vf.rail, 5);
        assert_eq!(vf.card().to_string(), "0000:9c:00.0");
        assert_eq!(
            vf.role,
            DeviceRole::Vf {
                physfn: "0000:9c:00.0".parse().unwrap()
            }
        );
    }

    #[test]
    fn link_down_or_port_inactive_is_unhealthy() {
        let mut inv = two_socket_node();
        assert_eq!(view(&inv, "0000:0c:00.0").health, Health::Healthy);
        inv.nics[0].netdevs[0].operstate = Some("down".into());
        assert_eq!(view(&inv, "0000:0c:00.0").health, Health::Unhealthy);
        // The PF's VFs follow it down.
        assert_eq!(view(&inv, "0000:0c:00.1").health, Health::Unhealthy);
        assert_eq!(view(&inv, "0000:0d:00.1").health, Health::Healthy);
        let i = inv.nics.iter().position(|n| n.address.bus == 0x0d).unwrap();
        inv.nics[i].rdma[0].ports[0].state = Some("DOWN".into());
        assert_eq!(view(&inv, "0000:0d:00.0").health, Health::Unhealthy);
        assert_eq!(Health::Unhealthy.as_str(), "Unhealthy");
    }
}
