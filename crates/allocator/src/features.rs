//! The Kubernetes feature gates that change what the allocator does, with
//! their Kubernetes 1.34 defaults.

/// Feature gates of the DRA allocator (upstream names in the field docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `DRAAdminAccess` (beta, on by default in 1.34).
    pub admin_access: bool,
    /// `DRAPrioritizedList` (beta, on by default in 1.34): `firstAvailable`.
    pub prioritized_list: bool,
    /// `DRAPartitionableDevices` (alpha, off): shared counters.
    pub partitionable_devices: bool,
    /// `DRADeviceTaints` (alpha, off): device taints and tolerations.
    pub device_taints: bool,
    /// `DRAConsumableCapacity` (alpha, off): shared devices and capacity requests.
    pub consumable_capacity: bool,
    /// `DRADeviceBindingConditions` (alpha, off): devices with binding conditions.
    pub device_binding_conditions: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            admin_access: true,
            prioritized_list: true,
            partitionable_devices: false,
            device_taints: false,
            consumable_capacity: false,
            device_binding_conditions: false,
        }
    }
}

impl Features {
    /// Every gate the allocator knows, by its upstream name.
    pub const GATE_NAMES: [&'static str; 6] = [
        "DRAAdminAccess",
        "DRAPrioritizedList",
        "DRAPartitionableDevices",
        "DRADeviceTaints",
        "DRAConsumableCapacity",
        "DRADeviceBindingConditions",
    ];

    /// Sets the gate `name` (upstream spelling); false when the allocator
    /// does not know that gate.
    pub fn set(&mut self, name: &str, enabled: bool) -> bool {
        let slot = match name {
            "DRAAdminAccess" => &mut self.admin_access,
            "DRAPrioritizedList" => &mut self.prioritized_list,
            "DRAPartitionableDevices" => &mut self.partitionable_devices,
            "DRADeviceTaints" => &mut self.device_taints,
            "DRAConsumableCapacity" => &mut self.consumable_capacity,
            "DRADeviceBindingConditions" => &mut self.device_binding_conditions,
            _ => return false,
        };
        *slot = enabled;
        true
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
