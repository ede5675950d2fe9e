//! The Kubernetes feature gates that change what the allocator does, and
//! the release whose rules apply ([`crate::Release`]). Defaults are those
//! of Kubernetes 1.34; [`Features::for_release`] gives another release's.

use crate::release::Release;

/// Feature gates of the DRA allocator (upstream names in the field docs),
/// with the release whose allocation rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// The release whose rules apply (ordering, counters, taint effects).
    pub release: Release,
    /// `DRAAdminAccess` (beta, on by default in 1.34).
    pub admin_access: bool,
    /// `DRAPrioritizedList` (beta, on by default in 1.34): `firstAvailable`.
    pub prioritized_list: bool,
    /// `DRAResourceClaimDeviceStatus` (beta, on by default in 1.34): binding
    /// conditions need it too.
    pub device_status: bool,
    /// `DRAPartitionableDevices` (alpha, off): shared counters.
    pub partitionable_devices: bool,
    /// `DRADeviceTaints` (alpha, off): device taints and tolerations.
    pub device_taints: bool,
    /// `DRAConsumableCapacity` (alpha, off): shared devices and capacity requests.
    pub consumable_capacity: bool,
    /// `DRADeviceBindingConditions` (alpha, off): devices with binding conditions.
    pub device_binding_conditions: bool,
    /// `DRAListTypeAttributes` (alpha from 1.36, off): list-typed attribute
    /// values and CEL `includes()`.
    pub list_type_attributes: bool,
    /// `DRAFractionalCapacityRange` (beta from 1.37, on): a request policy
    /// range with a fractional bound rounds in milli-units; without it (and
    /// before 1.37) every range rounds in whole units (`Quantity.Value()`).
    pub fractional_capacity_range: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features::for_release(Release::V1_34)
    }
}

impl Features {
    /// Every gate the allocator knows, by its upstream name.
    pub const GATE_NAMES: [&'static str; 9] = [
        "DRAAdminAccess",
        "DRAPrioritizedList",
        "DRAResourceClaimDeviceStatus",
        "DRAPartitionableDevices",
        "DRADeviceTaints",
        "DRAConsumableCapacity",
        "DRADeviceBindingConditions",
        "DRAListTypeAttributes",
        "DRAFractionalCapacityRange",
    ];

    /// Sets the gate `name` (upstream spelling); false when the allocator
    /// does not know that gate.
    pub fn set(&mut self, name: &str, enabled: bool) -> bool {
        let slot = match name {
            "DRAAdminAccess" => &mut self.admin_access,
            "DRAPrioritizedList" => &mut self.prioritized_list,
            "DRAResourceClaimDeviceStatus" => &mut self.device_status,
            "DRAPartitionableDevices" => &mut self.partitionable_devices,
            "DRADeviceTaints" => &mut self.device_taints,
            "DRAConsumableCapacity" => &mut self.consumable_capacity,
            "DRADeviceBindingConditions" => &mut self.device_binding_conditions,
            "DRAListTypeAttributes" => &mut self.list_type_attributes,
            "DRAFractionalCapacityRange" => &mut self.fractional_capacity_range,
            _ => return false,
        };
        *slot = enabled;
        true
    }

    /// Whether devices with binding conditions can be allocated: both the
    /// gate and device status, in every release (1.34's allocators check
    /// `DeviceBinding && DeviceStatus`, later ones the one feature
    /// `DeviceBindingAndStatus`); otherwise such devices are passed over.
    pub fn binding_conditions(&self) -> bool {
        self.device_binding_conditions && self.device_status
    }
}

impl Features {
    /// Whether fractional request-policy ranges round in milli-units: the
    /// gate, which exists from 1.37.
    pub fn fractional_ranges(&self) -> bool {
        self.fractional_capacity_range && self.release >= Release::V1_37
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_those_of_kubernetes_1_34() {
        let f = Features::default();
        assert!(f.admin_access && f.prioritized_list);
        assert!(!f.partitionable_devices && !f.device_taints && !f.consumable_capacity);
    }

    #[test]
    fn gates_are_set_by_upstream_name() {
        let mut f = Features::default();
        for name in Features::GATE_NAMES {
            assert!(f.set(name, true));
        }
        assert!(f.consumable_capacity && f.device_taints && f.partitionable_devices);
        assert!(!f.set("DRAUnknown", true));
    }
}
