//! GPU–NIC affinity classes, computed from two positions in the PCIe tree.
//!
//! The classes are the `nvidia-smi topo -m` legend, which RCCL/NCCL also use:
//!
//! | class | meaning here |
//! | --- | --- |
//! | `PIX` | both hang off the same PCIe switch (at most one switch between them) |
//! | `PXB` | a common bridge below the host bridge, but through several switches |
//! | `PHB` | same host bridge (`pcieRoot`), different root ports |
//! | `NODE` | different host bridges, same NUMA node |
//! | `SYS` | different NUMA nodes, or NUMA unknown on either side |
//!
//! The switch of a function is found by position: below a root port the
//! bridges alternate switch upstream port, switch downstream port, upstream,
//! … (PCIe gives every switch exactly one upstream port), so bridges at odd
//! positions of the chain are upstream ports. An unknown NUMA node never
//! counts as "same node": the class then errs towards far (`SYS`), so a
//! claim asking for locality is never told a pair is closer than it is.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::PcieLocation;
use crate::pci::PciAddress;

/// How close a GPU and a NIC are. Ordered best (`Pix`) to worst (`Sys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Affinity {
    /// Same PCIe switch.
    #[serde(rename = "PIX")]
    Pix,
    /// Several switches, no host bridge between.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the same host bridge.
    #[serde(rename = "PHB")]
    Phb,
    /// Different host bridges on the same NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across NUMA nodes (or NUMA unknown).
    #[serde(rename = "SYS")]
    Sys,
}

impl Affinity {
    /// All classes, best first.
    pub const ALL: [Affinity; 5] = [
        Affinity::Pix,
        Affinity::Pxb,
        Affinity::Phb,
        Affinity::Node,
        Affinity::Sys,
    ];

    /// The legend label (`PIX`, `PXB`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Affinity::Pix => "PIX",
            Affinity::Pxb => "PXB",
            Affinity::Phb => "PHB",
            Affinity::Node => "NODE",
            Affinity::Sys => "SYS",
        }
    }

    /// One line of the legend, as `nvidia-smi topo -m` prints it.
    pub fn description(self) -> &'static str {
        match self {
            Affinity::Pix => "same PCIe switch (at most one switch between)",
            Affinity::Pxb => "several PCIe switches, no host bridge between",
            Affinity::Phb => "through a PCIe host bridge (same root complex)",
            Affinity::Node => "across host bridges within one NUMA node",
            Affinity::Sys => "across NUMA nodes (the SMP interconnect), or NUMA unknown",
        }
    }
}

impl fmt::Display for Affinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The upstream port of the nearest switch above a function whose bridge
/// chain (root port first) is `bridges`; `None` when it sits on a root port.
pub fn nearest_switch(bridges: &[PciAddress]) -> Option<PciAddress> {
    bridges
        .iter()
        .enumerate()
        .rev()
        .find(|(i, _)| i % 2 == 1)
        .map(|(_, b)| *b)
}

/// The affinity class of two functions at `a` and `b`.
pub fn classify(a: &PcieLocation, b: &PcieLocation) -> Affinity {
    if a.root != b.root {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y => Affinity::Node,
            _ => Affinity::Sys,
        };
    }
    let common = a
        .bridges
        .iter()
        .zip(&b.bridges)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return Affinity::Phb;
    }
    // Switches crossed: upstream ports (odd positions) at or below the
    // deepest common bridge, on either branch, the shared one counted once.
    let upstream_ports =
        |bridges: &[PciAddress]| (common..bridges.len()).filter(|i| i % 2 == 1).count();
    let shared = usize::from((common - 1) % 2 == 1);
    let switches = shared + upstream_ports(&a.bridges) + upstream_ports(&b.bridges);
    if switches <= 1 {
        Affinity::Pix
    } else {
        Affinity::Pxb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(root: &str, bridges: &[&str], numa: Option<u32>) -> PcieLocation {
        let bridges: Vec<PciAddress> = bridges.iter().map(|b| b.parse().unwrap()).collect();
        PcieLocation {
            root: root.into(),
            switch: nearest_switch(&bridges),
            bridges,
            numa_node: numa,
        }
    }

    const RP: &str = "0000:00:01.1";
    const USP: &str = "0000:01:00.0";

    #[test]
    fn same_switch_is_pix() {
        let gpu = loc("pci0000:00", &[RP, USP, "0000:02:00.0"], Some(0));
        let nic = loc("pci0000:00", &[RP, USP, "0000:02:01.0"], Some(0));
        assert_eq!(classify(&gpu, &nic), Affinity::Pix);
    }

    #[test]
    fn nested_switches_are_pxb() {
        let gpu = loc(
            "pci0000:00",
            &[RP, USP, "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"],
            Some(0),
        );
        let nic = loc("pci0000:00", &[RP, USP, "0000:02:01.0"], Some(0));
        assert_eq!(classify(&gpu, &nic), Affinity::Pxb);
        assert_eq!(classify(&nic, &gpu), Affinity::Pxb);
    }

    #[test]
    fn inner_switch_is_pix_and_crossing_two_is_pxb() {
        let a = loc(
            "pci0000:00",
            &[RP, USP, "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"],
            None,
        );
        let b = loc(
            "pci0000:00",
            &[RP, USP, "0000:02:00.0", "0000:03:00.0", "0000:04:01.0"],
            None,
        );
        // Both below the same inner switch: one switch between them.
        assert_eq!(classify(&a, &b), Affinity::Pix);
        let c = loc(
            "pci0000:00",
            &[RP, USP, "0000:02:01.0", "0000:05:00.0", "0000:06:00.0"],
            None,
        );
        assert_eq!(classify(&a, &c), Affinity::Pxb);
    }

    #[test]
    fn different_root_ports_are_phb() {
        let gpu = loc("pci0000:00", &[RP, USP, "0000:02:00.0"], Some(0));
        let nic = loc("pci0000:00", &["0000:00:03.1"], Some(0));
        assert_eq!(classify(&gpu, &nic), Affinity::Phb);
    }

    #[test]
    fn different_roots_split_by_numa() {
        let gpu = loc("pci0000:00", &[RP], Some(0));
        let same = loc("pci0000:40", &["0000:40:01.1"], Some(0));
        let other = loc("pci0000:80", &["0000:80:01.1"], Some(1));
        let unknown = loc("pci0000:c0", &["0000:c0:01.1"], None);
        assert_eq!(classify(&gpu, &same), Affinity::Node);
        assert_eq!(classify(&gpu, &other), Affinity::Sys);
        assert_eq!(classify(&gpu, &unknown), Affinity::Sys);
    }

    #[test]
    fn nearest_switch_is_last_upstream_port() {
        let rp: PciAddress = RP.parse().unwrap();
        let usp: PciAddress = USP.parse().unwrap();
        let dsp: PciAddress = "0000:02:00.0".parse().unwrap();
        let usp2: PciAddress = "0000:03:00.0".parse().unwrap();
        assert_eq!(nearest_switch(&[rp]), None);
        assert_eq!(nearest_switch(&[rp, usp, dsp]), Some(usp));
        assert_eq!(nearest_switch(&[rp, usp, dsp, usp2]), Some(usp2));
    }

    #[test]
    fn classes_order_best_first() {
        let mut all = Affinity::ALL;
        all.reverse();
        all.sort();
        assert_eq!(all, Affinity::ALL);
    }
}
