//! The driver's ResourceSlices as the controller keeps them between
//! passes, so that a pass a change triggers reads nothing of them.
//!
//! At 5,000 nodes a list of every node's slice took about 4 s (95 MB of
//! JSON), and every change cost one: a pass listed them all again. The
//! slice watch brings each change anyway; this index applies it to the
//! fabric view ([`partitions::fabric_view`]) of its slice. A list still
//! makes it whole: at the first pass, after the watch had to replay (it may
//! have missed deletions meanwhile), after an object whose version is not
//! a number, and every [`RELIST_EVERY`] as a safety net.
//!
//! A list and the watch run side by side, so either may bring a change
//! first. Each slice (and each deletion, as a tombstone) keeps its
//! resourceVersion, and an event no newer than what the index holds of
//! that slice, or than the list that made it whole, is already in it.
//! That compares versions as numbers, which the API server's storage
//! (etcd revisions) gives; Kubernetes does not promise it, so a version
//! that is not a number makes the index not whole again and the next pass
//! lists, as every pass did before.

use std::collections::BTreeMap;
use std::time::Duration;

use dra_model::partitions;
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::time::Instant;

use crate::node::follow::Seen;

/// How long the index is trusted without a list.
pub const RELIST_EVERY: Duration = Duration::from_secs(600);

/// The fabric views of the driver's slices, by name.
///
/// Each view is kept as its JSON text and read back at each pass: as
/// structs, 5,000 nodes' views took about 60 MB (a map node of eleven
/// slots for each device's four attributes), and kept for good they left
/// the controller at 222 MiB at rest (98 MiB before the index); as text
/// they take about a tenth of that, and a pass pays about as much as
/// reading them did when every pass listed them.
#[derive(Debug)]
pub struct SliceIndex {
    driver: String,
    /// Slices by name: resourceVersion and fabric view (JSON).
    slices: BTreeMap<String, (u64, Box<str>)>,
    /// Slices deleted since the last list, with the version of the deletion.
    deleted: BTreeMap<String, u64>,
    /// The version and time of the list that made it whole; `None`: not
    /// whole, the next pass lists.
    listed: Option<(u64, Instant)>,
}

impl SliceIndex {
    /// An empty index of `driver`'s slices, not whole.
    pub fn new(driver: &str) -> Self {
        Self {
            driver: driver.to_string(),
            slices: BTreeMap::new(),
            deleted: BTreeMap::new(),
            listed: None,
        }
    }

    /// Takes one thing the slice watch saw.
    pub fn apply(&mut self, seen: Seen<ResourceSlice>) {
        let (slice, deleted) = match seen {
            Seen::Applied(slice) => (slice, false),
            Seen::Deleted(slice) => (slice, true),
            // What follows may leave out what was deleted meanwhile.
            Seen::Restarted => return self.listed = None,
        };
        let name = slice.metadata.name.clone().unwrap_or_default();
        let Some(version) = version(&slice) else {
            tracing::debug!(slice = %name, "resource version not a number; the next pass lists");
            return self.listed = None;
        };
        if version <= self.latest(&name) {
            return;
        }
        if deleted {
            self.slices.remove(&name);
            self.deleted.insert(name, version);
        } else {
            self.deleted.remove(&name);
            let Some(view) = text(&partitions::fabric_view(slice, &self.driver)) else {
                return self.listed = None;
            };
            self.slices.insert(name, (version, view));
        }
    }

    /// Takes a slice the controller itself deleted (`slice` as it was):
    /// the watch's news of it, older or not, leave it deleted.
    pub fn deleted_here(&mut self, slice: &ResourceSlice) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let Some(version) = version(slice) else {
            return self.listed = None;
        };
        self.slices.remove(&name);
        let at = self.deleted.entry(name).or_default();
        *at = (*at).max(version);
    }

    /// The newest version the index knows of `name` (its state, its
    /// deletion, or the list).
    fn latest(&self, name: &str) -> u64 {
        let listed = self.listed.map_or(0, |(v, _)| v);
        let held = (self.slices.get(name).map(|(v, _)| *v))
            .or_else(|| self.deleted.get(name).copied())
            .unwrap_or(0);
        listed.max(held)
    }

    /// Makes the index what a list at `version` (its metadata's
    /// resourceVersion) returned, fabric views already taken: what the
    /// watch brought that is newer than the list stays.
    pub fn replace(&mut self, version: Option<&str>, listed: &[ResourceSlice]) {
        let Some(at) = version.and_then(|v| v.parse::<u64>().ok()) else {
            tracing::debug!(?version, "list version not a number; passes keep listing");
            self.listed = None;
            return;
        };
        let mut slices = BTreeMap::new();
        for slice in listed {
            let (Some(v), Some(view)) = (self::version(slice), text(slice)) else {
                self.listed = None;
                return;
            };
            let name = slice.metadata.name.clone().unwrap_or_default();
            slices.insert(name, (v, view));
        }
        for (name, (v, slice)) in std::mem::take(&mut self.slices) {
            if v > at {
                slices.insert(name, (v, slice));
            }
        }
        self.deleted.retain(|_, v| *v > at);
        for name in self.deleted.keys() {
            slices.remove(name);
        }
        self.slices = slices;
        self.listed = Some((at, Instant::now()));
    }

    /// Every slice's fabric view, when the index is whole and was listed
    /// within [`RELIST_EVERY`]; `None`: list.
    pub fn snapshot(&self) -> Option<Vec<ResourceSlice>> {
        let (_, when) = self.listed?;
        if when.elapsed() >= RELIST_EVERY {
            return None;
        }
        let read = (self.slices.iter()).map(|(name, (_, view))| {
            serde_json::from_str(view).inspect_err(|error| {
                tracing::warn!(slice = %name, %error, "cannot read back an indexed slice; listing");
            })
        });
        read.collect::<Result<_, _>>().ok()
    }
}

/// A view as kept: its JSON (`None`, never seen, if it cannot be written).
fn text(view: &ResourceSlice) -> Option<Box<str>> {
    serde_json::to_string(view).ok().map(String::into_boxed_str)
}

fn version(slice: &ResourceSlice) -> Option<u64> {
    slice.metadata.resource_version.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DRIVER: &str = "ainic.amd.com";

    /// Node `node`'s slice at `version`, its one device in `fabric`.
    fn slice(node: &str, version: u64, fabric: &str) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{node}-slice"), "resourceVersion": version.to_string()},
            "spec": {
                "driver": DRIVER, "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "pf0", "attributes": {
                    "ainic.amd.com/fabric": {"string": fabric},
                    "ainic.amd.com/unread": {"string": "dropped by the view"},
                }}],
            },
        }))
        .unwrap()
    }

    /// Each slice's fabric, by slice name.
    fn fabrics(index: &SliceIndex) -> BTreeMap<String, String> {
        let all = index.snapshot().expect("whole");
        (all.into_iter())
            .map(|s| {
                let device = &s.spec.devices.unwrap()[0];
                let attrs = device.attributes.as_ref().unwrap();
                assert_eq!(attrs.len(), 1, "the view keeps only what is read");
                let fabric = attrs["ainic.amd.com/fabric"].string.clone().unwrap();
                (s.metadata.name.unwrap(), fabric)
            })
            .collect()
    }

    fn listed(index: &mut SliceIndex, at: u64, slices: Vec<ResourceSlice>) {
        let views: Vec<ResourceSlice> = (slices.into_iter())
            .map(|s| partitions::fabric_view(s, DRIVER))
            .collect();
        index.replace(Some(&at.to_string()), &views);
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn not_whole_until_listed_then_changes_apply_without_a_list() {
        let mut index = SliceIndex::new(DRIVER);
        index.apply(Seen::Applied(slice("a", 5, "x")));
        assert!(index.snapshot().is_none(), "never listed");
        listed(&mut index, 10, vec![slice("a", 5, "x"), slice("b", 7, "x")]);
        index.apply(Seen::Applied(slice("a", 11, "y")));
        index.apply(Seen::Deleted(slice("b", 12, "x")));
        index.apply(Seen::Applied(slice("c", 13, "x")));
        assert_eq!(fabrics(&index), map(&[("a-slice", "y"), ("c-slice", "x")]));
    }

    #[test]
    fn what_the_list_already_holds_or_an_older_event_changes_nothing() {
        let mut index = SliceIndex::new(DRIVER);
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        // Replayed by the watch, or late: no newer than the list.
        index.apply(Seen::Applied(slice("a", 8, "old")));
        index.apply(Seen::Deleted(slice("gone", 10, "x")));
        index.apply(Seen::Applied(slice("a", 14, "y")));
        index.apply(Seen::Applied(slice("a", 12, "between")));
        assert_eq!(fabrics(&index), map(&[("a-slice", "y")]));
    }

    #[test]
    fn changes_the_watch_brought_during_a_list_survive_it() {
        let mut index = SliceIndex::new(DRIVER);
        // While a list at version 10 ran: a changed, b deleted after it.
        index.apply(Seen::Applied(slice("a", 11, "y")));
        index.apply(Seen::Deleted(slice("b", 12, "x")));
        listed(&mut index, 10, vec![slice("a", 4, "x"), slice("b", 6, "x")]);
        assert_eq!(fabrics(&index), map(&[("a-slice", "y")]));
        // A deletion older than the list is not kept for ever.
        assert!(index.deleted.contains_key("b-slice"));
        listed(&mut index, 20, vec![slice("a", 11, "y")]);
        assert!(index.deleted.is_empty());
    }

    #[test]
    fn a_replay_or_a_version_not_a_number_asks_for_a_list() {
        let mut index = SliceIndex::new(DRIVER);
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        index.apply(Seen::Restarted);
        assert!(index.snapshot().is_none(), "a replay may miss deletions");
        listed(&mut index, 20, vec![slice("a", 9, "x")]);
        let mut odd = slice("a", 21, "y");
        odd.metadata.resource_version = Some("opaque".into());
        index.apply(Seen::Applied(odd));
        assert!(index.snapshot().is_none());
        index.replace(Some("opaque"), &[]);
        assert!(index.snapshot().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_is_trusted_for_a_while_only() {
        let mut index = SliceIndex::new(DRIVER);
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        tokio::time::advance(RELIST_EVERY - Duration::from_secs(1)).await;
        assert!(index.snapshot().is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(index.snapshot().is_none());
    }
}
