//! The locks of the sandbox hooks. Two moves of one netdev must never
//! interleave, but a slow move of one claim's netdev (netlink in a busy
//! namespace, an RDMA device that takes its time) must not hold up
//! another pod's hook: the runtime gives each hook 2 s. So:
//!
//! - [`KeyLocks`]: one lock per move key (`<claim uid>/<device>`); a hook
//!   takes the keys it will touch, all at once and in sorted order (no
//!   two hooks can deadlock), and holds them across its netlink work;
//! - a gate (`tokio::sync::RwLock`) every hook holds shared, and the
//!   runtime's `Synchronize` exclusively: its list of running sandboxes
//!   is a snapshot, so no hook may move anything between the snapshot and
//!   the end of the convergence that follows it.
//!
//! The checkpoint's own lock is held only while a change is written,
//! never across netlink work.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard, OwnedRwLockReadGuard};

/// One async lock per key, made on first use and dropped once nobody
/// holds or waits for it.
#[derive(Debug, Default)]
pub struct KeyLocks(std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>);

impl KeyLocks {
    /// Locks every key of `keys` (a sorted set: every caller takes them in
    /// one order); released when the guards drop.
    pub async fn lock_all(&self, keys: &BTreeSet<String>) -> Vec<OwnedMutexGuard<()>> {
        let locks: Vec<Arc<Mutex<()>>> = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
            keys.iter()
                .map(|key| map.entry(key.clone()).or_default().clone())
                .collect()
        };
        let mut held = Vec::with_capacity(locks.len());
        for lock in locks {
            held.push(lock.lock_owned().await);
        }
        held
    }
}

/// Keeps every hook away from a claim's netdevs while unprepare forgets
/// the claim: the gate shared, the claim's move keys held.
#[derive(Debug)]
pub struct ClaimGuard {
    pub(super) _gate: OwnedRwLockReadGuard<()>,
    pub(super) _keys: Vec<OwnedMutexGuard<()>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_key_is_exclusive_and_other_keys_are_free() {
        let locks = Arc::new(KeyLocks::default());
        let a = BTreeSet::from(["c1/pf-a".to_string()]);
        let b = BTreeSet::from(["c2/pf-b".to_string()]);
        let held = locks.lock_all(&a).await;
        // Another key: at once.
        drop(locks.lock_all(&b).await);
        let waiting = {
            let (locks, a) = (locks.clone(), a.clone());
            tokio::spawn(async move { drop(locks.lock_all(&a).await) })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the same key waits");
        drop(held);
        waiting.await.unwrap();
        assert!(
            locks
                .0
                .lock()
                .unwrap()
                .values()
                .all(|l| Arc::strong_count(l) == 1)
        );
    }
}
