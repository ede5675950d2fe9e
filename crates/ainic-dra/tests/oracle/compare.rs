//! What must agree between `simulate` and upstream's allocator: the
//! outcome class (allocated, cannot allocate, invalid input) and, when
//! allocated, every claim's results in order (request, driver, pool,
//! device, admin access, whether it is a share, consumed capacity,
//! tolerations, binding conditions), its config and its node selector.
//!
//! Treated as equal on purpose: messages (each side explains in its own
//! words) and share IDs (upstream draws random UUIDs; only their presence
//! is compared). Map order is handled by the runner, not here: it asks
//! the oracle again with the slices shuffled and accepts any answer
//! upstream can give (see `main.rs`).

use std::collections::BTreeMap;

use allocator::Answer;
use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use serde_json::Value;

/// An answer reduced to what must agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Per claim name: its allocation.
    Allocated(Vec<Claim>),
    /// Cannot allocate.
    Unallocatable,
    /// Invalid input.
    Invalid,
    /// Upstream's allocator panicked (a bug of that release): nothing to
    /// compare against.
    Panicked,
}

/// One claim's allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Claim name.
    pub name: String,
    /// The results, in order.
    pub results: Vec<Result>,
    /// `allocation.devices.config`, as JSON.
    pub config: String,
    /// `allocation.nodeSelector`, as JSON.
    pub node_selector: String,
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Result {
    /// `request` (with `/subrequest`).
    pub request: String,
    /// `driver/pool/device`.
    pub device: String,
    /// Admin access.
    pub admin: bool,
    /// Has a share ID.
    pub share: bool,
    /// Consumed capacity.
    pub consumed: BTreeMap<String, String>,
    /// Tolerations, as JSON.
    pub tolerations: String,
    /// Binding and binding-failure conditions.
    pub binding: (Vec<String>, Vec<String>),
}

impl Outcome {
    /// Reduces our answer.
    pub fn of_ours(answer: &Answer) -> Outcome {
        match answer {
            Answer::Allocated(claims) => Outcome::Allocated(claims.iter().map(claim).collect()),
            Answer::Unallocatable(_) => Outcome::Unallocatable,
            Answer::Invalid(_) => Outcome::Invalid,
        }
    }

    /// Reduces the oracle's answer (`{"outcome", "claims"}`).
    pub fn of_oracle(answer: &Value) -> Outcome {
        match answer["outcome"].as_str() {
            Some("allocated") => {
                let claims: Vec<ResourceClaim> =
                    serde_json::from_value(answer["claims"].clone()).unwrap_or_default();
                Outcome::Allocated(claims.iter().map(claim).collect())
            }
            Some("unallocatable") => Outcome::Unallocatable,
            Some("panic") => Outcome::Panicked,
            _ => Outcome::Invalid,
        }
    }

    /// The outcome class, for counting.
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Allocated(_) => "allocated",
            Outcome::Unallocatable => "unallocatable",
            Outcome::Invalid => "invalid",
            Outcome::Panicked => "upstream panicked",
        }
    }
}

fn claim(c: &ResourceClaim) -> Claim {
    let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
    let devices = allocation.and_then(|a| a.devices.as_ref());
    let config = devices
        .and_then(|d| d.config.clone())
        .filter(|c| !c.is_empty());
    Claim {
        name: c.metadata.name.clone().unwrap_or_default(),
        results: devices
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .map(result)
            .collect(),
        config: serde_json::to_string(&config).unwrap(),
        node_selector: serde_json::to_string(&allocation.and_then(|a| a.node_selector.clone()))
            .unwrap(),
    }
}

fn result(r: &DeviceRequestAllocationResult) -> Result {
    Result {
        request: r.request.clone(),
        device: format!("{}/{}/{}", r.driver, r.pool, r.device),
        admin: r.admin_access.unwrap_or(false),
        share: r.share_id.is_some(),
        consumed: r
            .consumed_capacity
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        tolerations: serde_json::to_string(&r.tolerations.clone().filter(|t| !t.is_empty()))
            .unwrap(),
        binding: (
            r.binding_conditions.clone().unwrap_or_default(),
            r.binding_failure_conditions.clone().unwrap_or_default(),
        ),
    }
}
