//! Lookups over an inventory built once per slice build, so that a node
//! with thousands of VFs costs linear time, not a scan per device.

use std::collections::HashMap;

use topology::{Affinity, FunctionKind, Inventory, NicFunction, PciAddress};

/// NIC functions by address, VFs by PF, and each NIC's nearest GPU.
pub(crate) struct InventoryIndex<'a> {
    nics: HashMap<PciAddress, &'a NicFunction>,
    vfs: HashMap<PciAddress, Vec<&'a NicFunction>>,
    nearest_gpu: HashMap<PciAddress, (PciAddress, Affinity)>,
}

impl<'a> InventoryIndex<'a> {
    pub(crate) fn new(inventory: &'a Inventory) -> Self {
        let nics = inventory.nics.iter().map(|n| (n.address, n)).collect();
        let mut vfs: HashMap<PciAddress, Vec<&NicFunction>> = HashMap::new();
        for n in &inventory.nics {
            if let FunctionKind::Vf { physfn, .. } = n.kind {
                vfs.entry(physfn).or_default().push(n);
            }
        }
        // Best affinity, lowest GPU address on ties (as Inventory::nearest_gpu).
        let mut nearest_gpu: HashMap<PciAddress, (PciAddress, Affinity)> = HashMap::new();
        for l in &inventory.links {
            let better = nearest_gpu
                .get(&l.nic)
                .is_none_or(|(gpu, aff)| (l.affinity, l.gpu) < (*aff, *gpu));
            if better {
                nearest_gpu.insert(l.nic, (l.gpu, l.affinity));
            }
        }
        InventoryIndex {
            nics,
            vfs,
            nearest_gpu,
        }
    }

    /// The function at `address`.
    pub(crate) fn nic(&self, address: PciAddress) -> Option<&'a NicFunction> {
        self.nics.get(&address).copied()
    }

    /// The PF of a VF (`None` for a PF or an orphan VF).
    pub(crate) fn parent(&self, nic: &NicFunction) -> Option<&'a NicFunction> {
        match nic.kind {
            FunctionKind::Vf { physfn, .. } => self.nic(physfn),
            FunctionKind::Pf { .. } => None,
        }
    }

    /// The VFs of `pf` found in the inventory, by address.
    pub(crate) fn vfs_of(&self, pf: PciAddress) -> &[&'a NicFunction] {
        self.vfs.get(&pf).map_or(&[], Vec::as_slice)
    }

    /// The GPU nearest to `nic` and its class.
    pub(crate) fn nearest_gpu(&self, nic: PciAddress) -> Option<(PciAddress, Affinity)> {
        self.nearest_gpu.get(&nic).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_gpu_agrees_with_the_inventory() {
        let inv = crate::sample::inventory(3, 2);
        let idx = InventoryIndex::new(&inv);
        for n in &inv.nics {
            assert_eq!(idx.nearest_gpu(n.address), inv.nearest_gpu(n.address));
        }
        assert_eq!(idx.vfs_of(crate::sample::pf_address(1)).len(), 2);
    }
}
