//! One sync pass: list this node's slices, plan, write.
//!
//! Besides the plain content comparison, the pass remembers what the API
//! server stored the last time it published. A server with a feature gate
//! off drops that feature's fields from stored slices (upstream behaviour);
//! without the memory every resync would find a difference and rewrite the
//! whole pool forever. With it, a pool that still looks exactly as the server
//! stored it for the same desired slices needs no write.

use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use tracing::{debug, info, warn};

use super::backoff;
use super::metrics::WriteOp;
use super::plan::{self, SliceWrites, Write};
use super::{PublishError, PublishOutcome, SlicePublisher};
use dra_model::dropped::{self, ReadBack};

/// The last successful publish: what was asked for, what the server stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct LastPublished {
    asked: Vec<plan::Content>,
    stored: Vec<plan::Content>,
}

impl SlicePublisher {
    fn api_error(&self, action: &'static str) -> impl FnOnce(kube::Error) -> PublishError + '_ {
        move |source| PublishError::Api {
            action,
            node: self.config.node_name.clone(),
            source,
        }
    }

    async fn list_existing(&self) -> Result<Vec<ResourceSlice>, PublishError> {
        let (node, driver) = (&self.config.node_name, &self.config.driver_name);
        let fields = format!("spec.nodeName={node},spec.driver={driver}");
        let list = self
            .slices
            .list(&ListParams::default().fields(&fields))
            .await;
        Ok(list.map_err(self.api_error("list"))?.items)
    }

    /// The owner reference to our Node; `uid` empty when not looked up.
    fn owner(&self, uid: String) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.config.node_name.clone(),
            uid,
            controller: Some(true),
            ..Default::default()
        }
    }

    /// The Node's uid, read fresh for every publish that writes (a node
    /// deleted and re-created gets a new uid).
    async fn node_uid(&self) -> Result<String, PublishError> {
        match self.nodes.get(&self.config.node_name).await {
            Ok(node) => Ok(node.metadata.uid.unwrap_or_default()),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(PublishError::NodeNotFound {
                    node: self.config.node_name.clone(),
                })
            }
            Err(source) => Err(self.api_error("get node")(source)),
        }
    }

    /// Whether `existing` is exactly what the server stored when we last
    /// published the same desired slices.
    fn as_stored_last_time(&self, existing: &[ResourceSlice], asked: &[plan::Content]) -> bool {
        self.last
            .as_ref()
            .is_some_and(|last| last.asked == asked && plan::holds(existing, &last.stored))
    }

    fn remember(&mut self, asked: Vec<plan::Content>, stored: &[ResourceSlice]) {
        let stored = plan::contents(stored);
        if stored != asked {
            warn!(
                "the API server changed the resource slices it stored (fields of a disabled feature dropped?); \
                 they are not rewritten until the desired slices change"
            );
        }
        self.last = Some(LastPublished { asked, stored });
    }

    /// Takes note of what the server did with the gated fields it was
    /// sent; a field dropped for the first time is logged, counted and its
    /// gate refused. Returns whether any was.
    fn learn(&mut self, backs: &[ReadBack]) -> bool {
        let mut refused = false;
        for back in backs {
            self.fields.kept.extend(&back.kept);
            for &field in &back.dropped {
                if !self.fields.dropped.insert(field) {
                    continue;
                }
                let gate = field.gate();
                warn!(
                    field = field.path(),
                    gate = gate.name(),
                    "the API server drops {field} from resource slices (feature gate {gate} is off there); publishing without {gate} from now on"
                );
                self.metrics.count_dropped(field.path(), gate.name());
                self.fields.refused.add(gate);
                refused = true;
            }
        }
        refused
    }

    /// Dry-run creates each desired slice carrying a gated field the
    /// server has not yet been seen to keep or drop, and learns from what
    /// it would store. Returns whether a gate was refused (nothing is
    /// written then: the caller builds again without it).
    async fn probe(&mut self, desired: &[ResourceSlice]) -> Result<bool, PublishError> {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let mut backs = Vec::new();
        for slice in desired {
            if self.fields.no_probes {
                break;
            }
            let known = |f: &dropped::GatedField| {
                self.fields.kept.contains(f) || self.fields.dropped.contains(f)
            };
            if dropped::carried(slice).iter().all(known) {
                continue;
            }
            let mut probe = slice.clone();
            probe.metadata = ObjectMeta {
                generate_name: Some(format!(
                    "{}-{}-probe-",
                    self.config.node_name, self.config.driver_name
                )),
                ..ObjectMeta::default()
            };
            let stored = match self.slices.create(&params, &probe).await {
                Ok(stored) => stored,
                // Invalid content fails the real write the same way.
                Err(kube::Error::Api(status)) if status.code == 422 => {
                    return Err(self.api_error("dry-run create")(kube::Error::Api(status)));
                }
                Err(error) if backoff::is_retryable(&error) => {
                    return Err(self.api_error("dry-run create")(error));
                }
                Err(error) => {
                    warn!(%error, "dry-run creates of resource slices fail; publishing without them (what the server drops is found in what it stores)");
                    self.fields.no_probes = true;
                    break;
                }
            };
            backs.push(dropped::read_back(&probe, &stored));
        }
        Ok(self.learn(&backs))
    }

    /// One list-compare-write pass.
    pub(super) async fn sync_once(
        &mut self,
        desired: &[ResourceSlice],
    ) -> Result<PublishOutcome, PublishError> {
        let existing = self.list_existing().await?;
        let unchanged = |generation| PublishOutcome {
            changed: false,
            generation,
            created: 0,
            updated: 0,
            deleted: 0,
            attempts: 0,
            refused: false,
        };
        // Compare without the node uid first: no read of the Node when nothing changed.
        let probe = self.owner(String::new());
        if let SliceWrites::Unchanged { generation } = plan::plan(&existing, desired, &probe) {
            debug!(
                generation,
                slices = existing.len(),
                "resource slices up to date"
            );
            return Ok(unchanged(generation));
        }
        let asked = plan::wanted_contents(desired, &probe);
        if self.as_stored_last_time(&existing, &asked) {
            debug!("resource slices as the API server stored them last time; nothing to write");
            return Ok(unchanged(plan::max_generation(&existing)));
        }
        if self.probe(desired).await? {
            return Ok(PublishOutcome {
                refused: true,
                ..unchanged(plan::max_generation(&existing))
            });
        }
        let owner = self.owner(self.node_uid().await?);
        let SliceWrites::Publish { generation, writes } = plan::plan(&existing, desired, &owner)
        else {
            return Ok(unchanged(plan::max_generation(&existing)));
        };
        let mut outcome = PublishOutcome {
            changed: true,
            generation,
            ..unchanged(generation)
        };
        let mut stored = Vec::with_capacity(desired.len());
        let mut backs = Vec::with_capacity(desired.len());
        for write in writes {
            if let Some((object, back)) = self.apply(write, &mut outcome).await? {
                stored.push(object);
                backs.push(back);
            }
        }
        outcome.refused = self.learn(&backs);
        let (created, updated, deleted) = (outcome.created, outcome.updated, outcome.deleted);
        info!(
            generation,
            created, updated, deleted, "published resource slices"
        );
        self.remember(asked, &stored);
        Ok(outcome)
    }

    /// Performs one write; returns the object the server stored, if any,
    /// with what it did to the gated fields sent.
    async fn apply(
        &self,
        write: Write,
        outcome: &mut PublishOutcome,
    ) -> Result<Option<(ResourceSlice, ReadBack)>, PublishError> {
        let params = PostParams::default();
        match write {
            Write::Create(mut slice) => {
                if slice.metadata.name.is_none() && slice.metadata.generate_name.is_none() {
                    let prefix = format!("{}-{}-", self.config.node_name, self.config.driver_name);
                    slice.metadata.generate_name = Some(prefix);
                }
                let created = self
                    .slices
                    .create(&params, &slice)
                    .await
                    .map_err(self.api_error("create"))?;
                debug!(
                    slice = created.metadata.name.as_deref(),
                    "created resource slice"
                );
                self.metrics.count_write(WriteOp::Create);
                outcome.created += 1;
                let back = dropped::read_back(&slice, &created);
                Ok(Some((created, back)))
            }
            Write::Update(slice) => {
                let name = slice.metadata.name.clone().unwrap_or_default();
                let replaced = self.slices.replace(&name, &params, &slice).await;
                let updated = replaced.map_err(self.api_error("update"))?;
                debug!(slice = %name, "updated resource slice");
                self.metrics.count_write(WriteOp::Update);
                outcome.updated += 1;
                let back = dropped::read_back(&slice, &updated);
                Ok(Some((updated, back)))
            }
            Write::Delete(slice) => {
                let name = slice.metadata.name.clone().unwrap_or_default();
                let preconditions = Preconditions {
                    uid: slice.metadata.uid,
                    resource_version: slice.metadata.resource_version,
                };
                let params = DeleteParams {
                    preconditions: Some(preconditions),
                    ..Default::default()
                };
                match self.slices.delete(&name, &params).await {
                    Ok(_) => debug!(slice = %name, "deleted stale resource slice"),
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        debug!(slice = %name, "stale resource slice already gone")
                    }
                    Err(source) => return Err(self.api_error("delete")(source)),
                }
                self.metrics.count_write(WriteOp::Delete);
                outcome.deleted += 1;
                Ok(None)
            }
        }
    }
}
