//! The checks a CDI runtime makes on a spec before it injects any device
//! of it: kind and device names, unique non-empty devices, environment
//! entries, device nodes, mounts and net devices. A spec that fails here
//! would fail at container start with a vague "unresolvable CDI devices",
//! so the driver refuses to write it.

use std::collections::BTreeSet;

use super::{ContainerEdits, Spec};

/// Why a spec would be refused by a runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CDI spec of kind {kind:?}: {reason}")]
pub struct CdiSpecError {
    /// The spec's kind.
    pub kind: String,
    /// What is wrong, naming the device or field.
    pub reason: String,
}

/// Checks `spec` as a runtime would.
pub(super) fn check(spec: &Spec) -> Result<(), CdiSpecError> {
    let fail = |reason: String| CdiSpecError {
        kind: spec.kind.clone(),
        reason,
    };
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| fail("kind is not vendor/class".into()))?;
    vendor_or_class(vendor).map_err(|e| fail(format!("vendor: {e}")))?;
    vendor_or_class(class).map_err(|e| fail(format!("class: {e}")))?;
    if spec.devices.is_empty() {
        return Err(fail("no devices".into()));
    }
    let mut seen = BTreeSet::new();
    for device in &spec.devices {
        device_name(&device.name).map_err(|e| fail(format!("device {:?}: {e}", device.name)))?;
        if !seen.insert(device.name.as_str()) {
            return Err(fail(format!("device {:?} is defined twice", device.name)));
        }
        if device.container_edits.is_empty() {
            return Err(fail(format!("device {:?} has no edits", device.name)));
        }
        edits(&device.container_edits)
            .map_err(|e| fail(format!("device {:?}: {e}", device.name)))?;
    }
    if let Some(common) = &spec.container_edits {
        edits(common).map_err(|e| fail(format!("containerEdits: {e}")))?;
    }
    Ok(())
}

fn edits(e: &ContainerEdits) -> Result<(), String> {
    if let Some(bad) = e
        .env
        .iter()
        .find(|v| v.split_once('=').is_none_or(|(name, _)| name.is_empty()))
    {
        return Err(format!("environment entry {bad:?} is not NAME=value"));
    }
    for node in &e.device_nodes {
        if !node.path.starts_with('/') {
            return Err(format!("device node path {:?} is not absolute", node.path));
        }
        if let Some(kind) = &node.kind
            && !matches!(kind.as_str(), "b" | "c" | "u" | "p" | "")
        {
            return Err(format!("device node {}: invalid type {kind:?}", node.path));
        }
        if let Some(perms) = &node.permissions
            && !perms.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))
        {
            return Err(format!(
                "device node {}: invalid permissions {perms:?}",
                node.path
            ));
        }
    }
    for mount in &e.mounts {
        if mount.host_path.is_empty() || mount.container_path.is_empty() {
            return Err(format!(
                "mount {:?} -> {:?} lacks a path",
                mount.host_path, mount.container_path
            ));
        }
    }
    let mut hosts = BTreeSet::new();
    let mut names = BTreeSet::new();
    for net in &e.net_devices {
        if net.host_interface_name.is_empty() || net.name.is_empty() {
            return Err("net device with an empty interface name".into());
        }
        if !hosts.insert(&net.host_interface_name) || !names.insert(&net.name) {
            return Err(format!(
                "net device {} -> {} named twice",
                net.host_interface_name, net.name
            ));
        }
    }
    Ok(())
}

/// A vendor or class: starts with a letter, ends with a letter or digit,
/// letters, digits, `_`, `-` and `.` between.
fn vendor_or_class(name: &str) -> Result<(), String> {
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!("{name:?} does not start with a letter"));
    }
    inner_and_end(name, &['-', '_', '.'])
}

/// A device name: starts and ends with a letter or digit, letters,
/// digits, `_`, `-`, `.` and `:` between.
fn device_name(name: &str) -> Result<(), String> {
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err("name does not start with a letter or digit".into());
    }
    inner_and_end(name, &['-', '_', '.', ':'])
}

fn inner_and_end(name: &str, allowed: &[char]) -> Result<(), String> {
    if !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("{name:?} does not end with a letter or digit"));
    }
    match name
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !allowed.contains(c))
    {
        Some(c) => Err(format!("invalid character {c:?} in {name:?}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Device, DeviceNode, Mount};
    use super::*;

    fn spec() -> Spec {
        Spec {
            kind: "amd.com/ainic".into(),
            devices: vec![Device {
                name: "0b1c-pf-0000-0c-00-0".into(),
                container_edits: ContainerEdits {
                    env: vec!["A=1".into()],
                    ..ContainerEdits::default()
                },
                ..Device::default()
            }],
            ..Spec::default()
        }
    }

    fn reason(s: &Spec) -> String {
        check(s).unwrap_err().reason
    }

    #[test]
    fn a_good_spec_passes_and_each_fault_is_named() {
        check(&spec()).unwrap();
        let mut s = spec();
        s.kind = "amd.com".into();
        assert!(reason(&s).contains("vendor/class"));
        let mut s = spec();
        s.kind = "1amd.com/ainic".into();
        assert!(reason(&s).contains("vendor"));
        let mut s = spec();
        s.devices[0].name = "a/b".into();
        assert!(reason(&s).contains("invalid character '/'"));
        let mut s = spec();
        s.devices.push(s.devices[0].clone());
        assert!(reason(&s).contains("defined twice"));
        let mut s = spec();
        s.devices[0].container_edits = ContainerEdits::default();
        assert!(reason(&s).contains("no edits"));
        let mut s = spec();
        s.devices[0].container_edits.env.push("=x".into());
        assert!(reason(&s).contains("NAME=value"));
        let mut s = spec();
        s.devices[0].container_edits.device_nodes.push(DeviceNode {
            path: "dev/x".into(),
            ..DeviceNode::default()
        });
        assert!(reason(&s).contains("not absolute"));
        let mut s = spec();
        s.devices[0].container_edits.mounts.push(Mount::default());
        assert!(reason(&s).contains("lacks a path"));
        let mut s = spec();
        s.devices.clear();
        assert!(reason(&s).contains("no devices"));
    }
}
