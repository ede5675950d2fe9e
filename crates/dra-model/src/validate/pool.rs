//! Rules that span all slices of one pool.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_quantity::Quantity;

use super::{Report, Violation};
use crate::gates::Release;

/// Every rule the slices of one pool break together: one driver and pool
/// name, one generation, `resourceSliceCount` equal to the number of
/// slices, unique slice and device names, unique counter sets, and every
/// `consumesCounters` naming a counter set and counter of the pool with
/// enough in it. Also runs [`super::check_slice`] on each slice, with the
/// slice name in the path. Rules of 1.35 and later.
pub fn check_pool(slices: &[ResourceSlice]) -> Vec<Violation> {
    check_pool_for(slices, Release::NEWEST)
}

/// [`check_pool`] for the API server and scheduler of `release`: in 1.34 a
/// device's counter sets must be in its own slice.
pub fn check_pool_for(slices: &[ResourceSlice], release: Release) -> Vec<Violation> {
    let mut r = Report::default();
    for s in slices {
        let name = s.metadata.name.clone().unwrap_or_default();
        for v in super::check_slice_for(s, release) {
            r.fail(format!("{name}: {}", v.path), v.message);
        }
    }
    let Some(first) = slices.first() else {
        return r.violations;
    };
    let pool = &first.spec.pool;
    for s in slices {
        let name = s.metadata.name.as_deref().unwrap_or("");
        r.check(
            s.spec.driver == first.spec.driver,
            name,
            "driver differs within the pool",
        );
        r.check(
            s.spec.pool.name == pool.name,
            name,
            "pool name differs within the pool",
        );
        r.check(
            s.spec.pool.generation == pool.generation,
            name,
            "generation differs within the pool",
        );
        r.check(
            s.spec.pool.resource_slice_count == slices.len() as i64,
            name,
            format!(
                "resourceSliceCount {} but the pool has {} slices",
                s.spec.pool.resource_slice_count,
                slices.len()
            ),
        );
    }
    check_unique_names(&mut r, slices);
    if release.counters_in_own_slices() {
        check_counter_references(&mut r, slices);
    } else {
        for s in slices {
            check_counter_references(&mut r, std::slice::from_ref(s));
        }
    }
    r.violations
}

fn check_unique_names(r: &mut Report, slices: &[ResourceSlice]) {
    let mut slice_names = BTreeSet::new();
    let mut devices = BTreeSet::new();
    for s in slices {
        let name = s.metadata.name.as_deref().unwrap_or("");
        r.check(slice_names.insert(name), name, "duplicate slice name");
        for d in s.spec.devices.iter().flatten() {
            r.check(
                devices.insert(d.name.as_str()),
                name,
                format!("device {:?} appears twice in the pool", d.name),
            );
        }
    }
}

fn check_counter_references(r: &mut Report, slices: &[ResourceSlice]) {
    // counter set -> counter -> (available, consumed by all devices at once is not required)
    let mut sets: BTreeMap<&str, BTreeMap<&str, Quantity>> = BTreeMap::new();
    for s in slices {
        for set in s.spec.shared_counters.iter().flatten() {
            let counters = set
                .counters
                .iter()
                .map(|(n, c)| {
                    (
                        n.as_str(),
                        Quantity::parse(&c.value.0).unwrap_or(Quantity::ZERO),
                    )
                })
                .collect();
            if sets.insert(set.name.as_str(), counters).is_some() {
                r.fail(
                    s.metadata.name.as_deref().unwrap_or(""),
                    format!("counter set {:?} defined twice in the pool", set.name),
                );
            }
        }
    }
    for s in slices {
        for d in s.spec.devices.iter().flatten() {
            for c in d.consumes_counters.iter().flatten() {
                let at = format!(
                    "{}: device {}",
                    s.metadata.name.as_deref().unwrap_or(""),
                    d.name
                );
                let Some(set) = sets.get(c.counter_set.as_str()) else {
                    r.fail(
                        &at,
                        format!("consumes from unknown counter set {:?}", c.counter_set),
                    );
                    continue;
                };
                for (name, q) in &c.counters {
                    match set.get(name.as_str()) {
                        None => r.fail(
                            &at,
                            format!("counter {name:?} is not in set {:?}", c.counter_set),
                        ),
                        Some(avail) => r.check(
                            Quantity::parse(&q.value.0).is_ok_and(|v| v <= *avail),
                            &at,
                            format!("consumes more {name:?} than set {:?} holds", c.counter_set),
                        ),
                    }
                }
            }
        }
    }
}
