//! The ResourceSlice publisher: makes the API server hold exactly this
//! node's desired pool of slices for our driver.
//!
//! A sync lists the slices of this driver on this node (field selector
//! `spec.nodeName`, `spec.driver`), compares them with the desired slices by
//! content (`plan`), and writes nothing when they match. Otherwise it bumps
//! the pool generation above every existing one, writes all desired slices at
//! that generation (owned by the Node object, so they go when the node goes),
//! and only then deletes leftovers. Conflicts, throttling, 5xx and transport
//! errors restart the sync after a capped exponential backoff; the restarted
//! sync re-lists, so partial progress is never lost or duplicated.
//!
//! The publisher does not build slices: the caller passes them in (from
//! `dra-model`). [`run`] re-publishes on inventory changes, nudges and
//! periodic resyncs (it can also take link events, which the agent routes
//! through its refresh loop instead: they reach the publisher as inventory
//! changes). The list-compare-write pass itself is in `sync`. The netlink
//! link listener lives here for that reason; the agent's refresher uses it.
//!
//! Gated fields a server drops ([`dra_model::dropped`]) are found before the first
//! write that carries them (a dry-run create) and in every stored object
//! a write returns; each is logged once and counted, and its gate lands in
//! [`RefusedGates`], which the caller's build honours.

mod metrics;
mod netlink;
mod plan;
mod run;
mod sync;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use dra_model::FeatureGate;
use dra_model::dropped;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use tracing::{Instrument, info_span, warn};

pub use ainic_dra_daemon::backoff::{self, Backoff, Sleeper, TokioSleeper};
pub use metrics::{PublisherMetrics, SyncResult, WriteOp};
pub use netlink::{LinkSource, NetlinkLinks};
pub use run::{LinkEvent, RunOptions, run, spawn};
pub(crate) use run::{next_event, settle};

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
    /// The server dropped a gated field not seen dropped before: its gate
    /// is now in [`RefusedGates`]; build again and publish at once.
    pub refused: bool,
}

/// Feature gates whose fields the API server dropped: the slices built
/// from now on leave them off. Clones share one set.
#[derive(Debug, Clone, Default)]
pub struct RefusedGates(Arc<Mutex<BTreeSet<FeatureGate>>>);

impl RefusedGates {
    /// The refused gates so far.
    pub fn get(&self) -> BTreeSet<FeatureGate> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn add(&self, gate: FeatureGate) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gate);
    }
}

/// What the publisher knows about the server's gated fields.
#[derive(Debug, Default)]
struct ServerFields {
    kept: BTreeSet<dropped::GatedField>,
    dropped: BTreeSet<dropped::GatedField>,
    refused: RefusedGates,
    /// Dry runs failed for another reason than the content: no more
    /// probes; real writes are still read back.
    no_probes: bool,
}

/// Publishes one node's ResourceSlices.
pub struct SlicePublisher {
    slices: Api<ResourceSlice>,
    /// Metadata only: the uid is all that is read.
    nodes: Api<PartialObjectMeta<Node>>,
    config: PublisherConfig,
    sleeper: Arc<dyn Sleeper>,
    metrics: PublisherMetrics,
    last: Option<sync::LastPublished>,
    fields: ServerFields,
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
            last: None,
            fields: ServerFields::default(),
        }
    }

    /// The gates whose fields the server dropped (shared with the build).
    pub fn refused_gates(&self) -> RefusedGates {
        self.fields.refused.clone()
    }

    /// The gated fields the server was found to drop.
    pub fn dropped_fields(&self) -> &BTreeSet<dropped::GatedField> {
        &self.fields.dropped
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
                    let result = match (outcome.changed, outcome.refused) {
                        (true, _) => SyncResult::Published,
                        (false, true) => SyncResult::Refused,
                        (false, false) => SyncResult::Unchanged,
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
}
