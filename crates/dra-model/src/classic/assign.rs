//! The split of one inventory between the classic resources and DRA.
//!
//! Every function goes to exactly one owner: one classic resource, DRA, or
//! nobody. A function matched by two owners (two resources, or a resource and
//! the `dra` selector) is an overlap. At start the agent refuses to run with
//! any overlap ([`Assignment::check`]); when a function appears later and
//! overlaps, it is offered by neither path and reported.

use std::collections::{BTreeMap, BTreeSet};

use topology::{FunctionKind, Inventory, PciAddress};

use super::config::{ClassicConfig, ResourceName};
use super::device::{ClassicDevice, PfFacts};

/// The owner name DRA appears under in overlap reports.
const DRA_OWNER: &str = "dra";

/// One device matched by more than one owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The device.
    pub device: PciAddress,
    /// Every owner that matched it (resource names, `dra`), in config order.
    pub owners: Vec<String>,
}

/// The config offers some devices through two paths.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("device plugin config offers devices more than once: {}", describe(.overlaps))]
pub struct OverlapError {
    /// Each device matched twice or more, by address.
    pub overlaps: Vec<Overlap>,
}

fn describe(overlaps: &[Overlap]) -> String {
    overlaps
        .iter()
        .map(|o| format!("{} ({})", o.device, o.owners.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The devices of one classic resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceDevices {
    /// The extended resource.
    pub name: ResourceName,
    /// Its devices, by address.
    pub devices: Vec<ClassicDevice>,
}

/// Who gets which device on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Per classic resource, in config order (resources without devices too).
    pub resources: Vec<ResourceDevices>,
    /// Devices left to DRA, by address.
    pub dra: Vec<PciAddress>,
    /// Devices nobody offers, by address.
    pub unclaimed: Vec<PciAddress>,
    /// Devices matched more than once; they are in none of the lists above.
    pub overlaps: Vec<Overlap>,
}

impl Assignment {
    /// `Ok` when no device is matched twice.
    pub fn check(&self) -> Result<(), OverlapError> {
        if self.overlaps.is_empty() {
            Ok(())
        } else {
            Err(OverlapError {
                overlaps: self.overlaps.clone(),
            })
        }
    }

    /// Replaces the default rails (PF ordinals) with fabric facts: every
    /// device `rails` names takes that rail.
    pub fn set_rails(&mut self, rails: &BTreeMap<PciAddress, u32>) {
        for device in self.resources.iter_mut().flat_map(|r| r.devices.iter_mut()) {
            if let Some(rail) = rails.get(&device.address) {
                device.rail = *rail;
            }
        }
    }

    /// The devices of resource `name`, if the config has it.
    pub fn resource(&self, name: &str) -> Option<&ResourceDevices> {
        self.resources.iter().find(|r| r.name.as_str() == name)
    }
}

/// Splits `inventory` by `config`.
pub fn assign(config: &ClassicConfig, inventory: &Inventory) -> Assignment {
    let mut out = Assignment {
        resources: config
            .resources
            .iter()
            .map(|r| ResourceDevices {
                name: r.name.clone(),
                devices: Vec::new(),
            })
            .collect(),
        dra: Vec::new(),
        unclaimed: Vec::new(),
        overlaps: Vec::new(),
    };
    let facts = PfFacts::new(inventory);
    let mut nics: Vec<_> = inventory.nics.iter().collect();
    nics.sort_by_key(|n| n.address);
    for nic in nics {
        let mut owners: Vec<usize> = config
            .resources
            .iter()
            .enumerate()
            .filter(|(_, r)| r.selector.matches(nic))
            .map(|(i, _)| i)
            .collect();
        let dra = config.left_to_dra(nic);
        match (owners.len(), dra) {
            (0, false) => out.unclaimed.push(nic.address),
            (0, true) => out.dra.push(nic.address),
            (1, false) => {
                let i = owners.remove(0);
                out.resources[i]
                    .devices
                    .push(ClassicDevice::with_facts(&facts, nic));
            }
            _ => {
                let mut names: Vec<String> = owners
                    .iter()
                    .map(|&i| config.resources[i].name.to_string())
                    .collect();
                if dra {
                    names.push(DRA_OWNER.to_string());
                }
                out.overlaps.push(Overlap {
                    device: nic.address,
                    owners: names,
                });
            }
        }
    }
    out
}

/// The inventory the DRA path may publish while the classic path runs:
/// only the functions left to DRA (never an overlapping one), with the GPU
/// links and PF `vfs` lists trimmed to match.
pub fn dra_share(config: &ClassicConfig, inventory: &Inventory) -> Inventory {
    let kept: BTreeSet<PciAddress> = assign(config, inventory).dra.into_iter().collect();
    let mut share = inventory.clone();
    share.nics.retain(|n| kept.contains(&n.address));
    share.links.retain(|l| kept.contains(&l.nic));
    for nic in &mut share.nics {
        if let FunctionKind::Pf { vfs, .. } = &mut nic.kind {
            vfs.retain(|v| kept.contains(v));
        }
    }
    share
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::classic::testing::two_socket_node;

    fn config(text: &str) -> ClassicConfig {
        ClassicConfig::from_yaml(text, Path::new("dp.yaml")).unwrap()
    }

    fn ids(r: &ResourceDevices) -> Vec<String> {
        r.devices.iter().map(|d| d.id()).collect()
    }

    #[test]
    fn default_split_offers_pfs_and_vfs_separately() {
        let a = assign(&ClassicConfig::default(), &two_socket_node());
        a.check().unwrap();
        let nic = a.resource("amd.com/nic").unwrap();
        let vnic = a.resource("amd.com/vnic").unwrap();
        assert_eq!(nic.devices.len(), 8);
        assert!(ids(nic).iter().all(|id| id.ends_with(".0")));
        assert_eq!(vnic.devices.len(), 16);
        assert!(ids(vnic).iter().all(|id| !id.ends_with(".0")));
        assert!(a.dra.is_empty() && a.unclaimed.is_empty());
    }

    #[test]
    fn devices_left_to_dra_leave_the_classic_path() {
        let c = config(
            "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8:1002\"], pciAddresses: [\"0000:0c:00.0\", \"0000:0d:00.0\"]}\ndra:\n  pciIds: [\"1dd8:1003\"]\n",
        );
        let a = assign(&c, &two_socket_node());
        a.check().unwrap();
        assert_eq!(ids(&a.resources[0]), ["0000:0c:00.0", "0000:0d:00.0"]);
        assert_eq!(a.dra.len(), 16);
        assert_eq!(a.unclaimed.len(), 6);
    }

    #[test]
    fn dra_share_holds_only_devices_left_to_dra() {
        let c = config(
            "resources:\n  - name: amd.com/vnic\n    selectors: {pciIds: [\"1dd8:1003\"]}\ndra:\n  pciIds: [\"1dd8:1002\"]\n",
        );
        let share = dra_share(&c, &two_socket_node());
        assert_eq!(share.nics.len(), 8);
        assert!(share.nics.iter().all(|n| n.is_pf()));
        // The PFs' VFs went to amd.com/vnic, so DRA sees PFs without VFs.
        assert!(
            share
                .nics
                .iter()
                .all(|n| matches!(&n.kind, FunctionKind::Pf { vfs, .. } if vfs.is_empty()))
        );
        let none = dra_share(&ClassicConfig::default(), &two_socket_node());
        assert!(none.nics.is_empty());
    }

    #[test]
    fn overlap_between_resource_and_dra_names_the_devices() {
        let c = config("dra:\n  pciAddresses: [\"0000:8c:00.0\", \"0000:8c:00.1\"]\n");
        let a = assign(&c, &two_socket_node());
        let err = a.check().unwrap_err().to_string();
        assert_eq!(
            err,
            "device plugin config offers devices more than once: \
             0000:8c:00.0 (amd.com/nic, dra); 0000:8c:00.1 (amd.com/vnic, dra)"
        );
        // Neither path offers an overlapping device.
        assert!(!ids(&a.resources[0]).contains(&"0000:8c:00.0".to_string()));
        assert!(!a.dra.contains(&"0000:8c:00.0".parse().unwrap()));
    }

    #[test]
    fn overlap_between_two_resources_is_reported() {
        let c = config(
            "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8:1002\"]}\n  - name: amd.com/rail0\n    selectors: {netdevs: [\"eth0cf0\"]}\n",
        );
        let a = assign(&c, &two_socket_node());
        let e = a.check().unwrap_err();
        assert_eq!(e.overlaps.len(), 1);
        assert_eq!(e.overlaps[0].device.to_string(), "0000:0c:00.0");
        assert_eq!(e.overlaps[0].owners, ["amd.com/nic", "amd.com/rail0"]);
    }
}
