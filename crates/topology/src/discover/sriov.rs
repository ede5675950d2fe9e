//! SR-IOV relations: a PF's `virtfnN` links and a VF's `physfn` link.

use std::collections::HashMap;

use crate::model::FunctionKind;
use crate::pci::PciAddress;
use crate::sysfs::{Backend, parse};

use super::function::{Function, Physfn};
use super::reader::{IfMissing, Reader};

/// What one discovery thread learnt of each PF it met (through the PF or
/// one of its VFs): its VFs (`virtfnN` → address, N order) and the vendor
/// and device ID its VFs have.
#[derive(Debug, Default)]
pub(crate) struct VfLinks {
    by_pf: HashMap<PciAddress, Vec<(u32, PciAddress)>>,
    vf_ids: HashMap<PciAddress, Option<(u16, u16)>>,
}

impl VfLinks {
    fn of<B: Backend>(
        &mut self,
        r: &mut Reader<'_, B>,
        pf: PciAddress,
        pf_dir: &str,
    ) -> &[(u32, PciAddress)] {
        self.by_pf
            .entry(pf)
            .or_insert_with(|| read_virtfns(r, &pf.to_string(), pf_dir))
    }

    /// The vendor and device ID of `pf`'s VFs: the PF's `vendor` and
    /// `sriov_vf_device`, which Linux copies into each VF. `None` when
    /// either does not read (the VF's own files are read then, and warn).
    pub(crate) fn vf_ids<B: Backend>(
        &mut self,
        r: &mut Reader<'_, B>,
        pf: &Parent,
    ) -> Option<(u16, u16)> {
        *self.vf_ids.entry(pf.address).or_insert_with(|| {
            let vendor = r.try_field(&pf.dir, "vendor", parse::hex_u16).ok()??;
            let device = r.try_field(&pf.dir, "sriov_vf_device", parse::hex_u16);
            Some((vendor, device.ok()??))
        })
    }
}

/// A VF's PF, as found through the VF's `physfn` link.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub address: PciAddress,
    pub dir: String,
}

/// PF or VF, with its relations; `None` (device skipped, warned) for a VF
/// whose parent or index cannot be established.
pub(crate) fn kind<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    links: &mut VfLinks,
) -> Option<FunctionKind> {
    let who = f.who();
    let (pf, pf_dir) = match &f.physfn {
        Physfn::Parent(parent) => (parent.address, &parent.dir),
        Physfn::None => {
            let total_vfs = r.field(
                &who,
                &f.dir,
                "sriov_totalvfs",
                parse::decimal,
                IfMissing::Quiet,
            );
            let vfs = links
                .of(r, f.address, &f.dir)
                .iter()
                .map(|(_, a)| *a)
                .collect();
            return Some(FunctionKind::Pf { total_vfs, vfs });
        }
        Physfn::Broken(why) => {
            r.warn(
                &who,
                format!("cannot resolve physfn link: {why}; device skipped"),
            );
            return None;
        }
    };
    let index = links
        .of(r, pf, pf_dir)
        .iter()
        .find(|(_, vf)| *vf == f.address)
        .map(|(n, _)| *n);
    match index {
        Some(index) => Some(FunctionKind::Vf { physfn: pf, index }),
        None => {
            r.warn(
                &who,
                format!("no virtfnN link of {pf} points here; device skipped"),
            );
            None
        }
    }
}

/// What the `physfn` link of the function in `dir` says. Resolved first
/// of all: on a node of VFs the link is there far more often than not.
pub(crate) fn physfn<B: Backend>(r: &Reader<'_, B>, dir: &str) -> Physfn {
    let link = format!("{dir}/physfn");
    match resolve_function(r, &link) {
        Ok((address, dir)) => Physfn::Parent(Parent { address, dir }),
        Err(_) if !r.fs.exists(&link) => Physfn::None,
        Err(why) => Physfn::Broken(why),
    }
}

/// Resolves a link to a function directory: its address and directory.
fn resolve_function<B: Backend>(
    r: &Reader<'_, B>,
    link: &str,
) -> Result<(PciAddress, String), String> {
    let (dir, _) = r.fs.resolve(link).map_err(|e| e.to_string())?;
    let name = dir.rsplit('/').next().unwrap_or_default();
    let address = name
        .parse()
        .map_err(|_| format!("target {dir} is not named by a PCI address"))?;
    Ok((address, dir))
}

fn read_virtfns<B: Backend>(r: &mut Reader<'_, B>, who: &str, dir: &str) -> Vec<(u32, PciAddress)> {
    let Ok(entries) = r.fs.list(dir) else {
        return Vec::new();
    };
    let mut vfs = Vec::new();
    for (name, _) in entries {
        let Some(n) = name
            .strip_prefix("virtfn")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match resolve_function(r, &format!("{dir}/{name}")) {
            Ok((address, _)) => vfs.push((n, address)),
            Err(why) => r.warn(who, format!("cannot resolve {name} link: {why}")),
        }
    }
    vfs.sort();
    vfs
}
