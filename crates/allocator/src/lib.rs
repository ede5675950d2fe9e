//! The Kubernetes DRA structured-parameters allocator, as kube-scheduler's
//! DRA plugin runs it, as a pure library: given ResourceSlices,
//! DeviceClasses and the claims already allocated, find devices on one node
//! for a pod's claims, all or nothing, and explain a failure.
//!
//! Semantics follow upstream's allocator (`k8s.io/dynamic-resource-allocation/structured`)
//! of one release, 1.34 to 1.37, with its feature gates ([`Features`],
//! [`Features::for_release`]; `default()` is 1.34): first-fit depth-first
//! search over pools sorted by driver and name, slices by name, devices in
//! slice order. Each release picks one of upstream's implementations
//! (stable, incubating, experimental) from its gates, and the behaviours
//! where releases differ, upstream's own bugs included, are switches in
//! [`release::Rules`], so that an answer is the one that release's
//! scheduler gives. The differential test (`crates/ainic-dra/tests/oracle`)
//! checks that against upstream's code of each release.
//!
//! ```ignore
//! let allocator = Allocator::new(Features::default(), &slices, &classes, &allocated)?;
//! let results = allocator.allocate(&NodeFacts::from_node(&node), &claims)?;
//! ```
#![deny(missing_docs)]

mod capacity;
pub mod cel;
mod constraint;
mod context;
mod error;
mod explain;
mod features;
mod model;
mod node;
pub mod placement;
mod pools;
pub mod release;
mod request;
mod result;
pub mod scenario;
mod search;
pub mod semver;
mod taints;

/// Kubernetes quantities, from the `k8s-quantity` crate.
pub use k8s_quantity as quantity;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};

pub use crate::error::{AllocateError, AllocationFailure, InputError, PoolIssue, PoolProblem};
pub use crate::features::Features;
pub use crate::model::{AttributeValue, DeviceInfo};
pub use crate::node::NodeFacts;
pub use crate::placement::{Placement, place_pods};
pub use crate::release::{Implementation, Release, Rules, UnknownRelease};
pub use crate::request::ALLOCATION_RESULTS_MAX_SIZE;
pub use crate::scenario::{Answer, Scenario, ScenarioError, documents};

use crate::cel::Selector;
use crate::context::{AllocatedState, NodeContext};
use crate::model::SliceInfo;
use crate::pools::PoolIndex;
use crate::request::{SelectorCache, plan_claim};
use crate::search::{Search, Stop};

/// Classes by name, with their compiled selectors.
type ClassMap = HashMap<String, (Arc<DeviceClass>, Vec<Arc<Selector>>)>;

/// An allocator over a fixed set of slices, classes and allocated claims.
#[derive(Debug)]
pub struct Allocator {
    features: Features,
    index: PoolIndex,
    classes: ClassMap,
    state: AllocatedState,
    selectors: Mutex<SelectorCache>,
}

impl Allocator {
    /// Validates and indexes the inputs. Slices with unparsable values and
    /// classes whose selectors do not compile are input errors.
    pub fn new(
        features: Features,
        slices: &[ResourceSlice],
        classes: &[DeviceClass],
        allocated_claims: &[ResourceClaim],
    ) -> Result<Allocator, InputError> {
        // 1.37's allocator cannot check compatibility groups with their
        // gate (alpha, always off here) off, so it passes over the slices
        // that use them, which leaves their pools incomplete.
        let groups_ignored = features.release >= Release::V1_37;
        let parsed = slices
            .iter()
            .filter(|s| !(groups_ignored && uses_compatibility_groups(s)))
            .map(|s| SliceInfo::parse(s, features.release.has_list_type_attributes()))
            .collect::<Result<Vec<_>, _>>()?;
        // includes() whatever DRAListTypeAttributes says: upstream's
        // allocator compiles for stored expressions, which ignore gates.
        let mut cache = SelectorCache::new(features.release.has_list_type_attributes());
        let mut class_map = ClassMap::new();
        for class in classes {
            let name = class.metadata.name.clone().unwrap_or_default();
            let selectors = class
                .spec
                .as_ref()
                .and_then(|s| s.selectors.as_deref())
                .unwrap_or_default();
            let compiled = cache.compile_all(selectors, &format!("class {name}"))?;
            class_map.insert(name, (Arc::new(class.clone()), compiled));
        }
        Ok(Allocator {
            features,
            index: PoolIndex::new(parsed),
            classes: class_map,
            state: AllocatedState::from_claims(allocated_claims, features.consumable_capacity)?,
            selectors: Mutex::new(cache),
        })
    }

    /// The feature gates in effect.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Allocates all `claims` together on `node`: one result per claim, in
    /// order, or why not.
    pub fn allocate(
        &self,
        node: &NodeFacts,
        claims: &[ResourceClaim],
    ) -> Result<Vec<AllocationResult>, AllocateError> {
        let plans = {
            let mut cache = self
                .selectors
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            claims
                .iter()
                .map(|c| plan_claim(c, &self.classes, &mut cache, &self.features))
                .collect::<Result<Vec<_>, _>>()?
        };
        let ctx = NodeContext::new(&self.index, node, self.features, &self.state)?;
        let mut search = Search::new(&ctx, &plans);
        match search.run() {
            Ok(true) => {}
            Ok(false) => return Err(explain::explain(&ctx, &plans, None).into()),
            Err(Stop::Fatal(reason)) => return Err(InputError::Aborted { reason }.into()),
            Err(Stop::InvalidPool(p)) => {
                let pool = &ctx.pools[p];
                return Err(InputError::InvalidPool {
                    driver: pool.key.0.clone(),
                    pool: pool.key.1.clone(),
                    reason: pool.invalid.clone().unwrap_or_default(),
                }
                .into());
            }
            Err(stop) => return Err(explain::explain(&ctx, &plans, Some(stop)).into()),
        }
        let results = plans
            .iter()
            .zip(claims)
            .enumerate()
            .map(|(c, (plan, claim))| {
                result::build(&ctx, plan, claim, &search.picked[c], |r| {
                    search.selected_sub.get(&(c, r)).copied().unwrap_or(0)
                })
            })
            .collect();
        tracing::debug!(node = %node.name, claims = claims.len(), steps = search.steps, "allocated");
        Ok(results)
    }

    /// Records `results` (as returned by [`allocate`](Self::allocate)) as
    /// in use, so that later allocations do not reuse their devices.
    pub fn commit(&mut self, results: &[AllocationResult]) -> Result<(), InputError> {
        for result in results {
            let devices = result
                .devices
                .as_ref()
                .and_then(|d| d.results.as_deref())
                .unwrap_or_default();
            self.state
                .add_results(devices)
                .map_err(|reason| InputError::Claim {
                    claim: "<committed>".into(),
                    reason,
                })?;
        }
        Ok(())
    }

    /// Every device published by the slices, in slice order (for tools and tests).
    pub fn devices(&self) -> impl Iterator<Item = &DeviceInfo> {
        self.index.all_slices().iter().flat_map(|s| &s.devices)
    }
}

/// Whether a device of the slice draws counters under compatibility groups
/// (`DRADeviceCompatibilityGroups`, 1.37).
fn uses_compatibility_groups(slice: &ResourceSlice) -> bool {
    slice.spec.devices.iter().flatten().any(|d| {
        d.consumes_counters.iter().flatten().any(|c| {
            c.compatibility_groups
                .as_ref()
                .is_some_and(|g| !g.is_empty())
        })
    })
}
