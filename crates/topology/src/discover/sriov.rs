//! SR-IOV relations: a PF's `virtfnN` links and a VF's `physfn` link.

use std::collections::HashMap;

use crate::model::FunctionKind;
use crate::pci::PciAddress;
use crate::sysfs::{Backend, parse};

use super::function::Function;
use super::reader::{IfMissing, Reader};

/// The VFs of each PF seen so far (`virtfnN` → address, N order), read
/// once per PF whichever of the PF or its VFs is met first.
#[derive(Debug, Default)]
pub(crate) struct VfLinks {
    by_pf: HashMap<PciAddress, Vec<(u32, PciAddress)>>,
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
}

/// A function's place in SR-IOV: its kind and, for a VF, its PF.
pub(crate) struct Sriov {
    pub kind: FunctionKind,
    /// The VF's PF (address and directory); `None` for a PF.
    pub parent: Option<Parent>,
}

/// A VF's PF, as found through the VF's `physfn` link.
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
) -> Option<Sriov> {
    let who = f.who();
    // Resolved first: on a node of VFs the link is there far more often.
    let physfn = format!("{}/physfn", f.dir);
    let (pf, pf_dir) = match resolve_function(r, &physfn) {
        Ok(found) => found,
        Err(_) if !r.fs.exists(&physfn) => {
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
            return Some(Sriov {
                kind: FunctionKind::Pf { total_vfs, vfs },
                parent: None,
            });
        }
        Err(why) => {
            r.warn(
                &who,
                format!("cannot resolve physfn link: {why}; device skipped"),
            );
            return None;
        }
    };
    let index = links
        .of(r, pf, &pf_dir)
        .iter()
        .find(|(_, vf)| *vf == f.address)
        .map(|(n, _)| *n);
    match index {
        Some(index) => Some(Sriov {
            kind: FunctionKind::Vf { physfn: pf, index },
            parent: Some(Parent {
                address: pf,
                dir: pf_dir,
            }),
        }),
        None => {
            r.warn(
                &who,
                format!("no virtfnN link of {pf} points here; device skipped"),
            );
            None
        }
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
