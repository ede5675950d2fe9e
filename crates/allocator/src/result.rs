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

use std::collections::HashMap;

use crate::context::NodeContext;
use crate::release::Release;
use crate::request::{ClaimPlan, RequestSpec};
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
                        .map(|(name, q)| (name.clone(), ApiQuantity(q.canonical())))
                        .collect()
                }),
                admin_access: spec.admin_access.then_some(true),
                tolerations: (ctx.features.rules().results_carry_tolerations
                    && !spec.tolerations.is_empty())
                .then(|| spec.tolerations.clone()),
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
            config: config(plan, claim, selected_sub, ctx.features.release),
        }),
        node_selector: node_selector(ctx, picked),
        allocation_timestamp: None,
    }
}

/// `allocation.devices.config` as upstream builds it: each class's
/// configs once, naming every request that used the class; then the
/// claim's configs that apply to the requests (or the chosen
/// subrequests). Up to 1.36 a claim config is added once per request it
/// names; from 1.37 once, and a config that covers every request of the
/// claim names none ("applies to all").
fn config(
    plan: &ClaimPlan,
    claim: &ResourceClaim,
    selected_sub: impl Fn(usize) -> usize,
    release: Release,
) -> Option<Vec<DeviceAllocationConfiguration>> {
    let mut out: Vec<DeviceAllocationConfiguration> = Vec::new();
    let mut by_class: HashMap<&str, std::ops::Range<usize>> = HashMap::new();
    let chosen: Vec<&RequestSpec> = plan
        .requests
        .iter()
        .enumerate()
        .map(|(r, request)| &request.alternatives()[selected_sub(r)])
        .collect();
    for spec in &chosen {
        let class = spec.class.metadata.name.as_deref().unwrap_or("");
        if let Some(range) = by_class.get(class) {
            for entry in &mut out[range.clone()] {
                entry
                    .requests
                    .get_or_insert_with(Vec::new)
                    .push(spec.full_name());
            }
            continue;
        }
        let start = out.len();
        for c in spec
            .class
            .spec
            .iter()
            .flat_map(|s| s.config.iter().flatten())
        {
            out.push(DeviceAllocationConfiguration {
                opaque: c.opaque.clone(),
                requests: Some(vec![spec.full_name()]),
                source: "FromClass".into(),
            });
        }
        by_class.insert(class, start..out.len());
    }
    let once = release >= Release::V1_37;
    let claim_configs = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.config.as_ref());
    for c in claim_configs.into_iter().flatten() {
        let names = c.requests.as_deref().unwrap_or_default();
        let entry = || DeviceAllocationConfiguration {
            opaque: c.opaque.clone(),
            requests: c.requests.clone(),
            source: "FromClaim".into(),
        };
        if names.is_empty() {
            out.push(entry());
            continue;
        }
        for spec in &chosen {
            let named = names.iter().any(|n| *n == spec.base_name())
                || (spec.parent.is_some() && names.iter().any(|n| *n == spec.full_name()));
            if named {
                out.push(entry());
                if once {
                    break;
                }
            }
        }
    }
    if once {
        for entry in &mut out {
            let covers_all = entry.requests.as_ref().is_some_and(|names| {
                !names.is_empty()
                    && chosen.iter().all(|spec| {
                        names
                            .iter()
                            .any(|n| *n == spec.base_name() || *n == spec.full_name())
                    })
            });
            if covers_all {
                entry.requests = None;
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
        // A device local to one node, or one that binds to the node it is
        // allocated on, pins the allocation to that node.
        if name.is_some() || cand.device().binds_to_node {
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
