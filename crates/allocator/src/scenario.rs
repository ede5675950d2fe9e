//! A scheduling question as `ainic-dra simulate` asks it: Kubernetes
//! objects (Node, DeviceClass, ResourceSlice, ResourceClaim,
//! ResourceClaimTemplate and Pod), a node and the gates. Claims with
//! `status.allocation` hold their devices; all others are allocated
//! together on the node, all or nothing, as kube-scheduler does for one
//! pod. The answer has simulate's three outcomes. Pods are placed one
//! after another by [`crate::placement`].
//!
//! Upstream's allocator (run by `testbed/oracle-1.3x`) answers the same
//! question on the same objects; the differential tests compare the two.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimStatus,
    ResourceClaimTemplate, ResourceSlice,
};
use serde_json::Value;

use crate::{AllocateError, Allocator, Features, NodeFacts};

/// Why a scenario's input could not be read or its pods placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The text is neither JSON nor YAML.
    #[error("invalid {format}: {reason}")]
    Syntax {
        /// `JSON` or `YAML`.
        format: &'static str,
        /// What the parser said.
        reason: String,
    },
    /// An object is of an unsupported kind or version, or does not parse.
    #[error("object #{index}: {reason}")]
    Object {
        /// Its position in the input, from 1.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Node objects are given, but not the one asked for.
    #[error("node {name} is not among the {count} Node objects in the input")]
    UnknownNode {
        /// The node asked for.
        name: String,
        /// How many Node objects the input has.
        count: usize,
    },
    /// Pods are to be placed, but the input has no Node objects.
    #[error("placing pods needs the Node objects to place them on")]
    NoNodes,
    /// A pod names a claim or template the input does not have.
    #[error("pod {pod}: {reason}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// What is missing.
        reason: String,
    },
    /// The allocator refused the input (an unknown class, a selector that
    /// does not compile, …).
    #[error("invalid input: {0}")]
    Input(String),
}

/// The objects of a JSON or multi-document YAML text, `kind: List` and
/// JSON arrays flattened, empty documents skipped.
pub fn documents(text: &str) -> Result<Vec<Value>, ScenarioError> {
    let syntax = |format, e: &dyn std::fmt::Display| ScenarioError::Syntax {
        format,
        reason: e.to_string(),
    };
    let trimmed = text.trim_start();
    let raw: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        vec![serde_json::from_str(text).map_err(|e| syntax("JSON", &e))?]
    } else {
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| syntax("YAML", &e))?;
            docs.push(serde_json::to_value(value).map_err(|e| syntax("YAML", &e))?);
        }
        docs
    };
    let mut out = Vec::new();
    let mut queue: Vec<Value> = raw.into_iter().rev().collect();
    while let Some(value) = queue.pop() {
        match value {
            Value::Null => {}
            Value::Array(items) => queue.extend(items.into_iter().rev()),
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = map
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                queue.extend(items.into_iter().rev());
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The objects of a question, by kind.
#[derive(Debug, Clone, Default)]
pub struct Scenario {
    /// Nodes (the one allocated on supplies labels).
    pub nodes: Vec<Node>,
    /// Device classes.
    pub classes: Vec<DeviceClass>,
    /// Resource slices.
    pub slices: Vec<ResourceSlice>,
    /// Claims with an allocation: they hold their devices.
    pub held: Vec<ResourceClaim>,
    /// Claims to allocate, in input order (one per template too).
    pub pending: Vec<ResourceClaim>,
    /// The ResourceClaims among `pending` (not those of templates): the
    /// claims pods share by name.
    pub claims: Vec<ResourceClaim>,
    /// ResourceClaimTemplates, which stamp out a claim per pod.
    pub templates: Vec<ResourceClaimTemplate>,
    /// Pods, in input order.
    pub pods: Vec<Pod>,
    /// DeviceTaintRules: their taints are added to the devices they select
    /// before allocating, as the scheduler's slice tracker does.
    pub taint_rules: Vec<DeviceTaintRule>,
    /// PodGroups (`scheduling.k8s.io/v1beta1`, 1.37 with
    /// `DRAWorkloadResourceClaims`): a claim made from a template for the
    /// group is one claim all its pods share.
    pub pod_groups: Vec<k8s_openapi::api::scheduling::v1beta1::PodGroup>,
}

/// What a question gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The pending claims, each with `status.allocation`.
    Allocated(Vec<ResourceClaim>),
    /// They cannot all be allocated on the node; why.
    Unallocatable(String),
    /// The input is invalid (unknown class, CEL that does not compile, …).
    Invalid(String),
}

impl Scenario {
    /// Sorts `objects` by kind; an object of an unsupported kind or
    /// version, or one that does not parse, is an error naming it.
    pub fn from_objects(objects: Vec<Value>) -> Result<Scenario, ScenarioError> {
        let mut s = Scenario::default();
        for (index, value) in objects.into_iter().enumerate() {
            s.add(value).map_err(|reason| ScenarioError::Object {
                index: index + 1,
                reason,
            })?;
        }
        Ok(s)
    }

    fn add(&mut self, value: Value) -> Result<(), String> {
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let kind = kind.to_owned();
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let wanted = match kind.as_str() {
            "Node" | "Pod" => "v1",
            "DeviceClass"
            | "ResourceSlice"
            | "ResourceClaim"
            | "ResourceClaimTemplate"
            | "DeviceTaintRule" => "resource.k8s.io/v1",
            "PodGroup" => "scheduling.k8s.io/v1beta1",
            _ => api_version,
        };
        if api_version != wanted {
            return Err(format!(
                "{kind} has apiVersion {api_version:?}, expected {wanted}"
            ));
        }
        let parse_error = |e: serde_json::Error| format!("invalid {kind}: {e}");
        match kind.as_str() {
            "Node" => self
                .nodes
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "Pod" => self
                .pods
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "PodGroup" => self
                .pod_groups
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "DeviceClass" => self
                .classes
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "ResourceSlice" => self
                .slices
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "DeviceTaintRule" => self
                .taint_rules
                .push(serde_json::from_value(value).map_err(parse_error)?),
            "ResourceClaim" => {
                let claim: ResourceClaim = serde_json::from_value(value).map_err(parse_error)?;
                if claim.status.as_ref().is_none_or(|s| s.allocation.is_none()) {
                    self.claims.push(claim.clone());
                }
                self.add_claim(claim);
            }
            "ResourceClaimTemplate" => {
                let template: ResourceClaimTemplate =
                    serde_json::from_value(value).map_err(parse_error)?;
                self.templates.push(template.clone());
                self.add_claim(claim_from_template(template));
            }
            "" => return Err("object has no kind".into()),
            other => {
                return Err(format!(
                    "unsupported kind {other} (expected Node, Pod, PodGroup, DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule)"
                ));
            }
        }
        Ok(())
    }

    fn add_claim(&mut self, claim: ResourceClaim) {
        if claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some())
        {
            self.held.push(claim);
        } else {
            self.pending.push(claim);
        }
    }

    /// The facts of node `name`: its Node object when given, else the name
    /// alone; an error when Nodes are given but not this one.
    pub fn node(&self, name: &str) -> Result<NodeFacts, ScenarioError> {
        match self
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
        {
            Some(node) => Ok(NodeFacts::from_node(node)),
            None if self.nodes.is_empty() => Ok(NodeFacts::named(name)),
            None => Err(ScenarioError::UnknownNode {
                name: name.to_string(),
                count: self.nodes.len(),
            }),
        }
    }

    /// The slices as the scheduler sees them: with the DeviceTaintRules'
    /// taints (without the gate it neither applies rules nor heeds taints).
    pub(crate) fn visible_slices(&self, features: Features) -> Vec<ResourceSlice> {
        if features.device_taints {
            tainted(&self.slices, &self.taint_rules)
        } else {
            self.slices.clone()
        }
    }

    /// Allocates the pending claims together on node `name`.
    pub fn solve(&self, features: Features, name: &str) -> Answer {
        let node = match self.node(name) {
            Ok(node) => node,
            Err(e) => return Answer::Invalid(e.to_string()),
        };
        let slices = self.visible_slices(features);
        let allocator = match Allocator::new(features, &slices, &self.classes, &self.held) {
            Ok(a) => a,
            Err(e) => return Answer::Invalid(format!("invalid input: {e}")),
        };
        match allocator.allocate(&node, &self.pending) {
            Ok(results) => Answer::Allocated(with_allocations(&self.pending, results)),
            Err(AllocateError::Input(e)) => Answer::Invalid(format!("invalid input: {e}")),
            Err(AllocateError::Unsatisfiable(f)) => Answer::Unallocatable(format!(
                "cannot allocate the claims on node {}: {}",
                node.name, f.explanation
            )),
        }
    }
}

/// `slices` with the taint of every rule added to each device its selector
/// matches: a rule without a selector matches nothing; each field it sets
/// (driver, pool, device) must match, the others match anything.
pub fn tainted(slices: &[ResourceSlice], rules: &[DeviceTaintRule]) -> Vec<ResourceSlice> {
    let mut out = slices.to_vec();
    for rule in rules {
        let Some(selector) = &rule.spec.device_selector else {
            continue;
        };
        for slice in &mut out {
            let spec = &mut slice.spec;
            let wrong =
                |want: &Option<String>, have: &str| want.as_deref().is_some_and(|w| w != have);
            if wrong(&selector.driver, &spec.driver) || wrong(&selector.pool, &spec.pool.name) {
                continue;
            }
            for device in spec.devices.iter_mut().flatten() {
                if wrong(&selector.device, &device.name) {
                    continue;
                }
                device
                    .taints
                    .get_or_insert_with(Vec::new)
                    .push(rule.spec.taint.clone());
            }
        }
    }
    out
}

pub(crate) fn with_allocations(
    claims: &[ResourceClaim],
    results: Vec<AllocationResult>,
) -> Vec<ResourceClaim> {
    claims
        .iter()
        .cloned()
        .zip(results)
        .map(|(mut claim, result)| {
            claim
                .status
                .get_or_insert_with(ResourceClaimStatus::default)
                .allocation = Some(result);
            claim
        })
        .collect()
}

/// The claim a template stamps out, named after the template.
pub fn claim_from_template(template: ResourceClaimTemplate) -> ResourceClaim {
    let spec = template.spec.unwrap_or_default();
    ResourceClaim {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: template.metadata.name,
            namespace: template.metadata.namespace,
            labels: spec.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: spec.metadata.and_then(|m| m.annotations),
            ..Default::default()
        },
        spec: spec.spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_sorted_by_kind_and_claims_by_allocation() {
        let s = Scenario::from_objects(vec![
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "held"},
                   "status": {"allocation": {"devices": {"results": []}}}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": "t"}, "spec": {"spec": {}}}),
        ])
        .unwrap();
        assert_eq!((s.nodes.len(), s.held.len(), s.pending.len()), (1, 1, 1));
        assert_eq!((s.pods.len(), s.templates.len(), s.claims.len()), (1, 1, 0));
        assert_eq!(s.pending[0].metadata.name.as_deref(), Some("t"));
        assert!(
            s.node("m")
                .unwrap_err()
                .to_string()
                .contains("not among the 1 Node")
        );
    }

    #[test]
    fn a_wrong_version_or_kind_is_named() {
        let err = Scenario::from_objects(vec![json!({"apiVersion": "resource.k8s.io/v1beta1",
            "kind": "DeviceClass"})])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("object #1: DeviceClass has apiVersion"),
            "{err}"
        );
        let err = Scenario::from_objects(vec![json!({"apiVersion": "v1", "kind": "Secret"})])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported kind Secret"), "{err}");
    }
}
