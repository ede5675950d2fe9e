//! PCI addresses (`domain:bus:device.function`) and PCI identity numbers.
//!
//! Addresses are parsed once at the edge and then carried as a typed value, so
//! that ordering ("lowest BDF wins a tie") and formatting are the same
//! everywhere.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI function address, printed as `0000:0c:00.0`.
///
/// Ordering is numeric by domain, bus, device, function: the order in which
/// Linux enumerates functions and the order used for every tie-break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI segment (domain), 16 bits on every platform Linux supports here.
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PCI address {input:?}: expected dddd:bb:dd.f in hex (e.g. 0000:0c:00.0)")]
pub struct ParsePciAddressError {
    /// The text that failed to parse.
    pub input: String,
}

impl FromStr for PciAddress {
    type Err = ParsePciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParsePciAddressError {
            input: s.to_string(),
        };
        let (domain, rest) = s.split_once(':').ok_or_else(err)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(err)?;
        let (device, function) = rest.split_once('.').ok_or_else(err)?;
        let fixed =
            |t: &str, len: usize| t.len() == len && t.bytes().all(|b| b.is_ascii_hexdigit());
        if !(fixed(domain, 4) && fixed(bus, 2) && fixed(device, 2) && fixed(function, 1)) {
            return Err(err());
        }
        let addr = PciAddress {
            domain: u16::from_str_radix(domain, 16).map_err(|_| err())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| err())?,
            device: u8::from_str_radix(device, 16).map_err(|_| err())?,
            function: u8::from_str_radix(function, 16).map_err(|_| err())?,
        };
        if addr.device > 31 || addr.function > 7 {
            return Err(err());
        }
        Ok(addr)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` so that width and alignment flags (`{:<13}`) apply in tables.
        f.pad(&format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        ))
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The identity registers of a PCI function, as read from sysfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciIds {
    /// `vendor` (e.g. `0x1dd8` for AMD Pensando).
    pub vendor: u16,
    /// `device` (e.g. `0x1002` for an AINIC PF).
    pub device: u16,
    /// `subsystem_vendor`, when readable (a VF's is its PF's, as SR-IOV
    /// requires).
    pub subsystem_vendor: Option<u16>,
    /// `subsystem_device`, when readable.
    pub subsystem_device: Option<u16>,
    /// `class`, the 24-bit class code (e.g. `0x020000` Ethernet); a VF's is
    /// its PF's, as SR-IOV requires.
    pub class: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        let a: PciAddress = "0000:0c:00.1".parse().unwrap();
        assert_eq!(a.bus, 0x0c);
        assert_eq!(a.function, 1);
        assert_eq!(a.to_string(), "0000:0c:00.1");
        let b: PciAddress = "10ab:ff:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "10ab:ff:1f.7");
        assert_eq!(format!("[{b:<14}]"), "[10ab:ff:1f.7  ]");
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "0000:0c:00",
            "0c:00.0",
            "0000:0c:00.8",
            "0000:0c:20.0",
            "000g:0c:00.0",
            "0000:0c:00.0x",
            "pci0000:00",
            "0000:c:00.0",
        ] {
            assert!(
                bad.parse::<PciAddress>().is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn orders_numerically() {
        let mut v: Vec<PciAddress> = [
            "0000:c1:00.0",
            "0000:0c:00.0",
            "0001:00:00.0",
            "0000:0c:00.1",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        v.sort();
        let printed: Vec<String> = v.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            printed,
            [
                "0000:0c:00.0",
                "0000:0c:00.1",
                "0000:c1:00.0",
                "0001:00:00.0"
            ]
        );
    }
}
