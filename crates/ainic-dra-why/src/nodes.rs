//! The scheduler's node filters that come before DynamicResources, in its
//! order and words (kube-scheduler 1.34–1.37, default profile):
//! NodeUnschedulable, TaintToleration, NodeAffinity. Node selectors are
//! matched as `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`
//! does, for the pod's affinity and for an allocation's node selector.

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

/// NodeUnschedulable's reason.
pub(crate) const UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// TaintToleration's reason.
pub(crate) const UNTOLERATED: &str = "node(s) had untolerated taint(s)";
/// NodeAffinity's reason.
pub(crate) const AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";

/// The first of these filters `node` fails for `pod`: the scheduler's
/// reason and what exactly (the taint, the selector).
pub(crate) fn refuses(pod: &Pod, node: &Node) -> Option<(&'static str, String)> {
    let spec = pod.spec.clone().unwrap_or_default();
    let tolerations = spec.tolerations.unwrap_or_default();
    let node_spec = node.spec.clone().unwrap_or_default();
    let cordon = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    if node_spec.unschedulable == Some(true) && !tolerated(&tolerations, &cordon) {
        return Some((
            UNSCHEDULABLE,
            "the node is cordoned (spec.unschedulable)".into(),
        ));
    }
    let taints = node_spec.taints.unwrap_or_default();
    let blocking = (taints.iter())
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .find(|t| !tolerated(&tolerations, t));
    if let Some(taint) = blocking {
        return Some((
            UNTOLERATED,
            format!("taint {} that the pod does not tolerate", show_taint(taint)),
        ));
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector = spec.node_selector.unwrap_or_default();
    if let Some((key, value)) = selector.iter().find(|(k, v)| labels.get(*k) != Some(*v)) {
        return Some((AFFINITY, format!("nodeSelector {key}={value}")));
    }
    let required = (spec.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required
        && !selector_matches(required, node)
    {
        return Some((AFFINITY, "the pod's required node affinity".into()));
    }
    None
}

/// `key=value:Effect`.
pub(crate) fn show_taint(taint: &Taint) -> String {
    format!(
        "{}={}:{}",
        taint.key,
        taint.value.as_deref().unwrap_or(""),
        taint.effect
    )
}

/// Whether a toleration of `tolerations` matches `taint` (the scheduler's
/// `ToleratesTaint`: an empty key with `Exists` matches every key, an
/// empty effect every effect).
pub(crate) fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect = t.effect.as_deref().unwrap_or("");
        if !effect.is_empty() && effect != taint.effect {
            return false;
        }
        let key = t.key.as_deref().unwrap_or("");
        if !key.is_empty() && key != taint.key {
            return false;
        }
        match t.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
            _ => false,
        }
    })
}

/// Whether `node` matches one of the selector's terms (none: no match).
pub(crate) fn selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    (selector.node_selector_terms.iter()).any(|term| term_matches(term, node))
}

/// A term matches when it has requirements and all of them hold.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.clone().unwrap_or_default();
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let label =
        |r: &NodeSelectorRequirement| requirement(r, labels.get(&r.key).map(String::as_str));
    let field = |r: &NodeSelectorRequirement| {
        r.key == "metadata.name" && requirement(r, Some(name.as_str()))
    };
    expressions.iter().all(label) && fields.iter().all(field)
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (value.and_then(int), values.first().and_then(|v| int(v))) {
            (Some(v), Some(bound)) if r.operator == "Gt" => v > bound,
            (Some(v), Some(bound)) => v < bound,
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn filters_run_in_the_schedulers_order_with_its_words() {
        let n = node(json!({"metadata": {"name": "n", "labels": {"g": "a"}},
            "spec": {"unschedulable": true,
                     "taints": [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]}}));
        let p = pod(json!({"containers": [], "nodeSelector": {"g": "b"}}));
        assert_eq!(refuses(&p, &n).unwrap().0, UNSCHEDULABLE);
        let p = pod(
            json!({"containers": [], "nodeSelector": {"g": "b"}, "tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}),
        );
        let (reason, detail) = refuses(&p, &n).unwrap();
        assert_eq!(
            (reason, detail.as_str()),
            (
                UNTOLERATED,
                "taint gpu=busy:NoSchedule that the pod does not tolerate"
            )
        );
        let p = pod(
            json!({"containers": [], "nodeSelector": {"g": "b"}, "tolerations": [
            {"operator": "Exists"}]}),
        );
        assert_eq!(
            refuses(&p, &n).unwrap(),
            (AFFINITY, "nodeSelector g=b".to_string())
        );
        let p = pod(
            json!({"containers": [], "nodeSelector": {"g": "a"}, "tolerations": [
            {"operator": "Exists"}]}),
        );
        assert_eq!(refuses(&p, &n), None);
    }

    #[test]
    fn node_selectors_match_as_upstream() {
        let n = node(json!({"metadata": {"name": "n1", "labels": {"zone": "a", "size": "8"}}}));
        let sel = |terms: serde_json::Value| -> NodeSelector {
            serde_json::from_value(json!({"nodeSelectorTerms": terms})).unwrap()
        };
        let yes = [
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]),
            json!([{"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["4"]}]}]),
            json!([{"matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                   {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]),
        ];
        for terms in yes {
            assert!(selector_matches(&sel(terms.clone()), &n), "{terms}");
        }
        let no = [
            json!([{"matchExpressions": [{"key": "size", "operator": "Lt", "values": ["4"]}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
            json!([{}]),
            json!([]),
        ];
        for terms in no {
            assert!(!selector_matches(&sel(terms.clone()), &n), "{terms}");
        }
    }

    #[test]
    fn tolerations_match_as_the_scheduler_does() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let t = |v: serde_json::Value| -> Vec<Toleration> { serde_json::from_value(v).unwrap() };
        assert!(tolerated(&t(json!([{"key": "k", "value": "v"}])), &taint));
        assert!(tolerated(
            &t(json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}])),
            &taint
        ));
        assert!(!tolerated(&t(json!([{"key": "k", "value": "w"}])), &taint));
        assert!(!tolerated(
            &t(json!([{"key": "k", "operator": "Exists", "effect": "NoExecute"}])),
            &taint
        ));
    }
}
