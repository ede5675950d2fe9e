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
//! first; a list only makes the index whole if the watch had opened before
//! it began and did not replay meanwhile (a replay mentions only what
//! still exists, so a deletion between the list's snapshot and the replay
//! would be lost). Each slice (and each deletion, as a tombstone) keeps its
//! resourceVersion, and an event no newer than what the index holds of
//! that slice, or than the list that made it whole, is already in it.
//! That compares versions as numbers, which the API server's storage
//! (etcd revisions) gives; Kubernetes does not promise it, so a version
//! that is not a number makes the index not whole again and the next pass
//! lists, as every pass did before.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use dra_model::partitions;
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::time::Instant;

use ainic_dra_daemon::follow::Seen;

/// How long the index is trusted without a list.
pub(crate) const RELIST_EVERY: Duration = Duration::from_secs(600);

/// The fabric views of the driver's slices, by name.
///
/// Each view is kept as its JSON text and read back at each pass: as
/// structs, 5,000 nodes' views took about 60 MB (a map node of eleven
/// slots for each device's four attributes), and kept for good they left
/// the controller at 222 MiB at rest (98 MiB before the index); as text
/// they take about a tenth of that, and a pass pays about as much as
/// reading them did when every pass listed them.
#[derive(Debug)]
pub(crate) struct SliceIndex {
    driver: String,
    /// Slices by name: resourceVersion and fabric view (JSON).
    slices: BTreeMap<String, (u64, Box<str>)>,
    /// Slices deleted since the last list, with the version of the
    /// deletion; kept only while a list is running or the index is whole
    /// (a list taken later knows of them).
    deleted: BTreeMap<String, u64>,
    /// The version and time of the list that made it whole; `None`: not
    /// whole, the next pass lists.
    listed: Option<(u64, Instant)>,
    /// Counts the watch's replays (and anything else that makes a list
    /// running now untrustworthy); 0 until the watch first opened.
    epoch: u64,
    /// A list is running ([`SliceIndex::begin_list`]).
    listing: bool,
}

impl SliceIndex {
    /// An empty index of `driver`'s slices, not whole.
    pub(crate) fn new(driver: &str) -> Self {
        Self {
            driver: driver.to_string(),
            slices: BTreeMap::new(),
            deleted: BTreeMap::new(),
            listed: None,
            epoch: 0,
            listing: false,
        }
    }

    /// Takes one thing the slice watch saw.
    pub(crate) fn apply(&mut self, seen: Seen<ResourceSlice>) {
        let (slice, deleted) = match seen {
            Seen::Applied(slice) => (slice, false),
            Seen::Deleted(slice) => (slice, true),
            // What follows may leave out what was deleted meanwhile, and
            // its versions may be lower than those held (etcd restored).
            Seen::Restarted => return self.restart(),
        };
        let name = slice.metadata.name.clone().unwrap_or_default();
        let Some(version) = version(&slice) else {
            tracing::debug!(slice = %name, "resource version not a number; the next pass lists");
            return self.restart();
        };
        if version <= self.latest(&name) {
            return;
        }
        if deleted {
            self.slices.remove(&name);
            if self.listing || self.listed.is_some() {
                self.deleted.insert(name, version);
            }
        } else {
            self.deleted.remove(&name);
            let Some(view) = text(&partitions::fabric_view(slice, &self.driver)) else {
                return self.restart();
            };
            self.slices.insert(name, (version, view));
        }
    }

    /// Forgets everything: not whole, and a list running now does not make
    /// it whole.
    fn restart(&mut self) {
        self.epoch += 1;
        self.listed = None;
        self.slices.clear();
        self.deleted.clear();
    }

    /// Not whole: the next pass lists (a write found the index stale).
    pub(crate) fn forget(&mut self) {
        self.listed = None;
    }

    /// Takes a slice the controller itself deleted (`slice` as it was):
    /// the watch's news of it, older or not, leave it deleted.
    pub(crate) fn deleted_here(&mut self, slice: &ResourceSlice) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let Some(version) = version(slice) else {
            return self.restart();
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

    /// Says a list begins; what it returns goes to [`SliceIndex::replace`].
    pub(crate) fn begin_list(&mut self) -> u64 {
        self.listing = true;
        self.epoch
    }

    /// Makes the index what a list begun at `epoch` returned at `version`
    /// (its metadata's resourceVersion), fabric views already taken: what
    /// the watch brought that is newer than the list stays. Left not
    /// whole when the watch replayed since the list began, or had not yet
    /// opened (the list may hold what the replay no longer mentions).
    pub(crate) fn replace(&mut self, epoch: u64, version: Option<&str>, listed: &[ResourceSlice]) {
        self.listing = false;
        if epoch != self.epoch || epoch == 0 {
            tracing::debug!("the slice watch (re)started during the list; the next pass lists");
            return;
        }
        let Some(at) = version.and_then(|v| v.parse::<u64>().ok()) else {
            tracing::debug!(?version, "list version not a number; passes keep listing");
            return self.restart();
        };
        let mut slices = BTreeMap::new();
        for slice in listed {
            let (Some(v), Some(view)) = (self::version(slice), text(slice)) else {
                return self.restart();
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
    pub(crate) fn snapshot(&self) -> Option<Vec<ResourceSlice>> {
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

/// Locks `index`; one a panic left poisoned starts again empty (not
/// whole: the next pass lists) rather than be trusted half updated.
pub(crate) fn lock(index: &Mutex<SliceIndex>) -> MutexGuard<'_, SliceIndex> {
    index.lock().unwrap_or_else(|poisoned| {
        let mut guard = poisoned.into_inner();
        *guard = SliceIndex::new(&guard.driver);
        index.clear_poison();
        guard
    })
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
        let epoch = index.begin_list();
        replace(index, epoch, at, slices);
    }

    fn replace(index: &mut SliceIndex, epoch: u64, at: u64, slices: Vec<ResourceSlice>) {
        let views: Vec<ResourceSlice> = (slices.into_iter())
            .map(|s| partitions::fabric_view(s, DRIVER))
            .collect();
        index.replace(epoch, Some(&at.to_string()), &views);
    }

    /// An index whose watch has opened (its first replay begun).
    fn watched() -> SliceIndex {
        let mut index = SliceIndex::new(DRIVER);
        index.apply(Seen::Restarted);
        index
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn not_whole_until_listed_then_changes_apply_without_a_list() {
        let mut index = watched();
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
        let mut index = watched();
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        // Replayed by the watch, or late: no newer than the list.
        index.apply(Seen::Applied(slice("a", 8, "old")));
        index.apply(Seen::Deleted(slice("a", 10, "x")));
        index.apply(Seen::Applied(slice("a", 14, "y")));
        index.apply(Seen::Applied(slice("a", 12, "between")));
        assert_eq!(fabrics(&index), map(&[("a-slice", "y")]));
        assert!(
            index.deleted.is_empty(),
            "a deletion the list holds is no tombstone"
        );
    }

    #[test]
    fn changes_the_watch_brought_during_a_list_survive_it() {
        let mut index = watched();
        let epoch = index.begin_list();
        // While a list at version 10 ran: a changed, b deleted after it.
        index.apply(Seen::Applied(slice("a", 11, "y")));
        index.apply(Seen::Deleted(slice("b", 12, "x")));
        replace(
            &mut index,
            epoch,
            10,
            vec![slice("a", 4, "x"), slice("b", 6, "x")],
        );
        assert_eq!(fabrics(&index), map(&[("a-slice", "y")]));
        // A deletion older than the list is not kept for ever.
        assert!(index.deleted.contains_key("b-slice"));
        listed(&mut index, 20, vec![slice("a", 11, "y")]);
        assert!(index.deleted.is_empty());
    }

    /// Found by review: the list's snapshot saw b, b was deleted, then
    /// the watch replayed (which mentions only what exists): b would have
    /// stayed for good.
    #[test]
    fn a_list_begun_before_the_watch_replayed_or_opened_makes_it_not_whole() {
        let mut index = SliceIndex::new(DRIVER);
        let before_any_watch = index.begin_list();
        replace(&mut index, before_any_watch, 10, vec![slice("b", 6, "x")]);
        assert!(index.snapshot().is_none(), "no watch had opened");
        index.apply(Seen::Restarted);
        let snapshot_at_10 = vec![slice("a", 3, "x"), slice("b", 6, "x")];
        let epoch = index.begin_list();
        index.apply(Seen::Restarted);
        index.apply(Seen::Applied(slice("a", 3, "x")));
        replace(&mut index, epoch, 10, snapshot_at_10);
        assert!(index.snapshot().is_none(), "replayed during the list");
        listed(&mut index, 12, vec![slice("a", 3, "x")]);
        assert_eq!(fabrics(&index), map(&[("a-slice", "x")]));
    }

    /// Found by review: after an etcd restore, versions start lower; what
    /// the index held before the replay must not outrank the next list.
    #[test]
    fn a_replay_forgets_what_was_held_and_the_next_list_is_the_truth() {
        let mut index = watched();
        listed(
            &mut index,
            100,
            vec![slice("a", 90, "x"), slice("b", 95, "x")],
        );
        index.apply(Seen::Deleted(slice("c", 101, "x")));
        index.apply(Seen::Restarted);
        assert!(index.snapshot().is_none(), "a replay may miss deletions");
        listed(
            &mut index,
            20,
            vec![slice("a", 15, "y"), slice("c", 18, "x")],
        );
        assert_eq!(fabrics(&index), map(&[("a-slice", "y"), ("c-slice", "x")]));
    }

    #[test]
    fn a_version_not_a_number_asks_for_a_list() {
        let mut index = watched();
        listed(&mut index, 20, vec![slice("a", 9, "x")]);
        let mut odd = slice("a", 21, "y");
        odd.metadata.resource_version = Some("opaque".into());
        index.apply(Seen::Applied(odd));
        assert!(index.snapshot().is_none());
        listed(&mut index, 30, vec![slice("a", 9, "x")]);
        assert!(index.snapshot().is_some());
        let epoch = index.begin_list();
        index.replace(epoch, Some("opaque"), &[]);
        assert!(
            index.snapshot().is_none(),
            "a list at a version not a number"
        );
    }

    #[test]
    fn a_slice_the_controller_deleted_stays_deleted_whatever_comes_late() {
        let mut index = watched();
        listed(
            &mut index,
            10,
            vec![slice("ours", 8, "x"), slice("a", 9, "x")],
        );
        index.deleted_here(&slice("ours", 8, "x"));
        // The watch's news of it from before the delete, late.
        index.apply(Seen::Applied(slice("ours", 8, "x")));
        assert_eq!(fabrics(&index), map(&[("a-slice", "x")]));
        // Made again later: a newer version.
        index.apply(Seen::Applied(slice("ours", 15, "y")));
        assert_eq!(
            fabrics(&index),
            map(&[("a-slice", "x"), ("ours-slice", "y")])
        );
    }

    #[test]
    fn a_write_that_found_it_stale_or_a_poisoned_lock_asks_for_a_list() {
        let mut index = watched();
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        index.forget();
        assert!(index.snapshot().is_none());
        listed(&mut index, 11, vec![slice("a", 9, "x")]);
        let shared = std::sync::Arc::new(Mutex::new(index));
        let poisoner = shared.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(shared.is_poisoned());
        assert!(lock(&shared).snapshot().is_none(), "started again empty");
        assert!(!shared.is_poisoned());
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_is_trusted_for_a_while_only() {
        let mut index = watched();
        listed(&mut index, 10, vec![slice("a", 9, "x")]);
        tokio::time::advance(RELIST_EVERY - Duration::from_secs(1)).await;
        assert!(index.snapshot().is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(index.snapshot().is_none());
    }
}
