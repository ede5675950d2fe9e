//! Discovery: a sysfs tree in, an [`Inventory`] out.
//!
//! Walks `bus/pci/devices`, keeps the AINIC functions of the allow-list and
//! the GPUs, reads what Linux says about each (see the crate docs of
//! [`crate::model`] for the fields), and classifies every GPU–NIC pair.
//! Only an unusable root is an error; every other problem costs one
//! attribute or one device and leaves a line in [`Inventory::warnings`].

mod function;
mod net;
mod rdma;
mod reader;
mod sriov;

use std::path::{Path, PathBuf};

use crate::affinity::classify;
use crate::model::{Gpu, GpuNicLink, Inventory, NicFunction};
use crate::sysfs::{Backend, FsError, Sysfs};

use function::Function;
use reader::Reader;

/// PCI vendor ID of AMD Pensando (AINIC).
pub const AINIC_VENDOR: u16 = 0x1dd8;
/// PCI device ID of an AINIC physical function.
pub const AINIC_PF_DEVICE: u16 = 0x1002;
/// PCI device ID of an AINIC SR-IOV virtual function.
pub const AINIC_VF_DEVICE: u16 = 0x1003;
/// PCI vendor ID of AMD (GPUs).
pub const AMD_VENDOR: u16 = 0x1002;
/// PCI vendor ID of NVIDIA.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// Marketing names by subsystem vendor and device.
const PRODUCT_NAMES: &[((u16, u16), &str)] = &[((AINIC_VENDOR, 0x5201), "Pollara 400")];

/// What discovery looks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// `(vendor, device)` pairs of the NIC functions to inventory.
    /// Default: the AINIC PF and VF.
    pub nic_ids: Vec<(u16, u16)>,
    /// Vendors whose display (class `0x03xxxx`) and processing-accelerator
    /// (class `0x1200xx`) functions are GPUs. Default: AMD and NVIDIA.
    pub gpu_vendors: Vec<u16>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            nic_ids: vec![
                (AINIC_VENDOR, AINIC_PF_DEVICE),
                (AINIC_VENDOR, AINIC_VF_DEVICE),
            ],
            gpu_vendors: vec![AMD_VENDOR, NVIDIA_VENDOR],
        }
    }
}

impl DiscoveryConfig {
    /// True when `(vendor, device)` is on the NIC allow-list.
    pub fn is_nic(&self, vendor: u16, device: u16) -> bool {
        self.nic_ids.contains(&(vendor, device))
    }

    /// True when a function of `vendor` may be a GPU (its class decides).
    pub fn is_gpu_vendor(&self, vendor: u16) -> bool {
        self.gpu_vendors.contains(&vendor)
    }

    /// True when `class` is a display or processing-accelerator class.
    pub fn is_gpu_class(class: u32) -> bool {
        class >> 16 == 0x03 || class >> 8 == 0x1200
    }
}

/// The marketing name of a function with these subsystem IDs, if known.
pub fn product_name(subsystem_vendor: u16, subsystem_device: u16) -> Option<&'static str> {
    PRODUCT_NAMES
        .iter()
        .find(|(ids, _)| *ids == (subsystem_vendor, subsystem_device))
        .map(|(_, name)| *name)
}

/// Why discovery could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The root has no readable `bus/pci/devices` directory.
    #[error("sysfs root {root} is unusable: cannot list {path}: {source}")]
    NoPciDevices {
        /// The sysfs root given.
        root: PathBuf,
        /// The directory that could not be listed.
        path: PathBuf,
        /// Why.
        source: FsError,
    },
}

/// Discovers the AINICs and GPUs below the sysfs root `sysfs_root`.
pub fn discover(sysfs_root: &Path, config: &DiscoveryConfig) -> Result<Inventory, DiscoverError> {
    discover_in(&Sysfs::open(sysfs_root), config).map_err(|e| match e {
        DiscoverError::NoPciDevices { path, source, .. } => DiscoverError::NoPciDevices {
            root: sysfs_root.to_path_buf(),
            path: sysfs_root.join(path),
            source,
        },
    })
}

/// [`discover`] over any [`Backend`] (an in-memory tree in tests).
pub fn discover_in<B: Backend>(
    fs: &Sysfs<B>,
    config: &DiscoveryConfig,
) -> Result<Inventory, DiscoverError> {
    const DEVICES: &str = "bus/pci/devices";
    let entries = fs
        .list(DEVICES)
        .map_err(|source| DiscoverError::NoPciDevices {
            root: PathBuf::new(),
            path: PathBuf::from(DEVICES),
            source,
        })?;
    let mut r = Reader::new(fs);
    let chars = rdma::CharDevices::read(&mut r);
    let mut vf_links = sriov::VfLinks::default();
    let mut inventory = Inventory::default();
    for (name, _) in entries {
        let Some(f) = function::identify(&mut r, &name) else {
            continue;
        };
        if config.is_nic(f.vendor, f.device) {
            inventory
                .nics
                .extend(read_nic(&mut r, &f, &chars, &mut vf_links));
        } else if config.is_gpu_vendor(f.vendor) {
            inventory.gpus.extend(read_gpu(&mut r, &f));
        }
    }
    inventory.rdma_cm = rdma::rdma_cm(&mut r);
    inventory.nics.sort_by_key(|n| n.address);
    inventory.gpus.sort_by_key(|g| g.address);
    inventory.links = links(&inventory.gpus, &inventory.nics);
    inventory.warnings = r.into_warnings();
    Ok(inventory)
}

fn read_nic<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    chars: &rdma::CharDevices,
    vf_links: &mut sriov::VfLinks,
) -> Option<NicFunction> {
    let ids = function::ids(r, f)?;
    let location = function::location(r, f)?;
    let kind = sriov::kind(r, f, vf_links)?;
    let product_name = match (ids.subsystem_vendor, ids.subsystem_device) {
        (Some(v), Some(d)) => product_name(v, d).map(str::to_string),
        _ => None,
    };
    Some(NicFunction {
        address: f.address,
        kind,
        ids,
        product_name,
        driver: function::driver(r, f),
        location,
        local_cpus: function::local_cpus(r, f),
        pcie_link: function::pcie_link(r, f),
        netdevs: net::netdevs(r, f),
        rdma: rdma::rdma_devices(r, f, chars),
    })
}

/// A GPU, when `f` has a GPU class (other functions of GPU vendors, such as
/// audio or bridges, are ignored quietly).
fn read_gpu<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<Gpu> {
    let ids = function::ids(r, f)?;
    if !DiscoveryConfig::is_gpu_class(ids.class) {
        return None;
    }
    Some(Gpu {
        address: f.address,
        ids,
        driver: function::driver(r, f),
        location: function::location(r, f)?,
    })
}

/// Every GPU × NIC pair, GPU-major, both already sorted by address.
fn links(gpus: &[Gpu], nics: &[NicFunction]) -> Vec<GpuNicLink> {
    gpus.iter()
        .flat_map(|g| {
            nics.iter().map(move |n| GpuNicLink {
                gpu: g.address,
                nic: n.address,
                affinity: classify(&g.location, &n.location),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
