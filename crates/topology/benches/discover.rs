//! Discovery of the large SR-IOV node: 8 Pollara PFs × 256 VFs each, with
//! one MI300X per PCIe switch (2,056 NIC functions, 16,448 GPU–NIC links).
//!
//! The tree is rendered once, on tmpfs (`/dev/shm`) when available since
//! real sysfs lives in memory too. Measured: `discover` with the automatic
//! thread count and with one thread; one attribute read as discovery reads
//! it (printed beside how many filesystem calls a discovery makes: the
//! floor); and the agent's safety-net rescan ([`topology::recheck`]) of
//! that node when nothing changed.

#![allow(missing_docs)]

use std::cell::Cell;
use std::hint::black_box;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use criterion::{Criterion, criterion_group, criterion_main};
use testkit::fixture::sriov_node;
use topology::sysfs::{Backend, DirBackend, EntryKind, Sysfs};
use topology::{DiscoveryConfig, Recheck, discover, discover_in, recheck};

/// The real tree, counting what discovery asks of it: each call is one
/// file read, listing, link read or `lstat` (1–4 syscalls).
struct Counting {
    inner: DirBackend,
    calls: Rc<Cell<u64>>,
}

impl Counting {
    fn count(&self) {
        self.calls.set(self.calls.get() + 1);
    }
}

impl Backend for Counting {
    fn kind(&self, path: &str) -> io::Result<EntryKind> {
        self.count();
        self.inner.kind(path)
    }
    fn list(&self, path: &str) -> io::Result<Vec<(String, EntryKind)>> {
        self.count();
        self.inner.list(path)
    }
    fn read_link(&self, path: &str) -> io::Result<PathBuf> {
        self.count();
        self.inner.read_link(path)
    }
    fn read_file(&self, path: &str) -> io::Result<Option<String>> {
        self.count();
        self.inner.read_file(path)
    }
    fn read_beneath(&self, dir: &str, file: &str) -> Option<String> {
        self.count();
        self.inner.read_beneath(dir, file)
    }
}

/// What a discovery of the tree at `root` asks of the filesystem, printed
/// beside the time of one file read: the floor the figures sit on.
fn print_floor(root: &Path, functions: usize) {
    let calls = Rc::new(Cell::new(0));
    let counting = Sysfs::new(Counting {
        inner: DirBackend::new(root),
        calls: calls.clone(),
    });
    discover_in(&counting, &DiscoveryConfig::default()).expect("discovery runs");
    let calls = calls.get();
    println!(
        "floor: discovery asks the filesystem {calls} times, {:.1} per NIC function",
        calls as f64 / functions as f64
    );
}

fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("a temp dir")
}

fn bench_discover(c: &mut Criterion) {
    let root = temp_root();
    sriov_node(8, 256)
        .render(root.path())
        .expect("the benchmark node renders");
    let config = DiscoveryConfig::default();
    let inventory = discover(root.path(), &config).expect("discovery runs");
    assert_eq!(inventory.nics.len(), 8 * 257, "{:?}", inventory.warnings);
    assert!(inventory.warnings.is_empty(), "{:?}", inventory.warnings);
    print_floor(root.path(), inventory.nics.len());
    let one_thread = DiscoveryConfig {
        threads: 1,
        ..DiscoveryConfig::default()
    };
    let mut group = c.benchmark_group("discover");
    group.sample_size(20);
    group.bench_function("8pf_x_256vf", |b| {
        b.iter(|| discover(black_box(root.path()), &config).expect("discovery runs"))
    });
    group.bench_function("8pf_x_256vf_one_thread", |b| {
        b.iter(|| discover(black_box(root.path()), &one_thread).expect("discovery runs"))
    });
    // The unit of the floor: one attribute file of a VF, read the way
    // discovery reads it (a cached handle on the function's directory).
    let vf = format!("bus/pci/devices/{}", inventory.nics[1].address);
    let fs = Sysfs::open(root.path());
    group.bench_function("floor_one_file_read", |b| {
        b.iter(|| {
            fs.read_in(black_box(&vf), "current_link_speed")
                .expect("a file")
        })
    });
    group.finish();

    // The safety-net rescan of the agent: what it costs when nothing moved.
    assert_eq!(recheck(root.path(), &inventory), Recheck::Unchanged);
    let mut group = c.benchmark_group("rescan");
    group.bench_function("8pf_x_256vf_nothing_changed", |b| {
        b.iter(|| recheck(black_box(root.path()), &inventory))
    });
    group.finish();
}

criterion_group!(benches, bench_discover);
criterion_main!(benches);
