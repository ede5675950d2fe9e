//! The pool of one node: devices and counter sets cut into ResourceSlices
//! that each stay within the API limits.
//!
//! Layout: counter sets (only with `DRAPartitionableDevices`) first, in
//! slices of their own holding at most 8 sets; then devices in PCI address
//! order, at most 128 per slice, or 64 when any device of the pool carries
//! taints or counters. Counter sets and devices never share a slice: that
//! is what Kubernetes 1.35+ requires, and the only layout that can hold a
//! PF with 256 VFs and the PF/VF counter set they share (1.34's alpha
//! layout wanted them all in one slice, beyond its device limit).
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
    let specs = layout(&plan.counters, devices);
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

/// What one slice holds.
enum Content {
    Counters(Vec<CounterSet>),
    Devices(Vec<Device>),
}

fn layout(counters: &[CounterPlan], devices: Vec<Device>) -> Vec<Content> {
    let mut out: Vec<Content> = counters
        .chunks(MAX_COUNTER_SETS)
        .map(|chunk| Content::Counters(chunk.iter().map(counter_set).collect()))
        .collect();
    let advanced = devices
        .iter()
        .any(|d| d.taints.is_some() || d.consumes_counters.is_some());
    let per_slice = if advanced {
        MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    } else {
        MAX_DEVICES
    };
    let mut devices = devices.into_iter().peekable();
    while devices.peek().is_some() {
        out.push(Content::Devices(devices.by_ref().take(per_slice).collect()));
    }
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
    let (devices, shared_counters) = match content {
        Content::Counters(sets) => (None, Some(sets)),
        Content::Devices(devs) => (Some(devs), None),
    };
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
