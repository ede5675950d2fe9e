//! One pass of the controller: read the node agents' slices (kept by the
//! slice watch, [`super::slice_index`]) and the Nodes, and make the partition label of every Node and the partition
//! slices say what those slices imply. Writes only what differs, so a
//! pass at rest writes nothing.
//!
//! Labels are written before slices: a node joining a partition matches
//! the partition slice's selector as soon as it carries the label.
//!
//! Only trusted, complete node pools are read
//! (`dra_model::partitions::pools`): a slice in a pool not named after its
//! node, or offered to several nodes outside the controller's pools, is
//! logged once and counted in [`Pass::untrusted`]; a node whose pool is
//! being rewritten counts as its last complete pool said, or, never seen
//! complete, not at all, its labels left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use dra_model::partitions::{self, Collision, Ignored, NodeFacts, POOL_PREFIX, Partition};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectList, PostParams, Preconditions};
use serde_json::{Value, json};

use super::slice_index::SliceIndex;
use ainic_dra_daemon::follow::Seen;
use dra_model::dropped::{self, GatedField};

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Partitions found, with their node counts.
    pub partitions: BTreeMap<String, usize>,
    /// Node labels set or removed.
    pub labels: usize,
    /// Slices created, updated or deleted.
    pub slices: usize,
    /// "Fits no partition" Events posted.
    pub events: usize,
    /// Tenant binding labels and claim answers written.
    pub tenant_writes: usize,
    /// Slices of the driver not read as a node's pool (untrusted shape).
    pub untrusted: usize,
    /// Nodes whose pool was half written and never seen complete: not
    /// counted, labels left alone.
    pub unknown: usize,
    /// Label values two fabric names make (the newcomer got none).
    pub collisions: usize,
}

/// The parts a pass works with.
pub(crate) struct Reconciler {
    /// ResourceSlices (cluster-scoped).
    pub slices: Api<ResourceSlice>,
    /// Nodes.
    pub nodes: Api<Node>,
    /// The driver name.
    pub driver: String,
    /// Publish partition devices for sharing (`DRAConsumableCapacity`);
    /// turned off for good when the server drops the fields.
    pub shared: bool,
    /// ResourceClaims (all namespaces), for how full each partition is.
    pub claims: Api<ResourceClaim>,
    /// For Events in the claims' namespaces.
    pub client: kube::Client,
    /// DeviceClass of partition claims.
    pub fabric_class: String,
    /// This replica's identity (the Events' reporting instance).
    pub identity: String,
    /// Claims (by UID) told they fit no partition, with what they were
    /// told: each is told once per message.
    pub reported: BTreeMap<String, String>,
    /// Namespace label naming a namespace's tenant (sticky tenant binding).
    pub tenant_label: String,
    /// Each node's facts from its last complete pool, for passes that
    /// find it half written.
    pub known: BTreeMap<String, NodeFacts>,
    /// Nodes told of a label collision, with what they were told.
    pub told: BTreeMap<String, String>,
    /// Untrusted slices already logged (logged again if they go and come).
    pub untrusted: BTreeSet<Ignored>,
    /// The driver's slices as the slice watch keeps them.
    pub index: Arc<Mutex<SliceIndex>>,
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action}: {source}")]
pub(crate) struct PassError {
    action: String,
    #[source]
    source: kube::Error,
}

pub(super) fn failed(action: impl Into<String>) -> impl FnOnce(kube::Error) -> PassError {
    let action = action.into();
    move |source| PassError { action, source }
}

/// Objects a list page holds at most. A pass holds one page of whole
/// objects at a time and keeps of each only what it reads: at 5,000 nodes
/// the whole slices of one list were most of the controller's memory.
const PAGE: u32 = 500;

/// Every object `list` returns for `params`, read [`PAGE`] at a time,
/// each turned into what is kept of it by `keep`, and the list's
/// resourceVersion. The pages are one snapshot (the server's continue
/// token); one that expired fails the list, and the pass is tried again.
async fn paged<K, T>(
    mut list: impl AsyncFnMut(&ListParams) -> kube::Result<ObjectList<K>>,
    params: ListParams,
    mut keep: impl FnMut(K) -> T,
) -> kube::Result<(Vec<T>, Option<String>)>
where
    K: Clone,
{
    let mut params = params.limit(PAGE);
    let mut out = Vec::new();
    let mut version = None;
    loop {
        let page = list(&params).await?;
        version = version.or(page.metadata.resource_version);
        out.extend(page.items.into_iter().map(&mut keep));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok((out, version)),
        }
    }
}

/// A slice's content for comparison: the spec without the generation.
fn content(slice: &ResourceSlice) -> Value {
    let mut spec = serde_json::to_value(&slice.spec).unwrap_or(Value::Null);
    spec["pool"]["generation"] = json!(0);
    spec
}

impl Reconciler {
    /// Runs one pass.
    pub(crate) async fn pass(&mut self) -> Result<Pass, PassError> {
        let all = self.driver_slices().await?;
        let (mut found, mut collisions, unknown) = self.read_pools(&all);
        let claims = paged(
            async |params| self.claims.list(params).await,
            ListParams::default(),
            |claim| claim,
        );
        let (claims, _) = claims.await.map_err(failed("list resource claims"))?;
        partitions::count_allocated(&mut found, &claims, &self.driver);
        let mut pass = Pass {
            partitions: (found.iter())
                .map(|(name, p)| (name.clone(), p.nodes.len()))
                .collect(),
            untrusted: self.untrusted.len(),
            unknown: unknown.len(),
            ..Pass::default()
        };
        // Metadata only: a cluster's full Node objects are large.
        let nodes = paged(
            async |params| self.nodes.list_metadata(params).await,
            ListParams::default(),
            |n| {
                (
                    n.metadata.name.unwrap_or_default(),
                    n.metadata.labels.unwrap_or_default(),
                )
            },
        );
        let node_labels: BTreeMap<String, BTreeMap<String, String>> = nodes
            .await
            .map_err(failed("list nodes"))?
            .0
            .into_iter()
            .collect();
        let wanted = partitions::node_fabric_labels(&found);
        collisions.extend(wanted.collisions);
        pass.collisions = collisions.len();
        // A node that could not be labelled is logged and tried again at the
        // next pass; the slices are written regardless.
        pass.labels = self
            .label_nodes(&node_labels, &wanted.nodes, &unknown)
            .await;
        let desired = partitions::partition_slices(&found, &self.driver, self.shared);
        let ours: Vec<ResourceSlice> = (all.into_iter())
            .filter(|s| s.spec.node_name.is_none() && s.spec.pool.name.starts_with(POOL_PREFIX))
            .collect();
        let slices = self.write_slices(&desired, &ours).await;
        pass.events = self.tell_unfit(&found, &claims).await;
        pass.events += self.tell_collisions(&collisions).await;
        // Pods wait on the tenant answers: a failed slice write must not
        // hold them back.
        pass.tenant_writes = self.bind_tenants(&claims, &node_labels).await?;
        pass.slices = slices?;
        Ok(pass)
    }

    /// The fabric views of the driver's slices: from the index when it is
    /// whole, else listed, the index made whole from the list.
    async fn driver_slices(&mut self) -> Result<Vec<ResourceSlice>, PassError> {
        if let Some(all) = self.index().snapshot() {
            return Ok(all);
        }
        let fields = format!("spec.driver={}", self.driver);
        let driver = self.driver.clone();
        let epoch = self.index().begin_list();
        let all = paged(
            async |params| self.slices.list(params).await,
            ListParams::default().fields(&fields),
            |slice| partitions::fabric_view(slice, &driver),
        );
        let (all, version) = all.await.map_err(failed("list resource slices"))?;
        self.index().replace(epoch, version.as_deref(), &all);
        Ok(all)
    }

    fn index(&self) -> std::sync::MutexGuard<'_, SliceIndex> {
        super::slice_index::lock(&self.index)
    }

    /// The partitions of the trusted node pools among `all` (a half
    /// written one as it last was), the label collisions, and the nodes
    /// of which nothing is known.
    fn read_pools(
        &mut self,
        all: &[ResourceSlice],
    ) -> (
        BTreeMap<String, Partition>,
        Vec<Collision>,
        BTreeSet<String>,
    ) {
        let pools = partitions::node_pools(all, &self.driver);
        let untrusted: BTreeSet<Ignored> = pools.ignored.iter().cloned().collect();
        for slice in untrusted.difference(&self.untrusted) {
            tracing::warn!(%slice, "resource slice ignored: not a pool a node agent may publish");
        }
        self.untrusted = untrusted;
        for (node, (present, announced)) in &pools.incomplete {
            tracing::debug!(%node, present, announced, "node pool half written; using what it last said");
        }
        let fresh = partitions::node_facts(&pools, &self.driver);
        let (facts, unknown) = super::labels::remembered(fresh, &pools.incomplete, &self.known);
        let held = partitions::held_labels(all, &self.driver);
        let (found, collisions) = partitions::from_facts(&facts, &held);
        self.known = facts;
        (found, collisions, unknown)
    }

    /// Posts a Warning Event on each unallocated partition claim that no
    /// partition has room for, once per claim and message; how many.
    async fn tell_unfit(
        &mut self,
        found: &BTreeMap<String, partitions::Partition>,
        claims: &[ResourceClaim],
    ) -> usize {
        let mut still = BTreeMap::new();
        let mut posted = 0;
        for claim in claims {
            let Some(why) = partitions::why_no_partition_fits(found, claim, &self.fabric_class)
            else {
                continue;
            };
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            if self.reported.get(&uid) != Some(&why) {
                match self.post_claim_event(claim, &why).await {
                    Ok(()) => posted += 1,
                    Err(error) => {
                        tracing::warn!(claim = ?claim.metadata.name, %error, "cannot post the event; trying again at the next pass");
                        continue;
                    }
                }
            }
            still.insert(uid, why);
        }
        // Claims allocated or gone since are forgotten: told again if
        // they come back to it.
        self.reported = still;
        posted
    }

    async fn post_claim_event(&self, claim: &ResourceClaim, why: &str) -> Result<(), kube::Error> {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let regarding = ObjectReference {
            api_version: Some("resource.k8s.io/v1".into()),
            kind: Some("ResourceClaim".into()),
            name: claim.metadata.name.clone(),
            namespace: Some(namespace.clone()),
            uid: claim.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let event = ("Allocate", "NoFabricPartitionFits", why);
        self.post_event(regarding, &namespace, event).await?;
        tracing::info!(claim = ?claim.metadata.name, %namespace, why, "claim fits no fabric partition");
        Ok(())
    }

    /// Posts a Warning Event (action, reason, note) about `regarding` in
    /// `namespace`.
    pub(super) async fn post_event(
        &self,
        regarding: ObjectReference,
        namespace: &str,
        (action, reason, note): (&str, &str, &str),
    ) -> Result<(), kube::Error> {
        let name = regarding.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(note.to_string()),
            type_: Some("Warning".into()),
            reporting_controller: Some(format!("{}/controller", self.driver)),
            reporting_instance: Some(self.identity.clone()),
            regarding: Some(regarding),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        events.create(&PostParams::default(), &event).await?;
        Ok(())
    }

    /// Makes the controller's slices equal `desired`; how many writes.
    async fn write_slices(
        &mut self,
        desired: &[ResourceSlice],
        existing: &[ResourceSlice],
    ) -> Result<usize, PassError> {
        let mut writes = 0;
        let names: BTreeSet<&str> = desired
            .iter()
            .filter_map(|s| s.metadata.name.as_deref())
            .collect();
        for want in desired {
            let name = want.metadata.name.clone().unwrap_or_default();
            let old = existing
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(&name));
            if old.is_some_and(|old| content(old) == content(want)) {
                continue;
            }
            let mut slice = want.clone();
            let stored = match old {
                Some(old) => {
                    slice.spec.pool.generation = old.spec.pool.generation + 1;
                    slice.metadata.resource_version = old.metadata.resource_version.clone();
                    let done = self
                        .slices
                        .replace(&name, &PostParams::default(), &slice)
                        .await;
                    done.map_err(|e| self.stale(e))
                        .map_err(failed(format!("update resource slice {name}")))?
                }
                None => {
                    slice.spec.pool.generation = 1;
                    let done = self.slices.create(&PostParams::default(), &slice).await;
                    done.map_err(|e| self.stale(e))
                        .map_err(failed(format!("create resource slice {name}")))?
                }
            };
            self.learn(&slice, &stored);
            self.index().apply(Seen::Applied(stored));
            tracing::info!(slice = %name, "partition slice published");
            writes += 1;
        }
        for old in existing {
            let name = old.metadata.name.clone().unwrap_or_default();
            if names.contains(name.as_str()) {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: old.metadata.uid.clone(),
                    resource_version: old.metadata.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.slices.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    let e = self.stale(e);
                    return Err(failed(format!("delete resource slice {name}"))(e));
                }
            }
            self.index().deleted_here(old);
            tracing::info!(slice = %name, "slice of a partition that is gone deleted");
            writes += 1;
        }
        Ok(writes)
    }

    /// Passes `error` on; one that says the slice was not as the index
    /// held it (a conflict, or gone) makes the next pass list.
    fn stale(&self, error: kube::Error) -> kube::Error {
        if let kube::Error::Api(status) = &error
            && matches!(status.code, 404 | 409)
        {
            self.index().forget();
        }
        error
    }

    /// A server that drops the sharing fields (consumable capacity off)
    /// gets exclusive partition devices from now on, instead of a rewrite
    /// on every pass.
    fn learn(&mut self, sent: &ResourceSlice, stored: &ResourceSlice) {
        let back = dropped::read_back(sent, stored);
        if self.shared && back.dropped.contains(&GatedField::AllowMultipleAllocations) {
            tracing::warn!(
                "the API server drops allowMultipleAllocations (DRAConsumableCapacity is off there): one claim takes a whole partition"
            );
            self.shared = false;
        }
    }
}
