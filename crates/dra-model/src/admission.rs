//! The NicConfig checks an admission webhook runs when a ResourceClaim,
//! ResourceClaimTemplate or DeviceClass is written, so that a bad config
//! is refused then instead of minutes later at NodePrepareResources.
//!
//! One source of truth: the verdict comes from
//! [`nic_config::config_for_request`], the function the node agent runs
//! at prepare, on the configuration the scheduler would copy into the
//! allocation (the class's entries as `FromClass` for the request, the
//! claim's as written, as `FromClaim`). The messages are therefore the
//! agent's own, word for word.
//!
//! What admission cannot know, it does not guess:
//!
//! - a request is checked when its DeviceClass is this driver's (a config
//!   entry of the driver, or a CEL selector naming it); a request of
//!   another driver's class never reaches this driver's prepare;
//! - a request whose class does not exist yet (classes may come later) is
//!   checked for what needs no class: each entry of the claim that applies
//!   to it must parse and be valid on its own;
//! - every subrequest of a `firstAvailable` list is checked, though the
//!   scheduler picks one: a config that breaks any of them is refused;
//! - an entry of this driver that applies to no request checked above
//!   must still parse (nothing would ever read it, but it is a mistake).

use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceClaimConfiguration, DeviceClass, DeviceClassSpec,
    ResourceClaimSpec,
};

use crate::nic_config::{
    self, NicConfigError, SOURCE_CLAIM, SOURCE_CLASS, applies_to, config_for_request,
};

/// A request or subrequest a claim asks for: `nic`, or `nic/pf` for a
/// subrequest of `firstAvailable`, and the DeviceClass it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The name prepare sees in the allocation result.
    pub request: String,
    /// The DeviceClass it names.
    pub class: String,
}

/// Every request and subrequest of `spec`, in order.
pub fn targets(spec: &ResourceClaimSpec) -> Vec<Target> {
    let requests = (spec.devices.as_ref()).and_then(|d| d.requests.as_deref());
    let mut out = Vec::new();
    for request in requests.unwrap_or_default() {
        if let Some(exact) = &request.exactly {
            out.push(Target {
                request: request.name.clone(),
                class: exact.device_class_name.clone(),
            });
        }
        for sub in request.first_available.iter().flatten() {
            out.push(Target {
                request: format!("{}/{}", request.name, sub.name),
                class: sub.device_class_name.clone(),
            });
        }
    }
    out
}

/// Whether `class` is one of `driver`'s: it carries a config entry of the
/// driver, or a CEL selector that names the driver.
pub fn is_drivers_class(class: &DeviceClass, driver: &str) -> bool {
    let Some(spec) = &class.spec else {
        return false;
    };
    let configured = (spec.config.iter().flatten())
        .any(|c| c.opaque.as_ref().is_some_and(|o| o.driver == driver));
    let quoted = [format!("\"{driver}\""), format!("'{driver}'")];
    let selected = (spec.selectors.iter().flatten())
        .filter_map(|s| s.cel.as_ref())
        .any(|cel| quoted.iter().any(|q| cel.expression.contains(q.as_str())));
    configured || selected
}

/// Judges the NicConfig entries of a claim (or a template's claim) under
/// the `classes` it names (those that exist; the others are taken as not
/// created yet). `Ok` when prepare would accept the config for each of
/// this driver's requests; else the agent's error for the first that it
/// would refuse.
pub fn check_claim(
    spec: &ResourceClaimSpec,
    driver: &str,
    classes: &[DeviceClass],
) -> Result<(), NicConfigError> {
    let entries = (spec.devices.as_ref()).and_then(|d| d.config.as_deref());
    let entries = entries.unwrap_or_default();
    let claim_configs: Vec<DeviceAllocationConfiguration> =
        entries.iter().map(from_claim).collect();
    let targets = targets(spec);
    let mut checked: Vec<String> = Vec::new();
    for target in targets.iter().cloned() {
        let class = classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(target.class.as_str()));
        match class {
            Some(class) if !is_drivers_class(class, driver) => continue,
            Some(class) => {
                let mut configs = class_configs(class, &target.request);
                configs.extend(claim_configs.iter().cloned());
                config_for_request(&configs, driver, &target.request)?;
            }
            None => parse_applying(&claim_configs, driver, &target.request)?,
        }
        checked.push(target.request);
    }
    for entry in &claim_configs {
        let reached = checked
            .iter()
            .any(|r| applies_to(entry.requests.as_deref(), r));
        if !reached {
            // Named after the first request it names, else the claim's first.
            let request =
                (entry.requests.iter().flatten().next()).or(targets.first().map(|t| &t.request));
            parse_applying(
                std::slice::from_ref(entry),
                driver,
                request.map_or("", String::as_str),
            )?;
        }
    }
    Ok(())
}

/// Judges a DeviceClass's NicConfig entries of `driver` on their own and
/// combined, as every request of the class would get them.
pub fn check_class(spec: &DeviceClassSpec, driver: &str) -> Result<(), NicConfigError> {
    let configs: Vec<DeviceAllocationConfiguration> = (spec.config.iter().flatten())
        .map(|c| DeviceAllocationConfiguration {
            opaque: c.opaque.clone(),
            requests: None,
            source: SOURCE_CLASS.into(),
        })
        .collect();
    config_for_request(&configs, driver, "").map(|_| ())
}

/// The class's config entries as the scheduler copies them into an
/// allocation for `request`.
fn class_configs(class: &DeviceClass, request: &str) -> Vec<DeviceAllocationConfiguration> {
    let spec = class.spec.as_ref();
    (spec.and_then(|s| s.config.as_deref()).unwrap_or_default())
        .iter()
        .map(|c| DeviceAllocationConfiguration {
            opaque: c.opaque.clone(),
            requests: Some(vec![request.to_string()]),
            source: SOURCE_CLASS.into(),
        })
        .collect()
}

/// A claim's config entry as the scheduler copies it into an allocation.
fn from_claim(entry: &DeviceClaimConfiguration) -> DeviceAllocationConfiguration {
    DeviceAllocationConfiguration {
        opaque: entry.opaque.clone(),
        requests: entry.requests.clone(),
        source: SOURCE_CLAIM.into(),
    }
}

/// Each of `configs` that applies to `request` parses and is valid on
/// its own (no class to hold it against).
fn parse_applying(
    configs: &[DeviceAllocationConfiguration],
    driver: &str,
    request: &str,
) -> Result<(), NicConfigError> {
    let applying = (configs.iter())
        .filter(|c| request.is_empty() || applies_to(c.requests.as_deref(), request))
        .filter_map(|c| c.opaque.as_ref().filter(|o| o.driver == driver));
    for opaque in applying {
        nic_config::parse_entry(&opaque.parameters.0, SOURCE_CLAIM, request)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
