//! Turning a found solution into `AllocationResult`s as upstream writes
//! them: one result per device (request or `req/sub` name, admin access,
//! tolerations, share ID and consumed capacity), the class and claim
//! configuration that applies, and the node selector of the allocation.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult, ResourceClaim,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::context::NodeContext;
use crate::request::ClaimPlan;
use crate::search::Picked;

/// A share ID that is stable for the same inputs (upstream draws a random
/// UUID; determinism keeps `simulate` output reproducible).
fn share_id(claim: &str, request: &str, device: &str, nth: usize) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in claim
        .bytes()
        .chain([0])
        .chain(request.bytes())
        .chain([0])
        .chain(device.bytes())
        .chain(nth.to_le_bytes())
    {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let low = hash.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        low & 0xfff,
        low >> 16 & 0xffff_ffff_ffff
    )
}

pub(crate) fn build(
    ctx: &NodeContext<'_>,
    plan: &ClaimPlan,
    claim: &ResourceClaim,
    picked: &[Picked],
    selected_sub: impl Fn(usize) -> usize,
) -> AllocationResult {
    let results = picked
        .iter()
        .enumerate()
        .map(|(nth, p)| {
            let spec = &plan.requests[p.request].alternatives()[p.sub];
            let cand = ctx.candidates[p.candidate];
            let request = spec.full_name();
            let device = cand.device().name.clone();
            let binding = ctx.features.binding_conditions() && cand.device().has_binding_conditions;
            DeviceRequestAllocationResult {
                share_id: p
                    .consumed
                    .as_ref()
                    .map(|_| share_id(&plan.label, &request, &device, nth)),
                consumed_capacity: p.consumed.as_ref().filter(|c| !c.is_empty()).map(|c| {
                    c.iter()
                        .map(|(name, q)| (name.clone(), ApiQuantity(q.to_decimal_si())))
                        .collect()
                }),
                admin_access: spec.admin_access.then_some(true),
                tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
                binding_conditions: binding.then(|| cand.device().binding.0.clone()),
                binding_failure_conditions: binding.then(|| cand.device().binding.1.clone()),
                request,
                driver: cand.slice.driver.clone(),
                pool: cand.slice.pool.clone(),
                device,
                ..DeviceRequestAllocationResult::default()
            }
        })
        .collect();
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(results),
            config: config(plan, claim, selected_sub),
        }),
        node_selector: node_selector(ctx, picked),
        allocation_timestamp: None,
    }
}

fn config(
    plan: &ClaimPlan,
    claim: &ResourceClaim,
    selected_sub: impl Fn(usize) -> usize,
) -> Option<Vec<DeviceAllocationConfiguration>> {
    let mut out = Vec::new();
    for (r, request) in plan.requests.iter().enumerate() {
        let spec = &request.alternatives()[selected_sub(r)];
        for config in spec
            .class
            .spec
            .iter()
            .flat_map(|s| s.config.iter().flatten())
        {
            out.push(DeviceAllocationConfiguration {
                opaque: config.opaque.clone(),
                requests: None,
                source: "FromClass".into(),
            });
        }
    }
    for config in claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.config.as_ref())
        .into_iter()
        .flatten()
    {
        let names = config.requests.as_deref().unwrap_or_default();
        let push = |out: &mut Vec<DeviceAllocationConfiguration>| {
            out.push(DeviceAllocationConfiguration {
                opaque: config.opaque.clone(),
                requests: config.requests.clone(),
                source: "FromClaim".into(),
            })
        };
        if names.is_empty() {
            push(&mut out);
            continue;
        }
        for (r, request) in plan.requests.iter().enumerate() {
            let spec = &request.alternatives()[selected_sub(r)];
            if names
                .iter()
                .any(|n| *n == spec.base_name() || *n == spec.full_name())
            {
                push(&mut out);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Restricts the allocation to the node when a device is local to it;
/// otherwise to the union of the slices' node selector requirements; none
/// when every device is available everywhere.
fn node_selector(ctx: &NodeContext<'_>, picked: &[Picked]) -> Option<NodeSelector> {
    let mut term = NodeSelectorTerm::default();
    for p in picked {
        let cand = ctx.candidates[p.candidate];
        let (name, selector) = if cand.slice.per_device {
            cand.slice.device_node[cand.index].clone()
        } else {
            (
                cand.slice.api_node_name.clone(),
                cand.slice.api_node_selector.clone(),
            )
        };
        if name.is_some() {
            return Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![ctx.node.name.clone()]),
                    }]),
                    match_expressions: None,
                }],
            });
        }
        if let Some(first) = selector.and_then(|s| s.node_selector_terms.into_iter().next()) {
            merge(
                &mut term.match_fields,
                first.match_fields.unwrap_or_default(),
            );
            merge(
                &mut term.match_expressions,
                first.match_expressions.unwrap_or_default(),
            );
        }
    }
    let empty = term.match_fields.is_none() && term.match_expressions.is_none();
    (!empty).then(|| NodeSelector {
        node_selector_terms: vec![term],
    })
}

fn merge(into: &mut Option<Vec<NodeSelectorRequirement>>, from: Vec<NodeSelectorRequirement>) {
    for requirement in from {
        let list = into.get_or_insert_with(Vec::new);
        let same = |r: &NodeSelectorRequirement| {
            let mut a = r.values.clone().unwrap_or_default();
            let mut b = requirement.values.clone().unwrap_or_default();
            a.sort();
            b.sort();
            r.key == requirement.key && r.operator == requirement.operator && a == b
        };
        if !list.iter().any(same) {
            list.push(requirement);
        }
    }
}
