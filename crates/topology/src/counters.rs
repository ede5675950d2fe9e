//! Hardware error counters of the NICs' physical ports, read cheaply and
//! often: the RDMA port counters (`infiniband/<ibdev>/ports/<n>/counters/*`
//! and `hw_counters/*`) and the netdev's `carrier_changes`, of PFs only.
//!
//! A VF sends and receives through its PF's port, so the port's errors are
//! the PF's and its VFs' alike; reading the PFs alone keeps a poll of an
//! 8 PF × 256 VF node at 8 × (ports × counters + netdev counters) files.
//! [`CounterPlan::new`] works out those files once per inventory;
//! [`read_counters`] reads them, each file one `openat2` and one `read`
//! through [`Sysfs`] (never out of the root), listing nothing.
//!
//! What a value means (rates, thresholds) is for the caller: this module
//! only says what each file held, or why it held no number.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::model::Inventory;
use crate::pci::PciAddress;
use crate::sysfs::{Backend, Sysfs};

/// The directory a counter file lives below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterBase {
    /// An RDMA port: `infiniband/<ibdev>/ports/<n>/`.
    Port,
    /// A netdev: `net/<ifname>/`.
    Netdev,
}

/// A counter file, by its path below its [`CounterBase`].
///
/// Written `counters/<name>` or `hw_counters/<name>` (RDMA port),
/// `carrier_changes` or `statistics/<name>` (netdev); a bare other name is
/// `counters/<name>`; `port:<path>` and `netdev:<path>` say the base
/// outright. Each component is a C identifier, at most two components, so
/// a name never reaches outside its directory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterName {
    base: CounterBase,
    path: String,
}

/// Why a counter name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid counter {0:?}: expected counters/<name>, hw_counters/<name>, carrier_changes, statistics/<name>, or port:/netdev: before a path of one or two identifiers"
)]
pub struct InvalidCounterName(pub String);

impl CounterName {
    /// The counter `path` below `base`; `None` unless one or two
    /// components of letters, digits and `_`.
    pub fn new(base: CounterBase, path: &str) -> Option<Self> {
        let parts: Vec<&str> = path.split('/').collect();
        let ok = parts.len() <= 2
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.len() <= 64
                    && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
        ok.then(|| CounterName {
            base,
            path: path.to_string(),
        })
    }

    /// Where the file lives.
    pub fn base(&self) -> CounterBase {
        self.base
    }

    /// Its path below the base, e.g. `counters/symbol_error`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file's own name, e.g. `symbol_error`: what messages, metrics
    /// and taints call it.
    pub fn label(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The base a name written without `port:`/`netdev:` gets.
    fn implied_base(path: &str) -> CounterBase {
        if path == "carrier_changes" || path.starts_with("statistics/") {
            CounterBase::Netdev
        } else {
            CounterBase::Port
        }
    }
}

impl FromStr for CounterName {
    type Err = InvalidCounterName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidCounterName(s.to_string());
        let (base, path) = match s.split_once(':') {
            Some(("port", path)) => (CounterBase::Port, path.to_string()),
            Some(("netdev", path)) => (CounterBase::Netdev, path.to_string()),
            Some(_) => return Err(bad()),
            None => {
                let base = Self::implied_base(s);
                let path = match base {
                    CounterBase::Port if !s.contains('/') => format!("counters/{s}"),
                    _ => s.to_string(),
                };
                (base, path)
            }
        };
        CounterName::new(base, &path).ok_or_else(bad)
    }
}

impl fmt::Display for CounterName {
    /// The shortest form that parses back to the same name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if Self::implied_base(&self.path) != self.base {
            let prefix = match self.base {
                CounterBase::Port => "port",
                CounterBase::Netdev => "netdev",
            };
            return write!(f, "{prefix}:{}", self.path);
        }
        match self.path.strip_prefix("counters/") {
            Some(bare)
                if self.base == CounterBase::Port && Self::implied_base(bare) == self.base =>
            {
                f.write_str(bare)
            }
            _ => f.write_str(&self.path),
        }
    }
}

/// One counter file a poll reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedCounter {
    /// The PF whose port it counts.
    pub function: PciAddress,
    /// The port or netdev, for people: `rocep4s0/1`, `enp4s0`.
    pub source: String,
    /// Index of its name in the names the plan was made for.
    pub counter: usize,
    dir: String,
    file: String,
}

/// The counter files of an inventory's PFs, in a fixed order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterPlan {
    /// Every PF of the inventory, with counters or not.
    pub functions: Vec<PciAddress>,
    /// The files, PF by PF.
    pub counters: Vec<PlannedCounter>,
}

impl CounterPlan {
    /// The files of `names` for every port and netdev of every PF of
    /// `inventory` (VFs share their PF's port and are not read).
    pub fn new(inventory: &Inventory, names: &[CounterName]) -> Self {
        let mut plan = CounterPlan::default();
        for nic in inventory.nics.iter().filter(|n| n.is_pf()) {
            plan.functions.push(nic.address);
            let at = |base: &str, source: String, counter: usize, name: &CounterName| {
                let (sub, file) = name.path.rsplit_once('/').unwrap_or(("", &name.path));
                let dir = match sub {
                    "" => base.to_string(),
                    sub => format!("{base}/{sub}"),
                };
                PlannedCounter {
                    function: nic.address,
                    source,
                    counter,
                    dir,
                    file: file.to_string(),
                }
            };
            let device = format!("bus/pci/devices/{}", nic.address);
            for rdma in &nic.rdma {
                for port in &rdma.ports {
                    let base = format!("{device}/infiniband/{}/ports/{}", rdma.name, port.number);
                    let source = format!("{}/{}", rdma.name, port.number);
                    for (i, name) in names.iter().enumerate() {
                        if name.base == CounterBase::Port {
                            plan.counters.push(at(&base, source.clone(), i, name));
                        }
                    }
                }
            }
            for netdev in &nic.netdevs {
                let base = format!("{device}/net/{}", netdev.name);
                for (i, name) in names.iter().enumerate() {
                    if name.base == CounterBase::Netdev {
                        plan.counters.push(at(&base, netdev.name.clone(), i, name));
                    }
                }
            }
        }
        plan
    }
}

/// What one counter file held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterReading {
    /// A number.
    Value(u64),
    /// No such file (the driver does not provide this counter).
    Missing,
    /// The file held no number; the text (cut to 40 characters).
    Invalid(String),
    /// The file could not be read (the kernel refused: a device going
    /// away, a counter the hardware cannot answer); why.
    Unreadable(String),
}

/// Reads every file of `plan` below the sysfs root `sysfs_root`, in the
/// plan's order.
pub fn read_counters(sysfs_root: &Path, plan: &CounterPlan) -> Vec<CounterReading> {
    read_counters_in(&Sysfs::open(sysfs_root), plan)
}

/// [`read_counters()`] over any [`Backend`].
pub fn read_counters_in<B: Backend>(fs: &Sysfs<B>, plan: &CounterPlan) -> Vec<CounterReading> {
    plan.counters
        .iter()
        .map(|c| match fs.read_in(&c.dir, &c.file) {
            Ok(text) => parse(&text),
            Err(e) if e.is_not_found() => CounterReading::Missing,
            Err(e) => CounterReading::Unreadable(e.to_string()),
        })
        .collect()
}

fn parse(text: &str) -> CounterReading {
    let text = text.trim();
    match text.parse() {
        Ok(value) => CounterReading::Value(value),
        Err(_) => CounterReading::Invalid(text.chars().take(40).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_their_base_and_print_back_the_same() {
        for (written, base, path, shown) in [
            (
                "symbol_error",
                CounterBase::Port,
                "counters/symbol_error",
                "symbol_error",
            ),
            (
                "counters/link_downed",
                CounterBase::Port,
                "counters/link_downed",
                "link_downed",
            ),
            (
                "hw_counters/out_of_buffer",
                CounterBase::Port,
                "hw_counters/out_of_buffer",
                "hw_counters/out_of_buffer",
            ),
            (
                "carrier_changes",
                CounterBase::Netdev,
                "carrier_changes",
                "carrier_changes",
            ),
            (
                "statistics/rx_crc_errors",
                CounterBase::Netdev,
                "statistics/rx_crc_errors",
                "statistics/rx_crc_errors",
            ),
            (
                "netdev:rx_errors",
                CounterBase::Netdev,
                "rx_errors",
                "netdev:rx_errors",
            ),
            (
                "port:carrier_changes",
                CounterBase::Port,
                "carrier_changes",
                "port:carrier_changes",
            ),
            (
                "port:counters/carrier_changes",
                CounterBase::Port,
                "counters/carrier_changes",
                "counters/carrier_changes",
            ),
        ] {
            let name: CounterName = written.parse().unwrap();
            assert_eq!((name.base(), name.path()), (base, path), "{written}");
            assert_eq!(name.to_string(), shown, "{written}");
            assert_eq!(shown.parse::<CounterName>().unwrap(), name, "{shown}");
        }
        assert_eq!("hw_counters/x".parse::<CounterName>().unwrap().label(), "x");
    }

    #[test]
    fn names_that_could_leave_their_directory_are_refused() {
        for bad in [
            "",
            "../x",
            "counters/../../x",
            "a/b/c",
            "/abs",
            "counters/",
            "x y",
            "disk:x",
            "port:",
            "counters/sym-bol",
        ] {
            assert!(bad.parse::<CounterName>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_value_is_a_decimal_number_anything_else_is_invalid() {
        assert_eq!(parse("42\n"), CounterReading::Value(42));
        assert_eq!(parse(" 0 "), CounterReading::Value(0));
        assert_eq!(parse("-1\n"), CounterReading::Invalid("-1".into()));
        assert_eq!(parse(""), CounterReading::Invalid(String::new()));
        assert_eq!(
            parse("18446744073709551616"),
            CounterReading::Invalid("18446744073709551616".into())
        );
        let long = "x".repeat(100);
        assert_eq!(parse(&long), CounterReading::Invalid("x".repeat(40)));
    }
}
