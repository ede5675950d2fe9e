//! Discovery as a plain process, to count its syscalls or profile it
//! (`strace -c -f`, `perf`), which the criterion bench cannot isolate.
//!
//! ```text
//! cargo build --release -p topology --example discover_node
//! B=target/release/examples/discover_node
//! $B /dev/shm/node render                  # the bench node: 8 PFs x 256 VFs
//! $B /dev/shm/node 1 5                     # discover 5 times, 1 thread, print times
//! strace -c -f $B /dev/shm/node 1 1        # syscalls of one discovery
//! $B /tmp/fx bundled broken && $B /tmp/fx dump 1   # a bundled fixture's inventory
//! ```

#![allow(missing_docs)]

use std::path::Path;
use std::time::Instant;

use testkit::fixture::{Topology, bundled_by_name, sriov_node};
use topology::{DiscoveryConfig, discover};

fn config(threads: &str) -> DiscoveryConfig {
    DiscoveryConfig {
        threads: threads.parse().expect("a thread count"),
        ..DiscoveryConfig::default()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [root, "render"] => sriov_node(8, 256).render(Path::new(root)).expect("renders"),
        [root, "bundled", name] => Topology::from_yaml(bundled_by_name(name).expect("a fixture"))
            .expect("parses")
            .render(Path::new(root))
            .expect("renders"),
        [root, "dump", threads] => {
            let inventory = discover(Path::new(root), &config(threads)).expect("discovers");
            println!("{inventory:#?}");
        }
        [root, threads, times] => {
            for _ in 0..times.parse().expect("a count") {
                let start = Instant::now();
                let inventory = discover(Path::new(root), &config(threads)).expect("discovers");
                let took = start.elapsed();
                let (nics, warnings) = (inventory.nics.len(), inventory.warnings.len());
                eprintln!("{nics} nics, {warnings} warnings, {took:?}");
            }
        }
        _ => eprintln!("usage: see the doc comment of examples/discover_node.rs"),
    }
}
