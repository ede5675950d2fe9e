//! A claim's and its classes' opaque configuration, as the node agent
//! resolves it for one request: any JSON list of allocation configs. It may
//! be refused (unknown fields, widened access from a claim, bad values);
//! it must not panic.
#![no_main]

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(configs) = serde_json::from_slice::<Vec<DeviceAllocationConfiguration>>(data) else {
        return;
    };
    for request in ["nic", "rail0/pf", ""] {
        let _ = dra_model::nic_config::config_for_request(&configs, "ainic.amd.com", request);
    }
});
