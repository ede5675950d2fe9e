//! The facts a VF shares with its PF, read from the PF once per discovery
//! thread instead of from each of its (up to 256) VFs.
//!
//! The SR-IOV specification makes a VF's class code and subsystem vendor
//! those of its PF; Linux gives a VF its PF's NUMA node and local CPUs
//! (both come from the bus they share); a VF has no PCIe link of its own
//! (its link registers are reserved: the PF's link is the one its traffic
//! crosses); the firmware is the adapter's, which the PF's RDMA device
//! reports; and a port's physical state and link layer are the physical
//! port's, which is the PF's. Reading them per VF cost 9 of the about 40
//! filesystem calls of each of the 2,048 VFs of an 8 PF × 256 VF node, for
//! the same answer. What differs per VF (its IDs, driver, netdevs, RDMA
//! devices, their ports' logical state and rate, char devices) is still
//! read from the VF.

use std::collections::HashMap;

use crate::model::{NicFunction, PcieLink};
use crate::pci::PciAddress;
use crate::sysfs::Backend;

use super::function::{self, Function};
use super::rdma;
use super::reader::Reader;
use super::sriov::Parent;

/// What a function shares with its VFs (for a PF, simply its own facts).
#[derive(Clone, Debug)]
pub(crate) struct Shared {
    pub class: u32,
    pub subsystem_vendor: Option<u16>,
    pub numa_node: Option<u32>,
    pub local_cpus: Option<String>,
    pub pcie_link: PcieLink,
}

impl Shared {
    /// Reads them from `f`; `None` (with a warning that `f` is skipped)
    /// when it has no usable class.
    pub(crate) fn read<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<Shared> {
        Some(Shared {
            class: function::class(r, f)?,
            subsystem_vendor: function::subsystem(r, f, "subsystem_vendor"),
            numa_node: function::numa_node(r, f),
            local_cpus: function::local_cpus(r, f),
            pcie_link: function::pcie_link(r, f),
        })
    }
}

/// A PF's shared facts and its RDMA device's, as its VFs inherit them.
#[derive(Clone, Debug)]
pub(crate) struct Inherited {
    pub shared: Shared,
    pub rdma: rdma::FromPf,
}

/// The PFs met so far by one discovery thread, with what their VFs inherit
/// (`None` when the PF has no usable class: its VFs are skipped too).
#[derive(Debug, Default)]
pub(crate) struct ByPf {
    by_pf: HashMap<PciAddress, Option<Inherited>>,
}

impl ByPf {
    /// Remembers what the VFs of the PF `pf`, just read, inherit from it.
    pub(crate) fn remember(&mut self, pf: &NicFunction) {
        let shared = Shared {
            class: pf.ids.class,
            subsystem_vendor: pf.ids.subsystem_vendor,
            numa_node: pf.location.numa_node,
            local_cpus: pf.local_cpus.clone(),
            pcie_link: pf.pcie_link.clone(),
        };
        let rdma = pf.rdma.first().map(|first| rdma::FromPf {
            firmware: first.firmware_version.clone(),
            ports: first.ports.clone(),
        });
        let rdma = rdma.unwrap_or_default();
        self.by_pf
            .insert(pf.address, Some(Inherited { shared, rdma }));
    }

    /// What the VFs of `pf` inherit, read on first use.
    pub(crate) fn of<B: Backend>(
        &mut self,
        r: &mut Reader<'_, B>,
        pf: &Parent,
        vf: &Function,
    ) -> Option<&Inherited> {
        self.by_pf
            .entry(pf.address)
            .or_insert_with(|| {
                let f = Function {
                    address: pf.address,
                    dir: pf.dir.clone(),
                    // Only the address and directory are read below.
                    vendor: vf.vendor,
                    device: vf.device,
                    physfn: function::Physfn::None,
                };
                let shared = Shared::read(r, &f)?;
                let rdma = rdma::from_pf(r, &f);
                Some(Inherited { shared, rdma })
            })
            .as_ref()
    }
}
