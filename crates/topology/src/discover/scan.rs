//! Reading a run of `bus/pci/devices` entries into NICs and GPUs: the
//! unit of work of one discovery thread.

use crate::model::{Gpu, NicFunction};
use crate::pci::PciIds;
use crate::sysfs::{Backend, Sysfs};

use super::chardev::CharDevices;
use super::function::{self, Function, Physfn};
use super::reader::Reader;
use super::{DiscoveryConfig, net, product_name, rdma, shared, sriov};

/// What one run of entries held.
pub(crate) struct Found {
    pub nics: Vec<NicFunction>,
    pub gpus: Vec<Gpu>,
    pub warnings: Vec<String>,
}

/// Reads the entries `names` of `bus/pci/devices`.
pub(crate) fn scan<B: Backend>(
    fs: &Sysfs<B>,
    config: &DiscoveryConfig,
    chars: &CharDevices,
    names: &[String],
) -> Found {
    let mut r = Reader::new(fs);
    let mut vf_links = sriov::VfLinks::default();
    let mut by_pf = shared::ByPf::default();
    let (mut nics, mut gpus) = (Vec::new(), Vec::new());
    for name in names {
        let Some(f) = function::identify(&mut r, name, &mut vf_links) else {
            continue;
        };
        if config.is_nic(f.vendor, f.device) {
            nics.extend(read_nic(&mut r, &f, chars, &mut vf_links, &mut by_pf));
        } else if config.is_gpu_vendor(f.vendor) {
            gpus.extend(read_gpu(&mut r, &f));
        }
    }
    Found {
        nics,
        gpus,
        warnings: r.into_warnings(),
    }
}

/// A NIC function; a VF takes what it shares with its PF from the PF
/// (see [`shared`]).
fn read_nic<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    chars: &CharDevices,
    vf_links: &mut sriov::VfLinks,
    by_pf: &mut shared::ByPf,
) -> Option<NicFunction> {
    let kind = sriov::kind(r, f, vf_links)?;
    let (facts, from_pf) = match &f.physfn {
        Physfn::Parent(pf) => match by_pf.of(r, pf, f) {
            Some(inherited) => (inherited.shared.clone(), Some(inherited.rdma.clone())),
            None => {
                let why = format!("its PF {} has no usable class; device skipped", pf.address);
                r.warn(&f.who(), why);
                return None;
            }
        },
        _ => (shared::Shared::read(r, f)?, None),
    };
    let ids = PciIds {
        vendor: f.vendor,
        device: f.device,
        subsystem_vendor: facts.subsystem_vendor,
        subsystem_device: function::subsystem(r, f, "subsystem_device"),
        class: facts.class,
    };
    let product_name = match (ids.subsystem_vendor, ids.subsystem_device) {
        (Some(v), Some(d)) => product_name(v, d).map(str::to_string),
        _ => None,
    };
    let nic = NicFunction {
        address: f.address,
        kind,
        ids,
        product_name,
        driver: function::driver(r, f),
        location: function::place(r, f, |_| facts.numa_node)?,
        local_cpus: facts.local_cpus,
        pcie_link: facts.pcie_link,
        netdevs: net::netdevs(r, f),
        rdma: rdma::rdma_devices(r, f, chars, from_pf.as_ref()),
    };
    if from_pf.is_none() {
        // Its VFs, met later by this thread, take these without reading
        // the PF's files again.
        by_pf.remember(&nic);
    }
    Some(nic)
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
