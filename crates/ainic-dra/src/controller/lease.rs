//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` does it: a candidate takes the Lease when it is free,
//! expired (its holder did not renew it within `leaseDurationSeconds`) or
//! already its own, by an update carrying the resourceVersion it read, so
//! two candidates can never both win one round.
//!
//! Written here because the Rust crates for it (`kube-leader-election`,
//! `kube-lease-manager`) are built on older majors of `kube` than this
//! project's, which would put a second Kubernetes client into the binary.
//! Like them it has no fencing: a leader that stalls past the lease can
//! overlap briefly with the next; the controller's writes are idempotent
//! (it writes what the slices and labels should be), so that is safe.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;

/// A candidate for one Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl Elector {
    /// Candidate `identity` for Lease `name` of `api`'s namespace, held
    /// for `duration` after each renewal.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
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
    pub async fn try_lead(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() && !expired(&spec, now) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if mine {
            self.spec(now, spec.acquire_time, transitions)
        } else {
            self.spec(now, None, transitions + 1)
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up when this candidate holds it, so the next one
    /// need not wait for it to expire.
    pub async fn release(&self) -> Result<(), kube::Error> {
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

/// Whether the holder of `spec` failed to renew it in time.
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else {
        return true;
    };
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    renewed + SignedDuration::from_secs(seconds) < now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_only_after_its_duration_since_the_last_renewal() {
        let now = Timestamp::now();
        let spec = |ago: i64, duration: i32| LeaseSpec {
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(ago))),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec(5, 15), now));
        assert!(expired(&spec(16, 15), now));
        assert!(expired(&LeaseSpec::default(), now));
    }
}
