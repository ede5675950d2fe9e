//! Discovery: a sysfs tree in, an [`Inventory`] out.
//!
//! Walks `bus/pci/devices`, keeps the AINIC functions of the allow-list and
//! the GPUs, reads what Linux says about each (see the crate docs of
//! [`crate::model`] for the fields), and classifies every GPU–NIC pair.
//! Only an unusable root is an error; every other problem costs one
//! attribute or one device and leaves a line in [`Inventory::warnings`].

mod chardev;
mod function;
mod net;
mod parallel;
mod rdma;
mod reader;
mod recheck;
mod scan;
mod shared;
mod sriov;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::affinity::classify;
use crate::model::{Gpu, GpuNicLink, Inventory, NicFunction};
use crate::sysfs::{Backend, FsError, Sysfs};

use chardev::{CharDevices, ClassEntries};
use reader::Reader;

pub use recheck::{Recheck, recheck, recheck_in};

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
    /// Threads reading `bus/pci/devices`; 0 (the default) picks one per
    /// 256 entries, at most 8 and at most the CPUs available.
    pub threads: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            nic_ids: vec![
                (AINIC_VENDOR, AINIC_PF_DEVICE),
                (AINIC_VENDOR, AINIC_VF_DEVICE),
            ],
            gpu_vendors: vec![AMD_VENDOR, NVIDIA_VENDOR],
            threads: 0,
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

    /// How many threads read `entries` PCI functions (at least 1).
    pub fn workers(&self, entries: usize) -> usize {
        const ENTRIES_PER_WORKER: usize = 256;
        const MAX_WORKERS: usize = 8;
        let wanted = if self.threads > 0 {
            self.threads
        } else {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            cpus.min(MAX_WORKERS)
                .min(entries.div_ceil(ENTRIES_PER_WORKER))
        };
        wanted.clamp(1, entries.max(1))
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
///
/// Large trees are read by several threads (see [`DiscoveryConfig::threads`]);
/// the result is the same as reading them in one.
pub fn discover(sysfs_root: &Path, config: &DiscoveryConfig) -> Result<Inventory, DiscoverError> {
    let fs = Sysfs::open(sysfs_root);
    let names = device_names(&fs).map_err(|e| match e {
        DiscoverError::NoPciDevices { path, source, .. } => DiscoverError::NoPciDevices {
            root: sysfs_root.to_path_buf(),
            path: sysfs_root.join(path),
            source,
        },
    })?;
    // Both steps are split over threads the same way (and the results put
    // back in entry order): first the char devices, then the functions.
    let listed = ClassEntries::list(&fs);
    let class_workers = config.workers(listed.entries.len());
    let reads = parallel::map_runs(
        sysfs_root,
        &fs,
        class_workers,
        &listed.entries,
        chardev::read_entries,
    );
    let mut r = Reader::new(&fs);
    let chars = CharDevices::assemble(&mut r, listed, reads.into_iter().flatten().collect());
    let workers = config.workers(names.len());
    let found = parallel::map_runs(sysfs_root, &fs, workers, &names, |fs, run| {
        scan::scan(fs, config, &chars, run)
    });
    Ok(assemble(r, found))
}

/// [`discover()`] over any [`Backend`] (an in-memory tree in tests), in the
/// calling thread.
pub fn discover_in<B: Backend>(
    fs: &Sysfs<B>,
    config: &DiscoveryConfig,
) -> Result<Inventory, DiscoverError> {
    let names = device_names(fs)?;
    let listed = ClassEntries::list(fs);
    let reads = chardev::read_entries(fs, &listed.entries);
    let mut r = Reader::new(fs);
    let chars = CharDevices::assemble(&mut r, listed, reads);
    let found = scan::scan(fs, config, &chars, &names);
    Ok(assemble(r, vec![found]))
}

/// The entry names of `bus/pci/devices`, sorted.
fn device_names<B: Backend>(fs: &Sysfs<B>) -> Result<Vec<String>, DiscoverError> {
    const DEVICES: &str = "bus/pci/devices";
    let entries = fs
        .list(DEVICES)
        .map_err(|source| DiscoverError::NoPciDevices {
            root: PathBuf::new(),
            path: PathBuf::from(DEVICES),
            source,
        })?;
    Ok(entries.into_iter().map(|(name, _)| name).collect())
}

/// The inventory from the parts read (in entry order) and the node-wide
/// reader; a warning repeated by several parts is kept once.
fn assemble<B: Backend>(mut r: Reader<'_, B>, found: Vec<scan::Found>) -> Inventory {
    let mut inventory = Inventory {
        rdma_cm: chardev::rdma_cm(&mut r),
        ..Inventory::default()
    };
    let mut warnings = r.into_warnings();
    let mut seen: HashSet<String> = warnings.iter().cloned().collect();
    for part in found {
        inventory.nics.extend(part.nics);
        inventory.gpus.extend(part.gpus);
        for warning in part.warnings {
            if seen.insert(warning.clone()) {
                warnings.push(warning);
            }
        }
    }
    inventory.nics.sort_by_key(|n| n.address);
    inventory.gpus.sort_by_key(|g| g.address);
    inventory.links = links(&inventory.gpus, &inventory.nics);
    inventory.warnings = warnings;
    inventory
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
