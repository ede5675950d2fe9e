//! RDMA devices of a function (`infiniband/<ibdev>`) and the character
//! devices that open them (`class/infiniband_verbs`, `class/infiniband_mad`,
//! `class/misc/rdma_cm`).

use std::collections::HashMap;

use crate::model::{CharDevice, RdmaDevice, RdmaPort};
use crate::sysfs::{Backend, EntryKind, parse};

use super::function::Function;
use super::reader::{IfMissing, Reader};

/// Where the RDMA character device nodes live.
const DEV_DIR: &str = "/dev/infiniband";

/// The verbs and MAD char devices of the node, keyed by RDMA device name.
#[derive(Debug, Default)]
pub(crate) struct CharDevices {
    verbs: HashMap<String, CharDevice>,
    /// (port, device) pairs.
    umad: HashMap<String, Vec<(u32, CharDevice)>>,
    issm: HashMap<String, Vec<(u32, CharDevice)>>,
}

impl CharDevices {
    /// Reads `class/infiniband_verbs` and `class/infiniband_mad`; absent
    /// classes (no RDMA stack loaded) give no devices and no warning.
    pub(crate) fn read<B: Backend>(r: &mut Reader<'_, B>) -> Self {
        let mut all = CharDevices::default();
        for (name, dir) in class_entries(r, "class/infiniband_verbs", &["uverbs"]) {
            let who = format!("class/infiniband_verbs/{name}");
            let (Some(ibdev), Some(dev)) = ibdev_and_dev(r, &who, &name, &dir) else {
                continue;
            };
            all.verbs.insert(ibdev, dev);
        }
        for (name, dir) in class_entries(r, "class/infiniband_mad", &["umad", "issm"]) {
            let who = format!("class/infiniband_mad/{name}");
            let (Some(ibdev), Some(dev)) = ibdev_and_dev(r, &who, &name, &dir) else {
                continue;
            };
            let Some(port) = r.field(&who, &dir, "port", parse::decimal, IfMissing::Warn) else {
                continue;
            };
            let map = if name.starts_with("umad") {
                &mut all.umad
            } else {
                &mut all.issm
            };
            map.entry(ibdev).or_default().push((port, dev));
        }
        for list in all.umad.values_mut().chain(all.issm.values_mut()) {
            list.sort_by_key(|(port, dev)| (*port, dev.path.clone()));
        }
        all
    }

    fn of(map: &HashMap<String, Vec<(u32, CharDevice)>>, ibdev: &str) -> Vec<CharDevice> {
        map.get(ibdev)
            .map(|l| l.iter().map(|(_, d)| d.clone()).collect())
            .unwrap_or_default()
    }
}

/// `/dev/infiniband/rdma_cm` from `class/misc/rdma_cm/dev`, when present.
pub(crate) fn rdma_cm<B: Backend>(r: &mut Reader<'_, B>) -> Option<CharDevice> {
    let (major, minor) = r.field(
        "class/misc/rdma_cm",
        "class/misc/rdma_cm",
        "dev",
        parse::dev_numbers,
        IfMissing::Quiet,
    )?;
    Some(CharDevice {
        path: format!("{DEV_DIR}/rdma_cm"),
        major,
        minor,
    })
}

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
            firmware_version: r.field(
                &who,
                &f.dir,
                &format!("infiniband/{name}/fw_ver"),
                parse::text,
                IfMissing::Quiet,
            ),
            ports: ports(r, f, &name),
            uverbs: chars.verbs.get(&name).cloned(),
            umad: CharDevices::of(&chars.umad, &name),
            issm: CharDevices::of(&chars.issm, &name),
            name,
        })
        .collect()
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
        .map(|number| {
            let file = |attr: &str| format!("{rel}/{number}/{attr}");
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
        })
        .collect()
}

/// `(name, resolved directory)` of the entries of a class directory whose
/// names start with one of `prefixes`; nothing when the class is absent.
/// Each link is resolved once here, not once per file read below it.
fn class_entries<B: Backend>(
    r: &mut Reader<'_, B>,
    class: &str,
    prefixes: &[&str],
) -> Vec<(String, String)> {
    if !r.fs.exists(class) {
        return Vec::new();
    }
    let entries = match r.fs.list(class) {
        Ok(entries) => entries,
        Err(e) => {
            r.warn(class, format!("cannot list: {e}"));
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for (name, _) in entries {
        if !prefixes.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let who = format!("{class}/{name}");
        match r.fs.resolve(&who) {
            Ok((dir, EntryKind::Dir)) => found.push((name, dir)),
            Ok(_) => r.warn(&who, "not a directory; skipped".into()),
            Err(e) => r.warn(&who, format!("cannot resolve: {e}; skipped")),
        }
    }
    found
}

/// The `ibdev` and `dev` of a char device entry, warning under its class path.
fn ibdev_and_dev<B: Backend>(
    r: &mut Reader<'_, B>,
    who: &str,
    name: &str,
    dir: &str,
) -> (Option<String>, Option<CharDevice>) {
    let ibdev = r.field(who, dir, "ibdev", parse::text, IfMissing::Warn);
    let dev = r
        .field(who, dir, "dev", parse::dev_numbers, IfMissing::Warn)
        .map(|(major, minor)| CharDevice {
            path: format!("{DEV_DIR}/{name}"),
            major,
            minor,
        });
    (ibdev, dev)
}
