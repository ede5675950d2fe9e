//! The ResourceSlice publisher: makes the API server hold exactly this
//! node's desired pool of slices for our driver.
//!
//! A sync lists the slices of this driver on this node (field selector
//! `spec.nodeName`, `spec.driver`), compares them with the desired slices by
//! content ([`plan`]), and writes nothing when they match. Otherwise it bumps
//! the pool generation above every existing one, writes all desired slices at
//! that generation (owned by the Node object, so they go when the node goes),
//! and only then deletes leftovers. Conflicts, throttling, 5xx and transport
//! errors restart the sync after a capped exponential backoff; the restarted
//! sync re-lists, so partial progress is never lost or duplicated.
//!
//! The publisher does not build slices: the caller passes them in (from
//! `dra-model`). [`run`] re-publishes on periodic rescans and link events.

mod backoff;
mod metrics;
mod plan;
mod run;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tracing::{Instrument, debug, info, info_span, warn};

pub use backoff::{Backoff, Sleeper, TokioSleeper};
pub use metrics::{PublisherMetrics, SyncResult, WriteOp};
pub use plan::{Plan, Write};
pub use run::{LinkEvent, RunOptions, run};

/// Errors of one publish.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A desired slice is not part of this node's pool for our driver.
    #[error("desired slice {slice:?} does not belong to driver {driver} on node {node}")]
    ForeignSlice {
        /// The slice's name (may be empty).
        slice: String,
        /// Our driver.
        driver: String,
        /// Our node.
        node: String,
    },
    /// The Node object is missing; slices need it as their owner.
    #[error("node {node} not found: cannot own its resource slices")]
    NodeNotFound {
        /// The node name.
        node: String,
    },
    /// An API call failed.
    #[error("failed to {action} resource slices of node {node}: {source}")]
    Api {
        /// What was being done (`list`, `create`, `update`, `delete`, `get node`).
        action: &'static str,
        /// The node name.
        node: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Retryable failures went on for every allowed attempt.
    #[error("gave up publishing resource slices after {attempts} attempts: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        #[source]
        last: Box<PublishError>,
    },
}

impl PublishError {
    fn is_retryable(&self) -> bool {
        matches!(self, PublishError::Api { source, .. } if backoff::is_retryable(source))
    }
}

/// Who and what to publish for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// This node's name (pool name and owner).
    pub node_name: String,
    /// Our DRA driver name (`spec.driver`).
    pub driver_name: String,
    /// Retry policy for transient API errors.
    pub backoff: Backoff,
}

/// The result of a successful publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    /// Whether anything was written.
    pub changed: bool,
    /// The pool generation the API now holds.
    pub generation: i64,
    /// Slices created, updated and deleted by the successful attempt.
    pub created: usize,
    /// See `created`.
    pub updated: usize,
    /// See `created`.
    pub deleted: usize,
    /// Attempts it took (1 = no retry).
    pub attempts: u32,
}

/// Publishes one node's ResourceSlices.
pub struct SlicePublisher {
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    config: PublisherConfig,
    sleeper: Arc<dyn Sleeper>,
    metrics: PublisherMetrics,
}

impl SlicePublisher {
    /// A publisher using `client`, real sleeps and fresh metrics.
    pub fn new(client: kube::Client, config: PublisherConfig) -> Self {
        Self {
            slices: Api::all(client.clone()),
            nodes: Api::all(client),
            config,
            sleeper: Arc::new(TokioSleeper),
            metrics: PublisherMetrics::default(),
        }
    }

    /// Uses `sleeper` for backoff waits (tests: one that only records).
    pub fn with_sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Counts into `metrics` (e.g. ones registered with the agent's registry).
    pub fn with_metrics(mut self, metrics: PublisherMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The publisher's metrics.
    pub fn metrics(&self) -> &PublisherMetrics {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// Makes the API hold exactly `desired` (all of one pool of this node),
    /// retrying transient failures. An empty `desired` removes the pool.
    pub async fn publish(
        &mut self,
        desired: &[ResourceSlice],
    ) -> Result<PublishOutcome, PublishError> {
        self.check_desired(desired)?;
        let span = info_span!("publish_slices", node = %self.config.node_name, driver = %self.config.driver_name);
        self.publish_with_retries(desired).instrument(span).await
    }

    async fn publish_with_retries(
        &mut self,
        desired: &[ResourceSlice],
    ) -> Result<PublishOutcome, PublishError> {
        let policy = self.config.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.sync_once(desired).await {
                Ok(outcome) => {
                    let result = if outcome.changed {
                        SyncResult::Published
                    } else {
                        SyncResult::Unchanged
                    };
                    self.metrics.count_sync(result);
                    self.metrics.set_generation(outcome.generation);
                    return Ok(PublishOutcome {
                        attempts: attempt,
                        ..outcome
                    });
                }
                Err(error) => error,
            };
            if !error.is_retryable() {
                self.metrics.count_sync(SyncResult::Failed);
                return Err(error);
            }
            if attempt >= policy.attempts.max(1) {
                self.metrics.count_sync(SyncResult::Failed);
                return Err(PublishError::GaveUp {
                    attempts: attempt,
                    last: Box::new(error),
                });
            }
            let delay = policy.delay(attempt);
            warn!(%error, attempt, delay_ms = delay.as_millis() as u64, "publishing slices failed, retrying");
            self.metrics.count_retry();
            self.sleeper.sleep(delay).await;
        }
    }

    fn check_desired(&self, desired: &[ResourceSlice]) -> Result<(), PublishError> {
        let node = Some(&self.config.node_name);
        let pool = desired.first().map(|s| &s.spec.pool.name);
        let foreign = desired.iter().find(|s| {
            s.spec.driver != self.config.driver_name
                || s.spec.node_name.as_ref() != node
                || Some(&s.spec.pool.name) != pool
        });
        match foreign {
            Some(s) => Err(PublishError::ForeignSlice {
                slice: s.metadata.name.clone().unwrap_or_default(),
                driver: self.config.driver_name.clone(),
                node: self.config.node_name.clone(),
            }),
            None => Ok(()),
        }
    }

    fn api_error(&self, action: &'static str) -> impl FnOnce(kube::Error) -> PublishError + '_ {
        move |source| PublishError::Api {
            action,
            node: self.config.node_name.clone(),
            source,
        }
    }

    async fn list_existing(&self) -> Result<Vec<ResourceSlice>, PublishError> {
        let fields = format!(
            "spec.nodeName={},spec.driver={}",
            self.config.node_name, self.config.driver_name
        );
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

    /// One list-compare-write pass.
    async fn sync_once(&self, desired: &[ResourceSlice]) -> Result<PublishOutcome, PublishError> {
        let existing = self.list_existing().await?;
        let mut outcome = PublishOutcome {
            changed: false,
            generation: 0,
            created: 0,
            updated: 0,
            deleted: 0,
            attempts: 0,
        };
        // Compare first without the node uid: no read of the Node when nothing changed.
        let (generation, writes) = match plan::plan(&existing, desired, &self.owner(String::new()))
        {
            Plan::Unchanged { generation } => {
                debug!(
                    generation,
                    slices = existing.len(),
                    "resource slices up to date"
                );
                return Ok(PublishOutcome {
                    generation,
                    ..outcome
                });
            }
            Plan::Publish { .. } => {
                match plan::plan(&existing, desired, &self.owner(self.node_uid().await?)) {
                    Plan::Publish { generation, writes } => (generation, writes),
                    Plan::Unchanged { generation } => {
                        return Ok(PublishOutcome {
                            generation,
                            ..outcome
                        });
                    }
                }
            }
        };
        for write in writes {
            self.apply(write, &mut outcome).await?;
        }
        info!(
            generation,
            created = outcome.created,
            updated = outcome.updated,
            deleted = outcome.deleted,
            "published resource slices"
        );
        Ok(PublishOutcome {
            changed: true,
            generation,
            ..outcome
        })
    }

    async fn apply(&self, write: Write, outcome: &mut PublishOutcome) -> Result<(), PublishError> {
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
            }
            Write::Update(slice) => {
                let name = slice.metadata.name.clone().unwrap_or_default();
                self.slices
                    .replace(&name, &params, &slice)
                    .await
                    .map_err(self.api_error("update"))?;
                debug!(slice = %name, "updated resource slice");
                self.metrics.count_write(WriteOp::Update);
                outcome.updated += 1;
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
            }
        }
        Ok(())
    }
}
