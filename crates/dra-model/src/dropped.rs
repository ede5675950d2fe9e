//! Fields of a ResourceSlice that an API server keeps only while a feature
//! gate is on there.
//!
//! An API server whose gate is off drops that feature's fields when it
//! stores a slice, without an error (upstream's `dropDisabledFields` in the
//! ResourceSlice strategy). The publisher learns which fields a server keeps
//! by reading back what it sent: a dry-run create before the first write
//! of a field (the node agent's publisher probes), and every
//! object a real create or update returns. A dropped field turns its gate
//! off for the rest of the agent's life, so the next build leaves it out
//! and the pool converges instead of being rewritten again and again.

use std::collections::BTreeSet;
use std::fmt;

use crate::FeatureGate;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};

/// A gated field of a ResourceSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GatedField {
    /// `spec.sharedCounters`.
    SharedCounters,
    /// `spec.devices[].consumesCounters`.
    ConsumesCounters,
    /// `spec.devices[].taints`.
    Taints,
    /// `spec.devices[].allowMultipleAllocations`.
    AllowMultipleAllocations,
    /// `spec.devices[].capacity[].requestPolicy`.
    RequestPolicy,
    /// `spec.devices[].bindingConditions` (and its failure conditions).
    BindingConditions,
}

impl GatedField {
    /// Every gated field the driver can publish.
    pub const ALL: [GatedField; 6] = [
        GatedField::SharedCounters,
        GatedField::ConsumesCounters,
        GatedField::Taints,
        GatedField::AllowMultipleAllocations,
        GatedField::RequestPolicy,
        GatedField::BindingConditions,
    ];

    /// The field's path, as in the API reference.
    pub fn path(self) -> &'static str {
        match self {
            GatedField::SharedCounters => "spec.sharedCounters",
            GatedField::ConsumesCounters => "spec.devices[].consumesCounters",
            GatedField::Taints => "spec.devices[].taints",
            GatedField::AllowMultipleAllocations => "spec.devices[].allowMultipleAllocations",
            GatedField::RequestPolicy => "spec.devices[].capacity[].requestPolicy",
            GatedField::BindingConditions => "spec.devices[].bindingConditions",
        }
    }

    /// The gate the API server needs on to keep the field.
    pub fn gate(self) -> FeatureGate {
        match self {
            GatedField::SharedCounters | GatedField::ConsumesCounters => {
                FeatureGate::DraPartitionableDevices
            }
            GatedField::Taints => FeatureGate::DraDeviceTaints,
            GatedField::AllowMultipleAllocations | GatedField::RequestPolicy => {
                FeatureGate::DraConsumableCapacity
            }
            GatedField::BindingConditions => FeatureGate::DraDeviceBindingConditions,
        }
    }

    fn on_device(self, d: &Device) -> bool {
        let some = |v: Option<usize>| v.is_some_and(|n| n > 0);
        match self {
            GatedField::SharedCounters => false,
            GatedField::ConsumesCounters => some(d.consumes_counters.as_ref().map(Vec::len)),
            GatedField::Taints => some(d.taints.as_ref().map(Vec::len)),
            GatedField::AllowMultipleAllocations => d.allow_multiple_allocations.is_some(),
            GatedField::RequestPolicy => {
                (d.capacity.iter().flatten()).any(|(_, c)| c.request_policy.is_some())
            }
            GatedField::BindingConditions => {
                some(d.binding_conditions.as_ref().map(Vec::len))
                    || some(d.binding_failure_conditions.as_ref().map(Vec::len))
            }
        }
    }

    /// Whether `slice` carries the field anywhere.
    pub fn is_in(self, slice: &ResourceSlice) -> bool {
        match self {
            GatedField::SharedCounters => slice
                .spec
                .shared_counters
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            _ => (slice.spec.devices.iter().flatten()).any(|d| self.on_device(d)),
        }
    }
}

impl fmt::Display for GatedField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// The gated fields `slice` carries.
pub fn carried(slice: &ResourceSlice) -> BTreeSet<GatedField> {
    GatedField::ALL
        .into_iter()
        .filter(|f| f.is_in(slice))
        .collect()
}

/// What a server did with the gated fields of one slice it was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBack {
    /// Sent and stored.
    pub kept: BTreeSet<GatedField>,
    /// Sent and missing from what the server stored.
    pub dropped: BTreeSet<GatedField>,
}

/// Compares the gated fields of `sent` with the object the server returned.
pub fn read_back(sent: &ResourceSlice, stored: &ResourceSlice) -> ReadBack {
    let (kept, dropped) = carried(sent)
        .into_iter()
        .partition(|field| field.is_in(stored));
    ReadBack { kept, dropped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FeatureGate, FeatureGates, ModelConfig, ModelOptions, Release, sample};

    fn pool(gates: FeatureGates) -> Vec<ResourceSlice> {
        let mut o = ModelOptions::new("node-a");
        o.gates = gates;
        o.shared_pfs = vec!["enp16s0".into()];
        let config = ModelConfig::new(o).unwrap();
        crate::build_slices(&sample::inventory(2, 2), &config).slices
    }

    #[test]
    fn a_field_missing_from_the_stored_slice_is_dropped_and_names_its_gate() {
        let slices = pool(FeatureGates::for_release(Release::NEWEST));
        let sent = slices.iter().find(|s| s.spec.devices.is_some()).unwrap();
        let fields = carried(sent);
        assert!(
            fields.contains(&GatedField::AllowMultipleAllocations),
            "{fields:?}"
        );
        assert!(fields.contains(&GatedField::ConsumesCounters), "{fields:?}");
        let mut stored = sent.clone();
        for d in stored.spec.devices.iter_mut().flatten() {
            d.allow_multiple_allocations = None;
            for c in d.capacity.iter_mut().flat_map(|c| c.values_mut()) {
                c.request_policy = None;
            }
        }
        let back = read_back(sent, &stored);
        assert_eq!(
            back.dropped,
            BTreeSet::from([
                GatedField::AllowMultipleAllocations,
                GatedField::RequestPolicy
            ])
        );
        assert!(back.kept.contains(&GatedField::ConsumesCounters));
        assert!((back.dropped.iter()).all(|f| f.gate() == FeatureGate::DraConsumableCapacity));
        assert!(read_back(sent, sent).dropped.is_empty());
    }

    #[test]
    fn a_slice_of_counters_carries_shared_counters_only() {
        let slices = pool(FeatureGates::for_release(Release::NEWEST));
        let counters = slices.iter().find(|s| s.spec.devices.is_none()).unwrap();
        assert_eq!(
            carried(counters),
            BTreeSet::from([GatedField::SharedCounters])
        );
        let mut stored = counters.clone();
        stored.spec.shared_counters = None;
        assert_eq!(
            read_back(counters, &stored).dropped,
            BTreeSet::from([GatedField::SharedCounters])
        );
        assert!(carried(&pool(FeatureGates::new())[0]).is_empty());
    }
}
