//! The RDMA character devices of the node (`class/infiniband_verbs`,
//! `class/infiniband_mad`), keyed by the RDMA device they open.
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

/// The verbs and MAD char devices of the node, keyed by RDMA device name.
#[derive(Debug, Default)]
pub(crate) struct CharDevices {
    verbs: HashMap<String, CharDevice>,
    umad: HashMap<String, Vec<Mad>>,
    issm: HashMap<String, Vec<Mad>>,
}

/// A MAD char device of an RDMA device, with the port it serves.
#[derive(Debug)]
struct Mad {
    /// Its class entry (`class/infiniband_mad/umad0`).
    entry: String,
    /// Its `port`, read only where the RDMA device has several (it orders
    /// them; a single one needs no order).
    port: u32,
    dev: CharDevice,
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
    /// The RDMA device it opens and its device node.
    found: Option<(String, CharDevice)>,
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
                if let Some((ibdev, dev)) = read.found {
                    all.add(entry, ibdev, dev);
                }
            }
        }
        all.order_ports(r);
        all
    }

    fn add(&mut self, entry: &ClassEntry, ibdev: String, dev: CharDevice) {
        let map = if entry.class == CLASSES[0].0 {
            self.verbs.insert(ibdev, dev);
            return;
        } else if entry.name.starts_with("umad") {
            &mut self.umad
        } else {
            &mut self.issm
        };
        let entry = format!("{}/{}", entry.class, entry.name);
        map.entry(ibdev).or_default().push(Mad {
            entry,
            port: 0,
            dev,
        });
    }

    /// Reads the `port` of the MAD devices of each RDMA device that has
    /// several, and orders them by it; one whose port does not read is
    /// left out (warned), as any entry whose files do not read.
    fn order_ports<B: Backend>(&mut self, r: &mut Reader<'_, B>) {
        for map in [&mut self.umad, &mut self.issm] {
            let mut several: Vec<_> = map.iter_mut().filter(|(_, l)| l.len() > 1).collect();
            several.sort_by(|a, b| a.0.cmp(b.0));
            for (_, list) in several {
                list.retain_mut(|mad| {
                    let port = r.field(
                        &mad.entry,
                        &mad.entry,
                        "port",
                        parse::decimal,
                        IfMissing::Warn,
                    );
                    mad.port = port.unwrap_or_default();
                    port.is_some()
                });
                list.sort_by(|a, b| (a.port, &a.dev.path).cmp(&(b.port, &b.dev.path)));
            }
        }
    }

    /// The verbs device of `ibdev`.
    pub(crate) fn verbs(&self, ibdev: &str) -> Option<CharDevice> {
        self.verbs.get(ibdev).cloned()
    }

    /// The MAD devices of `ibdev`, by port.
    pub(crate) fn umad(&self, ibdev: &str) -> Vec<CharDevice> {
        Self::of(&self.umad, ibdev)
    }

    /// The subnet-management devices of `ibdev`, by port.
    pub(crate) fn issm(&self, ibdev: &str) -> Vec<CharDevice> {
        Self::of(&self.issm, ibdev)
    }

    fn of(map: &HashMap<String, Vec<Mad>>, ibdev: &str) -> Vec<CharDevice> {
        map.get(ibdev)
            .map(|l| l.iter().map(|mad| mad.dev.clone()).collect())
            .unwrap_or_default()
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

/// Reads one entry's files through its link; an entry that does not read
/// whole that way is resolved (once, not once per file) and read again,
/// so that its warnings name what is wrong with it.
fn read_entry<B: Backend>(fs: &Sysfs<B>, entry: &ClassEntry) -> EntryRead {
    let who = format!("{}/{}", entry.class, entry.name);
    // The kernel follows the link (openat2 beneath the root): three files,
    // not a link read and two `lstat`s more, for each of the thousands of
    // entries of an SR-IOV node.
    if let Some(found) = read_files_quietly(&Reader::new(fs), entry, &who) {
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
        found,
    }
}

/// [`read_files`] when every file reads and parses; `None` otherwise,
/// without a warning (the careful path then says what is wrong).
fn read_files_quietly<B: Backend>(
    r: &Reader<'_, B>,
    entry: &ClassEntry,
    dir: &str,
) -> Option<(String, CharDevice)> {
    let ibdev = r.try_field(dir, "ibdev", parse::text).ok()??;
    let dev = r.try_field(dir, "dev", parse::dev_numbers).ok()??;
    Some((ibdev, char_device(entry, dev)))
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
