//! Pods placed one after another, as kube-scheduler binds them: each pod's
//! claims (shared ones by name, its own from templates) are allocated on
//! the first node, by name, where they all fit beside what earlier pods
//! and the input's allocated claims hold. A shared claim allocated for an
//! earlier pod keeps its devices and pins later pods to the nodes its
//! allocation selects — which is how a job's pods stay in the fabric
//! partition the first pod's claim got.
//!
//! A node is skipped when the pod's `nodeName` or `nodeSelector` rule it
//! out, when it is cordoned, or when it has a `NoSchedule`/`NoExecute`
//! taint the pod does not tolerate; a pod generated claims exist for
//! (`status.resourceClaimStatuses`) uses those. A pod of a PodGroup whose
//! claim entry equals the group's shares the one claim made for the group
//! (`<group>-<entry>`); the gang's all-or-nothing binding is not modelled. Node affinity, resources
//! other than claims, and inter-pod rules are not looked at. The scheduler
//! scores feasible nodes and takes the best; this takes the first by name,
//! so when several nodes fit it may name another one than a cluster would.
//! A search the allocator aborts on a node leaves that pod pending, as a
//! failed Filter does; the next pods are placed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::node::selector_matches;
use crate::scenario::ScenarioError;
use crate::scenario::{claim_from_template, with_allocations};
use crate::taints::Fields;
use crate::{AllocateError, Allocator, Features, InputError, NodeFacts, Scenario};

/// Where one pod went.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    /// The node and the pod's claims, each with its allocation, or why no
    /// node takes the pod.
    pub outcome: Result<(String, Vec<ResourceClaim>), String>,
}

/// A pod's claim: allocated already (by the input or an earlier pod), or
/// to be allocated with this pod.
enum Need {
    Held(ResourceClaim),
    Pending(ResourceClaim),
}

/// Places the scenario's pods in input order; `Err` is invalid input (a
/// claim or template a pod names is missing, a class unknown, …).
pub fn place_pods(
    scenario: &Scenario,
    features: Features,
) -> Result<Vec<Placement>, ScenarioError> {
    let mut nodes: Vec<Candidate> = scenario.nodes.iter().map(Candidate::of).collect();
    nodes.sort_by(|a, b| a.facts.name.cmp(&b.facts.name));
    if nodes.is_empty() {
        return Err(ScenarioError::NoNodes);
    }
    let slices = scenario.visible_slices(features);
    let mut held = scenario.held.clone();
    let mut shared: BTreeMap<(String, String), ResourceClaim> = scenario
        .claims
        .iter()
        .map(|c| (key(&c.metadata), c.clone()))
        .collect();
    let mut placements = Vec::new();
    for pod in &scenario.pods {
        let label = pod_label(pod);
        let needs = needs(scenario, pod, &held, &shared).map_err(|reason| ScenarioError::Pod {
            pod: label.clone(),
            reason,
        })?;
        let allocator = Allocator::new(features, &slices, &scenario.classes, &held)
            .map_err(|e| ScenarioError::Input(e.to_string()))?;
        let outcome = place(&allocator, pod, &nodes, &needs).map_err(ScenarioError::Input)?;
        if let Ok((_, claims)) = &outcome {
            for (need, claim) in needs.iter().zip(claims) {
                if let Need::Pending(_) = need {
                    shared.remove(&key(&claim.metadata));
                    held.push(claim.clone());
                }
            }
        }
        placements.push(Placement {
            pod: label,
            outcome,
        });
    }
    Ok(placements)
}

/// Tries the nodes in order: the first where the held claims' allocations
/// allow it and the pending claims fit.
fn place(
    allocator: &Allocator,
    pod: &Pod,
    nodes: &[Candidate],
    needs: &[Need],
) -> Result<Result<(String, Vec<ResourceClaim>), String>, String> {
    let pending: Vec<ResourceClaim> = needs
        .iter()
        .filter_map(|n| match n {
            Need::Pending(c) => Some(c.clone()),
            Need::Held(_) => None,
        })
        .collect();
    let mut reasons = Vec::new();
    for candidate in nodes.iter().filter(|n| pod_allows(pod, &n.facts)) {
        let node = &candidate.facts;
        if let Some(why) = candidate.refuses(pod) {
            reasons.push(format!("node {}: {why}", node.name));
            continue;
        }
        if let Some(claim) = needs.iter().find_map(|n| match n {
            Need::Held(c) if !allocated_for(c, node) => Some(c),
            _ => None,
        }) {
            reasons.push(format!(
                "node {}: claim {} is allocated for other nodes",
                node.name,
                crate::request::claim_label(claim)
            ));
            continue;
        }
        match allocator.allocate(node, &pending) {
            Ok(results) => {
                let mut allocated = with_allocations(&pending, results).into_iter();
                let claims = needs
                    .iter()
                    .map(|n| match n {
                        Need::Held(c) => c.clone(),
                        Need::Pending(_) => allocated.next().expect("one result per pending claim"),
                    })
                    .collect();
                return Ok(Ok((node.name.clone(), claims)));
            }
            // The scheduler's Filter fails for the pod, not the input:
            // the pod stays pending and the next pods are placed.
            Err(AllocateError::Input(InputError::Aborted { reason })) => {
                return Ok(Err(format!(
                    "scheduling failed on node {}: {reason}",
                    node.name
                )));
            }
            Err(AllocateError::Input(e)) => return Err(e.to_string()),
            Err(AllocateError::Unsatisfiable(f)) => {
                reasons.push(format!("node {}: {}", node.name, f.explanation));
            }
        }
    }
    let considered = reasons.len();
    Ok(Err(format!(
        "0/{} nodes are available{}{}",
        nodes.len(),
        if considered < nodes.len() {
            format!(
                " ({} excluded by the pod's nodeName or nodeSelector)",
                nodes.len() - considered
            )
        } else {
            String::new()
        },
        reasons.iter().map(|r| format!("; {r}")).collect::<String>()
    )))
}

/// A node as placement sees it: its facts, whether it is cordoned, and
/// the taints that keep pods off it.
struct Candidate {
    facts: NodeFacts,
    unschedulable: bool,
    taints: Vec<Taint>,
}

impl Candidate {
    fn of(node: &Node) -> Candidate {
        let spec = node.spec.as_ref();
        Candidate {
            facts: NodeFacts::from_node(node),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
        }
    }

    /// Why the node takes no new pod `pod`: cordoned, or a `NoSchedule`
    /// or `NoExecute` taint the pod does not tolerate.
    fn refuses(&self, pod: &Pod) -> Option<String> {
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        let tolerations = tolerations.unwrap_or_default();
        let tolerated = |t: &Taint| tolerations.iter().any(|tol| tolerates(tol, t));
        if self.unschedulable {
            let cordon = Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            };
            if !tolerated(&cordon) {
                return Some("is cordoned (spec.unschedulable)".into());
            }
        }
        let blocking = self
            .taints
            .iter()
            .find(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerated(t))?;
        Some(format!(
            "has taint {}={}:{} that the pod does not tolerate",
            blocking.key,
            blocking.value.as_deref().unwrap_or(""),
            blocking.effect
        ))
    }
}

/// Whether a pod's toleration matches a node taint (the scheduler's
/// `ToleratesTaint`, the rule device taints follow too).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    crate::taints::matches(
        Fields::new(
            t.key.as_deref(),
            t.operator.as_deref(),
            t.value.as_deref(),
            t.effect.as_deref(),
        ),
        Fields::new(
            Some(&taint.key),
            None,
            taint.value.as_deref(),
            Some(&taint.effect),
        ),
    )
}

/// The pod's claims, in `spec.resourceClaims` order.
fn needs(
    scenario: &Scenario,
    pod: &Pod,
    held: &[ResourceClaim],
    shared: &BTreeMap<(String, String), ResourceClaim>,
) -> Result<Vec<Need>, String> {
    let namespace = namespace_of(&pod.metadata);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_deref());
    let mut needs = Vec::new();
    for entry in entries.unwrap_or_default() {
        // A claim by name, or the one the resource-claim controller made
        // for the entry already (the pod's status names it).
        let by_name = (entry.resource_claim_name.as_deref())
            .map(|n| (n, String::new()))
            .or_else(|| {
                generated_claim(pod, &entry.name)
                    .map(|n| (n, format!(" (generated for entry {})", entry.name)))
            });
        if let Some((name, generated)) = by_name {
            let wanted = (namespace.clone(), name.to_string());
            if let Some(claim) = held.iter().find(|c| key(&c.metadata) == wanted) {
                needs.push(Need::Held(claim.clone()));
            } else if let Some(claim) = shared.get(&wanted) {
                needs.push(Need::Pending(claim.clone()));
            } else {
                return Err(format!(
                    "claim {namespace}/{name}{generated} is not in the input"
                ));
            }
        } else if let Some(template) = &entry.resource_claim_template_name {
            let found = scenario.templates.iter().find(|t| {
                t.metadata.name.as_deref() == Some(template)
                    && namespace_of(&t.metadata) == namespace
            });
            let Some(found) = found else {
                return Err(format!(
                    "template {namespace}/{template} is not in the input"
                ));
            };
            // The name the resource-claim controller would give, less its
            // random suffix: the group's when the pod's PodGroup makes the
            // claim for all its pods, else the pod's.
            let group = group_of(scenario, pod, entry);
            let owner = group.unwrap_or(&pod_name);
            // A group's claim made for an earlier pod of the group, known
            // by the uid given below (names can clash: pod `a` entry `b-x`
            // and pod `a-b` entry `x`).
            let uid = format!(
                "{namespace}/{}/{owner}/{}",
                if group.is_some() { "group" } else { "pod" },
                entry.name
            );
            let made = held
                .iter()
                .find(|c| c.metadata.uid.as_deref() == Some(&uid));
            if let Some(claim) = made.filter(|_| group.is_some()) {
                needs.push(Need::Held(claim.clone()));
                continue;
            }
            let mut claim = claim_from_template(found.clone());
            claim.metadata.name = Some(format!("{owner}-{}", entry.name));
            claim.metadata.namespace = Some(namespace.clone());
            claim.metadata.uid = Some(uid);
            needs.push(Need::Pending(claim));
        } else {
            return Err(format!(
                "resourceClaims entry {} names neither a claim nor a template",
                entry.name
            ));
        }
    }
    Ok(needs)
}

/// The pod's PodGroup when the group has the same claim entry as the
/// pod's `entry` (same name and template): the resource-claim controller
/// then makes one claim for the group and every pod of it uses that one.
fn group_of<'s>(
    scenario: &'s Scenario,
    pod: &Pod,
    entry: &k8s_openapi::api::core::v1::PodResourceClaim,
) -> Option<&'s String> {
    let group = (pod.spec.as_ref()?.scheduling_group.as_ref()?)
        .pod_group_name
        .as_deref()?;
    let namespace = namespace_of(&pod.metadata);
    let found = scenario.pod_groups.iter().find(|g| {
        g.metadata.name.as_deref() == Some(group) && namespace_of(&g.metadata) == namespace
    })?;
    let claims = found.spec.resource_claims.as_deref().unwrap_or_default();
    let same = claims.iter().any(|c| {
        c.name == entry.name
            && c.resource_claim_name == entry.resource_claim_name
            && c.resource_claim_template_name == entry.resource_claim_template_name
    });
    same.then_some(found.metadata.name.as_ref()?)
}

/// The claim the resource-claim controller generated for the pod's entry
/// `entry`, as `status.resourceClaimStatuses` names it.
fn generated_claim<'p>(pod: &'p Pod, entry: &str) -> Option<&'p str> {
    let statuses = pod.status.as_ref()?.resource_claim_statuses.as_ref()?;
    statuses
        .iter()
        .find(|s| s.name == entry)?
        .resource_claim_name
        .as_deref()
}

/// Whether an allocated claim's node selector takes `node` (none: any).
fn allocated_for(claim: &ResourceClaim, node: &NodeFacts) -> bool {
    let selector = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.node_selector.as_ref());
    selector.is_none_or(|s| selector_matches(s, node).unwrap_or(false))
}

/// The pod's `spec.nodeName` and `spec.nodeSelector`.
fn pod_allows(pod: &Pod, node: &NodeFacts) -> bool {
    let Some(spec) = &pod.spec else {
        return true;
    };
    if spec.node_name.as_ref().is_some_and(|n| *n != node.name) {
        return false;
    }
    spec.node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v))
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (namespace_of(meta), meta.name.clone().unwrap_or_default())
}

fn pod_label(pod: &Pod) -> String {
    let (namespace, name) = key(&pod.metadata);
    format!("{namespace}/{name}")
}
