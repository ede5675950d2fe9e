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

use std::fmt;
use std::str::FromStr;

use crate::features::Features;

/// A Kubernetes minor release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Release {
    /// 1.34: `resource.k8s.io/v1` GA.
    V1_34,
    /// 1.35: counters in slices of their own, taint effect `None`.
    V1_35,
    /// 1.36: consumable capacity, partitionable devices, taints and binding
    /// conditions on by default; list-typed attributes (alpha).
    V1_36,
    /// 1.37: device taints GA.
    V1_37,
}

impl Release {
    /// Every release, oldest first.
    pub const ALL: [Release; 4] = [
        Release::V1_34,
        Release::V1_35,
        Release::V1_36,
        Release::V1_37,
    ];

    /// The newest release (the default of `simulate`).
    pub const NEWEST: Release = Release::V1_37;

    /// `1.34` … `1.37`.
    pub fn as_str(self) -> &'static str {
        match self {
            Release::V1_34 => "1.34",
            Release::V1_35 => "1.35",
            Release::V1_36 => "1.36",
            Release::V1_37 => "1.37",
        }
    }

    /// From 1.35, a pool's shared counters live in slices of their own.
    pub fn counters_in_own_slices(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.35, taint effect `None` exists (and unknown effects act like
    /// it): such a taint does not keep a device from being allocated.
    pub fn taint_effect_none(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.35, binding conditions are honoured only when device status
    /// (`DRAResourceClaimDeviceStatus`) is on too.
    pub fn binding_needs_device_status(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.36, `DRAListTypeAttributes` exists.
    pub fn has_list_type_attributes(self) -> bool {
        self >= Release::V1_36
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A release name that is not 1.34 … 1.37.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported Kubernetes version {0:?} (supported: 1.34, 1.35, 1.36, 1.37)")]
pub struct UnknownRelease(pub String);

impl FromStr for Release {
    type Err = UnknownRelease;

    /// `1.37`, `v1.37` or a full `1.37.2`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim().trim_start_matches('v');
        let minor: Vec<&str> = trimmed.splitn(3, '.').take(2).collect();
        let key = minor.join(".");
        Release::ALL
            .into_iter()
            .find(|r| r.as_str() == key)
            .ok_or_else(|| UnknownRelease(s.to_string()))
    }
}

impl Features {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_in_every_spelling_and_unknown_ones_are_named() {
        assert_eq!("1.37".parse::<Release>().unwrap(), Release::V1_37);
        assert_eq!("v1.34.4".parse::<Release>().unwrap(), Release::V1_34);
        let err = "1.33".parse::<Release>().unwrap_err().to_string();
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
