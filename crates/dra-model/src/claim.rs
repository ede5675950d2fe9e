//! Reading a ResourceClaim's allocation.

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use serde_json::{Value, json};

/// The claim's allocated devices; none when it is not allocated.
pub fn allocation_results(claim: &ResourceClaim) -> &[DeviceRequestAllocationResult] {
    (claim.status.as_ref())
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
}

/// A claim as the kubelet names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
    /// Name.
    pub name: String,
}

/// The server-side apply object that sets `entries` as the claim's
/// `status.devices`: the claim's identity (UID included, so that a claim
/// deleted and made anew under the same name is refused) and our entries.
pub fn status_apply_body<E: serde::Serialize>(claim: &ClaimRef, entries: &[E]) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": claim.namespace, "name": claim.name, "uid": claim.uid},
        "status": {"devices": entries},
    })
}
