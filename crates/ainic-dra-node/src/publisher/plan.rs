//! Pure planning: existing slices + desired slices → the writes that make the
//! API hold exactly the desired pool.
//!
//! Content is compared without server-set metadata, without the pool
//! generation and without taint `timeAdded` (the API server stamps it). When
//! anything differs, every desired slice is written at one new generation
//! (higher than any existing one), and only then are leftovers deleted: from
//! the first write on, consumers see the new generation as the pool's truth
//! and ignore the older slices still waiting for deletion.

use std::collections::BTreeSet;

use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// One API write, in execution order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Write {
    /// Replace an existing slice (carries its name and resourceVersion).
    Update(ResourceSlice),
    /// Create a slice (by name, or by `generateName`).
    Create(ResourceSlice),
    /// Delete an existing slice (precondition: its uid and resourceVersion).
    Delete(ResourceSlice),
}

/// What a sync has to do.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum SliceWrites {
    /// The API already holds the desired pool: no writes.
    Unchanged {
        /// The pool generation found.
        generation: i64,
    },
    /// Write the pool at `generation`: updates and creates first, deletes last.
    Publish {
        /// The new pool generation.
        generation: i64,
        /// The writes, in order.
        writes: Vec<Write>,
    },
}

/// A digest (SHA-256) of a slice's comparable content.
///
/// Digests rather than the content itself: the publisher remembers what it
/// asked for and what the server stored, which as JSON text was two copies
/// of the pool (8 MB on an 8 PF × 256 VF node) held for the agent's life.
pub(super) type Content = [u8; 32];

/// The comparable content of a slice: spec (generation zeroed, taint
/// `timeAdded` dropped), labels, and owner references without uid.
pub(super) fn content(slice: &ResourceSlice) -> Content {
    let mut spec = slice.spec.clone();
    spec.pool.generation = 0;
    let taints = (spec.devices.iter_mut().flatten()).flat_map(|d| d.taints.iter_mut().flatten());
    for taint in taints {
        taint.time_added = None;
    }
    let owners: Vec<_> = (slice.metadata.owner_references.iter().flatten())
        .map(|o| (&o.api_version, &o.kind, &o.name, o.controller))
        .collect();
    let mut digest = DigestWriter(ring::digest::Context::new(&ring::digest::SHA256));
    serde_json::to_writer(&mut digest, &(&spec, &slice.metadata.labels, &owners))
        .expect("resource slices serialise");
    let mut out = Content::default();
    out.copy_from_slice(digest.0.finish().as_ref());
    out
}

/// Feeds what is written to a digest.
struct DigestWriter(ring::digest::Context);

impl std::io::Write for DigestWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sorted contents of a set of slices (order-independent comparison).
pub(super) fn contents(slices: &[ResourceSlice]) -> Vec<Content> {
    let mut all: Vec<Content> = slices.iter().map(content).collect();
    all.sort();
    all
}

/// Highest pool generation among `slices` (0 when empty).
pub(super) fn max_generation(slices: &[ResourceSlice]) -> i64 {
    slices
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0)
}

/// Whether `existing` is one complete generation whose contents equal `wanted`.
pub(super) fn holds(existing: &[ResourceSlice], wanted: &[Content]) -> bool {
    let generation = max_generation(existing);
    existing
        .iter()
        .all(|s| s.spec.pool.generation == generation)
        && contents(existing) == wanted
}

/// Copies `timeAdded` of taints the existing slice already carries, so an
/// update does not restamp unchanged taints.
fn keep_taint_times(new: &mut ResourceSlice, old: &ResourceSlice) {
    let old_devices = old.spec.devices.iter().flatten();
    for device in new.spec.devices.iter_mut().flatten() {
        let Some(old_device) = old_devices.clone().find(|d| d.name == device.name) else {
            continue;
        };
        for taint in device
            .taints
            .iter_mut()
            .flatten()
            .filter(|t| t.time_added.is_none())
        {
            let same = old_device.taints.iter().flatten().find(|t| {
                (&t.key, &t.value, &t.effect) == (&taint.key, &taint.value, &taint.effect)
            });
            taint.time_added = same.and_then(|t| t.time_added.clone());
        }
    }
}

/// Prepares a desired slice for writing at `generation` with `owner`.
fn stamped(
    desired: &ResourceSlice,
    generation: i64,
    count: i64,
    owner: &OwnerReference,
) -> ResourceSlice {
    let mut slice = desired.clone();
    slice.spec.pool.generation = generation;
    slice.spec.pool.resource_slice_count = count;
    slice.metadata.owner_references = Some(vec![owner.clone()]);
    slice.metadata.resource_version = None;
    slice.metadata.uid = None;
    slice
}

/// Existing slices paired with desired ones, and the ones in the way.
struct Pairing {
    /// For each desired slice, the existing slice to update, if any.
    pairs: Vec<Option<usize>>,
    /// Existing slices that hold a desired slice's name but belong to
    /// another pool (pool names are immutable): deleted before the creates.
    blocking: BTreeSet<usize>,
}

/// Pairs each desired slice with an existing one of the same pool to update:
/// by name when the desired slice is named, else first by equal content,
/// then by order.
fn pair(desired: &[ResourceSlice], existing: &[ResourceSlice]) -> Pairing {
    let same_pool = |d: &ResourceSlice, j: usize| existing[j].spec.pool.name == d.spec.pool.name;
    let named = |d: &ResourceSlice| d.metadata.name.clone().filter(|n| !n.is_empty());
    let mut pairing = Pairing {
        pairs: vec![None; desired.len()],
        blocking: BTreeSet::new(),
    };
    let mut taken = BTreeSet::new();
    for (i, d) in desired.iter().enumerate() {
        let Some(name) = named(d) else { continue };
        let Some(j) = existing
            .iter()
            .position(|e| e.metadata.name.as_ref() == Some(&name))
        else {
            continue;
        };
        taken.insert(j);
        if same_pool(d, j) {
            pairing.pairs[i] = Some(j);
        } else {
            pairing.blocking.insert(j);
        }
    }
    let reserved: BTreeSet<&String> = desired
        .iter()
        .filter_map(|d| d.metadata.name.as_ref())
        .collect();
    let free = |j: usize, taken: &BTreeSet<usize>| {
        !taken.contains(&j)
            && existing[j]
                .metadata
                .name
                .as_ref()
                .is_none_or(|n| !reserved.contains(n))
    };
    for equal_content in [true, false] {
        for (i, d) in desired.iter().enumerate() {
            if named(d).is_some() || pairing.pairs[i].is_some() {
                continue;
            }
            let found = (0..existing.len()).find(|&j| {
                free(j, &taken)
                    && same_pool(d, j)
                    && (!equal_content || content(&existing[j]) == content(d))
            });
            pairing.pairs[i] = found;
            taken.extend(found);
        }
    }
    pairing
}

/// The desired slices as they would be stored (owner set, count filled in).
fn wanted(
    desired: &[ResourceSlice],
    generation: i64,
    owner: &OwnerReference,
) -> Vec<ResourceSlice> {
    let count = desired.len() as i64;
    desired
        .iter()
        .map(|d| stamped(d, generation, count, owner))
        .collect()
}

/// Sorted contents of the desired slices as they would be stored; one
/// slice copied at a time.
pub(super) fn wanted_contents(desired: &[ResourceSlice], owner: &OwnerReference) -> Vec<Content> {
    let count = desired.len() as i64;
    let stamped = desired.iter().map(|d| stamped(d, 0, count, owner));
    let mut all: Vec<Content> = stamped.map(|s| content(&s)).collect();
    all.sort();
    all
}

/// Plans the sync of one pool. `desired` carries no owner; `owner` is the
/// Node reference every published slice gets.
pub(super) fn plan(
    existing: &[ResourceSlice],
    desired: &[ResourceSlice],
    owner: &OwnerReference,
) -> SliceWrites {
    let current = max_generation(existing);
    let count = desired.len() as i64;
    if holds(existing, &wanted_contents(desired, owner)) {
        return SliceWrites::Unchanged {
            generation: current,
        };
    }
    let wanted = wanted(desired, current, owner);
    let requested = desired
        .iter()
        .map(|d| d.spec.pool.generation)
        .max()
        .unwrap_or(0);
    let generation = (current + 1).max(requested).max(1);
    let Pairing { pairs, blocking } = pair(&wanted, existing);
    let mut writes: Vec<Write> = blocking
        .iter()
        .map(|&j| Write::Delete(existing[j].clone()))
        .collect();
    for (d, paired) in desired.iter().zip(&pairs) {
        let mut slice = stamped(d, generation, count, owner);
        match paired {
            Some(j) => {
                let old = &existing[*j];
                slice.metadata.name = old.metadata.name.clone();
                slice.metadata.resource_version = old.metadata.resource_version.clone();
                keep_taint_times(&mut slice, old);
                writes.push(Write::Update(slice));
            }
            None => writes.push(Write::Create(slice)),
        }
    }
    let used: BTreeSet<usize> = pairs.iter().flatten().chain(&blocking).copied().collect();
    let stale = (0..existing.len()).filter(|j| !used.contains(j));
    writes.extend(stale.map(|j| Write::Delete(existing[j].clone())));
    SliceWrites::Publish { generation, writes }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
