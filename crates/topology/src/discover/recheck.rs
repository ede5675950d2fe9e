//! The cheap safety-net rescan: re-reads only the facts of a held
//! [`Inventory`] that no kernel event announces, and says whether any of
//! them moved. The node agent runs it every rescan interval while kernel
//! events drive rediscovery, and rediscovers in full only when it finds a
//! difference.
//!
//! What the events already cover, and so is not read here: functions
//! added, removed, bound or unbound, VFs created, RDMA and char devices
//! added or removed (uevents of the `pci`, `net` and `infiniband*`
//! subsystems); netdevs added, removed, renamed, going up or down, with a
//! new MTU or address (rtnetlink link messages). What is left, read here
//! for each function that is not a VF: its PCIe link (speed, width), NUMA
//! node and local CPUs, each held netdev's files, each held RDMA device's
//! firmware version and port files. A VF's link and RDMA ports follow its
//! PF's, or change with its netdev (a link message), so the VFs — 2,048 of
//! the 2,056 functions of an 8 PF × 256 VF node — are not re-read; the
//! agent's periodic full rediscovery bounds how long such a change could
//! go unseen.
//!
//! Every value is read and parsed by the same code as discovery, so
//! "unchanged" means a discovery now would have found the same value.

use std::path::Path;

use crate::model::{Inventory, NicFunction};
use crate::pci::PciAddress;
use crate::sysfs::{Backend, Sysfs};

use super::function::{self, Function};
use super::reader::Reader;
use super::{net, rdma};

/// What a [`recheck()`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recheck {
    /// Every fact re-read is as held.
    Unchanged,
    /// The first fact found to differ (or to be unreadable now).
    Changed {
        /// The function it belongs to.
        function: PciAddress,
        /// Which fact, for the log (e.g. `RDMA port ionic_0/1`).
        what: String,
    },
}

/// Re-reads the unannounced facts of `held` below the sysfs root
/// `sysfs_root` (see the module docs for which).
pub fn recheck(sysfs_root: &Path, held: &Inventory) -> Recheck {
    recheck_in(&Sysfs::open(sysfs_root), held)
}

/// [`recheck()`] over any [`Backend`].
pub fn recheck_in<B: Backend>(fs: &Sysfs<B>, held: &Inventory) -> Recheck {
    let mut r = Reader::new(fs);
    for nic in held.nics.iter().filter(|n| n.is_pf()) {
        if let Some(what) = first_difference(&mut r, nic) {
            return Recheck::Changed {
                function: nic.address,
                what,
            };
        }
    }
    Recheck::Unchanged
}

/// The first unannounced fact of `held` that reads differently now.
fn first_difference<B: Backend>(r: &mut Reader<'_, B>, held: &NicFunction) -> Option<String> {
    // The entry link itself: the kernel follows it (openat2), so no
    // directory has to be resolved or listed here.
    let f = Function {
        address: held.address,
        dir: format!("bus/pci/devices/{}", held.address),
        vendor: held.ids.vendor,
        device: held.ids.device,
        physfn: function::Physfn::None,
    };
    if function::pcie_link(r, &f) != held.pcie_link {
        return Some("PCIe link".into());
    }
    if function::numa_node(r, &f) != held.location.numa_node {
        return Some("NUMA node".into());
    }
    if function::local_cpus(r, &f) != held.local_cpus {
        return Some("local CPUs".into());
    }
    for netdev in &held.netdevs {
        if net::netdev(r, &f, netdev.name.clone()) != *netdev {
            return Some(format!("netdev {}", netdev.name));
        }
    }
    for device in &held.rdma {
        if rdma::firmware_version(r, &f, &device.name) != device.firmware_version {
            return Some(format!("firmware of {}", device.name));
        }
        for port in &device.ports {
            if rdma::port(r, &f, &device.name, port.number) != *port {
                return Some(format!("RDMA port {}/{}", device.name, port.number));
            }
        }
    }
    None
}
