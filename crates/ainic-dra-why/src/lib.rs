//! `ainic-dra why POD` (also `kubectl ainic why POD`): why a pod is
//! pending, from the objects of a live cluster, in the scheduler's words
//! and then in the driver's.
//!
//! The scheduler's own status says `0/12 nodes are available: 12 cannot
//! allocate all claims`. This module follows the same steps as
//! kube-scheduler's default profile, in order — DynamicResources'
//! PreEnqueue and PreFilter (`claims`), then per node NodeUnschedulable,
//! TaintToleration, NodeAffinity (`nodes`) and DynamicResources' Filter
//! with the allocator `simulate` uses — and so predicts the scheduler's
//! message, which the report compares with the pod's `PodScheduled`
//! condition. For each group of nodes failing alike it gives the
//! allocator's explanation (which request, how many devices pass each
//! filter) and what would fix it (`fixes`): other claims holding the
//! devices, device taints, constraints, selectors, fabric partitions
//! without room, tenant classes used outside their tenant.
//!
//! Not modelled: CPU, memory and other non-DRA resources, inter-pod
//! affinity, topology spread, volumes. A node that passes every step here
//! is reported as fitting. Pure: the command reads the objects
//! ([`Cluster`]) and prints the [`Report`].

mod claims;
mod fixes;
mod judge;
mod nodes;

use allocator::Features;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde::Serialize;

use claims::Blocked;
pub use claims::Stage;
pub use fixes::Cause;
use judge::nodes_report;

/// DynamicResources' Filter reason when allocation fails.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// DynamicResources' Filter reason for an allocated claim of other nodes.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";

/// The objects `why` reads.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// The pod.
    pub pod: Pod,
    /// Its namespace (for the tenant label), if readable.
    pub namespace: Option<Namespace>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// Every DeviceClass.
    pub classes: Vec<DeviceClass>,
    /// Every ResourceSlice.
    pub slices: Vec<ResourceSlice>,
    /// Every ResourceClaim (allocated ones hold devices).
    pub claims: Vec<ResourceClaim>,
    /// The ResourceClaimTemplates of the pod's namespace.
    pub templates: Vec<ResourceClaimTemplate>,
    /// Every DeviceTaintRule (their taints apply with DRADeviceTaints).
    pub taint_rules: Vec<DeviceTaintRule>,
    /// Events about the pod.
    pub events: Vec<Event>,
}

/// How to judge.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The cluster's release and gates.
    pub features: Features,
    /// This driver's name.
    pub driver: String,
    /// The DeviceClass of fabric partitions.
    pub fabric_class: String,
    /// The namespace label naming a namespace's tenant.
    pub tenant_label: String,
}

/// The scheduler's own verdict, from the pod's `PodScheduled` condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SchedulerSays {
    /// `Unschedulable`, `SchedulerError`, …
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Why the scheduler stops before looking at nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Where it stops.
    pub stage: Stage,
    /// The scheduler's words.
    pub reason: String,
    /// More, where known (the resource-claim controller's event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What would fix it.
    pub fixes: Vec<String>,
}

/// Nodes refused alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// Node names.
    pub nodes: Vec<String>,
    /// The scheduler's reason for each.
    pub reason: String,
    /// What exactly (the allocator's explanation, the taint, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The claim whose request fails, when one is singled out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// That request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The one change that would make the claims fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// What to do, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's phase.
    pub phase: String,
    /// The node it is bound to, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What the scheduler wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerSays>,
    /// The message this analysis expects the scheduler to write (`None`:
    /// none, the pod is not tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<String>,
    /// Whether the prediction is what the scheduler wrote.
    pub agrees: bool,
    /// The scheduler stops before the nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Finding>,
    /// Nodes refused, grouped by reason.
    pub groups: Vec<NodeGroup>,
    /// Nodes where every step here passes.
    pub fits: Vec<String>,
    /// Fixes that concern the pod's claims as a whole (fabric partitions,
    /// tenant classes).
    pub fixes: Vec<String>,
    /// Recent warnings about the pod.
    pub events: Vec<String>,
}

/// Explains why `cluster.pod` is (or is not) pending.
pub fn explain(cluster: &Cluster, settings: &Settings) -> Report {
    let pod = &cluster.pod;
    let mut report = Report {
        pod: format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
        phase: (pod.status.as_ref().and_then(|s| s.phase.clone())).unwrap_or_default(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        scheduler: scheduler_says(pod),
        events: warnings(&cluster.events),
        ..Report::default()
    };
    if report.node.is_some() {
        report.agrees = true;
        return report;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let own_claims: Vec<ResourceClaim> = (cluster.claims.iter())
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
        .cloned()
        .collect();
    report.fixes = tenant_fixes(cluster, settings);
    match claims::resolve(pod, &own_claims, &cluster.classes) {
        Err(blocked) => blocked_report(&mut report, cluster, blocked),
        Ok(claims) => nodes_report(&mut report, cluster, settings, &claims),
    }
    report.agrees = agrees(report.predicted.as_deref(), report.scheduler.as_ref());
    report
}

/// Whether `predicted` is the scheduler's message (less its preemption
/// part); `None` predicted: the scheduler wrote nothing.
fn agrees(predicted: Option<&str>, says: Option<&SchedulerSays>) -> bool {
    match (predicted, says) {
        (None, None) => true,
        (Some(p), Some(s)) => s.message.split(" preemption:").next().map(str::trim_end) == Some(p),
        _ => false,
    }
}

fn scheduler_says(pod: &Pod) -> Option<SchedulerSays> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(SchedulerSays {
        reason: c.reason.clone().unwrap_or_default(),
        message: c.message.clone().unwrap_or_default(),
    })
}

/// The latest warnings, oldest first, each `Reason: message` once.
fn warnings(events: &[Event]) -> Vec<String> {
    let mut warnings: Vec<&Event> = (events.iter())
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    warnings.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
    let mut out: Vec<String> = Vec::new();
    for e in warnings {
        let line = format!(
            "{}: {}",
            e.reason.as_deref().unwrap_or_default(),
            e.message.as_deref().unwrap_or_default()
        );
        out.retain(|l| *l != line);
        out.push(line);
    }
    let skip = out.len().saturating_sub(5);
    out.split_off(skip)
}

fn blocked_report(report: &mut Report, cluster: &Cluster, blocked: Blocked) {
    let mut fixes = Vec::new();
    let mut detail = None;
    if blocked.words.ends_with("ResourceClaim not created yet") {
        detail = (report.events.iter().rev())
            .find(|e| e.starts_with("FailedResourceClaimCreation:"))
            .cloned();
        if detail.is_none() {
            fixes.push("the resource-claim controller (kube-controller-manager) has not made the pod's claim yet: check that it runs".into());
        }
    } else if blocked.words.starts_with("could not find ResourceClaim") {
        fixes.push(format!(
            "create the claim the pod names ({}), or fix the name",
            blocked.entry.as_deref().unwrap_or_default()
        ));
    } else if blocked.words.contains("does not exist") {
        let mut names: Vec<&str> = (cluster.classes.iter())
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        names.sort();
        fixes.push(format!(
            "create the DeviceClass or fix its name in the claim; the classes are: {}",
            names.join(", ")
        ));
    }
    report.predicted = (blocked.stage == Stage::PreFilter).then(|| {
        format!(
            "0/{} nodes are available: {}.",
            cluster.nodes.len(),
            blocked.words
        )
    });
    report.blocked = Some(Finding {
        stage: blocked.stage,
        reason: blocked.words,
        detail,
        fixes,
    });
}

/// The claim specs of the pod: its claims that exist and its templates.
fn pod_specs(cluster: &Cluster) -> Vec<k8s_openapi::api::resource::v1::ResourceClaimSpec> {
    let pod = &cluster.pod;
    let namespace = pod.metadata.namespace.as_deref();
    let entries = (pod.spec.as_ref()).and_then(|s| s.resource_claims.clone());
    let mut specs = Vec::new();
    for entry in entries.unwrap_or_default() {
        if let Some(name) = &entry.resource_claim_template_name {
            let template = (cluster.templates.iter()).find(|t| {
                t.metadata.name.as_ref() == Some(name)
                    && t.metadata.namespace.as_deref() == namespace
            });
            specs.extend(template.and_then(|t| t.spec.as_ref()?.spec.clone()));
        }
        if let Some(name) = &entry.resource_claim_name {
            let claim = (cluster.claims.iter()).find(|c| {
                c.metadata.name.as_ref() == Some(name)
                    && c.metadata.namespace.as_deref() == namespace
            });
            specs.extend(claim.and_then(|c| c.spec.clone()));
        }
    }
    specs
}

fn tenant_fixes(cluster: &Cluster, settings: &Settings) -> Vec<String> {
    let Some(namespace) = &cluster.namespace else {
        return Vec::new();
    };
    let specs = pod_specs(cluster);
    fixes::tenant_hints(
        &specs,
        &cluster.classes,
        namespace,
        &settings.tenant_label,
        &settings.driver,
    )
}

#[cfg(test)]
mod tests;
