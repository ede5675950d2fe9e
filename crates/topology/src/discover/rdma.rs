//! RDMA devices of a function (`infiniband/<ibdev>`), their ports, and the
//! character devices that open them (read by [`super::chardev`]).

use crate::model::{RdmaDevice, RdmaPort};
use crate::sysfs::{Backend, parse};

use super::chardev::CharDevices;
use super::function::Function;
use super::reader::{IfMissing, Reader};

/// The RDMA devices of `f`, by name, with their ports and char devices.
pub(crate) fn rdma_devices<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    chars: &CharDevices,
) -> Vec<RdmaDevice> {
    let who = f.who();
    let ib = format!("{}/infiniband", f.dir);
    let names = match r.fs.list(&ib) {
        Ok(entries) => entries.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        Err(_) if !r.fs.exists(&ib) => return Vec::new(),
        Err(e) => {
            r.warn(&who, format!("cannot list infiniband: {e}"));
            return Vec::new();
        }
    };
    names
        .into_iter()
        .map(|name| RdmaDevice {
            firmware_version: firmware_version(r, f, &name),
            ports: ports(r, f, &name),
            uverbs: chars.verbs(&name),
            umad: chars.umad(&name),
            issm: chars.issm(&name),
            name,
        })
        .collect()
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

/// Port `number` of the RDMA device `ibdev` of `f`.
pub(crate) fn port<B: Backend>(
    r: &mut Reader<'_, B>,
    f: &Function,
    ibdev: &str,
    number: u32,
) -> RdmaPort {
    let who = f.who();
    let file = |attr: &str| format!("infiniband/{ibdev}/ports/{number}/{attr}");
    RdmaPort {
        number,
        state: r.field(
            &who,
            &f.dir,
            &file("state"),
            parse::port_state,
            IfMissing::Warn,
        ),
        phys_state: r.field(
            &who,
            &f.dir,
            &file("phys_state"),
            parse::port_state,
            IfMissing::Warn,
        ),
        rate: r.field(&who, &f.dir, &file("rate"), parse::text, IfMissing::Warn),
        link_layer: r.field(
            &who,
            &f.dir,
            &file("link_layer"),
            parse::text,
            IfMissing::Warn,
        ),
    }
}
