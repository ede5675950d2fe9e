//! Every node judged as the scheduler would (node selectors, taints, then
//! the allocator), and the nodes that refuse the pod alike grouped, each
//! group with the cause and the fix of its first node.

use std::collections::BTreeMap;

use allocator::{AllocateError, Allocator, NodeFacts};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

use crate::claims::{PodClaims, Stage};
use crate::fixes::{self, Cause};
use crate::{CANNOT_ALLOCATE, Cluster, Finding, NOT_AVAILABLE, NodeGroup, Report, Settings, nodes};

/// One node's verdict: the scheduler's reason, and more.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Verdict {
    reason: String,
    detail: Option<String>,
    claim: Option<String>,
    request: Option<String>,
}

pub(crate) fn nodes_report(
    report: &mut Report,
    cluster: &Cluster,
    settings: &Settings,
    pod_claims: &PodClaims,
) {
    let slices = if settings.features.device_taints {
        allocator::scenario::tainted(&cluster.slices, &cluster.taint_rules)
    } else {
        cluster.slices.clone()
    };
    let held: Vec<ResourceClaim> = (cluster.claims.iter())
        .filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
        .cloned()
        .collect();
    let allocator = match Allocator::new(settings.features, &slices, &cluster.classes, &held) {
        Ok(a) => a,
        Err(error) => {
            report.blocked = Some(Finding {
                stage: Stage::PreFilter,
                reason: format!("the cluster's objects are not valid allocator input: {error}"),
                detail: None,
                fixes: Vec::new(),
            });
            return;
        }
    };
    let mut nodes: Vec<&Node> = cluster.nodes.iter().collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let judging = Judging {
        cluster,
        settings,
        pod_claims,
        slices: &slices,
        held: &held,
        allocator: &allocator,
    };
    let groups = judging.group(&nodes, &mut report.fits);
    let counts = push_groups(report, groups);
    if report.fits.is_empty() {
        report.predicted = Some(format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            counts.join(", ")
        ));
    }
    let partition = fixes::partition_hint(
        &cluster.slices,
        &cluster.claims,
        &pod_claims.pending,
        &settings.driver,
        &settings.fabric_class,
    );
    report.fixes.extend(partition);
}

/// Nodes alike: the same reason, the same detail but for the node's name,
/// and the same cause (nodes that fail a request alike may need different
/// fixes: one has its devices held, another none that the selector takes).
type Key = (String, Option<String>, Option<String>);

/// The nodes of each [`Key`], with the verdict and cause of the first.
type Groups<'n> = BTreeMap<Key, (Vec<&'n Node>, Verdict, Option<Cause>)>;

/// What judging the nodes reads.
struct Judging<'a> {
    cluster: &'a Cluster,
    settings: &'a Settings,
    pod_claims: &'a PodClaims,
    slices: &'a [ResourceSlice],
    held: &'a [ResourceClaim],
    allocator: &'a Allocator,
}

impl Judging<'_> {
    /// Judges every node: the names of those that take the pod into
    /// `fits`, the others grouped.
    fn group<'n>(&self, nodes: &[&'n Node], fits: &mut Vec<String>) -> Groups<'n> {
        let mut groups = Groups::new();
        for &node in nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let Some(verdict) = judge(&self.cluster.pod, node, self.allocator, self.pod_claims)
            else {
                fits.push(name);
                continue;
            };
            let cause = (verdict.reason == CANNOT_ALLOCATE).then(|| self.cause(node));
            let detail = verdict.detail.as_ref().map(|d| d.replace(&name, "<node>"));
            let kind = cause.as_ref().map(|c| {
                serde_json::to_string(c)
                    .unwrap_or_default()
                    .replace(&name, "<node>")
            });
            let key = (verdict.reason.clone(), detail, kind);
            let group = groups
                .entry(key)
                .or_insert_with(|| (Vec::new(), verdict, cause));
            group.0.push(node);
        }
        groups
    }

    /// Why the allocator finds nothing on `node`.
    fn cause(&self, node: &Node) -> Cause {
        fixes::Trial {
            features: self.settings.features,
            classes: &self.cluster.classes,
            slices: self.slices,
            held: self.held,
            own: &self.pod_claims.held,
            pending: &self.pod_claims.pending,
            node,
        }
        .cause()
    }
}

/// Adds a [`NodeGroup`] per group to the report; the count of nodes of
/// each reason, sorted ("3 cannot allocate all claims").
fn push_groups(report: &mut Report, groups: Groups<'_>) -> Vec<String> {
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    for ((reason, _, _), (members, verdict, cause)) in groups {
        *histogram.entry(reason).or_default() += members.len();
        let mut group = NodeGroup {
            nodes: (members.iter())
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
            reason: verdict.reason,
            detail: verdict.detail,
            claim: verdict.claim,
            request: verdict.request,
            cause: None,
            fix: None,
        };
        if let Some(cause) = cause {
            group.fix = Some(fixes::advice(&cause, members.len()));
            group.cause = Some(cause);
        }
        report.groups.push(group);
    }
    let mut counts: Vec<String> = (histogram.iter())
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    counts.sort();
    counts
}

/// Why `node` does not take the pod, as the scheduler decides it.
fn judge(pod: &Pod, node: &Node, allocator: &Allocator, claims: &PodClaims) -> Option<Verdict> {
    if let Some((reason, detail)) = nodes::refuses(pod, node) {
        return Some(Verdict {
            reason: reason.to_string(),
            detail: Some(detail),
            claim: None,
            request: None,
        });
    }
    if !claims.pending.is_empty() {
        match allocator.allocate(&NodeFacts::from_node(node), &claims.pending) {
            Ok(_) => {}
            Err(AllocateError::Unsatisfiable(failure)) => {
                return Some(Verdict {
                    reason: CANNOT_ALLOCATE.to_string(),
                    detail: Some(failure.explanation),
                    claim: failure.claim,
                    request: failure.request,
                });
            }
            Err(AllocateError::Input(error)) => {
                return Some(Verdict {
                    reason: error.to_string(),
                    detail: None,
                    claim: None,
                    request: None,
                });
            }
        }
    }
    let elsewhere = claims.held.iter().find(|c| {
        let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
        let selector = allocation.and_then(|a| a.node_selector.as_ref());
        selector.is_some_and(|s| !nodes::selector_matches(s, node))
    })?;
    Some(Verdict {
        reason: NOT_AVAILABLE.to_string(),
        detail: Some(format!(
            "claim {}/{} is allocated on other nodes; the pod can only run where its allocation is",
            elsewhere.metadata.namespace.as_deref().unwrap_or_default(),
            elsewhere.metadata.name.as_deref().unwrap_or_default()
        )),
        claim: None,
        request: None,
    })
}
