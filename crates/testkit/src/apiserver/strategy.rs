//! Type-specific write rules of the registry: what the API server changes in
//! an object on create and update besides the generic metadata.
//!
//! For ResourceSlices: device taints get `timeAdded` when they lack it, and
//! device fields of features switched off on this server are dropped (the
//! real server drops fields of disabled feature gates silently).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::resources::ResourceType;

/// The current time as the API serializes it.
pub(crate) fn now() -> Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or(Value::Null)
}

/// Write rules with their settings.
#[derive(Debug, Default)]
pub(crate) struct Strategy {
    /// Device fields (e.g. `allowMultipleAllocations`) this server drops.
    pub dropped_device_fields: Vec<String>,
}

impl Strategy {
    /// Applies the rules of `rt` to an object about to be stored.
    pub(super) fn prepare(&self, rt: &ResourceType, obj: &mut Value) {
        if rt.plural != "resourceslices" {
            return;
        }
        let Some(devices) = obj
            .pointer_mut("/spec/devices")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        for device in devices.iter_mut().filter_map(Value::as_object_mut) {
            for field in &self.dropped_device_fields {
                device.remove(field);
            }
            let taints = device.get_mut("taints").and_then(Value::as_array_mut);
            for taint in taints.into_iter().flatten() {
                if taint.get("timeAdded").is_none() {
                    taint["timeAdded"] = now();
                }
            }
        }
    }
}
