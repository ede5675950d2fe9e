//! Device selectors: which NIC functions a classic resource (or DRA) takes.
//!
//! A selector lists PCI IDs, PCI addresses and netdev names. A function
//! matches when it matches every list that is not empty (AND across lists),
//! and within a list any one entry (OR). A selector with every list empty is
//! rejected when the config is validated, so "matches nothing by accident"
//! cannot happen.

use topology::{NicFunction, PciAddress};

/// A validated device selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceSelector {
    /// `(vendor, device)` pairs, e.g. `(0x1dd8, 0x1002)`.
    pub pci_ids: Vec<(u16, u16)>,
    /// Exact PCI addresses.
    pub pci_addresses: Vec<PciAddress>,
    /// Network interface names of the function.
    pub netdevs: Vec<String>,
}

impl DeviceSelector {
    /// A selector taking every function with these vendor and device IDs.
    pub fn pci_id(vendor: u16, device: u16) -> Self {
        DeviceSelector {
            pci_ids: vec![(vendor, device)],
            ..DeviceSelector::default()
        }
    }

    /// True when no list has an entry (such a selector is never valid).
    pub fn is_empty(&self) -> bool {
        self.pci_ids.is_empty() && self.pci_addresses.is_empty() && self.netdevs.is_empty()
    }

    /// Whether `nic` is selected.
    pub fn matches(&self, nic: &NicFunction) -> bool {
        if self.is_empty() {
            return false;
        }
        let id_ok = self.pci_ids.is_empty()
            || self
                .pci_ids
                .iter()
                .any(|&(v, d)| nic.ids.vendor == v && nic.ids.device == d);
        let addr_ok = self.pci_addresses.is_empty() || self.pci_addresses.contains(&nic.address);
        let netdev_ok =
            self.netdevs.is_empty() || nic.netdevs.iter().any(|n| self.netdevs.contains(&n.name));
        id_ok && addr_ok && netdev_ok
    }
}

/// Parses `vvvv:dddd` (hex, optional `0x` on each half) into a PCI ID pair.
pub(crate) fn parse_pci_id(text: &str) -> Option<(u16, u16)> {
    let (v, d) = text.split_once(':')?;
    let hex = |t: &str| {
        let t = t.strip_prefix("0x").unwrap_or(t);
        if t.is_empty() || t.len() > 4 {
            return None;
        }
        u16::from_str_radix(t, 16).ok()
    };
    Some((hex(v)?, hex(d)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classic::testing::{pf, vf};

    #[test]
    fn parses_pci_ids() {
        assert_eq!(parse_pci_id("1dd8:1002"), Some((0x1dd8, 0x1002)));
        assert_eq!(parse_pci_id("0x1dd8:0x1003"), Some((0x1dd8, 0x1003)));
        assert_eq!(parse_pci_id("1dd8"), None);
        assert_eq!(parse_pci_id("1dd8:10020"), None);
        assert_eq!(parse_pci_id("zz:1002"), None);
    }

    #[test]
    fn lists_and_together_entries_or_together() {
        let a = pf("0000:0c:00.0", 0, "pci0000:00", Some(1));
        let b = pf("0000:8c:00.0", 1, "pci0000:80", Some(5));
        let by_id = DeviceSelector::pci_id(0x1dd8, 0x1002);
        assert!(by_id.matches(&a) && by_id.matches(&b));
        let id_and_addr = DeviceSelector {
            pci_addresses: vec!["0000:8c:00.0".parse().unwrap()],
            ..by_id.clone()
        };
        assert!(!id_and_addr.matches(&a));
        assert!(id_and_addr.matches(&b));
        let by_netdev = DeviceSelector {
            netdevs: vec!["eth0cf0".into(), "nothing".into()],
            ..DeviceSelector::default()
        };
        assert!(by_netdev.matches(&a) && !by_netdev.matches(&b));
    }

    #[test]
    fn vf_ids_do_not_match_pf_selector() {
        let v = vf("0000:0c:00.1", "0000:0c:00.0", 0, 0, "pci0000:00", Some(1));
        assert!(!DeviceSelector::pci_id(0x1dd8, 0x1002).matches(&v));
        assert!(DeviceSelector::pci_id(0x1dd8, 0x1003).matches(&v));
        assert!(!DeviceSelector::default().matches(&v));
    }
}
