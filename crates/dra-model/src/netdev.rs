//! Settings of exclusive netdev mode: what the NIC's netdev looks like once
//! it is moved into a pod's network namespace (name, MTU, addresses,
//! routes), checked at prepare so that the pod-sandbox hook only moves.
//!
//! Written as the `netdev` object of a NicConfig:
//!
//! ```yaml
//! netdev:
//!   interfaceName: net1          # default: the host's name
//!   mtu: 9000                    # default: the host's
//!   addresses: [10.10.0.2/24]    # default: the host's addresses
//!   routes:
//!   - destination: 10.20.0.0/16
//!     gateway: 10.10.0.1         # none: a route on the link
//! ```
//!
//! A DeviceClass's settings are pinned: [`NetdevSettings::merge`] takes
//! every field the class sets from the class and refuses a claim that sets
//! one of them to another value; the fields the class leaves unset come
//! from the claim. The same function serves prepare and admission.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The `netdev` object as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetdevSettings {
    /// Name inside the pod.
    pub interface_name: Option<String>,
    /// MTU inside the pod.
    pub mtu: Option<u32>,
    /// Addresses in CIDR form; unset keeps the host's.
    pub addresses: Option<Vec<String>>,
    /// Routes to add inside the pod; unset adds none (and, in a class,
    /// leaves them to the claim, where `[]` pins "no routes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<RouteSettings>>,
}

/// One route as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSettings {
    /// Destination in CIDR form (`0.0.0.0/0` for a default route).
    pub destination: String,
    /// Next hop; none for a route on the link.
    pub gateway: Option<String>,
}

/// An address with its prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Cidr {
    /// The address.
    pub address: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// A checked route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination network.
    pub destination: Cidr,
    /// Next hop, of the destination's family.
    pub gateway: Option<IpAddr>,
}

/// What the hook applies: every value checked and resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetdevPlan {
    /// Name inside the pod.
    pub name: String,
    /// MTU inside the pod; `None` keeps the host's.
    pub mtu: Option<u32>,
    /// Addresses inside the pod; `None` keeps the host's.
    pub addresses: Option<Vec<Cidr>>,
    /// Routes inside the pod.
    pub routes: Vec<Route>,
}

/// Why settings cannot be used; names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("netdev.{field}: {message}")]
pub struct NetdevError {
    /// The field path under `netdev`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// A claim sets a field its DeviceClass pinned to another value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("netdev.{field} is pinned to {class} by the DeviceClass; the claim sets {claim}")]
pub struct PinnedField {
    /// The field under `netdev` (`interfaceName`, `mtu`, `addresses`, `routes`).
    pub field: &'static str,
    /// The class's value, as JSON.
    pub class: String,
    /// The claim's value, as JSON.
    pub claim: String,
}

/// `Err` naming `field` when both set it and the values differ.
fn pin<T: PartialEq + Serialize>(
    field: &'static str,
    class: Option<&T>,
    claim: Option<&T>,
) -> Result<(), PinnedField> {
    match (class, claim) {
        (Some(class), Some(claim)) if class != claim => Err(PinnedField {
            field,
            class: shown(class),
            claim: shown(claim),
        }),
        _ => Ok(()),
    }
}

/// A value as compact JSON, for messages.
fn shown<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "?".into())
}

fn error(field: impl Into<String>, message: impl Into<String>) -> NetdevError {
    NetdevError {
        field: field.into(),
        message: message.into(),
    }
}

/// A text that is not an address in CIDR form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrError {
    /// No `/prefix`.
    #[error("{text:?} is not in CIDR form (address/prefix)")]
    NotCidr {
        /// The text given.
        text: String,
    },
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("{text:?}: {address:?} is not an IP address")]
    NotAnAddress {
        /// The text given.
        text: String,
        /// The part before `/`.
        address: String,
    },
    /// The prefix is not a number up to the address's length in bits.
    #[error("{text:?}: the prefix must be 0 to {max}")]
    BadPrefix {
        /// The text given.
        text: String,
        /// 32 or 128.
        max: u8,
    },
}

/// Parses `a.b.c.d/n` or `x::y/n`.
pub fn parse_cidr(text: &str) -> Result<Cidr, CidrError> {
    let (address, prefix) = text.split_once('/').ok_or_else(|| CidrError::NotCidr {
        text: text.to_string(),
    })?;
    let parsed: IpAddr = address.parse().map_err(|_| CidrError::NotAnAddress {
        text: text.to_string(),
        address: address.to_string(),
    })?;
    let max = if parsed.is_ipv4() { 32 } else { 128 };
    let prefix: u8 =
        prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| CidrError::BadPrefix {
                text: text.to_string(),
                max,
            })?;
    Ok(Cidr {
        address: parsed,
        prefix,
    })
}

/// Linux interface names: 1 to 15 bytes, no `/`, `:` or whitespace, not
/// `.` or `..`.
fn check_name(name: &str) -> Result<(), String> {
    let bad = name.is_empty()
        || name.len() > 15
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if bad {
        return Err(format!(
            "{name:?} is not an interface name (1 to 15 bytes, no '/', ':' or spaces)"
        ));
    }
    Ok(())
}

impl NetdevSettings {
    /// These settings with every field `later` sets taken from `later`:
    /// how the entries of one source (a class's, or a claim's) combine.
    pub fn overlay(&self, later: &NetdevSettings) -> NetdevSettings {
        NetdevSettings {
            interface_name: (later.interface_name.clone()).or_else(|| self.interface_name.clone()),
            mtu: later.mtu.or(self.mtu),
            addresses: (later.addresses.clone()).or_else(|| self.addresses.clone()),
            routes: (later.routes.clone()).or_else(|| self.routes.clone()),
        }
    }

    /// Refuses `claim` when it sets a field `class` sets, to another value
    /// (values compared as written); names the first such field.
    pub fn check_pinned(class: &NetdevSettings, claim: &NetdevSettings) -> Result<(), PinnedField> {
        pin(
            "interfaceName",
            class.interface_name.as_ref(),
            claim.interface_name.as_ref(),
        )?;
        pin("mtu", class.mtu.as_ref(), claim.mtu.as_ref())?;
        pin(
            "addresses",
            class.addresses.as_ref(),
            claim.addresses.as_ref(),
        )?;
        pin("routes", class.routes.as_ref(), claim.routes.as_ref())
    }

    /// The settings a request gets: each field the class sets (pinned),
    /// the claim's value for each field the class leaves unset. A claim
    /// setting a pinned field to another value is refused; repeating the
    /// class's value is fine.
    pub fn merge(class: &NetdevSettings, claim: &NetdevSettings) -> Result<Self, PinnedField> {
        Self::check_pinned(class, claim)?;
        Ok(claim.overlay(class))
    }

    /// Checks the settings before the NIC is known (at prepare, for the
    /// claim): everything but the default name, which is the host's.
    pub fn check(&self) -> Result<(), NetdevError> {
        self.plan("eth0").map(|_| ())
    }

    /// Checks the settings for the NIC whose host interface is `host_name`.
    pub fn plan(&self, host_name: &str) -> Result<NetdevPlan, NetdevError> {
        let name = self
            .interface_name
            .clone()
            .unwrap_or_else(|| host_name.to_string());
        check_name(&name).map_err(|m| error("interfaceName", m))?;
        if let Some(mtu) = self.mtu.filter(|m| !(68..=65535).contains(m)) {
            return Err(error("mtu", format!("{mtu} is outside 68 to 65535")));
        }
        let addresses = match &self.addresses {
            None => None,
            Some(list) => Some(
                (list.iter().enumerate())
                    .map(|(i, a)| {
                        parse_cidr(a).map_err(|m| error(format!("addresses[{i}]"), m.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        if let (Some(mtu), Some(list)) = (self.mtu, &addresses)
            && mtu < 1280
            && list.iter().any(|c| c.address.is_ipv6())
        {
            return Err(error(
                "mtu",
                format!("{mtu} is below 1280, the least IPv6 needs"),
            ));
        }
        let routes = (self.routes.iter().flatten().enumerate())
            .map(|(i, r)| route(r).map_err(|(f, m)| error(format!("routes[{i}].{f}"), m)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NetdevPlan {
            name,
            mtu: self.mtu,
            addresses,
            routes,
        })
    }
}

fn route(r: &RouteSettings) -> Result<Route, (&'static str, String)> {
    let destination = parse_cidr(&r.destination).map_err(|m| ("destination", m.to_string()))?;
    let gateway = match &r.gateway {
        None => None,
        Some(g) => {
            let ip: IpAddr = g
                .parse()
                .map_err(|_| ("gateway", format!("{g:?} is not an IP address")))?;
            if ip.is_ipv4() != destination.address.is_ipv4() {
                return Err((
                    "gateway",
                    format!("{g} is not of the family of {}", r.destination),
                ));
            }
            Some(ip)
        }
    };
    Ok(Route {
        destination,
        gateway,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> NetdevSettings {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn a_full_plan_is_resolved() {
        let plan = settings(
            "interfaceName: net1\nmtu: 9000\naddresses: [10.10.0.2/24, fd00::2/64]\nroutes:\n- {destination: 10.20.0.0/16, gateway: 10.10.0.1}\n- {destination: 0.0.0.0/0}\n",
        )
        .plan("enp4s0")
        .unwrap();
        assert_eq!(plan.name, "net1");
        assert_eq!(plan.mtu, Some(9000));
        let addresses: Vec<String> = plan
            .addresses
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(addresses, ["10.10.0.2/24", "fd00::2/64"]);
        assert_eq!(plan.routes[0].gateway, Some("10.10.0.1".parse().unwrap()));
        assert_eq!(plan.routes[1].destination.prefix, 0);
    }

    #[test]
    fn unset_fields_keep_the_hosts() {
        let plan = NetdevSettings::default().plan("enp4s0").unwrap();
        assert_eq!(
            (plan.name.as_str(), plan.mtu, plan.addresses),
            ("enp4s0", None, None)
        );
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        let cases = [
            (
                "interfaceName: a-name-longer-than-15",
                "netdev.interfaceName",
                "a-name-longer-than-15",
            ),
            ("interfaceName: 'eth:0'", "netdev.interfaceName", "eth:0"),
            ("mtu: 20", "netdev.mtu", "20"),
            ("mtu: 1200\naddresses: [fd00::1/64]", "netdev.mtu", "1280"),
            ("addresses: [10.0.0.1]", "netdev.addresses[0]", "CIDR"),
            (
                "addresses: [10.0.0.1/24, 10.0.0.300/24]",
                "netdev.addresses[1]",
                "10.0.0.300",
            ),
            ("addresses: [10.0.0.1/33]", "netdev.addresses[0]", "0 to 32"),
            (
                "routes: [{destination: 10.1.0.0/16, gateway: 'fd00::1'}]",
                "netdev.routes[0].gateway",
                "family",
            ),
            (
                "routes: [{destination: nowhere}]",
                "netdev.routes[0].destination",
                "nowhere",
            ),
        ];
        for (yaml, field, says) in cases {
            let err = settings(yaml).plan("enp4s0").unwrap_err().to_string();
            assert!(
                err.starts_with(field) && err.contains(says),
                "{yaml}: {err}"
            );
        }
    }

    /// Issue 29 item 6: each field a class sets is pinned. For every field,
    /// a claim setting another value is refused naming it, the same value
    /// passes, and a class leaving it unset takes the claim's.
    #[test]
    fn each_field_the_class_sets_is_pinned_and_each_it_leaves_unset_merges() {
        let cases = [
            (
                "interfaceName",
                "interfaceName: net1",
                "interfaceName: evil0",
            ),
            ("mtu", "mtu: 9000", "mtu: 1500"),
            (
                "addresses",
                "addresses: [10.10.0.2/24]",
                "addresses: [10.10.0.9/24]",
            ),
            (
                "routes",
                "routes: [{destination: 10.20.0.0/16, gateway: 10.10.0.1}]",
                "routes: [{destination: 0.0.0.0/0, gateway: 10.10.0.66}]",
            ),
            ("routes", "routes: []", "routes: [{destination: 0.0.0.0/0}]"),
        ];
        for (field, class_yaml, claim_yaml) in cases {
            let (class, claim) = (settings(class_yaml), settings(claim_yaml));
            let err = NetdevSettings::merge(&class, &claim).unwrap_err();
            assert_eq!(err.field, field, "{class_yaml} / {claim_yaml}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("netdev.{field} is pinned")),
                "{text}"
            );
            // The same value as the class is fine, and changes nothing.
            assert_eq!(NetdevSettings::merge(&class, &class), Ok(class.clone()));
            // Unset in the class: the claim's value.
            let merged = NetdevSettings::merge(&NetdevSettings::default(), &claim).unwrap();
            assert_eq!(merged, claim, "{claim_yaml}");
            // Unset in the claim: the class's value.
            let merged = NetdevSettings::merge(&class, &NetdevSettings::default()).unwrap();
            assert_eq!(merged, class, "{class_yaml}");
        }
    }

    /// Issue 29 item 6: a claim that only sets `mtu` used to replace the
    /// class's block whole, dropping its addresses and routes.
    #[test]
    fn a_claim_setting_only_the_mtu_keeps_the_class_addresses_and_routes() {
        let class = settings(
            "interfaceName: net1\naddresses: [10.10.0.2/24]\nroutes: [{destination: 10.20.0.0/16, gateway: 10.10.0.1}]",
        );
        let merged = NetdevSettings::merge(&class, &settings("mtu: 9000")).unwrap();
        let plan = merged.plan("enp4s0").unwrap();
        assert_eq!(plan.name, "net1");
        assert_eq!(plan.mtu, Some(9000));
        assert_eq!(plan.addresses.unwrap()[0].to_string(), "10.10.0.2/24");
        assert_eq!(plan.routes.len(), 1);
    }

    #[test]
    fn later_entries_of_one_source_override_field_by_field() {
        let first = settings("interfaceName: net1\nmtu: 1500");
        let later = settings("mtu: 9000");
        let both = first.overlay(&later);
        assert_eq!(both.interface_name.as_deref(), Some("net1"));
        assert_eq!(both.mtu, Some(9000));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_yaml_ng::from_str::<NetdevSettings>("mtuu: 9000").unwrap_err();
        assert!(err.to_string().contains("mtuu"), "{err}");
    }
}
