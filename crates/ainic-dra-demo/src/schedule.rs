//! The scheduler's part of the demo: the example claims of `examples/`,
//! allocated one pod at a time with the structured-parameters allocator
//! over what the API holds, trying nodes in order as kube-scheduler's
//! filter does, and stored back with `status.allocation` so the node
//! agents can prepare them.

use allocator::{AllocateError, Allocator, Features, NodeFacts};
use anyhow::{Context, Result, bail};
use dra_model::FeatureGates;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceRequestAllocationResult, ResourceClaim, ResourceClaimStatus,
    ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;
use testkit::apiserver::ApiServer;
use testkit::kubelet::ClaimRef;

/// The namespace of the demo's claims.
pub(crate) const NAMESPACE: &str = "demo";

/// Example files, compiled in so the demo runs from any directory.
pub(crate) mod examples {
    /// GPU + NIC on one PCIe switch.
    pub(crate) const SAME_SWITCH: &str = include_str!("../../../examples/gpu-nic-same-switch.yaml");
    /// A 100 Gb/s share of a shared PF.
    pub(crate) const SHARED: &str = include_str!("../../../examples/shared-nic.yaml");
    /// A NIC on rail 0 of fabric partition pod-a.
    pub(crate) const FABRIC: &str = include_str!("../../../examples/fabric-partition.yaml");
    /// At least 200 Gb/s, NUMA-attached, not behind leaf-13.
    pub(crate) const MIN_BANDWIDTH: &str = include_str!("../../../examples/min-bandwidth.yaml");
}

/// A claim named `name` from the first ResourceClaim(Template) of `yaml`.
pub(crate) fn claim_from_example(yaml: &str, name: &str) -> Result<ResourceClaim> {
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = Value::deserialize(doc)?;
        let spec = match value["kind"].as_str() {
            Some("ResourceClaimTemplate") => {
                serde_json::from_value::<ResourceClaimTemplate>(value)?
                    .spec
                    .and_then(|s| s.spec)
            }
            Some("ResourceClaim") => serde_json::from_value::<ResourceClaim>(value)?.spec,
            _ => continue,
        };
        return Ok(ResourceClaim {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            spec,
            status: None,
        });
    }
    bail!("example has no ResourceClaim or ResourceClaimTemplate")
}

/// Where a pod's claims went.
pub(crate) enum Placement {
    /// Allocated on `node`; the claims as stored (with UIDs).
    Placed {
        /// The node.
        node: String,
        /// The stored claims.
        claims: Vec<ResourceClaim>,
    },
    /// No node fits; why not, per node.
    Unschedulable(Vec<(String, String)>),
}

/// The cluster as the scheduler sees it.
pub(crate) struct Scheduler<'a> {
    api: &'a ApiServer,
    features: Features,
}

impl<'a> Scheduler<'a> {
    /// A scheduler with the cluster's feature gates.
    pub(crate) fn new(api: &'a ApiServer, gates: &str) -> Result<Scheduler<'a>> {
        let gates: FeatureGates = gates.parse()?;
        let mut features = Features::default();
        for gate in dra_model::FeatureGate::ALL {
            features.set(gate.name(), gates.enabled(gate));
        }
        Ok(Scheduler { api, features })
    }

    /// The cluster's feature gates, as the allocator takes them.
    pub(crate) fn features(&self) -> Features {
        self.features
    }

    /// Every ResourceSlice in the API (all drivers).
    pub(crate) fn slices(&self) -> Vec<ResourceSlice> {
        self.api.list()
    }

    /// Places one pod's `claims`: the first of `nodes` where all of them
    /// can be allocated together.
    pub(crate) fn place(&self, claims: &[ResourceClaim], nodes: &[&str]) -> Result<Placement> {
        let slices: Vec<ResourceSlice> = self.api.list();
        let classes: Vec<DeviceClass> = self.api.list();
        let mut held: Vec<ResourceClaim> = self.api.list();
        held.retain(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()));
        let allocator = Allocator::new(self.features, &slices, &classes, &held)
            .context("the cluster's objects are not valid allocator input")?;
        let mut refusals = Vec::new();
        for node in nodes {
            match allocator.allocate(&NodeFacts::named(node), claims) {
                Ok(results) => {
                    let stored = claims
                        .iter()
                        .cloned()
                        .zip(results)
                        .map(|(mut claim, result)| {
                            let status = claim
                                .status
                                .get_or_insert_with(ResourceClaimStatus::default);
                            status.allocation = Some(result);
                            self.api.seed(&claim)
                        })
                        .collect();
                    return Ok(Placement::Placed {
                        node: node.to_string(),
                        claims: stored,
                    });
                }
                Err(AllocateError::Unsatisfiable(why)) => {
                    refusals.push((node.to_string(), why.explanation));
                }
                Err(AllocateError::Input(e)) => bail!("invalid claim: {e}"),
            }
        }
        Ok(Placement::Unschedulable(refusals))
    }
}

/// The allocation results of a stored claim.
pub(crate) fn results(claim: &ResourceClaim) -> Vec<DeviceRequestAllocationResult> {
    dra_model::claim::allocation_results(claim).to_vec()
}

/// The device allocated for `request` from `driver`.
pub(crate) fn device_for(claim: &ResourceClaim, request: &str, driver: &str) -> Option<String> {
    results(claim)
        .into_iter()
        .find(|r| r.request == request && r.driver == driver)
        .map(|r| r.device)
}

/// How the kubelet names a stored claim.
pub(crate) fn claim_ref(claim: &ResourceClaim) -> ClaimRef {
    ClaimRef::new(
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default(),
        claim.metadata.uid.as_deref().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_becomes_a_named_claim_in_the_demo_namespace() {
        let claim = claim_from_example(examples::SHARED, "share-0").unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("share-0"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some(NAMESPACE));
        let requests = claim.spec.unwrap().devices.unwrap().requests.unwrap();
        assert_eq!(requests[0].name, "nic");
        let plain = claim_from_example(examples::MIN_BANDWIDTH, "fast").unwrap();
        assert!(plain.status.is_none());
        assert!(claim_from_example("kind: Pod\n", "x").is_err());
    }
}
