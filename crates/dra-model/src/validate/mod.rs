//! Checks ResourceSlices against the API server's validation rules,
//! independently of the builder.
//!
//! [`check_slice`] applies the rules of one object (what the API server
//! checks on create/update); [`check_pool`] the rules that span the slices
//! of one pool (counts, generations, unique names, counter references).
//! Where 1.34 and 1.35+ differ, the stricter rule is applied (≤4 taints,
//! ≤2 counter consumptions per device, ≤8 counter sets per slice), so a
//! slice that passes is accepted by either. Where they differ in kind, the
//! release decides ([`check_pool_for`]): ≤64 devices with taints or
//! counters from 1.35 (128 in 1.34);
//! from 1.35 counters and devices live in separate slices; in 1.34 a device
//! consumes only counter sets of its own slice. [`check_pool`] and
//! [`check_slice`] apply the 1.35+ rule.

mod device;
pub mod format;
mod pool;

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::resource::v1::{CounterSet, ResourceSlice};
use k8s_quantity::Quantity;

pub use pool::{check_pool, check_pool_for};

use crate::gates::Release;

/// Devices per slice.
pub const MAX_DEVICES: usize = 128;
/// Devices per slice when any device has taints or consumes counters
/// (1.35 and later; see `Release::max_devices_with_taints_or_counters`).
pub const MAX_DEVICES_WITH_TAINTS_OR_COUNTERS: usize = 64;
/// Attributes plus capacities per device.
pub const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
/// Length of string and version attribute values.
pub const MAX_VALUE_LENGTH: usize = 64;
/// Taints per device.
pub const MAX_TAINTS: usize = 4;
/// Counter sets per slice.
pub const MAX_COUNTER_SETS: usize = 8;
/// Counters per counter set (and per consumption entry).
pub const MAX_COUNTERS_PER_SET: usize = 32;
/// Counter consumption entries per device.
pub const MAX_CONSUMPTIONS_PER_DEVICE: usize = 2;
/// Length of a pool name.
pub const MAX_POOL_NAME: usize = 253;

/// One broken rule: where, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Field path, e.g. `spec.devices[3].attributes[ainic.amd.com/mac]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects violations under a path prefix.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) violations: Vec<Violation>,
}

impl Report {
    pub(crate) fn fail(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation {
            path: path.into(),
            message: message.into(),
        });
    }

    pub(crate) fn check(&mut self, ok: bool, path: impl Into<String>, message: impl Into<String>) {
        if !ok {
            self.fail(path, message);
        }
    }
}

/// Every rule one ResourceSlice breaks; empty when the API server of 1.35
/// or later would accept it.
pub fn check_slice(slice: &ResourceSlice) -> Vec<Violation> {
    check_slice_for(slice, Release::NEWEST)
}

/// Every rule one ResourceSlice breaks for the API server of `release`.
pub fn check_slice_for(slice: &ResourceSlice, release: Release) -> Vec<Violation> {
    let mut r = Report::default();
    let name = slice.metadata.name.as_deref().unwrap_or("");
    r.check(
        format::is_dns_subdomain(name),
        "metadata.name",
        format!("{name:?} is not a DNS subdomain"),
    );
    let spec = &slice.spec;
    r.check(
        format::is_driver_name(&spec.driver),
        "spec.driver",
        format!(
            "{:?} is not a DNS subdomain of at most 63 characters",
            spec.driver
        ),
    );
    check_pool_ref(&mut r, slice);
    check_node_selection(&mut r, slice);
    let devices = spec.devices.as_deref().unwrap_or(&[]);
    if spec.devices.is_some() && spec.shared_counters.is_some() && release.counters_in_own_slices()
    {
        r.fail("spec", "only one of devices and sharedCounters may be set");
    }
    let advanced = devices.iter().any(|d| {
        d.taints.as_ref().is_some_and(|t| !t.is_empty())
            || d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty())
    });
    let max = if advanced {
        release.max_devices_with_taints_or_counters()
    } else {
        MAX_DEVICES
    };
    r.check(
        devices.len() <= max,
        "spec.devices",
        format!("{} devices, at most {max} allowed", devices.len()),
    );
    let mut seen = BTreeSet::new();
    let per_device = spec.per_device_node_selection == Some(true);
    for (i, d) in devices.iter().enumerate() {
        let path = format!("spec.devices[{i}]");
        if !seen.insert(d.name.as_str()) {
            r.fail(
                format!("{path}.name"),
                format!("duplicate device name {:?}", d.name),
            );
        }
        device::check_device(&mut r, &path, d, per_device, release);
    }
    if let Some(sets) = &spec.shared_counters {
        check_counter_sets(&mut r, sets);
    }
    r.violations
}

fn check_pool_ref(r: &mut Report, slice: &ResourceSlice) {
    let pool = &slice.spec.pool;
    r.check(
        !pool.name.is_empty()
            && pool.name.len() <= MAX_POOL_NAME
            && pool.name.split('/').all(format::is_dns_subdomain),
        "spec.pool.name",
        format!(
            "{:?} is not a pool name (DNS subdomains joined by '/')",
            pool.name
        ),
    );
    r.check(
        pool.resource_slice_count > 0,
        "spec.pool.resourceSliceCount",
        "must be greater than zero",
    );
    r.check(
        pool.generation >= 0,
        "spec.pool.generation",
        "must not be negative",
    );
}

fn check_node_selection(r: &mut Report, slice: &ResourceSlice) {
    let spec = &slice.spec;
    let mut set = 0;
    if let Some(node) = &spec.node_name {
        set += 1;
        r.check(
            format::is_dns_subdomain(node),
            "spec.nodeName",
            format!("{node:?} is not a valid node name"),
        );
    }
    if let Some(sel) = &spec.node_selector {
        set += 1;
        r.check(
            sel.node_selector_terms.len() == 1,
            "spec.nodeSelector.nodeSelectorTerms",
            "must have exactly one term",
        );
    }
    for (flag, field) in [
        (spec.all_nodes, "spec.allNodes"),
        (
            spec.per_device_node_selection,
            "spec.perDeviceNodeSelection",
        ),
    ] {
        match flag {
            Some(true) => set += 1,
            Some(false) => r.fail(field, "must be unset or true"),
            None => {}
        }
    }
    r.check(
        set == 1,
        "spec",
        format!("exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set ({set} are)"),
    );
}

fn check_counter_sets(r: &mut Report, sets: &[CounterSet]) {
    r.check(
        sets.len() <= MAX_COUNTER_SETS,
        "spec.sharedCounters",
        format!(
            "{} counter sets, at most {MAX_COUNTER_SETS} allowed",
            sets.len()
        ),
    );
    let mut names = BTreeSet::new();
    for (i, set) in sets.iter().enumerate() {
        let path = format!("spec.sharedCounters[{i}]");
        r.check(
            format::is_dns_label(&set.name),
            format!("{path}.name"),
            format!("{:?} is not a DNS label", set.name),
        );
        if !names.insert(set.name.as_str()) {
            r.fail(
                format!("{path}.name"),
                format!("duplicate counter set {:?}", set.name),
            );
        }
        check_counters(r, &path, &set.counters);
    }
}

/// Counter maps (of sets and of consumptions): non-empty, ≤32, DNS-label
/// names, parsable values.
pub(crate) fn check_counters(
    r: &mut Report,
    path: &str,
    counters: &std::collections::BTreeMap<String, k8s_openapi::api::resource::v1::Counter>,
) {
    r.check(
        !counters.is_empty(),
        format!("{path}.counters"),
        "must not be empty",
    );
    r.check(
        counters.len() <= MAX_COUNTERS_PER_SET,
        format!("{path}.counters"),
        format!(
            "{} counters, at most {MAX_COUNTERS_PER_SET} allowed",
            counters.len()
        ),
    );
    for (name, counter) in counters {
        let at = format!("{path}.counters[{name}]");
        r.check(
            format::is_dns_label(name),
            &at,
            "counter name is not a DNS label",
        );
        r.check(
            Quantity::parse(&counter.value.0).is_ok(),
            &at,
            format!("{:?} is not a quantity", counter.value.0),
        );
    }
}
