//! The controller's part of sticky tenant binding
//! ([`dra_model::tenancy`]): each pass it reads the namespaces' tenant
//! labels, decides from the claims and node labels the pass already
//! listed, writes the binding labels on the Nodes, and then the
//! `tenant-bound` / `tenant-conflict` conditions on the claims' shares.
//!
//! Labels go first: a crash between the two leaves a label whose claim is
//! still unanswered, and the next pass answers it the same way. They are
//! applied per node under the field manager `<driver>/tenant-binding`
//! ([`super::labels`]), naming every binding label the node keeps. Conditions
//! are written by server-side apply under the field manager
//! `<driver>/tenant-binding` (the agent's `Ready` and network data on the
//! same entries are its own), naming the claim's UID so that a recreated
//! claim is not answered by mistake; a claim deallocated meanwhile is
//! refused by the API server (the entry must name an allocated device).

use std::collections::{BTreeMap, BTreeSet};

use dra_model::names::{self, CONDITION_TENANT_BOUND, CONDITION_TENANT_CONFLICT};
use dra_model::tenancy::{self, Answer, ClaimAnswer, LabelChange};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use super::labels::{apply_labels, tenant_manager};
use super::reconcile::{PassError, Reconciler, failed};
use dra_model::claim::ClaimRef;
use dra_model::claim::status_apply_body;

impl Reconciler {
    /// Binds sticky PFs to tenants; how many labels and claims it wrote.
    pub(super) async fn bind_tenants(
        &self,
        claims: &[ResourceClaim],
        node_labels: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<usize, PassError> {
        if !tenancy::in_use(claims, node_labels, &self.driver) {
            return Ok(0);
        }
        let tenants = self.namespace_tenants().await?;
        let tenant_of = |namespace: &str| {
            tenancy::tenant_identity(namespace, tenants.get(namespace).map(String::as_str))
        };
        let plan = tenancy::plan(claims, node_labels, &tenant_of, &self.driver);
        for violation in &plan.violations {
            tracing::error!(%violation, "tenants share a sticky PF");
        }
        let mut writes = 0;
        let mut unlabelled = Vec::new();
        let mut by_node: BTreeMap<&str, Vec<&LabelChange>> = BTreeMap::new();
        for change in &plan.labels {
            by_node.entry(&change.node).or_default().push(change);
        }
        for (node, changes) in by_node {
            let now = node_labels.get(node);
            match self.write_labels(node, now, &changes).await {
                Ok(()) => writes += changes.len(),
                Err(error) => {
                    tracing::warn!(%node, %error, "cannot write the tenant binding labels; trying again at the next pass");
                    unlabelled.push(node.to_string());
                }
            }
        }
        for answer in &plan.claims {
            // A binding whose label could not be written is not answered.
            let waits = answer
                .shares
                .iter()
                .any(|(share, a)| *a == Answer::Bound && unlabelled.contains(&share.pf.pool));
            if waits {
                continue;
            }
            match self.write_answer(answer).await {
                Ok(()) => writes += 1,
                Err(error) => {
                    tracing::warn!(claim = %answer.name, namespace = %answer.namespace, %error, "cannot answer the claim's tenant binding; trying again at the next pass")
                }
            }
        }
        Ok(writes)
    }

    /// The tenant label of each labelled namespace.
    async fn namespace_tenants(&self) -> Result<BTreeMap<String, String>, PassError> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let params = ListParams::default().labels(&self.tenant_label);
        let list = namespaces.list_metadata(&params).await;
        let list = list.map_err(failed("list namespaces"))?.items;
        let mut out = BTreeMap::new();
        for ns in list {
            let name = ns.metadata.name.unwrap_or_default();
            let Some(tenant) = ns
                .metadata
                .labels
                .and_then(|mut l| l.remove(&self.tenant_label))
            else {
                continue;
            };
            if !dra_model::validate::format::is_dns_label(&tenant) {
                tracing::warn!(namespace = %name, label = %self.tenant_label, value = %tenant, "tenant label is not a DNS label; the namespace is a tenant of its own");
            }
            out.insert(name, tenant);
        }
        Ok(out)
    }

    /// Applies `changes` to node `node`'s binding labels (`now`: all its
    /// labels as listed), as the tenant manager: the apply names every
    /// binding label the node keeps.
    async fn write_labels(
        &self,
        node: &str,
        now: Option<&BTreeMap<String, String>>,
        changes: &[&LabelChange],
    ) -> Result<(), kube::Error> {
        let prefix = names::qualified(&self.driver, names::LABEL_BOUND_TENANT_PREFIX);
        let mut want: BTreeMap<String, String> = (now.into_iter().flatten())
            .filter(|(key, _)| key.starts_with(&prefix))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let mut stale = BTreeSet::new();
        for change in changes {
            match &change.value {
                Some(value) => {
                    want.insert(change.key.clone(), value.clone());
                    stale.remove(&change.key);
                }
                None => {
                    want.remove(&change.key);
                    stale.insert(change.key.clone());
                }
            }
        }
        let manager = tenant_manager(&self.driver);
        let done = apply_labels(&self.nodes, node, &manager, &want, &stale).await;
        tracing::info!(%node, changes = ?changes, ok = done.is_ok(), "tenant binding labels");
        done
    }

    async fn write_answer(&self, answer: &ClaimAnswer) -> Result<(), kube::Error> {
        // Read the claim again right before writing: an answer made from
        // an older list (a replica that led before) is never changed.
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &answer.namespace);
        let fresh = api.get(&answer.name).await?;
        if fresh.metadata.uid.as_deref() != Some(&answer.uid) {
            return Ok(());
        }
        let now_answered = tenancy::answered(&fresh, &self.driver);
        let changes = answer.shares.iter().any(|(share, a)| {
            (now_answered.iter()).any(|(s, was)| s == share && was.as_ref().is_some_and(|w| w != a))
        });
        if changes {
            tracing::warn!(claim = %answer.name, namespace = %answer.namespace, "the claim was answered meanwhile; leaving it");
            return Ok(());
        }
        let claim = Some(&fresh);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let entries: Vec<AllocatedDeviceStatus> = (answer.shares.iter())
            .map(|(share, a)| {
                let (kind, reason, message) = match a {
                    Answer::Bound => (CONDITION_TENANT_BOUND, "TenantBound", String::new()),
                    Answer::Conflict(why) => {
                        (CONDITION_TENANT_CONFLICT, "TenantConflict", why.clone())
                    }
                };
                let kind = names::qualified(&self.driver, kind);
                let since = transition_time(claim, &self.driver, share, &kind)
                    .unwrap_or_else(|| now.clone());
                AllocatedDeviceStatus {
                    driver: self.driver.clone(),
                    pool: share.pf.pool.clone(),
                    device: share.pf.device.clone(),
                    share_id: share.share_id.clone(),
                    conditions: Some(vec![Condition {
                        type_: kind,
                        status: "True".into(),
                        reason: reason.into(),
                        message,
                        last_transition_time: since,
                        observed_generation: None,
                    }]),
                    ..AllocatedDeviceStatus::default()
                }
            })
            .collect();
        let claim_ref = ClaimRef {
            namespace: answer.namespace.clone(),
            uid: answer.uid.clone(),
            name: answer.name.clone(),
        };
        let manager = tenant_manager(&self.driver);
        api.patch_status(
            &answer.name,
            &PatchParams::apply(&manager).force(),
            &Patch::Apply(status_apply_body(&claim_ref, &entries)),
        )
        .await?;
        tracing::info!(claim = %answer.name, namespace = %answer.namespace, answers = ?answer.shares, "tenant binding answered");
        Ok(())
    }
}

/// When the condition `kind` of `share` last turned true, if it is already.
fn transition_time(
    claim: Option<&ResourceClaim>,
    driver: &str,
    share: &tenancy::Share,
    kind: &str,
) -> Option<Time> {
    let devices = claim?.status.as_ref()?.devices.as_ref()?;
    let entry = devices.iter().find(|d| {
        d.driver == driver
            && d.pool == share.pf.pool
            && d.device == share.pf.device
            && d.share_id == share.share_id
    })?;
    let condition = entry
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")?;
    Some(condition.last_transition_time.clone())
}
