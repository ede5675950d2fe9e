//! Shared helpers: render a bundled fixture, discover it, print matrices.

#![allow(dead_code)]

use std::path::Path;

use tempfile::TempDir;
use testkit::fixture::{Topology, bundled_by_name};
use topology::{DiscoveryConfig, Inventory, PciAddress, discover};

/// Renders the bundled fixture `name` into a temp dir.
pub fn render(name: &str) -> TempDir {
    let yaml = bundled_by_name(name).unwrap_or_else(|| panic!("no bundled fixture {name}"));
    let dir = tempfile::tempdir().unwrap();
    Topology::from_yaml(yaml)
        .unwrap()
        .render(dir.path())
        .unwrap();
    dir
}

/// Renders and discovers the bundled fixture `name` with the default config.
pub fn discover_bundled(name: &str) -> (TempDir, Inventory) {
    let dir = render(name);
    let inventory = discover(dir.path(), &DiscoveryConfig::default()).unwrap();
    (dir, inventory)
}

/// Parses a PCI address.
pub fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

/// Addresses as strings.
pub fn names(addresses: impl IntoIterator<Item = PciAddress>) -> Vec<String> {
    addresses.into_iter().map(|a| a.to_string()).collect()
}

/// The affinity matrix: one row per GPU, `"<gpu>: <class for each NIC>"`.
pub fn matrix(inv: &Inventory) -> Vec<String> {
    inv.gpus
        .iter()
        .map(|g| {
            let row: Vec<&str> = inv
                .nics
                .iter()
                .map(|n| {
                    inv.affinity(g.address, n.address)
                        .expect("a link for every pair")
                        .as_str()
                })
                .collect();
            format!("{}: {}", g.address, row.join(" "))
        })
        .collect()
}

/// True when `root` holds a directory tree (sanity for temp dirs).
pub fn exists(root: &Path, rel: &str) -> bool {
    root.join(rel).exists()
}
