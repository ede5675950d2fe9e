//! Prometheus counters of the publisher: writes by operation, syncs by
//! result, retries, and the published pool generation.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A ResourceSlice write operation.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum WriteOp {
    /// POST of a new slice.
    Create,
    /// PUT of an existing slice.
    Update,
    /// DELETE of a stale slice.
    Delete,
}

/// How one sync ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum SyncResult {
    /// Nothing to write.
    Unchanged,
    /// Nothing written: the server drops a gated field; built again without it.
    Refused,
    /// A new generation was published.
    Published,
    /// Gave up (the run loop tries again on the next trigger).
    Failed,
}

impl EncodeLabelValue for WriteOp {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let value = match self {
            WriteOp::Create => "create",
            WriteOp::Update => "update",
            WriteOp::Delete => "delete",
        };
        encoder.write_str(value)
    }
}

impl EncodeLabelValue for SyncResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let value = match self {
            SyncResult::Unchanged => "unchanged",
            SyncResult::Refused => "refused",
            SyncResult::Published => "published",
            SyncResult::Failed => "failed",
        };
        encoder.write_str(value)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: WriteOp,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: SyncResult,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    field: String,
    gate: String,
}

/// The publisher's metrics; clones share the same counters.
#[derive(Debug, Clone, Default)]
pub struct PublisherMetrics {
    writes: Family<OpLabels, Counter>,
    syncs: Family<ResultLabels, Counter>,
    retries: Counter,
    generation: Gauge,
    dropped: Family<FieldLabels, Counter>,
}

impl PublisherMetrics {
    /// Registers the metrics as `slice_writes`, `slice_syncs`,
    /// `slice_retries`, `slice_pool_generation`, `slice_fields_dropped`
    /// under the registry's prefix (the agent's registry uses `ainic_dra`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "slice_writes",
            "ResourceSlice API writes by operation",
            self.writes.clone(),
        );
        registry.register(
            "slice_syncs",
            "Publisher syncs by result",
            self.syncs.clone(),
        );
        registry.register(
            "slice_retries",
            "Sync attempts retried after an API error",
            self.retries.clone(),
        );
        registry.register(
            "slice_pool_generation",
            "Published pool generation",
            self.generation.clone(),
        );
        registry.register(
            "slice_fields_dropped",
            "Gated ResourceSlice fields the API server dropped (its gate is off there), counted once when found",
            self.dropped.clone(),
        );
    }

    pub(crate) fn count_dropped(&self, field: &str, gate: &str) {
        let labels = FieldLabels {
            field: field.to_string(),
            gate: gate.to_string(),
        };
        self.dropped.get_or_create(&labels).inc();
    }

    pub(crate) fn count_write(&self, op: WriteOp) {
        self.writes.get_or_create(&OpLabels { op }).inc();
    }

    pub(crate) fn count_sync(&self, result: SyncResult) {
        self.syncs.get_or_create(&ResultLabels { result }).inc();
    }

    pub(crate) fn count_retry(&self) {
        self.retries.inc();
    }

    pub(crate) fn set_generation(&self, generation: i64) {
        self.generation.set(generation);
    }

    /// Writes of one operation so far.
    pub fn writes(&self, op: WriteOp) -> u64 {
        self.writes.get_or_create(&OpLabels { op }).get()
    }

    /// Writes of all operations so far.
    pub fn total_writes(&self) -> u64 {
        [WriteOp::Create, WriteOp::Update, WriteOp::Delete]
            .map(|op| self.writes(op))
            .iter()
            .sum()
    }

    /// Syncs that ended with `result`.
    pub fn syncs(&self, result: SyncResult) -> u64 {
        self.syncs.get_or_create(&ResultLabels { result }).get()
    }

    /// Retried attempts so far.
    pub fn retries(&self) -> u64 {
        self.retries.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_counters_render_in_text_format() {
        let metrics = PublisherMetrics::default();
        let mut registry = Registry::with_prefix("ainic_dra");
        metrics.register(&mut registry);
        metrics.count_write(WriteOp::Create);
        metrics.count_write(WriteOp::Create);
        metrics.set_generation(3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("ainic_dra_slice_writes_total{op=\"create\"} 2"),
            "{text}"
        );
        assert!(text.contains("ainic_dra_slice_pool_generation 3"), "{text}");
        assert_eq!(metrics.total_writes(), 2);
    }
}
