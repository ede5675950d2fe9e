//! Reading a ResourceClaim's allocation.

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};

/// The claim's allocated devices; none when it is not allocated.
pub fn allocation_results(claim: &ResourceClaim) -> &[DeviceRequestAllocationResult] {
    (claim.status.as_ref())
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
}
