//! Kubernetes releases the allocator can answer for (1.34 to 1.37): each
//! one's default feature gates and the allocation rules that changed
//! between them. [`Features::for_release`] gives a release's defaults;
//! `--feature-gates` then overrides single gates.
//!
//! Defaults come from upstream's versioned feature specs
//! (`pkg/features/kube_features.go` of Kubernetes 1.37):
//!
//! | gate | 1.34 | 1.35 | 1.36 | 1.37 |
//! | --- | --- | --- | --- | --- |
//! | DRAAdminAccess | on | on | on (GA) | on (GA) |
//! | DRAPrioritizedList | on | on | on (GA) | on (GA) |
//! | DRAResourceClaimDeviceStatus | on | on | on | on (GA) |
//! | DRAConsumableCapacity | off | off | on | on |
//! | DRAPartitionableDevices | off | off | on | on |
//! | DRADeviceTaints | off | off | on | on (GA) |
//! | DRADeviceBindingConditions | off | off | on | on |
//! | DRAListTypeAttributes | – | – | off | off |
//! | DRAFractionalCapacityRange | – | – | – | on |

use crate::features::Features;

pub use k8s_release::{Release, UnknownRelease};

/// Upstream's three allocator implementations: the scheduler takes the
/// most stable one that supports every enabled feature, and they differ in
/// details the allocator follows ([`Features::rules`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// `stable`.
    Stable,
    /// `incubating`.
    Incubating,
    /// `experimental`.
    Experimental,
}

/// Allocation rules that depend on the release and the implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The devices of one request are taken in allocation order (a device
    /// is tried only after the previous one), so a shared device is taken
    /// at most once per request: 1.36+, incubating and experimental.
    pub ordered_devices: bool,
    /// Incomplete and invalid pools are passed over by the search (an
    /// invalid one makes a failed search fail this node only): 1.35+. In
    /// 1.34 an invalid pool met aborts, and the slices of an incomplete
    /// pool that are there are used.
    pub skip_unusable_pools: bool,
    /// `All` takes every matching device whose capacity could hold the
    /// request on its own, ignoring shares already held (so one that is
    /// too full makes `All` fail): 1.37.
    pub all_mode_static_capacity: bool,
    /// A share of a device whose capacity is already in use draws no
    /// counters again: 1.35 experimental, 1.36+ incubating and experimental.
    pub shares_skip_counters: bool,
    /// Devices held only as shares count as consuming their counters:
    /// 1.36+, incubating and experimental.
    pub held_shares_consume_counters: bool,
    /// A device draws only on the counter sets of its own slice, and
    /// availability is counted per slice: 1.34, and 1.35 stable. Later the
    /// counter sets belong to the pool.
    pub counters_per_slice: bool,
    /// Slices with counter sets belong to every node's view of the pool,
    /// whatever their node selection: 1.35 incubating and experimental,
    /// 1.36, 1.37 stable.
    pub counter_slices_everywhere: bool,
    /// With `DRAPartitionableDevices` off, a slice with counter sets is
    /// kept (only the devices that consume counters are refused): 1.34,
    /// and 1.35 stable. Later a gate that is off passes over such slices,
    /// which leaves their pool incomplete.
    pub counter_slices_kept_without_gate: bool,
    /// The implementation knows consumable capacity (1.34 and 1.35:
    /// experimental; from 1.36 incubating too), whether its gate is on or
    /// not: with the gate off it refuses capacity requests, and it reads
    /// `distinctAttribute` and passes CEL the device's
    /// `allowMultipleAllocations`. The others ignore capacity requests,
    /// refuse `distinctAttribute` as an empty constraint, and CEL sees
    /// `allowMultipleAllocations` false.
    pub consumable_capacity_known: bool,
    /// With `DRAListTypeAttributes` off, evaluating a CEL selector on a
    /// device with a list-valued attribute aborts ("unsupported attribute
    /// value": the CEL environment converts lists only with the gate):
    /// 1.36. 1.37 converts lists whatever the gate.
    pub list_values_fail_cel_without_gate: bool,
    /// Rounded capacity requests are written in the step's format; before
    /// 1.37 in binary SI.
    pub rounding_keeps_step_format: bool,
    /// Results repeat the request's tolerations: 1.35 incubating and
    /// experimental (its stable allocator does not), every allocator from
    /// 1.36.
    pub results_carry_tolerations: bool,
    /// After the first device of an `All` subrequest, upstream goes on
    /// with the request's first subrequest (it loses the subrequest
    /// index): 1.34 and 1.35. Followed, so answers are those releases'.
    pub all_subrequest_continues_as_first: bool,
    /// When taking a device, upstream rechecks the capacity of the
    /// slice's device at the position of the device within the request
    /// (the first device of the slice for a request's first device), not
    /// of the device taken: 1.34. Followed.
    pub capacity_recheck_by_position: bool,
    /// Slices with devices that have binding conditions come after the
    /// others of their pool: 1.34 and 1.35 experimental.
    pub binding_slices_last: bool,
    /// A pool is complete only when every one of its slices is relevant
    /// to the node (newer generations elsewhere are not seen): 1.34. Later
    /// releases count the pool's slices for every node.
    pub completeness_from_node_slices: bool,
    /// Checking the subrequests of a prioritized list up front, upstream
    /// files each subrequest's selector results under the previous
    /// subrequest's key (the key is advanced after the check): 1.34 and
    /// 1.35. Followed, so `All` subrequests and the subrequest before them
    /// see the same matches upstream's do.
    pub subrequest_checks_off_by_one: bool,
    /// `distinctAttribute` keeps one value per request (see `constraint`):
    /// up to 1.36.
    pub distinct_per_request: bool,
    /// `distinctAttribute` compares the values' pointers: a held value is
    /// repeated only by the device it came from (a share taken again), and
    /// two devices with equal values both pass: 1.34. Followed.
    pub distinct_by_device: bool,
    /// With `DRAListTypeAttributes`, removing a device restores
    /// `matchAttribute`'s intersection of the devices before: 1.37 (1.36
    /// keeps the narrowed one). Followed.
    pub match_sets_restored: bool,
    /// A device turned down after its counters were drawn (a taint, a
    /// constraint, its capacity) keeps them drawn for the rest of the
    /// search, and a device turned down by its capacity keeps its
    /// constraint values recorded and, when exclusive, stays marked in
    /// use: 1.34 and 1.35 (upstream rolls back only when
    /// backtracking over a device it took). Followed.
    pub counters_leak_on_rejection: bool,
    /// Backtracking over a share of a multi-allocation device leaves its
    /// counters drawn: 1.34 and 1.35 experimental. Followed.
    pub share_counters_leak_on_backtrack: bool,
}

impl Features {
    /// The implementation upstream's scheduler picks for these gates: the
    /// first whose supported features include every enabled one.
    pub fn implementation(&self) -> Implementation {
        let r = self.release;
        // The allocator features beyond the base set, as the scheduler maps
        // gates to them (from 1.35 binding conditions count only with
        // device status: upstream's DeviceBindingAndStatus).
        let basic = self.admin_access
            || self.prioritized_list
            || self.partitionable_devices
            || self.device_taints;
        let binding = if r.binding_and_status_one_feature() {
            self.device_binding_conditions && self.device_status
        } else {
            self.device_binding_conditions || self.device_status
        };
        // From 1.37 fractional ranges are a feature of their own, which
        // only incubating and experimental support.
        let newer = binding || self.consumable_capacity || self.fractional_ranges();
        let newest = self.list_type_attributes;
        // Releases after 1.37 are not allocated for (Release::parse_known).
        match r {
            Release::V1_34 | Release::V1_35 => {
                if newer || newest {
                    Implementation::Experimental
                } else if basic {
                    Implementation::Incubating
                } else {
                    Implementation::Stable
                }
            }
            _ => {
                if newest {
                    Implementation::Experimental
                } else if newer {
                    Implementation::Incubating
                } else {
                    Implementation::Stable
                }
            }
        }
    }

    /// The rules of this release and implementation.
    pub fn rules(&self) -> Rules {
        let release = self.release;
        let implementation = self.implementation();
        let newer = release >= Release::V1_36 && implementation != Implementation::Stable;
        Rules {
            ordered_devices: newer,
            skip_unusable_pools: release >= Release::V1_35,
            all_mode_static_capacity: release >= Release::V1_37,
            shares_skip_counters: newer
                || (release == Release::V1_35 && implementation == Implementation::Experimental),
            held_shares_consume_counters: newer,
            counters_per_slice: release == Release::V1_34
                || (release == Release::V1_35 && implementation == Implementation::Stable),
            counter_slices_everywhere: match release {
                Release::V1_34 => false,
                Release::V1_35 => implementation != Implementation::Stable,
                Release::V1_36 => true,
                _ => implementation == Implementation::Stable,
            },
            counter_slices_kept_without_gate: release == Release::V1_34
                || (release == Release::V1_35 && implementation == Implementation::Stable),
            consumable_capacity_known: implementation == Implementation::Experimental
                || (release >= Release::V1_36 && implementation == Implementation::Incubating),
            list_values_fail_cel_without_gate: release == Release::V1_36,
            rounding_keeps_step_format: release >= Release::V1_37,
            results_carry_tolerations: release >= Release::V1_36
                || (release == Release::V1_35 && implementation != Implementation::Stable),
            all_subrequest_continues_as_first: release <= Release::V1_35,
            capacity_recheck_by_position: release == Release::V1_34,
            binding_slices_last: release <= Release::V1_35
                && implementation == Implementation::Experimental,
            completeness_from_node_slices: release == Release::V1_34,
            subrequest_checks_off_by_one: release <= Release::V1_35,
            distinct_per_request: release <= Release::V1_36,
            distinct_by_device: release == Release::V1_34,
            match_sets_restored: release >= Release::V1_37,
            counters_leak_on_rejection: release <= Release::V1_35,
            share_counters_leak_on_backtrack: release <= Release::V1_35
                && implementation == Implementation::Experimental,
        }
    }

    /// The default gates of `release`.
    pub fn for_release(release: Release) -> Features {
        let newer = release >= Release::V1_36;
        Features {
            release,
            admin_access: true,
            prioritized_list: true,
            device_status: true,
            partitionable_devices: newer,
            device_taints: newer,
            consumable_capacity: newer,
            device_binding_conditions: newer,
            list_type_attributes: false,
            fractional_capacity_range: release >= Release::V1_37,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_in_every_spelling_and_unknown_ones_are_named() {
        assert_eq!(Release::parse_known("1.37").unwrap(), Release::V1_37);
        assert_eq!(Release::parse_known("v1.34.4").unwrap(), Release::V1_34);
        let err = Release::parse_known("1.33").unwrap_err().to_string();
        assert!(err.contains("\"1.33\"") && err.contains("1.37"), "{err}");
    }

    #[test]
    fn defaults_switch_on_the_beta_features_in_1_36() {
        let old = Features::for_release(Release::V1_35);
        assert!(!old.consumable_capacity && !old.partitionable_devices && !old.device_taints);
        let new = Features::for_release(Release::V1_36);
        assert!(new.consumable_capacity && new.partitionable_devices && new.device_taints);
        assert!(new.device_binding_conditions && !new.list_type_attributes);
        assert_eq!(Features::default(), Features::for_release(Release::V1_34));
    }
}
