//! The controller's writes to Nodes: its own labels only, by server-side
//! apply under a field manager of its own (`<driver>/fabric-labels` for
//! the fabric levels, `<driver>/tenant-binding` for sticky tenants), so a
//! write names nothing but those keys and the API server records them as
//! the controller's. The chart's admission policy refuses any other
//! change of a Node by the controller's service account.
//!
//! An apply that leaves out a key removes it only if no other manager
//! owns it too. A label an earlier controller set by merge patch (or a
//! person set) is therefore removed by a second, one-key merge patch when
//! the apply left it.
//!
//! Two fabric names that make one label value are not renamed: the
//! nodes of the refused name get a Warning Event
//! (`FabricLabelCollision`) saying so, once per node and message.

use std::collections::{BTreeMap, BTreeSet};

use dra_model::partitions::{Collision, NodeFacts};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::reconcile::Reconciler;

/// Node label writes in flight at once: one fewer than the API client
/// lets through, so that a Lease renewal never queues behind them.
const LABELS_IN_FLIGHT: usize = ainic_dra_daemon::client::API_REQUESTS_IN_FLIGHT - 1;

/// The field manager of the fabric labels.
pub(crate) fn fabric_manager(driver: &str) -> String {
    format!("{driver}/fabric-labels")
}

/// The field manager of the sticky tenants' binding labels (and answers).
pub(crate) fn tenant_manager(driver: &str) -> String {
    format!("{driver}/tenant-binding")
}

/// Makes Node `name` carry `want` as `manager`'s labels, and none of
/// `stale` (keys of the same manager that must go).
pub(super) async fn apply_labels(
    nodes: &Api<Node>,
    name: &str,
    manager: &str,
    want: &BTreeMap<String, String>,
    stale: &BTreeSet<String>,
) -> Result<(), kube::Error> {
    let body = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": want}});
    let params = PatchParams::apply(manager).force();
    let stored = nodes.patch(name, &params, &Patch::Apply(&body)).await?;
    let labels = stored.metadata.labels.unwrap_or_default();
    let left: serde_json::Map<String, Value> = (stale.iter())
        .filter(|key| labels.contains_key(*key))
        .map(|key| (key.clone(), Value::Null))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    tracing::info!(node = %name, keys = ?left.keys().collect::<Vec<_>>(), "removing labels another manager also set");
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    let patch = json!({"metadata": {"labels": left}});
    nodes.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(())
}

/// `fresh` facts (complete pools) plus, for each node whose pool is
/// being rewritten (`incomplete`), what its last complete pool said
/// (`known`); and the nodes of which nothing is known: they are counted
/// nowhere and their labels are left as they are.
pub(crate) fn remembered(
    mut fresh: BTreeMap<String, NodeFacts>,
    incomplete: &BTreeMap<String, (usize, i64)>,
    known: &BTreeMap<String, NodeFacts>,
) -> (BTreeMap<String, NodeFacts>, BTreeSet<String>) {
    let mut unknown = BTreeSet::new();
    for node in incomplete.keys() {
        match known.get(node) {
            Some(facts) => {
                fresh.insert(node.clone(), facts.clone());
            }
            None => {
                unknown.insert(node.clone());
            }
        }
    }
    (fresh, unknown)
}

impl Reconciler {
    /// Sets the labels of [`dra_model::partitions::NODE_LABELS`] as
    /// `wanted` says on every node but the `unknown` ones; how many nodes
    /// changed.
    pub(super) async fn label_nodes(
        &self,
        nodes: &BTreeMap<String, BTreeMap<String, String>>,
        wanted: &BTreeMap<String, BTreeMap<&'static str, String>>,
        unknown: &BTreeSet<String>,
    ) -> usize {
        let none = BTreeMap::new();
        let manager = fabric_manager(&self.driver);
        let keys = dra_model::partitions::NODE_LABELS;
        let mut writes = Vec::new();
        for (name, labels) in nodes.iter().filter(|(n, _)| !unknown.contains(*n)) {
            let want = wanted.get(name).unwrap_or(&none);
            if keys.iter().all(|key| labels.get(*key) == want.get(key)) {
                continue;
            }
            let stale: BTreeSet<String> = (keys.iter())
                .filter(|key| labels.contains_key(**key) && !want.contains_key(**key))
                .map(|key| key.to_string())
                .collect();
            let want: BTreeMap<String, String> = (want.iter())
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            writes.push((name, want, stale));
        }
        // Each node is its own request; the first pass of a large cluster
        // labels thousands, one after another ran past the pass's time.
        // Each write is logged as it lands: a pass stopped midway (its
        // leadership ended) still says which nodes it labelled.
        futures::stream::iter(writes)
            .map(|(name, want, stale)| {
                let manager = &manager;
                async move {
                    match apply_labels(&self.nodes, name, manager, &want, &stale).await {
                        Ok(()) => {
                            tracing::info!(node = %name, labels = ?want, "node fabric labels set");
                            1
                        }
                        // Deleted since the list: nothing to label.
                        Err(kube::Error::Api(s)) if s.code == 404 => 0,
                        Err(error) => {
                            tracing::warn!(node = %name, %error, "cannot label the node; trying again at the next pass");
                            0
                        }
                    }
                }
            })
            .buffer_unordered(LABELS_IN_FLIGHT)
            .fold(0, async |changed, one| changed + one)
            .await
    }

    /// Posts a Warning Event on each node of a refused name of
    /// `collisions`, once per node and message; how many.
    pub(super) async fn tell_collisions(&mut self, collisions: &[Collision]) -> usize {
        let mut still = BTreeMap::new();
        let mut posted = 0;
        for collision in collisions {
            let why = collision.message();
            for node in &collision.nodes {
                tracing::warn!(%node, value = %collision.value, kept = %collision.kept, refused = %collision.refused, "fabric label collision");
                if self.told.get(node) != Some(&why) {
                    let regarding = ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(node.clone()),
                        ..ObjectReference::default()
                    };
                    let event = ("Label", "FabricLabelCollision", why.as_str());
                    match self.post_event(regarding, "default", event).await {
                        Ok(()) => posted += 1,
                        Err(error) => {
                            tracing::warn!(%node, %error, "cannot post the event; trying again at the next pass");
                            continue;
                        }
                    }
                }
                still.insert(node.clone(), why.clone());
            }
        }
        self.told = still;
        posted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dra_model::partitions::FabricFacts;

    #[test]
    fn a_pool_being_rewritten_counts_as_it_last_was_and_an_unseen_one_not_at_all() {
        let facts = |fabric: &str| NodeFacts::from([(fabric.to_string(), FabricFacts::default())]);
        let fresh = BTreeMap::from([("n1".to_string(), facts("pod-a"))]);
        let incomplete = BTreeMap::from([("n2".to_string(), (1, 2)), ("n3".to_string(), (1, 3))]);
        let known = BTreeMap::from([
            ("n1".to_string(), facts("old")),
            ("n2".to_string(), facts("pod-b")),
        ]);
        let (all, unknown) = remembered(fresh, &incomplete, &known);
        assert_eq!(all["n1"], facts("pod-a"), "complete: what it says now");
        assert_eq!(all["n2"], facts("pod-b"), "half written: as it last was");
        assert!(!all.contains_key("n3"));
        assert_eq!(unknown, BTreeSet::from(["n3".to_string()]));
    }
}
