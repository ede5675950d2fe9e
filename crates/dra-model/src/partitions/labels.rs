//! Label values of fabric names (partitions, rail groups, leaf switches),
//! derived from each name alone so that a new name never renames another.
//!
//! The mapping ([`label_value`]): a name that is a DNS label (1 to 63 of
//! `a-z`, `0-9`, `-`, alphanumeric at both ends) is its own value; any
//! other name becomes its lower-cased form with every other character
//! turned into `-`, trimmed of `-` and cut to 46 characters, then `-` and
//! 16 hex digits of the name's 64-bit FNV-1a hash (the hash alone when
//! nothing is left). `pod-a` stays `pod-a`; `Pod_A` is
//! `pod-a-<hash of "Pod_A">`, never `pod-a`.
//!
//! Two names can still make one value (a name spelt like another's hashed
//! form, or a hash collision). Then the name that already holds the value
//! keeps it (for partitions: the one the controller's slice names), else
//! the first by name; the other gets no value, and the caller reports a
//! [`Collision`] (the controller posts an Event) instead of renaming
//! anything.

use std::collections::{BTreeMap, BTreeSet};

use crate::names::fnv1a;
use crate::validate::format;

/// Longest cleaned part before the hash (63 = 46 + `-` + 16).
const CLEAN_MAX: usize = 46;

/// The label value of fabric name `name` (see the module docs).
pub fn label_value(name: &str) -> String {
    if format::is_dns_label(name) {
        return name.to_string();
    }
    let mut clean: String = (name.chars())
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    clean.truncate(CLEAN_MAX);
    let clean = clean.trim_matches('-');
    let hash = format!("{:016x}", fnv1a(name.as_bytes()));
    if clean.is_empty() {
        hash
    } else {
        format!("{clean}-{hash}")
    }
}

/// Two fabric names that make one label value: the first keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collision {
    /// The node label whose value they share.
    pub key: &'static str,
    /// The value.
    pub value: String,
    /// The name that keeps it.
    pub kept: String,
    /// The name that gets none.
    pub refused: String,
    /// The nodes of the refused name: they carry no `key` label.
    pub nodes: BTreeSet<String>,
}

impl Collision {
    /// What an operator is told, on each of [`Collision::nodes`].
    pub fn message(&self) -> String {
        format!(
            "fabric names {:?} and {:?} both make the value {} of node label {}: {:?} keeps it, \
             and the nodes of {:?} get no {} label (nor, for a partition, a partition device) \
             until one of the two is renamed",
            self.kept, self.refused, self.value, self.key, self.kept, self.refused, self.key
        )
    }
}

/// The value of each of `names` (name → its nodes) for node label `key`,
/// and the collisions; `held` (value → name) says who holds a value now.
pub(crate) fn assign(
    key: &'static str,
    names: &BTreeMap<String, BTreeSet<String>>,
    held: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<Collision>) {
    let mut by_value: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for name in names.keys() {
        by_value.entry(label_value(name)).or_default().push(name);
    }
    let mut values = BTreeMap::new();
    let mut collisions = Vec::new();
    for (value, candidates) in by_value {
        let holder = held.get(&value).map(String::as_str);
        let kept = holder
            .filter(|h| candidates.contains(h))
            .unwrap_or(candidates[0]);
        for name in candidates.into_iter().filter(|n| *n != kept) {
            collisions.push(Collision {
                key,
                value: value.clone(),
                kept: kept.to_string(),
                refused: name.to_string(),
                nodes: names[name].clone(),
            });
        }
        values.insert(kept.to_string(), value);
    }
    (values, collisions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_label_is_its_own_value_and_anything_else_is_hashed() {
        assert_eq!(label_value("pod-a"), "pod-a");
        let odd = label_value("Pod_A");
        assert!(odd.starts_with("pod-a-") && odd.len() == 6 + 16, "{odd}");
        assert_ne!(label_value("Pod_A"), label_value("pod_a"));
        assert_ne!(label_value("Rack 7 / East"), label_value("rack-7---east"));
        assert!(format::is_dns_label(&label_value("__")));
        assert_eq!(label_value("__").len(), 16, "nothing left: the hash");
        let long = "X".repeat(200);
        assert!(format::is_dns_label(&label_value(&long)));
        assert_eq!(label_value(&long).len(), 63);
        assert!(format::is_dns_label(&label_value("Zürich-1")));
    }

    fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (name, node) in pairs {
            out.entry(name.to_string())
                .or_default()
                .insert(node.to_string());
        }
        out
    }

    #[test]
    fn a_collision_keeps_the_holder_and_refuses_the_other() {
        let hashed = label_value("POD-A");
        // A name spelt like another's hashed value: the same value.
        let all = names(&[("POD-A", "n1"), (&hashed, "n2")]);
        let (values, collisions) = assign("k", &all, &BTreeMap::new());
        assert_eq!(values.len(), 1);
        assert_eq!(values["POD-A"], hashed, "the first by name");
        assert_eq!(collisions.len(), 1);
        assert_eq!(collisions[0].refused, hashed);
        assert_eq!(collisions[0].nodes, BTreeSet::from(["n2".to_string()]));
        assert!(collisions[0].message().contains("get no k label"));
        // The holder keeps it, whatever the order of names.
        let held = BTreeMap::from([(hashed.clone(), hashed.clone())]);
        let (values, collisions) = assign("k", &all, &held);
        assert_eq!(values[&hashed], hashed);
        assert!(!values.contains_key("POD-A"));
        assert_eq!(collisions[0].refused, "POD-A");
    }
}
