//! `NicConfig`: the driver's opaque device configuration, as users write it
//! in a DeviceClass or ResourceClaim (`apiVersion: ainic.amd.com/v1alpha1`,
//! `kind: NicConfig`), and how the pieces that apply to one request merge.
//!
//! The allocation result of a claim carries the configuration of the class
//! (`source: FromClass`) and of the claim (`source: FromClaim`). For one
//! request, every entry of this driver that names the request (or names no
//! request) applies. The class's entries combine first, a later entry's
//! field overriding an earlier one's; so do the claim's. Then
//! [`merge_claim`] puts the claim under its class (admins control
//! DeviceClasses; anyone who can create a claim controls its config):
//!
//! - `mode` and every field of `netdev` that the class sets are pinned: a
//!   claim entry setting one to another value is an error naming the field
//!   (repeating the class's value is fine); the fields the class leaves
//!   unset come from the claim;
//! - `umad` and `issm` give a container more devices, so only the class
//!   grants them: a claim may turn them off, or repeat what its class
//!   grants; a claim asking for one its class does not grant is an error
//!   naming the field.

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde::{Deserialize, Serialize};

/// `apiVersion` of a NicConfig.
pub const API_VERSION: &str = "ainic.amd.com/v1alpha1";
/// `kind` of a NicConfig.
pub const KIND: &str = "NicConfig";
/// `source` of a configuration copied from the DeviceClass.
pub const SOURCE_CLASS: &str = "FromClass";
/// `source` of a configuration copied from the ResourceClaim.
pub const SOURCE_CLAIM: &str = "FromClaim";

/// How an allocated NIC is handed to a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// RDMA char devices and environment; the netdev stays in the host
    /// network namespace (the default).
    #[default]
    Rdma,
    /// The netdev moves into the pod's network namespace when the pod
    /// sandbox starts (the node agent's NRI plugin), as its `netdev:`
    /// settings say, and back at sandbox stop; the RDMA char devices are
    /// given as in `rdma` mode.
    Netdev,
}

impl AttachMode {
    /// The spelling used in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Rdma => "rdma",
            AttachMode::Netdev => "netdev",
        }
    }
}

/// The effective configuration of one request's devices.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicConfig {
    /// How the NIC is attached.
    pub mode: AttachMode,
    /// Also give the container the MAD devices (`/dev/infiniband/umadN`).
    pub umad: bool,
    /// Also give the container the subnet-management devices (`issmN`).
    pub issm: bool,
    /// Exclusive netdev mode's settings (checked): the class's fields,
    /// and the claim's where the class sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<crate::netdev::NetdevSettings>,
}

/// One NicConfig object as written: every field optional so that later
/// objects override only what they set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NicConfigObject {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Attach mode.
    #[serde(default)]
    pub mode: Option<AttachMode>,
    /// Give the MAD devices.
    #[serde(default)]
    pub umad: Option<bool>,
    /// Give the subnet-management devices.
    #[serde(default)]
    pub issm: Option<bool>,
    /// Exclusive netdev mode's settings ([`crate::netdev`]); checked here.
    #[serde(default)]
    pub netdev: Option<crate::netdev::NetdevSettings>,
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NicConfigError {
    /// The parameters are not a valid NicConfig (unknown field, wrong type).
    #[error("invalid NicConfig in {source_kind} config {}: {error}", target(.request))]
    Invalid {
        /// `FromClass` or `FromClaim`.
        source_kind: String,
        /// The request being configured.
        request: String,
        /// What serde said; names the offending field.
        error: serde_json::Error,
    },
    /// A claim asks for device access its class does not grant.
    #[error(
        "FromClaim config for request {request:?} sets {field}: true, which only the DeviceClass may grant (its class does not); ask an admin for a class that grants {field}, or drop the field"
    )]
    WidensAccess {
        /// The request being configured.
        request: String,
        /// The field (`umad`, `issm`).
        field: &'static str,
    },
    /// A claim sets a field its class pinned (`mode`, `netdev.*`) to
    /// another value.
    #[error(
        "FromClaim config for request {request:?} sets {} to {}, but its DeviceClass pins {} to {}; drop {} from the claim's config, or ask an admin for a class that leaves it unset",
        .pinned.field, .pinned.claim, .pinned.field, .pinned.class, .pinned.field
    )]
    Pinned {
        /// The request being configured.
        request: String,
        /// Which field, and both values (boxed: the error stays small).
        pinned: Box<Pinned>,
    },
    /// The `netdev` settings are not usable.
    #[error("{source_kind} config {}: {error}", target(.request))]
    Netdev {
        /// `FromClass` or `FromClaim`.
        source_kind: String,
        /// The request being configured.
        request: String,
        /// Which field and why (boxed: the error stays small).
        error: Box<crate::netdev::NetdevError>,
    },
    /// `apiVersion` or `kind` is not the NicConfig one.
    #[error(
        "unsupported config {api_version}/{kind} in {source_kind} config {}: expected {API_VERSION}/{KIND}",
        target(.request)
    )]
    WrongType {
        /// `FromClass` or `FromClaim`.
        source_kind: String,
        /// The request being configured.
        request: String,
        /// What the object said.
        api_version: String,
        /// What the object said.
        kind: String,
    },
    /// Exclusive netdev mode's settings, each field valid where it was
    /// written, are not usable together (an MTU below 1280 from one entry
    /// with an IPv6 address from another).
    #[error("{}: exclusive netdev mode: {error}", plan_target(.request))]
    Plan {
        /// The request being configured.
        request: String,
        /// Which field and why (boxed: the error stays small).
        error: Box<crate::netdev::NetdevError>,
    },
}

/// `request nic`, as the agent has always named a request in exclusive
/// netdev mode's errors; `every request of the class` for a class alone.
fn plan_target(request: &str) -> String {
    if request.is_empty() {
        "every request of the class".to_string()
    } else {
        format!("request {request}")
    }
}

/// `for request "nic"`; a DeviceClass judged on its own configures no
/// request yet (the empty name): `for every request of the class`.
fn target(request: &str) -> String {
    if request.is_empty() {
        "for every request of the class".to_string()
    } else {
        format!("for request {request:?}")
    }
}

impl NicConfigObject {
    /// Parses the `parameters` of an opaque configuration.
    pub fn parse(value: &serde_json::Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(value)
    }

    /// This object with every field `later` sets taken from `later`
    /// (`netdev` field by field): how the entries of one source combine.
    pub fn overlay(&self, later: &NicConfigObject) -> NicConfigObject {
        let netdev = match (&self.netdev, &later.netdev) {
            (Some(earlier), Some(later)) => Some(earlier.overlay(later)),
            (earlier, later) => later.clone().or_else(|| earlier.clone()),
        };
        NicConfigObject {
            api_version: later.api_version.clone(),
            kind: later.kind.clone(),
            mode: later.mode.or(self.mode),
            umad: later.umad.or(self.umad),
            issm: later.issm.or(self.issm),
            netdev,
        }
    }
}

/// A field a claim sets against its class's pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// The field (`mode`, `netdev.addresses`, ...).
    pub field: String,
    /// The class's value, as JSON.
    pub class: String,
    /// The claim's value, as JSON.
    pub claim: String,
}

/// Checks one claim entry against what its class set (`class`, the class's
/// entries combined): refused when it turns on `umad` or `issm` the class
/// does not grant, or sets `mode` or a `netdev` field the class pinned to
/// another value. Pure: prepare and admission checks call the same.
pub fn check_claim_entry(
    class: &NicConfigObject,
    entry: &NicConfigObject,
    request: &str,
) -> Result<(), NicConfigError> {
    refuse_widening(entry, class, request)?;
    let pinned = |field: String, class: String, claim: String| NicConfigError::Pinned {
        request: request.to_string(),
        pinned: Box::new(Pinned {
            field,
            class,
            claim,
        }),
    };
    if let (Some(class_mode), Some(mode)) = (class.mode, entry.mode)
        && class_mode != mode
    {
        let quoted = |m: AttachMode| format!("{:?}", m.as_str());
        return Err(pinned("mode".into(), quoted(class_mode), quoted(mode)));
    }
    if let (Some(class_netdev), Some(netdev)) = (&class.netdev, &entry.netdev) {
        crate::netdev::NetdevSettings::check_pinned(class_netdev, netdev)
            .map_err(|e| pinned(format!("netdev.{}", e.field), e.class, e.claim))?;
    }
    Ok(())
}

/// The effective configuration of a claim (`claim`, its entries combined,
/// each passed [`check_claim_entry`]) under its class (`class`): the
/// class's `mode` and `netdev` fields where it sets them, else the
/// claim's; `umad` and `issm` as the claim narrows them; defaults for the
/// rest.
pub fn merge_claim(class: &NicConfigObject, claim: &NicConfigObject) -> NicConfig {
    let netdev = match (&class.netdev, &claim.netdev) {
        (None, None) => None,
        (class, claim) => Some(
            claim
                .clone()
                .unwrap_or_default()
                .overlay(&class.clone().unwrap_or_default()),
        ),
    };
    NicConfig {
        mode: class.mode.or(claim.mode).unwrap_or_default(),
        umad: claim.umad.or(class.umad).unwrap_or(false),
        issm: claim.issm.or(class.issm).unwrap_or(false),
        netdev,
    }
}

/// True when a configuration entry listing `targets` applies to the result
/// of `request` (`main` or `main/sub` for a firstAvailable subrequest).
pub fn applies_to(targets: Option<&[String]>, request: &str) -> bool {
    let Some(targets) = targets.filter(|t| !t.is_empty()) else {
        return true;
    };
    let parent = request.split('/').next().unwrap_or(request);
    targets.iter().any(|t| t == request || t == parent)
}

/// The effective NicConfig for the devices allocated to `request`: every
/// matching class entry of `driver` combined, then every matching claim
/// entry, each checked against the class ([`check_claim_entry`]) and
/// combined, and the claim merged under the class ([`merge_claim`]); in
/// netdev mode the merged settings are checked as a whole. Prepare and
/// the admission checks ([`crate::admission`]) both call this.
pub fn config_for_request(
    configs: &[DeviceAllocationConfiguration],
    driver: &str,
    request: &str,
) -> Result<NicConfig, NicConfigError> {
    let entries = |source: &'static str| {
        let opaque = configs.iter().filter(move |c| c.source == source);
        opaque
            .filter(|c| applies_to(c.requests.as_deref(), request))
            .filter_map(|c| c.opaque.as_ref().filter(|o| o.driver == driver))
            .map(move |o| parse_entry(&o.parameters.0, source, request))
    };
    let mut class = NicConfigObject::default();
    for object in entries(SOURCE_CLASS) {
        class = class.overlay(&object?);
    }
    let mut claim = NicConfigObject::default();
    for object in entries(SOURCE_CLAIM) {
        let object = object?;
        check_claim_entry(&class, &object, request)?;
        claim = claim.overlay(&object);
    }
    let merged = merge_claim(&class, &claim);
    if let (AttachMode::Netdev, Some(settings)) = (merged.mode, &merged.netdev) {
        settings.check().map_err(|error| NicConfigError::Plan {
            request: request.to_string(),
            error: Box::new(error),
        })?;
    }
    Ok(merged)
}

/// A claim's entry may not turn on access its class did not grant.
fn refuse_widening(
    object: &NicConfigObject,
    class: &NicConfigObject,
    request: &str,
) -> Result<(), NicConfigError> {
    for (field, asked, allowed) in [
        ("umad", object.umad, class.umad),
        ("issm", object.issm, class.issm),
    ] {
        if asked == Some(true) && allowed != Some(true) {
            return Err(NicConfigError::WidensAccess {
                request: request.to_string(),
                field,
            });
        }
    }
    Ok(())
}

pub(crate) fn parse_entry(
    value: &serde_json::Value,
    source: &str,
    request: &str,
) -> Result<NicConfigObject, NicConfigError> {
    let object = NicConfigObject::parse(value).map_err(|error| NicConfigError::Invalid {
        source_kind: source.to_string(),
        request: request.to_string(),
        error,
    })?;
    if object.api_version != API_VERSION || object.kind != KIND {
        return Err(NicConfigError::WrongType {
            source_kind: source.to_string(),
            request: request.to_string(),
            api_version: object.api_version,
            kind: object.kind,
        });
    }
    if let Some(settings) = &object.netdev
        && let Err(error) = settings.check()
    {
        return Err(NicConfigError::Netdev {
            source_kind: source.to_string(),
            request: request.to_string(),
            error: Box::new(error),
        });
    }
    Ok(object)
}

#[cfg(test)]
mod netdev_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_netdev_settings_fail_with_the_field() {
        let value = json!({"apiVersion": API_VERSION, "kind": KIND, "mode": "netdev",
            "netdev": {"interfaceName": "net1", "addresses": ["10.0.0.1/40"]}});
        let err = parse_entry(&value, SOURCE_CLAIM, "nic")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("request \"nic\"") && err.contains("netdev.addresses[0]"),
            "{err}"
        );
        let typo = json!({"apiVersion": API_VERSION, "kind": KIND, "netdev": {"mtuu": 9000}});
        let err = parse_entry(&typo, SOURCE_CLAIM, "nic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("mtuu"), "{err}");
        let good = json!({"apiVersion": API_VERSION, "kind": KIND, "netdev": {"mtu": 9000}});
        assert!(parse_entry(&good, SOURCE_CLAIM, "nic").is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::OpaqueDeviceConfiguration;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use serde_json::json;

    fn entry(
        source: &str,
        driver: &str,
        requests: &[&str],
        params: serde_json::Value,
    ) -> DeviceAllocationConfiguration {
        DeviceAllocationConfiguration {
            source: source.into(),
            requests: (!requests.is_empty())
                .then(|| requests.iter().map(|r| r.to_string()).collect()),
            opaque: Some(OpaqueDeviceConfiguration {
                driver: driver.into(),
                parameters: RawExtension(params),
            }),
        }
    }

    fn nic(fields: serde_json::Value) -> serde_json::Value {
        let mut v = json!({"apiVersion": API_VERSION, "kind": KIND});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        v
    }

    const D: &str = "ainic.amd.com";

    #[test]
    fn no_config_means_rdma_without_mad_devices() {
        assert_eq!(
            config_for_request(&[], D, "nic").unwrap(),
            NicConfig::default()
        );
        assert_eq!(NicConfig::default().mode, AttachMode::Rdma);
    }

    #[test]
    fn claim_config_overrides_class_config_whatever_the_order() {
        let configs = vec![
            entry(SOURCE_CLAIM, D, &[], nic(json!({"umad": false}))),
            entry(
                SOURCE_CLASS,
                D,
                &[],
                nic(json!({"umad": true, "issm": true})),
            ),
        ];
        let c = config_for_request(&configs, D, "nic").unwrap();
        assert!(!c.umad, "claim said umad: false");
        assert!(
            c.issm,
            "class said issm: true and the claim did not override it"
        );
    }

    #[test]
    fn entries_for_other_requests_or_drivers_are_ignored() {
        let configs = vec![
            entry(SOURCE_CLASS, D, &[], nic(json!({"issm": true}))),
            entry(SOURCE_CLAIM, D, &["other"], nic(json!({"umad": true}))),
            entry(SOURCE_CLAIM, "gpu.amd.com", &[], json!({"anything": 1})),
            entry(SOURCE_CLAIM, D, &["nic"], nic(json!({"issm": false}))),
        ];
        let c = config_for_request(&configs, D, "nic/pf").unwrap();
        assert!(!c.umad);
        assert!(
            !c.issm,
            "an entry naming the parent request applies to its subrequest"
        );
    }

    #[test]
    fn a_claim_cannot_grant_itself_mad_or_sm_devices() {
        for field in ["umad", "issm"] {
            let configs = vec![entry(SOURCE_CLAIM, D, &[], nic(json!({ field: true })))];
            let err = config_for_request(&configs, D, "nic")
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("sets {field}: true")), "{err}");
            assert!(err.contains("\"nic\""), "{err}");
            // A class entry for another request grants nothing here.
            let configs = vec![
                entry(SOURCE_CLASS, D, &["other"], nic(json!({ field: true }))),
                entry(SOURCE_CLAIM, D, &[], nic(json!({ field: true }))),
            ];
            assert!(config_for_request(&configs, D, "nic").is_err());
        }
    }

    #[test]
    fn a_claim_may_repeat_what_its_class_grants() {
        let configs = vec![
            entry(SOURCE_CLASS, D, &[], nic(json!({"umad": true}))),
            entry(SOURCE_CLAIM, D, &[], nic(json!({"umad": true}))),
        ];
        assert!(config_for_request(&configs, D, "nic").unwrap().umad);
    }

    /// Issue 29 item 6: a claim's netdev block used to replace its class's
    /// whole. Each field the class sets is now pinned: for every field, a
    /// claim setting another value fails naming the field and the request.
    #[test]
    fn a_claim_cannot_change_what_its_class_pinned() {
        let class = json!({"mode": "netdev", "netdev": {"interfaceName": "net1", "mtu": 9000,
            "addresses": ["10.10.0.2/24"], "routes": [{"destination": "10.20.0.0/16", "gateway": "10.10.0.1"}]}});
        let cases = [
            (json!({"mode": "rdma"}), "sets mode to \"rdma\""),
            (
                json!({"netdev": {"interfaceName": "eth9"}}),
                "sets netdev.interfaceName to \"eth9\"",
            ),
            (json!({"netdev": {"mtu": 1500}}), "sets netdev.mtu to 1500"),
            (
                json!({"netdev": {"addresses": ["10.10.0.66/24"]}}),
                "sets netdev.addresses to [\"10.10.0.66/24\"]",
            ),
            (
                json!({"netdev": {"routes": []}}),
                "sets netdev.routes to []",
            ),
        ];
        for (claim, says) in cases {
            let configs = vec![
                entry(SOURCE_CLASS, D, &[], nic(class.clone())),
                entry(SOURCE_CLAIM, D, &[], nic(claim.clone())),
            ];
            let err = config_for_request(&configs, D, "nic")
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{claim}: {err}");
            assert!(
                err.contains("request \"nic\"") && err.contains("DeviceClass pins"),
                "{err}"
            );
        }
        // Repeating the class's values is fine.
        let configs = vec![
            entry(SOURCE_CLASS, D, &[], nic(class.clone())),
            entry(SOURCE_CLAIM, D, &[], nic(class.clone())),
        ];
        let c = config_for_request(&configs, D, "nic").unwrap();
        assert_eq!(c.mode, AttachMode::Netdev);
        assert_eq!(c.netdev.unwrap().mtu, Some(9000));
    }

    /// Issue 29 item 6: a claim setting only `mtu` used to drop the class's
    /// addresses; the fields the class leaves unset merge from the claim.
    #[test]
    fn fields_the_class_leaves_unset_merge_from_the_claim() {
        let configs = vec![
            entry(
                SOURCE_CLASS,
                D,
                &[],
                nic(json!({"mode": "netdev", "netdev": {"addresses": ["10.10.0.2/24"]}})),
            ),
            entry(SOURCE_CLAIM, D, &[], nic(json!({"netdev": {"mtu": 9000}}))),
            entry(
                SOURCE_CLAIM,
                D,
                &[],
                nic(json!({"netdev": {"interfaceName": "net1"}})),
            ),
        ];
        let c = config_for_request(&configs, D, "nic").unwrap();
        let netdev = c.netdev.unwrap();
        assert_eq!(netdev.addresses, Some(vec!["10.10.0.2/24".to_string()]));
        assert_eq!(netdev.mtu, Some(9000));
        assert_eq!(netdev.interface_name.as_deref(), Some("net1"));
        // No class mode: the claim's.
        let configs = vec![entry(SOURCE_CLAIM, D, &[], nic(json!({"mode": "netdev"})))];
        let c = config_for_request(&configs, D, "nic").unwrap();
        assert_eq!(c.mode, AttachMode::Netdev);
    }

    #[test]
    fn class_entries_for_other_requests_pin_nothing() {
        let configs = vec![
            entry(
                SOURCE_CLASS,
                D,
                &["other"],
                nic(json!({"netdev": {"mtu": 9000}})),
            ),
            entry(SOURCE_CLAIM, D, &[], nic(json!({"netdev": {"mtu": 1500}}))),
        ];
        let c = config_for_request(&configs, D, "nic").unwrap();
        assert_eq!(c.netdev.unwrap().mtu, Some(1500));
    }

    #[test]
    fn unknown_field_is_rejected_by_name() {
        let configs = vec![entry(SOURCE_CLAIM, D, &[], nic(json!({"umadd": true})))];
        let err = config_for_request(&configs, D, "nic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `umadd`"), "{err}");
        assert!(err.contains("FromClaim"), "{err}");
    }

    #[test]
    fn wrong_kind_is_rejected() {
        let v = json!({"apiVersion": "ainic.amd.com/v1", "kind": "NicConfig"});
        let configs = vec![entry(SOURCE_CLASS, D, &[], v)];
        let err = config_for_request(&configs, D, "nic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ainic.amd.com/v1/NicConfig"), "{err}");
    }

    #[test]
    fn netdev_mode_parses_so_the_node_can_refuse_it_clearly() {
        let configs = vec![entry(SOURCE_CLAIM, D, &[], nic(json!({"mode": "netdev"})))];
        let c = config_for_request(&configs, D, "nic").unwrap();
        assert_eq!(c.mode, AttachMode::Netdev);
        let bad = vec![entry(SOURCE_CLAIM, D, &[], nic(json!({"mode": "sriov"})))];
        let err = config_for_request(&bad, D, "nic").unwrap_err().to_string();
        assert!(err.contains("sriov"), "{err}");
    }
}
