//! RDMA devices of a function (`infiniband/<ibdev>`), their ports, and the
//! character devices that open them (read by [`super::chardev`]).

use crate::model::{RdmaDevice, RdmaPort};
use crate::sysfs::{Backend, parse};

use super::chardev::CharDevices;
use super::function::Function;
use super::reader::{IfMissing, Reader};

/// What a VF's RDMA devices take from its PF's first one: the adapter's
/// firmware, the port numbers, and each port's physical state and link
/// layer (the physical port is the PF's, shared by its VFs).
#[derive(Clone, Debug, Default)]
pub(crate) struct FromPf {
    pub firmware: Option<String>,
    pub ports: Vec<RdmaPort>,
}

/// The RDMA devices of `f`, by name, with their ports and char devices;
/// for a VF, what `from_pf` holds is not read again.
pub(crate) fn rdma_devices<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    chars: &CharDevices,
    from_pf: Option<&FromPf>,
) -> Vec<RdmaDevice> {
    let names = device_names(r, f);
    let sole = names.len() == 1;
    names
        .into_iter()
        .map(|name| {
            let nodes = chars.of(r, &f.dir, &name, sole);
            RdmaDevice {
                firmware_version: match from_pf {
                    Some(pf) => pf.firmware.clone(),
                    None => firmware_version(r, f, &name),
                },
                ports: match from_pf {
                    Some(pf) if !pf.ports.is_empty() => vf_ports(r, f, &name, &pf.ports),
                    _ => ports(r, f, &name),
                },
                uverbs: nodes.uverbs,
                umad: nodes.umad,
                issm: nodes.issm,
                name,
            }
        })
        .collect()
}

/// The names in `f`'s `infiniband` directory; none when it has none.
fn device_names<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Vec<String> {
    let ib = format!("{}/infiniband", f.dir);
    match r.fs.list(&ib) {
        Ok(entries) => entries.into_iter().map(|(n, _)| n).collect(),
        Err(_) if !r.fs.exists(&ib) => Vec::new(),
        Err(e) => {
            r.warn(&f.who(), format!("cannot list infiniband: {e}"));
            Vec::new()
        }
    }
}

/// What the VFs of the PF `f` take from its first RDMA device.
pub(crate) fn from_pf<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> FromPf {
    let Some(first) = device_names(r, f).into_iter().next() else {
        return FromPf::default();
    };
    FromPf {
        firmware: firmware_version(r, f, &first),
        ports: ports(r, f, &first),
    }
}

/// `infiniband/<ibdev>/fw_ver` of `f`.
pub(crate) fn firmware_version<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    ibdev: &str,
) -> Option<String> {
    let file = format!("infiniband/{ibdev}/fw_ver");
    r.field(&f.who(), &f.dir, &file, parse::text, IfMissing::Quiet)
}

/// The ports of `ibdev`, as listed.
fn ports<B: Backend>(r: &mut Reader<'_, B>, f: &Function, ibdev: &str) -> Vec<RdmaPort> {
    let who = f.who();
    let rel = format!("infiniband/{ibdev}/ports");
    let entries = match r.fs.list(&format!("{}/{rel}", f.dir)) {
        Ok(entries) => entries,
        Err(e) => {
            r.warn(&who, format!("cannot list {rel}: {e}"));
            return Vec::new();
        }
    };
    let mut numbers: Vec<u32> = Vec::new();
    for (name, _) in entries {
        match name.parse() {
            Ok(n) => numbers.push(n),
            Err(_) => r.warn(&who, format!("{rel}/{name} is not a port number")),
        }
    }
    numbers.sort_unstable();
    numbers
        .into_iter()
        .map(|number| port(r, f, ibdev, number))
        .collect()
}

/// The ports of a VF's `ibdev`: those of its PF (`physical`), the port's
/// logical state and rate read from the VF, its physical state and link
/// layer the PF's. A VF's RDMA device has its PF's ports; one that lacked
/// a port would say so in a warning (its state cannot be read).
fn vf_ports<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    ibdev: &str,
    physical: &[RdmaPort],
) -> Vec<RdmaPort> {
    physical
        .iter()
        .map(|pf_port| RdmaPort {
            number: pf_port.number,
            state: state(r, f, ibdev, pf_port.number),
            phys_state: pf_port.phys_state.clone(),
            rate: rate(r, f, ibdev, pf_port.number),
            link_layer: pf_port.link_layer.clone(),
        })
        .collect()
}

/// Port `number` of the RDMA device `ibdev` of `f`.
pub(crate) fn port<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    ibdev: &str,
    number: u32,
) -> RdmaPort {
    let file = |attr: &str| format!("infiniband/{ibdev}/ports/{number}/{attr}");
    RdmaPort {
        number,
        state: state(r, f, ibdev, number),
        phys_state: r.field(
            &f.who(),
            &f.dir,
            &file("phys_state"),
            parse::port_state,
            IfMissing::Warn,
        ),
        rate: rate(r, f, ibdev, number),
        link_layer: r.field(
            &f.who(),
            &f.dir,
            &file("link_layer"),
            parse::text,
            IfMissing::Warn,
        ),
    }
}

fn state<B: Backend>(r: &mut Reader<'_, B>, f: &Function, ibdev: &str, n: u32) -> Option<String> {
    let file = format!("infiniband/{ibdev}/ports/{n}/state");
    r.field(&f.who(), &f.dir, &file, parse::port_state, IfMissing::Warn)
}

fn rate<B: Backend>(r: &mut Reader<'_, B>, f: &Function, ibdev: &str, n: u32) -> Option<String> {
    let file = format!("infiniband/{ibdev}/ports/{n}/rate");
    r.field(&f.who(), &f.dir, &file, parse::text, IfMissing::Warn)
}
