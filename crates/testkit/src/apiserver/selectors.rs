//! Label and field selectors, parsed with the Kubernetes query syntax.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a,b)`, joined by commas. Field selectors: `path=v`, `path==v`,
//! `path!=v`; a missing field compares as the empty string, as upstream.

use serde_json::Value;

use super::resources::{ResourceType, lookup};

/// One requirement of a label selector.
#[derive(Debug, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<LabelRequirement>);

/// A parsed field selector; empty matches everything.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(key: &str, rest: &str) -> Result<(String, Vec<String>), String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("invalid label selector set for {key:?}: {rest:?}"))?;
    let values = inner.split(',').map(|v| v.trim().to_string()).collect();
    Ok((key.trim().to_string(), values))
}

fn parse_label_requirement(text: &str) -> Result<LabelRequirement, String> {
    if let Some(key) = text.strip_prefix('!') {
        return Ok(LabelRequirement::NotExists(key.trim().to_string()));
    }
    if let Some((key, rest)) = text.split_once(" notin ") {
        let (key, values) = parse_set(key, rest)?;
        return Ok(LabelRequirement::NotIn(key, values));
    }
    if let Some((key, rest)) = text.split_once(" in ") {
        let (key, values) = parse_set(key, rest)?;
        return Ok(LabelRequirement::In(key, values));
    }
    if let Some((key, value)) = text.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            key.trim().into(),
            value.trim().into(),
        ));
    }
    if let Some((key, value)) = text.split_once("==").or_else(|| text.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            key.trim().into(),
            value.trim().into(),
        ));
    }
    if text.contains(|c: char| c.is_whitespace() || "()".contains(c)) {
        return Err(format!("invalid label selector requirement {text:?}"));
    }
    Ok(LabelRequirement::Exists(text.to_string()))
}

impl LabelSelector {
    /// Parses the `labelSelector` query value.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        split_top_level(text)
            .into_iter()
            .map(parse_label_requirement)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether an object (its `metadata.labels`) satisfies every requirement.
    pub(super) fn matches(&self, object: &Value) -> bool {
        let labels = lookup(object, "metadata.labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::NotExists(k) => label(k).is_none(),
        })
    }
}

impl FieldSelector {
    /// Parses the `fieldSelector` query value, rejecting labels the type does not support.
    pub(super) fn parse(text: &str, rt: &ResourceType) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_top_level(text) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (p, true, v)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            let path = path.trim();
            if !rt.supports_field(path) {
                return Err(format!(
                    "field label not supported for {}: {path}",
                    rt.qualified_name()
                ));
            }
            terms.push((path.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether an object satisfies every term.
    pub(super) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, wanted)| {
            let actual = match lookup(object, path) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *wanted) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::by_plural;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    #[test]
    fn label_selector_supports_equality_and_set_forms() {
        let obj = labelled(json!({"app": "nic", "tier": "node"}));
        let yes = [
            "app=nic",
            "app==nic",
            "app",
            "!missing",
            "app in (gpu, nic)",
            "tier notin (x)",
        ];
        for text in yes {
            assert!(LabelSelector::parse(text).unwrap().matches(&obj), "{text}");
        }
        let no = [
            "app=gpu",
            "app!=nic",
            "missing",
            "!app",
            "app in (gpu)",
            "app notin (nic,x)",
        ];
        for text in no {
            assert!(!LabelSelector::parse(text).unwrap().matches(&obj), "{text}");
        }
        let both = LabelSelector::parse("app in (nic,gpu),tier=node").unwrap();
        assert!(both.matches(&obj));
    }

    #[test]
    fn field_selector_matches_nested_fields_and_missing_as_empty() {
        let rt = by_plural("resourceslices").unwrap();
        let obj = json!({"metadata": {"name": "s"}, "spec": {"driver": "d", "nodeName": "n1"}});
        let sel = FieldSelector::parse("spec.nodeName=n1,spec.driver==d", rt).unwrap();
        assert!(sel.matches(&obj));
        assert!(
            !FieldSelector::parse("spec.nodeName!=n1", rt)
                .unwrap()
                .matches(&obj)
        );
        let unset = json!({"metadata": {"name": "s"}, "spec": {"driver": "d"}});
        assert!(
            FieldSelector::parse("spec.nodeName=", rt)
                .unwrap()
                .matches(&unset)
        );
    }

    #[test]
    fn field_selector_rejects_unsupported_labels() {
        let rt = by_plural("resourceslices").unwrap();
        let err = FieldSelector::parse("spec.devices=x", rt).unwrap_err();
        assert!(err.contains("spec.devices"), "{err}");
        assert!(FieldSelector::parse("metadata.namespace=x", rt).is_err());
    }
}
