//! The pool of one node: devices and counter sets cut into ResourceSlices
//! that each stay within the API limits.
//!
//! Layout: counter sets (only with `DRAPartitionableDevices`) first, in
//! slices of their own holding at most 8 sets; then devices in PCI address
//! order, at most 128 per slice, or 64 when any device of the pool carries
//! taints or counters. Counter sets and devices never share a slice: that
//! is what Kubernetes 1.35+ requires, and the only layout that can hold a
//! PF with 256 VFs and the PF/VF counter set they share.
//!
//! For 1.34 (the gates' release), whose alpha layout wants a device's
//! counter sets in its own slice, each set goes with its PF and VFs
//! (families packed while they fit in 128 devices, 1.34's limit, and 8
//! sets); a PF whose family would not fit is published as its VFs (see
//! `plan`).
//! Slice names are `<node>-<driver>-<index>`; content is deterministic so
//! a publisher can diff by value.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Counter, CounterSet, Device, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use topology::Inventory;

use crate::config::ModelConfig;
use crate::device::{DeviceContext, build_device};
use crate::fabric::{self, FabricResolution};
use crate::gates::Release;
use crate::index::InventoryIndex;
use crate::names;
use crate::plan::{self, CounterPlan};
use crate::validate::{MAX_COUNTER_SETS, MAX_DEVICES, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS};

/// The slices of one node's pool, and what the build had to say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SliceSet {
    /// The slices, by index; `pool.resourceSliceCount` equals their number.
    pub slices: Vec<ResourceSlice>,
    /// Decisions and cuts worth logging (one line each).
    pub warnings: Vec<String>,
    /// Disagreements between fabric sources.
    pub fabric_conflicts: Vec<String>,
}

impl SliceSet {
    /// Sets `pool.generation` on every slice (the publisher bumps it on change).
    pub fn set_generation(&mut self, generation: i64) {
        for s in &mut self.slices {
            s.spec.pool.generation = generation;
        }
    }

    /// Every device of the pool.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
    }

    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices().find(|d| d.name == name)
    }
}

/// A built pool that the API server would reject: a bug in the model, or a
/// configuration it did not foresee. Nothing of it may be published.
#[derive(Debug, thiserror::Error)]
#[error("built an invalid ResourceSlice ({} violations), first: {}", .violations.len(), .violations[0])]
pub struct InvalidSlices {
    /// Every rule broken, at least one.
    pub violations: Vec<crate::validate::Violation>,
}

/// [`build_slices`], refusing to return any slice that the API server of
/// the configured release would reject.
pub fn build_slices_checked(
    inventory: &Inventory,
    config: &ModelConfig,
) -> Result<SliceSet, InvalidSlices> {
    let set = build_slices(inventory, config);
    let release = config.gates().release();
    let violations = crate::validate::check_pool_for(&set.slices, release);
    if violations.is_empty() {
        Ok(set)
    } else {
        Err(InvalidSlices { violations })
    }
}

/// Builds the pool of `config.node_name()` from `inventory`.
pub fn build_slices(inventory: &Inventory, config: &ModelConfig) -> SliceSet {
    let index = InventoryIndex::new(inventory);
    let plan = plan::plan_indexed(inventory, &index, config);
    let FabricResolution { facts, conflicts } = fabric::resolve(
        inventory,
        &config.options().fabric,
        config.node_name(),
        config.driver(),
    );
    let ctx = |nic: &topology::NicFunction| DeviceContext {
        config,
        index: &index,
        fabric: facts.get(&nic.address),
    };
    let mut warnings = plan.warnings.clone();
    let devices: Vec<Device> = plan
        .devices
        .iter()
        .map(|p| build_device(p, &ctx(p.nic), &mut warnings))
        .collect();
    let specs = layout(&plan.counters, devices, config.gates().release());
    let count = specs.len() as i64;
    let slices = specs
        .into_iter()
        .enumerate()
        .map(|(i, content)| slice(config, i, count, content))
        .collect();
    for w in &warnings {
        tracing::info!(node = config.node_name(), "{w}");
    }
    SliceSet {
        slices,
        warnings,
        fabric_conflicts: conflicts,
    }
}

/// What one slice holds: counter sets, devices, or (1.34) both.
#[derive(Default)]
struct Content {
    counters: Vec<CounterSet>,
    devices: Vec<Device>,
}

fn per_slice(devices: &[Device]) -> usize {
    let advanced = devices
        .iter()
        .any(|d| d.taints.is_some() || d.consumes_counters.is_some());
    if advanced {
        MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    } else {
        MAX_DEVICES
    }
}

/// Cuts `devices` into slices of devices only, as many per slice as allowed.
fn device_slices(devices: Vec<Device>, out: &mut Vec<Content>) {
    let per_slice = per_slice(&devices);
    let mut devices = devices.into_iter().peekable();
    while devices.peek().is_some() {
        out.push(Content {
            devices: devices.by_ref().take(per_slice).collect(),
            ..Content::default()
        });
    }
}

fn layout(counters: &[CounterPlan], devices: Vec<Device>, release: Release) -> Vec<Content> {
    if !release.counters_in_own_slices() && !counters.is_empty() {
        let max = release.max_devices_with_taints_or_counters();
        return layout_beside(counters, devices, max);
    }
    let mut out: Vec<Content> = counters
        .chunks(MAX_COUNTER_SETS)
        .map(|chunk| Content {
            counters: chunk.iter().map(counter_set).collect(),
            ..Content::default()
        })
        .collect();
    device_slices(devices, &mut out);
    out
}

/// The 1.34 layout: each counter set in the slice of the devices that
/// consume it (whole families, packed while they fit in `max` devices),
/// then the other devices. The plan keeps every family within `max`.
fn layout_beside(counters: &[CounterPlan], devices: Vec<Device>, max: usize) -> Vec<Content> {
    let family = |d: &Device| {
        let set = d.consumes_counters.as_ref()?.first()?;
        counters.iter().position(|c| c.name == set.counter_set)
    };
    let mut families: Vec<Vec<Device>> = vec![Vec::new(); counters.len()];
    let mut others = Vec::new();
    for d in devices {
        match family(&d) {
            Some(i) => families[i].push(d),
            None => others.push(d),
        }
    }
    let mut out: Vec<Content> = Vec::new();
    for (plan, members) in counters.iter().zip(families) {
        let fits = out.last().is_some_and(|c: &Content| {
            c.counters.len() < MAX_COUNTER_SETS && c.devices.len() + members.len() <= max
        });
        if !fits {
            out.push(Content::default());
        }
        let slice = out.last_mut().expect("pushed above");
        slice.counters.push(counter_set(plan));
        slice.devices.extend(members);
    }
    device_slices(others, &mut out);
    out
}

fn counter_set(c: &CounterPlan) -> CounterSet {
    CounterSet {
        name: c.name.clone(),
        counters: BTreeMap::from([(
            names::COUNTER_FUNCTIONS.to_string(),
            Counter {
                value: Quantity(c.functions.to_string()),
            },
        )]),
    }
}

fn slice(config: &ModelConfig, index: usize, count: i64, content: Content) -> ResourceSlice {
    let devices = Some(content.devices).filter(|d| !d.is_empty());
    let shared_counters = Some(content.counters).filter(|c| !c.is_empty());
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(names::slice_name(
                config.node_name(),
                config.driver(),
                index,
            )),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: config.driver().to_string(),
            node_name: Some(config.node_name().to_string()),
            pool: ResourcePool {
                name: config.node_name().to_string(),
                generation: 0,
                resource_slice_count: count,
            },
            devices,
            shared_counters,
            ..ResourceSliceSpec::default()
        },
    }
}
