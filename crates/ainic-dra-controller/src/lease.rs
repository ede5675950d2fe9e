//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` does it: a candidate takes the Lease when it is free,
//! expired (its holder did not renew it within `leaseDurationSeconds`) or
//! already its own, by an update carrying the resourceVersion it read, so
//! two candidates can never both win one round.
//!
//! Expiry is measured on this process's own monotonic clock, from when it
//! last saw the Lease's record change (`Observed`), never by comparing
//! the holder's `renewTime` with the local wall clock: the holder's clock
//! may be minutes off this one's. So a candidate that starts, or first
//! sees a holder, waits a full lease duration before taking over from a
//! holder that stopped renewing, as client-go's does.
//!
//! Written here because the Rust crates for it (`kube-leader-election`,
//! `kube-lease-manager`) are built on older majors of `kube` than this
//! project's, which would put a second Kubernetes client into the binary.
//! Like them it has no fencing: a leader that stalls past the lease can
//! overlap briefly with the next; the controller's writes are idempotent
//! (it writes what the slices and labels should be), so that is safe.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

/// A candidate for one Lease.
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    observed: Mutex<Option<Observed>>,
}

/// The Lease's record as this process last saw it change, and when.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    record: LeaseSpec,
    at: Instant,
}

impl Observed {
    /// Whether the holder of the record seen has not renewed it (the
    /// record has not changed) for its lease duration, by this process's
    /// clock.
    fn expired(&self, now: Instant) -> bool {
        let seconds = self.record.lease_duration_seconds.unwrap_or(0).max(0);
        self.at + Duration::from_secs(seconds as u64) <= now
    }
}

impl Elector {
    /// Candidate `identity` for Lease `name` of `api`'s namespace, held
    /// for `duration` after each renewal.
    pub(crate) fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            observed: Mutex::new(None),
        }
    }

    /// Notes `record` as seen at `now`; the observation in force: the
    /// previous one while the record is unchanged (the holder has not
    /// renewed).
    fn observe(&self, record: &LeaseSpec, now: Instant) -> Observed {
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match &*observed {
            Some(seen) if seen.record == *record => seen.clone(),
            _ => {
                let seen = Observed {
                    record: record.clone(),
                    at: now,
                };
                *observed = Some(seen.clone());
                seen
            }
        }
    }

    fn spec(&self, now: Timestamp, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Takes or renews the Lease; whether this candidate leads now.
    /// `renewTime` is written from the wall clock for people and other
    /// tools to read; no candidate here compares it with its own clock.
    pub(crate) async fn try_lead(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return self.write(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = self.observe(&spec, Instant::now());
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() && !seen.expired(Instant::now()) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if mine {
            self.spec(now, spec.acquire_time, transitions)
        } else {
            self.spec(now, None, transitions + 1)
        });
        let params = PostParams::default();
        self.write(self.api.replace(&self.name, &params, &lease).await)
    }

    /// Whether a write of the Lease won it; a won record is observed now.
    fn write(&self, written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
        match written {
            Ok(lease) => {
                self.observe(&lease.spec.unwrap_or_default(), Instant::now());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up when this candidate holds it, so the next one
    /// need not wait for it to expire.
    pub(crate) async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests;
