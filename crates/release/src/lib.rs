//! One Kubernetes minor release, as both the device model (what a slice
//! may hold, which gates are on by default) and the allocator (which rules
//! it follows) need it.
//!
//! A release is `1.<minor>` with minor 34 or later: the API servers this
//! driver publishes to. [`Release::KNOWN`] are those whose defaults and
//! allocation rules the project has from upstream's code (1.34 to 1.37);
//! a later one (an API server newer than this build) keeps 1.37's
//! defaults where the model is concerned, while the allocator, which must
//! answer exactly as that release's scheduler would, takes only the known
//! ones ([`Release::parse_known`]).

use std::fmt;
use std::str::FromStr;

/// A Kubernetes minor release, 1.34 or later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    minor: u32,
}

impl Release {
    /// 1.34: `resource.k8s.io/v1` GA.
    pub const V1_34: Release = Release { minor: 34 };
    /// 1.35: counters in slices of their own, taint effect `None`.
    pub const V1_35: Release = Release { minor: 35 };
    /// 1.36: consumable capacity, partitionable devices, taints and binding
    /// conditions on by default; list-typed attributes (alpha).
    pub const V1_36: Release = Release { minor: 36 };
    /// 1.37: device taints GA.
    pub const V1_37: Release = Release { minor: 37 };
    /// The oldest supported release.
    pub const OLDEST: Release = Release::V1_34;
    /// The newest release whose defaults and rules are known.
    pub const NEWEST: Release = Release::V1_37;
    /// Every known release, oldest first.
    pub const KNOWN: [Release; 4] = [
        Release::V1_34,
        Release::V1_35,
        Release::V1_36,
        Release::V1_37,
    ];

    /// Release `1.<minor>`; `None` below 1.34.
    pub fn of_minor(minor: u32) -> Option<Release> {
        (minor >= Self::OLDEST.minor).then_some(Release { minor })
    }

    /// The minor version (34 for 1.34).
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// Whether its defaults and rules are known ([`Release::KNOWN`]).
    pub fn is_known(self) -> bool {
        self <= Release::NEWEST
    }

    /// `text` as a known release (`1.37`, `v1.37`, `1.37.2`); an error
    /// naming the known ones otherwise.
    pub fn parse_known(text: &str) -> Result<Release, UnknownRelease> {
        text.parse::<Release>()
            .ok()
            .filter(|r| r.is_known())
            .ok_or_else(|| UnknownRelease(text.to_string()))
    }

    /// From 1.35 a pool's shared counters live in slices of their own; in
    /// 1.34 a device may consume only counter sets of its own slice.
    pub fn counters_in_own_slices(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.35, taint effect `None` exists (informational: no effect on
    /// scheduling or eviction, and unknown effects act like it).
    pub fn taint_effect_none(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.35 the binding-conditions and device-status gates make one
    /// allocator feature (`DeviceBindingAndStatus`, on when both are);
    /// 1.34 has two (`DeviceBinding`, `DeviceStatus`), and either one
    /// alone picks the experimental allocator.
    pub fn binding_and_status_one_feature(self) -> bool {
        self >= Release::V1_35
    }

    /// From 1.36, `DRAListTypeAttributes` exists.
    pub fn has_list_type_attributes(self) -> bool {
        self >= Release::V1_36
    }

    /// Devices a slice may hold when one of them has taints or consumes
    /// counters: 64 from 1.35, the plain limit of 128 in 1.34.
    pub fn max_devices_with_taints_or_counters(self) -> usize {
        if self >= Release::V1_35 { 64 } else { 128 }
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

/// A release that is not `1.<minor>` with minor 34 or later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported Kubernetes version {0:?}: expected 1.34 or later, e.g. 1.37")]
pub struct UnsupportedRelease(pub String);

/// A release name that is not one of the known releases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported Kubernetes version {0:?} (supported: 1.34, 1.35, 1.36, 1.37)")]
pub struct UnknownRelease(pub String);

impl FromStr for Release {
    type Err = UnsupportedRelease;

    /// `1.37`, `v1.37` or a full `v1.37.2`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnsupportedRelease(s.to_string());
        let mut parts = s.trim().trim_start_matches('v').split('.');
        let (major, minor) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
        if major != "1" {
            return Err(bad());
        }
        let minor: u32 = minor.parse().map_err(|_| bad())?;
        Release::of_minor(minor).ok_or_else(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_in_every_spelling_and_order_by_minor() {
        for text in ["1.36", "v1.36", "1.36.2", " v1.36.0 "] {
            assert_eq!(text.parse::<Release>(), Ok(Release::V1_36), "{text}");
        }
        assert!(Release::V1_34 < Release::V1_37);
        assert_eq!(Release::V1_35.to_string(), "1.35");
        assert_eq!("1.38".parse::<Release>().map(Release::minor), Ok(38));
        for bad in ["1.33", "2.0", "1", "1.x", ""] {
            assert!(bad.parse::<Release>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_known_releases_are_known() {
        assert_eq!(Release::parse_known("v1.37.1"), Ok(Release::V1_37));
        let newer = Release::parse_known("1.38").unwrap_err();
        assert_eq!(
            newer.to_string(),
            "unsupported Kubernetes version \"1.38\" (supported: 1.34, 1.35, 1.36, 1.37)"
        );
        assert!(Release::parse_known("1.33").is_err());
    }
}
