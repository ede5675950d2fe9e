//! One PCI function: where its directory is, who it is, where it sits.

use crate::affinity::nearest_switch;
use crate::model::{PcieLink, PcieLocation};
use crate::pci::{PciAddress, PciIds};
use crate::sysfs::Backend;
use crate::sysfs::parse;

use super::reader::{IfMissing, Reader};
use super::sriov::{self, Parent, VfLinks};

/// A PCI function found under `bus/pci/devices`, identified.
#[derive(Clone, Debug)]
pub(crate) struct Function {
    /// Its address (the `bus/pci/devices` entry name).
    pub address: PciAddress,
    /// Its directory with all links resolved, relative to the root.
    pub dir: String,
    /// Vendor and device (class and subsystem are read on demand).
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
    /// Its `physfn` link: whether it is a VF, and of which PF.
    pub physfn: Physfn,
}

/// What a function's `physfn` link says.
#[derive(Clone, Debug)]
pub(crate) enum Physfn {
    /// No link: not a VF.
    None,
    /// A VF of this PF.
    Parent(Parent),
    /// A link that does not lead to a function, and why.
    Broken(String),
}

impl Function {
    /// The name used in warnings.
    pub(super) fn who(&self) -> String {
        self.address.to_string()
    }
}

/// Resolves `bus/pci/devices/<name>` and reads vendor and device (a VF's
/// are its PF's vendor and VF device ID, as Linux sets them, read once per
/// PF through `links`); `None` (with a warning naming it) when the entry
/// cannot be used.
pub(crate) fn identify<B: Backend>(
    r: &mut Reader<'_, B>,
    name: &str,
    links: &mut VfLinks,
) -> Option<Function> {
    let Ok(address) = name.parse::<PciAddress>() else {
        r.warn(
            &format!("bus/pci/devices/{name}"),
            "not a PCI address; skipped".into(),
        );
        return None;
    };
    let dir = match r.fs.resolve(&format!("bus/pci/devices/{name}")) {
        Ok((dir, crate::sysfs::EntryKind::Dir)) => dir,
        Ok(_) => {
            r.warn(
                name,
                "bus/pci/devices entry is not a directory; device skipped".into(),
            );
            return None;
        }
        Err(e) => {
            r.warn(
                name,
                format!("cannot resolve bus/pci/devices link: {e}; device skipped"),
            );
            return None;
        }
    };
    if dir.rsplit('/').next() != Some(name) {
        r.warn(
            name,
            format!("bus/pci/devices entry leads to {dir}, another function; device skipped"),
        );
        return None;
    }
    let physfn = sriov::physfn(r, &dir);
    let from_pf = match &physfn {
        Physfn::Parent(pf) => links.vf_ids(r, pf),
        _ => None,
    };
    let (vendor, device) = match from_pf {
        Some(ids) => ids,
        None => (
            r.required(name, &dir, "vendor", parse::hex_u16)?,
            r.required(name, &dir, "device", parse::hex_u16)?,
        ),
    };
    Some(Function {
        address,
        dir,
        vendor,
        device,
        physfn,
    })
}

/// The full identity registers; `None` (device skipped) without a class.
pub(crate) fn ids<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<PciIds> {
    let class = class(r, f)?;
    Some(PciIds {
        vendor: f.vendor,
        device: f.device,
        subsystem_vendor: subsystem(r, f, "subsystem_vendor"),
        subsystem_device: subsystem(r, f, "subsystem_device"),
        class,
    })
}

/// `class`; `None` with a warning that `f` is skipped.
pub(crate) fn class<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<u32> {
    r.required(&f.who(), &f.dir, "class", parse::class_code)
}

/// `subsystem_vendor` or `subsystem_device` (`file`).
pub(crate) fn subsystem<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    file: &str,
) -> Option<u16> {
    r.field(&f.who(), &f.dir, file, parse::hex_u16, IfMissing::Warn)
}

/// The position in the PCIe tree, from the resolved directory
/// `devices/…/<host bridge>/<bridge>/…/<function>`; `None` (device skipped)
/// when the directory is not below a host bridge. The host bridge is the
/// last `pci…` component: usually right below `devices/`, but deeper on
/// Hyper-V virtual PCI (`devices/…/VMBUS:00/<guid>/pci0041:00/…`).
pub(crate) fn location<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<PcieLocation> {
    place(r, f, |r| numa_node(r, f))
}

/// [`location`] with the NUMA node from `numa_node`, asked only once the
/// position is known (a VF's node is its PF's).
pub(crate) fn place<'a, B: Backend>(
    r: &mut Reader<'a, B>,
    f: &Function,
    numa_node: impl FnOnce(&mut Reader<'a, B>) -> Option<u32>,
) -> Option<PcieLocation> {
    let who = f.who();
    let comps: Vec<&str> = f.dir.split('/').collect();
    let host_bridge = comps
        .iter()
        .rposition(|c| c.starts_with("pci"))
        .filter(|&i| comps[0] == "devices" && i >= 1 && i + 1 < comps.len());
    let (root, root_at) = match host_bridge {
        Some(i) => (comps[i].to_string(), i),
        None => {
            r.warn(
                &who,
                format!(
                    "resolves to {}, not below devices/pci<domain>:<bus>; device skipped",
                    f.dir
                ),
            );
            return None;
        }
    };
    let bridges: Vec<PciAddress> = comps[root_at + 1..comps.len() - 1]
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect();
    Some(PcieLocation {
        root,
        switch: nearest_switch(&bridges),
        bridges,
        numa_node: numa_node(r),
    })
}

/// `numa_node` (`-1`, no node, reads as `None`).
pub(crate) fn numa_node<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<u32> {
    r.field(
        &f.who(),
        &f.dir,
        "numa_node",
        parse::numa_node,
        IfMissing::Warn,
    )
}

/// The bound driver's name, from the `driver` link (not followed).
pub(crate) fn driver<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<String> {
    match r.fs.link_name(&format!("{}/driver", f.dir)) {
        Ok(name) => Some(name),
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            r.warn(&f.who(), format!("cannot read driver link: {e}"));
            None
        }
    }
}

/// `current_link_speed` and `current_link_width`.
pub(crate) fn pcie_link<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> PcieLink {
    let who = f.who();
    PcieLink {
        speed_gts: r.field(
            &who,
            &f.dir,
            "current_link_speed",
            parse::link_speed,
            IfMissing::Warn,
        ),
        width: r.field(
            &who,
            &f.dir,
            "current_link_width",
            parse::link_width,
            IfMissing::Warn,
        ),
    }
}

/// `local_cpulist`.
pub(crate) fn local_cpus<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Option<String> {
    r.field(
        &f.who(),
        &f.dir,
        "local_cpulist",
        parse::cpu_list,
        IfMissing::Warn,
    )
}
