//! Kubernetes feature gates that change what the driver publishes.
//!
//! Parsed from `--feature-gates`, upstream syntax: `Name=true,Other=false`.
//! Only the DRA gates are known; any other name is an error that names it,
//! so a typo never silently leaves a feature off. Defaults are those of
//! one Kubernetes release: 1.34 unless [`FeatureGates::for_release`] picks
//! another (the node agent picks the API server's).
//!
//! | gate | 1.34 | 1.35 | 1.36 | 1.37 |
//! | --- | --- | --- | --- | --- |
//! | DRAAdminAccess, DRAPrioritizedList, DRAResourceClaimDeviceStatus, DRASchedulerFilterTimeout | on | on | on | on |
//! | DRAConsumableCapacity, DRAPartitionableDevices, DRADeviceTaints, DRADeviceBindingConditions, DRAExtendedResource | off | off | on | on |
//!
//! (Upstream's versioned feature specs, `pkg/features/kube_features.go` of
//! 1.37; the allocator crate's `release` module holds the same table for
//! the scheduler's side.)

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub use k8s_release::Release;

/// A DRA feature gate, by its upstream name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FeatureGate {
    /// `DynamicResourceAllocation` (GA in 1.34).
    DynamicResourceAllocation,
    /// `DRAAdminAccess` (beta, on in 1.34).
    DraAdminAccess,
    /// `DRAConsumableCapacity` (alpha in 1.34): shared devices with
    /// `allowMultipleAllocations` and capacity request policies.
    DraConsumableCapacity,
    /// `DRADeviceBindingConditions` (alpha in 1.34).
    DraDeviceBindingConditions,
    /// `DRADeviceTaints` (alpha in 1.34): device taints in slices.
    DraDeviceTaints,
    /// `DRAExtendedResource` (alpha in 1.34).
    DraExtendedResource,
    /// `DRAPartitionableDevices` (alpha in 1.34): `sharedCounters` and
    /// `consumesCounters`.
    DraPartitionableDevices,
    /// `DRAPrioritizedList` (beta, on in 1.34).
    DraPrioritizedList,
    /// `DRAResourceClaimDeviceStatus` (beta, on in 1.34).
    DraResourceClaimDeviceStatus,
    /// `DRASchedulerFilterTimeout` (beta, on in 1.34).
    DraSchedulerFilterTimeout,
}

impl FeatureGate {
    /// Every known gate.
    pub const ALL: [FeatureGate; 10] = [
        FeatureGate::DynamicResourceAllocation,
        FeatureGate::DraAdminAccess,
        FeatureGate::DraConsumableCapacity,
        FeatureGate::DraDeviceBindingConditions,
        FeatureGate::DraDeviceTaints,
        FeatureGate::DraExtendedResource,
        FeatureGate::DraPartitionableDevices,
        FeatureGate::DraPrioritizedList,
        FeatureGate::DraResourceClaimDeviceStatus,
        FeatureGate::DraSchedulerFilterTimeout,
    ];

    /// The upstream name, e.g. `DRAConsumableCapacity`.
    pub fn name(self) -> &'static str {
        match self {
            FeatureGate::DynamicResourceAllocation => "DynamicResourceAllocation",
            FeatureGate::DraAdminAccess => "DRAAdminAccess",
            FeatureGate::DraConsumableCapacity => "DRAConsumableCapacity",
            FeatureGate::DraDeviceBindingConditions => "DRADeviceBindingConditions",
            FeatureGate::DraDeviceTaints => "DRADeviceTaints",
            FeatureGate::DraExtendedResource => "DRAExtendedResource",
            FeatureGate::DraPartitionableDevices => "DRAPartitionableDevices",
            FeatureGate::DraPrioritizedList => "DRAPrioritizedList",
            FeatureGate::DraResourceClaimDeviceStatus => "DRAResourceClaimDeviceStatus",
            FeatureGate::DraSchedulerFilterTimeout => "DRASchedulerFilterTimeout",
        }
    }

    /// The default in Kubernetes 1.34.
    pub fn default_enabled(self) -> bool {
        self.default_in(Release::OLDEST)
    }

    /// The default in `release`.
    pub fn default_in(self, release: Release) -> bool {
        match self {
            FeatureGate::DynamicResourceAllocation
            | FeatureGate::DraAdminAccess
            | FeatureGate::DraPrioritizedList
            | FeatureGate::DraResourceClaimDeviceStatus
            | FeatureGate::DraSchedulerFilterTimeout => true,
            FeatureGate::DraExtendedResource
            | FeatureGate::DraConsumableCapacity
            | FeatureGate::DraDeviceBindingConditions
            | FeatureGate::DraDeviceTaints
            | FeatureGate::DraPartitionableDevices => release >= Release::V1_36,
        }
    }
}

impl fmt::Display for FeatureGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a `--feature-gates` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// The name is not a DRA feature gate this driver knows.
    #[error("unknown feature gate {name:?} (known: {known})")]
    Unknown {
        /// The name as given.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// An entry is not `Name=true` or `Name=false`.
    #[error("invalid feature gate entry {entry:?}: expected Name=true or Name=false")]
    Malformed {
        /// The entry as given.
        entry: String,
    },
}

/// The state of every known gate: a release's defaults overridden by what
/// was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    release: Release,
    overrides: BTreeMap<FeatureGate, bool>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            release: Release::OLDEST,
            overrides: BTreeMap::new(),
        }
    }
}

impl FeatureGates {
    /// Kubernetes 1.34 defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// `release`'s defaults.
    pub fn for_release(release: Release) -> Self {
        Self {
            release,
            ..Self::default()
        }
    }

    /// These overrides over `release`'s defaults.
    pub fn with_release(self, release: Release) -> Self {
        Self { release, ..self }
    }

    /// The release whose defaults apply.
    pub fn release(&self) -> Release {
        self.release
    }

    /// Whether `gate` is on.
    pub fn enabled(&self, gate: FeatureGate) -> bool {
        self.overrides
            .get(&gate)
            .copied()
            .unwrap_or_else(|| gate.default_in(self.release))
    }

    /// Whether `gate` was set explicitly (not left at its default).
    pub fn is_set(&self, gate: FeatureGate) -> bool {
        self.overrides.contains_key(&gate)
    }

    /// Turns `gate` on or off.
    pub fn set(&mut self, gate: FeatureGate, on: bool) -> &mut Self {
        self.overrides.insert(gate, on);
        self
    }

    /// Returns these gates with `gate` set to `on`.
    pub fn with(mut self, gate: FeatureGate, on: bool) -> Self {
        self.set(gate, on);
        self
    }

    /// `--feature-gates` form of the gates that differ from the defaults.
    pub fn to_flag(&self) -> String {
        self.overrides
            .iter()
            .filter(|(g, on)| g.default_in(self.release) != **on)
            .map(|(g, on)| format!("{}={on}", g.name()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl FromStr for FeatureGate {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FeatureGate::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| FeatureGateError::Unknown {
                name: s.to_string(),
                known: FeatureGate::ALL.map(FeatureGate::name).join(", "),
            })
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGateError;

    /// Parses `Name=true,Other=false`; empty entries and surrounding spaces
    /// are ignored, values are `true`/`false` in any case (as upstream).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut gates = FeatureGates::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let malformed = || FeatureGateError::Malformed {
                entry: entry.to_string(),
            };
            let (name, value) = entry.split_once('=').ok_or_else(malformed)?;
            let gate: FeatureGate = name.trim().parse()?;
            let on = match value.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(malformed()),
            };
            gates.set(gate, on);
        }
        Ok(gates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_those_of_1_34() {
        let g = FeatureGates::new();
        assert!(!g.enabled(FeatureGate::DraConsumableCapacity));
        assert!(!g.enabled(FeatureGate::DraPartitionableDevices));
        assert!(!g.enabled(FeatureGate::DraDeviceTaints));
        assert!(g.enabled(FeatureGate::DraPrioritizedList));
        assert!(g.enabled(FeatureGate::DraAdminAccess));
    }

    #[test]
    fn parses_upstream_syntax() {
        let g: FeatureGates =
            "DRAConsumableCapacity=true, DRAPrioritizedList=false,,DRADeviceTaints=TRUE"
                .parse()
                .unwrap();
        assert!(g.enabled(FeatureGate::DraConsumableCapacity));
        assert!(g.enabled(FeatureGate::DraDeviceTaints));
        assert!(!g.enabled(FeatureGate::DraPrioritizedList));
        assert!(!g.enabled(FeatureGate::DraPartitionableDevices));
        let back: FeatureGates = g.to_flag().parse().unwrap();
        assert_eq!(back.to_flag(), g.to_flag());
    }

    #[test]
    fn release_defaults_turn_the_1_36_features_on_and_overrides_still_win() {
        let r36: Release = "v1.36.0".parse().unwrap();
        let g = FeatureGates::for_release(r36);
        assert!(g.enabled(FeatureGate::DraConsumableCapacity));
        assert!(g.enabled(FeatureGate::DraPartitionableDevices));
        assert!(g.enabled(FeatureGate::DraDeviceTaints));
        let r35 = Release::of_minor(35).unwrap();
        assert!(!FeatureGates::for_release(r35).enabled(FeatureGate::DraDeviceTaints));
        assert!(!FeatureGates::for_release(r35).enabled(FeatureGate::DraExtendedResource));
        let set: FeatureGates = "DRADeviceTaints=false".parse().unwrap();
        let g = set.with_release(r36);
        assert!(!g.enabled(FeatureGate::DraDeviceTaints));
        assert!(g.is_set(FeatureGate::DraDeviceTaints));
        assert!(!g.is_set(FeatureGate::DraConsumableCapacity));
        assert_eq!(g.to_flag(), "DRADeviceTaints=false");
        assert!(r35.counters_in_own_slices() && !Release::OLDEST.counters_in_own_slices());
    }

    #[test]
    fn releases_parse_from_server_versions_and_old_ones_are_refused() {
        assert_eq!("1.37".parse::<Release>().unwrap().minor(), 37);
        assert_eq!("v1.40.1".parse::<Release>().unwrap().to_string(), "1.40");
        for bad in ["1.33", "v1.33.9", "2.0", "1", "", "1.x"] {
            let err = bad.parse::<Release>().unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn unknown_gate_is_named_in_the_error() {
        let err = "DRAConsumableCapacty=true"
            .parse::<FeatureGates>()
            .unwrap_err();
        assert!(err.to_string().contains("DRAConsumableCapacty"), "{err}");
        assert!(matches!(err, FeatureGateError::Unknown { .. }));
    }

    #[test]
    fn malformed_entries_are_rejected() {
        for bad in ["DRADeviceTaints", "DRADeviceTaints=yes", "=true"] {
            assert!(bad.parse::<FeatureGates>().is_err(), "{bad}");
        }
        assert!("".parse::<FeatureGates>().unwrap() == FeatureGates::new());
    }
}
