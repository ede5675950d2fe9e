//! The RDMA character devices of the node (`class/infiniband_verbs`,
//! `class/infiniband_mad`), keyed by the function whose RDMA device they
//! open or, where their link does not say, by the RDMA device's name.
//!
//! An entry's link (`../../devices/…/<function>/infiniband_verbs/uverbs5`)
//! names its function: reading it is one call, reading its `ibdev` file
//! three, for each of the 6,000 entries of an 8 PF × 256 VF node. The name
//! is read after all where a function has several RDMA devices.
//!
//! Read in three steps so that the middle one, a few files per entry and
//! thousands of entries on an SR-IOV node, can be split over threads:
//! [`ClassEntries::list`] names the entries, [`read_entries`] reads any run
//! of them, and [`CharDevices::assemble`] puts the runs back together in
//! entry order, warnings included, exactly as one thread would have.

use std::collections::HashMap;

use crate::model::CharDevice;
use crate::sysfs::{Backend, EntryKind, Sysfs, parse};

use super::reader::{IfMissing, Reader};

/// Where the RDMA character device nodes live.
const DEV_DIR: &str = "/dev/infiniband";

/// The classes read, with the entry name prefixes kept in each.
const CLASSES: [(&str, &[&str]); 2] = [
    ("class/infiniband_verbs", &["uverbs"]),
    ("class/infiniband_mad", &["umad", "issm"]),
];

/// The verbs and MAD char devices of the node.
#[derive(Debug, Default)]
pub(crate) struct CharDevices {
    /// By the directory of the function whose RDMA device they open.
    by_function: HashMap<String, Vec<Found>>,
    /// By RDMA device name, where the entry's link did not say.
    by_ibdev: HashMap<String, Vec<Found>>,
}

/// A char device, with the class entry it was found by.
#[derive(Clone, Debug)]
struct Found {
    entry: ClassEntry,
    dev: CharDevice,
}

/// Who an entry's device belongs to.
#[derive(Debug)]
enum Owner {
    /// The function in this directory.
    Function(String),
    /// The RDMA device of this name.
    Ibdev(String),
}

/// The char devices of one RDMA device.
#[derive(Debug, Default)]
pub(crate) struct DeviceNodes {
    pub uverbs: Option<CharDevice>,
    pub umad: Vec<CharDevice>,
    pub issm: Vec<CharDevice>,
}

/// One entry of a class directory, to be read.
#[derive(Clone, Debug)]
pub(crate) struct ClassEntry {
    class: &'static str,
    name: String,
}

/// The entries of both classes, and the warnings of listing each class.
#[derive(Debug, Default)]
pub(crate) struct ClassEntries {
    pub(crate) entries: Vec<ClassEntry>,
    /// Per class: its listing warning (if any), and how many entries it has.
    classes: Vec<(Vec<String>, usize)>,
}

/// What reading one entry gave.
#[derive(Debug)]
pub(crate) struct EntryRead {
    /// Warnings of resolving the entry's link (the entry is then skipped).
    resolve_warnings: Vec<String>,
    /// Warnings of reading its files.
    field_warnings: Vec<String>,
    /// Whose device it opens, and its device node.
    found: Option<(Owner, CharDevice)>,
}

impl ClassEntries {
    /// The entries of `class/infiniband_verbs` and `class/infiniband_mad`;
    /// absent classes (no RDMA stack loaded) give none and no warning.
    pub(crate) fn list<B: Backend>(fs: &Sysfs<B>) -> Self {
        let mut all = ClassEntries::default();
        for (class, prefixes) in CLASSES {
            let mut r = Reader::new(fs);
            let names = class_names(&mut r, class, prefixes);
            all.classes.push((r.into_warnings(), names.len()));
            all.entries
                .extend(names.into_iter().map(|name| ClassEntry { class, name }));
        }
        all
    }
}

/// Reads a run of entries, in order.
pub(crate) fn read_entries<B: Backend>(fs: &Sysfs<B>, entries: &[ClassEntry]) -> Vec<EntryRead> {
    entries.iter().map(|e| read_entry(fs, e)).collect()
}

impl CharDevices {
    /// The devices from the entries and what was read of them (in entry
    /// order); warnings go to `r` in the order one pass would meet them:
    /// per class, its listing, the links of its entries, then their files.
    pub(crate) fn assemble<B: Backend>(
        r: &mut Reader<'_, B>,
        listed: ClassEntries,
        reads: Vec<EntryRead>,
    ) -> Self {
        let mut all = CharDevices::default();
        let mut reads = listed.entries.iter().zip(reads);
        for (list_warnings, count) in listed.classes {
            r.extend_warnings(list_warnings);
            let class: Vec<_> = reads.by_ref().take(count).collect();
            for (_, read) in &class {
                r.extend_warnings(read.resolve_warnings.clone());
            }
            for (entry, read) in class {
                r.extend_warnings(read.field_warnings);
                if let Some((owner, dev)) = read.found {
                    let map = match owner {
                        Owner::Function(dir) => all.by_function.entry(dir),
                        Owner::Ibdev(name) => all.by_ibdev.entry(name),
                    };
                    let entry = entry.clone();
                    map.or_default().push(Found { entry, dev });
                }
            }
        }
        all
    }

    /// The char devices of the RDMA device `ibdev` of the function in
    /// `function_dir`; `sole` when it is the function's only one (else the
    /// name of each device found by the function is read, to match).
    pub(crate) fn of<B: Backend>(
        &self,
        r: &mut Reader<'_, B>,
        function_dir: &str,
        ibdev: &str,
        sole: bool,
    ) -> DeviceNodes {
        let mut found: Vec<&Found> = self.by_ibdev.get(ibdev).into_iter().flatten().collect();
        let by_function = self.by_function.get(function_dir).into_iter().flatten();
        found.extend(by_function.filter(|f| {
            sole || r
                .try_field(&f.entry.who(), "ibdev", parse::text)
                .ok()
                .flatten()
                .as_deref()
                == Some(ibdev)
        }));
        let of_kind = |prefix: &'static str| -> Vec<&Found> {
            let kind = found.iter().filter(|f| f.entry.name.starts_with(prefix));
            kind.copied().collect()
        };
        let (uverbs, umad, issm) = (of_kind("uverbs"), of_kind("umad"), of_kind("issm"));
        DeviceNodes {
            uverbs: uverbs.first().map(|f| f.dev.clone()),
            umad: by_port(r, umad),
            issm: by_port(r, issm),
        }
    }
}

/// MAD devices of one RDMA device, by port: where there are several, each
/// one's `port` is read to order them, and one whose port does not read is
/// left out (warned), as any entry whose files do not read. A single one
/// needs no order and its port is not read.
fn by_port<B: Backend>(r: &mut Reader<'_, B>, found: Vec<&Found>) -> Vec<CharDevice> {
    if found.len() < 2 {
        return found.into_iter().map(|f| f.dev.clone()).collect();
    }
    let mut ported: Vec<(u32, &CharDevice)> = found
        .into_iter()
        .filter_map(|f| {
            let who = f.entry.who();
            let port = r.field(&who, &who, "port", parse::decimal, IfMissing::Warn)?;
            Some((port, &f.dev))
        })
        .collect();
    ported.sort_by(|a, b| (a.0, &a.1.path).cmp(&(b.0, &b.1.path)));
    ported.into_iter().map(|(_, dev)| dev.clone()).collect()
}

impl ClassEntry {
    /// Its path, as warnings name it (`class/infiniband_mad/umad0`).
    fn who(&self) -> String {
        format!("{}/{}", self.class, self.name)
    }
}

/// The names in `class` that start with one of `prefixes`, sorted.
fn class_names<B: Backend>(r: &mut Reader<'_, B>, class: &str, prefixes: &[&str]) -> Vec<String> {
    if !r.fs.exists(class) {
        return Vec::new();
    }
    match r.fs.list(class) {
        Ok(entries) => entries
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| prefixes.iter().any(|p| name.starts_with(p)))
            .collect(),
        Err(e) => {
            r.warn(class, format!("cannot list: {e}"));
            Vec::new()
        }
    }
}

/// Reads one entry through its link; an entry that does not read whole
/// that way is resolved (once, not once per file) and read again, so that
/// its warnings name what is wrong with it.
fn read_entry<B: Backend>(fs: &Sysfs<B>, entry: &ClassEntry) -> EntryRead {
    let who = entry.who();
    // The kernel follows the link (openat2 beneath the root): a link read
    // and a file, not two `lstat`s and three files more.
    if let Some(found) = read_quietly(fs, entry, &who) {
        return EntryRead {
            resolve_warnings: Vec::new(),
            field_warnings: Vec::new(),
            found: Some(found),
        };
    }
    let mut r = Reader::new(fs);
    let dir = match r.fs.resolve(&who) {
        Ok((dir, EntryKind::Dir)) => Some(dir),
        Ok(_) => {
            r.warn(&who, "not a directory; skipped".into());
            None
        }
        Err(e) => {
            r.warn(&who, format!("cannot resolve: {e}; skipped"));
            None
        }
    };
    let resolve_warnings = r.into_warnings();
    let mut r = Reader::new(fs);
    let found = dir.and_then(|dir| read_files(&mut r, &who, entry, &dir));
    EntryRead {
        resolve_warnings,
        field_warnings: r.into_warnings(),
        found: found.map(|(ibdev, dev)| (Owner::Ibdev(ibdev), dev)),
    }
}

/// The entry's owner and device when its `dev` reads and either its link
/// names its function or its `ibdev` reads; `None` otherwise, without a
/// warning (the careful path then says what is wrong).
fn read_quietly<B: Backend>(
    fs: &Sysfs<B>,
    entry: &ClassEntry,
    who: &str,
) -> Option<(Owner, CharDevice)> {
    let r = Reader::new(fs);
    let dev = r.try_field(who, "dev", parse::dev_numbers).ok()??;
    let owner = match function_of(fs, entry) {
        Some(dir) => Owner::Function(dir),
        None => Owner::Ibdev(r.try_field(who, "ibdev", parse::text).ok()??),
    };
    Some((owner, char_device(entry, dev)))
}

/// The function directory the entry's link names, when the link reads as
/// the kernel makes it: relative, to `<function>/<class name>/<entry>`.
/// Only compared with the directories of the functions discovered; nothing
/// is opened through it.
fn function_of<B: Backend>(fs: &Sysfs<B>, entry: &ClassEntry) -> Option<String> {
    let target = fs.link_target(&entry.who()).ok()?;
    let target = target.to_str().filter(|t| !t.starts_with('/'))?;
    let mut parts: Vec<&str> = entry.class.split('/').collect();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    let class_name = entry.class.rsplit('/').next()?;
    match parts.as_slice() {
        [dir @ .., class, name]
            if !dir.is_empty() && *class == class_name && *name == entry.name =>
        {
            Some(dir.join("/"))
        }
        _ => None,
    }
}

fn char_device(entry: &ClassEntry, (major, minor): (u32, u32)) -> CharDevice {
    CharDevice {
        path: format!("{DEV_DIR}/{}", entry.name),
        major,
        minor,
    }
}

/// `ibdev` and `dev` (always both; a MAD entry's `port` is read later,
/// where it is needed).
fn read_files<B: Backend>(
    r: &mut Reader<'_, B>,
    who: &str,
    entry: &ClassEntry,
    dir: &str,
) -> Option<(String, CharDevice)> {
    let ibdev = r.field(who, dir, "ibdev", parse::text, IfMissing::Warn);
    let dev = r
        .field(who, dir, "dev", parse::dev_numbers, IfMissing::Warn)
        .map(|numbers| char_device(entry, numbers));
    Some((ibdev?, dev?))
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
