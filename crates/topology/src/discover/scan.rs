//! Reading a run of `bus/pci/devices` entries into NICs and GPUs: the
//! unit of work of one discovery thread.

use crate::model::{Gpu, NicFunction};
use crate::sysfs::{Backend, Sysfs};

use super::chardev::CharDevices;
use super::function::{self, Function};
use super::reader::Reader;
use super::{DiscoveryConfig, net, product_name, rdma, sriov};

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
    let (mut nics, mut gpus) = (Vec::new(), Vec::new());
    for name in names {
        let Some(f) = function::identify(&mut r, name) else {
            continue;
        };
        if config.is_nic(f.vendor, f.device) {
            nics.extend(read_nic(&mut r, &f, chars, &mut vf_links));
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

fn read_nic<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    chars: &CharDevices,
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
