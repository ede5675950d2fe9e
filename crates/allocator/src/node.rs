//! Node selection: whether a slice or device applies to a node (nodeName,
//! allNodes, nodeSelector against the Node's name and labels), as the
//! scheduler's `nodeaffinity` helper evaluates a `NodeSelector`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement};

use crate::error::InputError;
use crate::model::NodeSelection;

/// The node facts selection looks at.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

impl NodeFacts {
    /// Facts of a Node object.
    pub fn from_node(node: &Node) -> NodeFacts {
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
        }
    }

    /// A node known by name only (no labels).
    pub fn named(name: &str) -> NodeFacts {
        NodeFacts {
            name: name.to_owned(),
            labels: BTreeMap::new(),
        }
    }
}

/// Whether `selection` includes the node. `PerDevice` and `Unknown` are
/// never a match at this level.
pub(crate) fn selection_matches(
    selection: &NodeSelection,
    node: &NodeFacts,
) -> Result<bool, InputError> {
    match selection {
        NodeSelection::NodeName(name) => Ok(*name == node.name),
        NodeSelection::AllNodes => Ok(true),
        NodeSelection::Selector(selector) => selector_matches(selector, node),
        NodeSelection::PerDevice | NodeSelection::Unknown => Ok(false),
    }
}

/// A `NodeSelector`: any term matches; a term matches when all its
/// requirements do; a term without requirements matches nothing.
pub(crate) fn selector_matches(
    selector: &NodeSelector,
    node: &NodeFacts,
) -> Result<bool, InputError> {
    for term in &selector.node_selector_terms {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if expressions.is_empty() && fields.is_empty() {
            continue;
        }
        let mut all = true;
        for requirement in expressions {
            all &= requirement_matches(
                requirement,
                node.labels.get(&requirement.key).map(String::as_str),
            )?;
        }
        for requirement in fields {
            if requirement.key != "metadata.name" {
                return Err(InputError::NodeSelector {
                    reason: format!("unsupported field {}", requirement.key),
                });
            }
            all &= requirement_matches(requirement, Some(&node.name))?;
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    value: Option<&str>,
) -> Result<bool, InputError> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |text: &str| {
        text.parse::<i64>().map_err(|_| InputError::NodeSelector {
            reason: format!("{} needs an integer, got {text:?}", requirement.key),
        })
    };
    Ok(match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let [bound] = values else {
                return Err(InputError::NodeSelector {
                    reason: format!("{} needs one value", requirement.operator),
                });
            };
            let bound = number(bound)?;
            match value.map(str::parse::<i64>) {
                Some(Ok(v)) if requirement.operator == "Gt" => v > bound,
                Some(Ok(v)) => v < bound,
                _ => false,
            }
        }
        other => {
            return Err(InputError::NodeSelector {
                reason: format!("unknown operator {other}"),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorTerm;

    fn requirement(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn selector(terms: Vec<Vec<NodeSelectorRequirement>>) -> NodeSelector {
        NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|e| NodeSelectorTerm {
                    match_expressions: Some(e),
                    match_fields: None,
                })
                .collect(),
        }
    }

    fn node() -> NodeFacts {
        let mut n = NodeFacts::named("worker-1");
        n.labels.insert("rack".into(), "r1".into());
        n.labels.insert("gen".into(), "5".into());
        n
    }

    #[test]
    fn terms_are_ored_and_requirements_anded() {
        let n = node();
        let s = selector(vec![
            vec![requirement("rack", "In", &["r2"])],
            vec![requirement("gen", "Gt", &["4"])],
        ]);
        assert!(selector_matches(&s, &n).unwrap());
        let s = selector(vec![vec![
            requirement("rack", "In", &["r1"]),
            requirement("gen", "Lt", &["5"]),
        ]]);
        assert!(!selector_matches(&s, &n).unwrap());
        let s = selector(vec![vec![
            requirement("zone", "DoesNotExist", &[]),
            requirement("rack", "NotIn", &["r9"]),
        ]]);
        assert!(selector_matches(&s, &n).unwrap());
    }

    #[test]
    fn empty_term_matches_nothing_and_bad_operator_is_an_error() {
        assert!(!selector_matches(&selector(vec![vec![]]), &node()).unwrap());
        assert!(
            selector_matches(
                &selector(vec![vec![requirement("rack", "Like", &["r1"])]]),
                &node()
            )
            .is_err()
        );
    }

    #[test]
    fn node_name_and_all_nodes() {
        assert!(selection_matches(&NodeSelection::NodeName("worker-1".into()), &node()).unwrap());
        assert!(!selection_matches(&NodeSelection::NodeName("worker-2".into()), &node()).unwrap());
        assert!(selection_matches(&NodeSelection::AllNodes, &node()).unwrap());
    }
}
