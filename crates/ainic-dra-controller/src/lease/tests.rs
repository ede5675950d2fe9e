//! Leader election against an in-memory Lease API (GET, POST, PUT with
//! resourceVersion checks, as the API server does them) on paused time:
//! the holder's `renewTime` is written by a clock that is hours off ours.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::SignedDuration;
use serde_json::{Value, json};

use super::*;

const NAME: &str = "ainic-dra-controller";
const DURATION: Duration = Duration::from_secs(15);

/// The one Lease of the fake API server.
#[derive(Clone, Default)]
struct Store(Arc<Mutex<Option<Lease>>>);

fn status(code: StatusCode, reason: &str) -> Response<Full<Bytes>> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "message": reason, "code": code.as_u16()});
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response
}

fn ok(code: StatusCode, lease: &Lease) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(serde_json::to_vec(lease).unwrap())));
    *response.status_mut() = code;
    response
}

impl Store {
    /// Answers one request as the API server would.
    fn answer(&self, method: &Method, body: &[u8]) -> Response<Full<Bytes>> {
        let mut stored = self.0.lock().unwrap();
        let version = |l: &Lease| l.metadata.resource_version.clone().unwrap_or_default();
        match *method {
            Method::GET => match &*stored {
                Some(lease) => ok(StatusCode::OK, lease),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            Method::POST | Method::PUT => {
                let mut lease: Lease = serde_json::from_slice(body).unwrap();
                let current = stored.as_ref().map(version);
                let expected = (*method == Method::PUT).then(|| version(&lease));
                if current != expected {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                let next = current.map_or(1, |v| v.parse::<u64>().unwrap() + 1);
                lease.metadata.resource_version = Some(next.to_string());
                *stored = Some(lease.clone());
                ok(StatusCode::OK, &lease)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }

    fn client(&self) -> kube::Client {
        let store = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let store = store.clone();
            async move {
                let method = request.method().clone();
                let body = request.into_body().collect().await.unwrap().to_bytes();
                Ok::<_, Infallible>(store.answer(&method, &body))
            }
        });
        kube::Client::new(service, "ns")
    }

    /// What another candidate, `holder`, writes when it takes or renews
    /// the Lease by its own clock, `renewed`.
    fn renew_as(&self, holder: &str, renewed: Timestamp) {
        let mut stored = self.0.lock().unwrap();
        let version = stored
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .map_or(1, |v| v.parse::<u64>().unwrap() + 1);
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": NAME, "namespace": "ns", "resourceVersion": version.to_string()},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": DURATION.as_secs(),
                     "renewTime": Value::String(MicroTime(renewed).0.to_string())},
        }))
        .unwrap();
        *stored = Some(lease);
    }

    fn holder(&self) -> Option<String> {
        let stored = self.0.lock().unwrap();
        stored.as_ref()?.spec.as_ref()?.holder_identity.clone()
    }
}

fn elector(store: &Store) -> Elector {
    let api = Api::namespaced(store.client(), "ns");
    Elector::new(api, NAME, "me", DURATION)
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_clock_is_behind_keeps_the_lease_while_it_renews() {
    let store = Store::default();
    // The holder's clock is an hour behind ours: by our wall clock its
    // every renewal looks an hour old.
    let behind = Timestamp::now() - SignedDuration::from_hours(1);
    store.renew_as("them", behind);
    let me = elector(&store);
    for round in 1..=10 {
        assert!(
            !me.try_lead().await.unwrap(),
            "round {round}: taken from a live holder"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        store.renew_as("them", behind + SignedDuration::from_secs(5 * round));
    }
    assert_eq!(store.holder().as_deref(), Some("them"));
    // It stops renewing: a full lease duration after the last renewal we
    // saw, the lease is ours.
    assert!(!me.try_lead().await.unwrap());
    tokio::time::advance(DURATION - Duration::from_secs(1)).await;
    assert!(!me.try_lead().await.unwrap(), "not before the duration");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(me.try_lead().await.unwrap());
    assert_eq!(store.holder().as_deref(), Some("me"));
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_clock_is_ahead_loses_the_lease_once_it_stops_renewing() {
    let store = Store::default();
    // An hour ahead: by our wall clock its last renewal is in the future
    // and would look fresh for an hour after it died.
    store.renew_as("them", Timestamp::now() + SignedDuration::from_hours(1));
    let me = elector(&store);
    assert!(!me.try_lead().await.unwrap());
    tokio::time::advance(DURATION - Duration::from_secs(1)).await;
    assert!(!me.try_lead().await.unwrap());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(
        me.try_lead().await.unwrap(),
        "expired a lease duration after we saw it last change"
    );
    assert_eq!(store.holder().as_deref(), Some("me"));
    // Renewing our own needs no expiry; a released lease is free at once.
    assert!(me.try_lead().await.unwrap());
    me.release().await.unwrap();
    let other = Elector::new(
        Api::namespaced(store.client(), "ns"),
        NAME,
        "other",
        DURATION,
    );
    assert!(
        other.try_lead().await.unwrap(),
        "a released lease is taken at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_free_or_missing_lease_is_taken_at_once() {
    let store = Store::default();
    let me = elector(&store);
    assert!(me.try_lead().await.unwrap(), "created");
    assert_eq!(store.holder().as_deref(), Some("me"));
    let rival = Elector::new(
        Api::namespaced(store.client(), "ns"),
        NAME,
        "rival",
        DURATION,
    );
    assert!(!rival.try_lead().await.unwrap(), "held and renewed");
}
