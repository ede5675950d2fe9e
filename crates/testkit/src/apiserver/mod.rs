//! An in-process stand-in for the Kubernetes API server.
//!
//! Plain HTTP on `127.0.0.1` (random port), serving enough REST semantics for
//! the real `kube` client: `resource.k8s.io/v1` ResourceSlices, ResourceClaims
//! (namespaced, with `/status`) and DeviceClasses, core `v1` Nodes and
//! `events.k8s.io/v1` Events (namespaced). Verbs:
//! list (label and field selectors), watch, get, create (`generateName`, uid,
//! resourceVersion, creationTimestamp; `dryRun=All` stores nothing),
//! update (stale resourceVersion → 409 with a `Status` body), merge and
//! JSON patch, delete (with preconditions), and `/version` (1.34 unless
//! [`ApiServer::set_version`] says otherwise).
//!
//! Tests can seed and read objects directly, inject failures
//! ([`Fault`]), read the request log ([`RequestRecord`]) and every version
//! of every object ever stored ([`ApiServer::history`]).
//!
//! ```no_run
//! # async fn demo() {
//! use testkit::apiserver::{ApiServer, Fault, Verb};
//! let server = ApiServer::start().await.unwrap();
//! server.inject(Fault::status(503).on(Verb::Create).resource("resourceslices"));
//! let client = server.client();
//! # let _ = client;
//! assert_eq!(server.writes(), 0);
//! # }
//! ```

mod faults;
mod http;
mod patch;
mod resources;
mod selectors;
mod status;
mod store;
mod strategy;
mod watch;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub use faults::{Fault, RequestRecord, Verb};

use http::{Shared, lock};
use selectors::{FieldSelector, LabelSelector};

/// A running stand-in; stops (and drops its connections) when dropped.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| http::handle(shared.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = conn.await {
                tracing::debug!(%error, "api stand-in connection ended");
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

/// A `/version` answer for Kubernetes `1.<minor>`.
fn version_info(minor: u32) -> serde_json::Value {
    serde_json::json!({
        "major": "1",
        "minor": minor.to_string(),
        "gitVersion": format!("v1.{minor}.0-ainic-stand-in"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.26",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn resource_type<K: Resource>() -> &'static resources::ResourceType {
    resources::by_plural(K::URL_PATH_SEGMENT)
        .unwrap_or_else(|| panic!("the API stand-in does not serve {}", K::URL_PATH_SEGMENT))
}

impl ApiServer {
    /// Binds `127.0.0.1:0` and starts serving on the current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        let shared = Arc::new(Shared {
            store: Mutex::new(store::Store::new(seed ^ u64::from(addr.port()))),
            faults: Mutex::default(),
            log: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
            version: Mutex::new(version_info(34)),
            connections: Default::default(),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Self { addr, shared, task })
    }

    /// How many connections clients have opened so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Config` pointing at this server. Its built-in retry of
    /// 429/503/504 is off, so injected faults reach the code under test.
    pub fn config(&self) -> kube::Config {
        let uri = self.url().parse().expect("stand-in URL is a valid URI");
        let mut config = kube::Config::new(uri);
        config.default_retry = false;
        config
    }

    /// A `kube::Client` for this server (call inside a tokio runtime).
    pub fn client(&self) -> kube::Client {
        crate::testbed::choose_crypto_provider();
        kube::Client::try_from(self.config()).expect("kube client for the API stand-in")
    }

    /// Stores an object as a create would (server fields assigned, status
    /// kept) without going through HTTP or the log. Panics if invalid.
    pub fn seed<K>(&self, object: &K) -> K
    where
        K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
    {
        let rt = resource_type::<K>();
        let body = serde_json::to_value(object).expect("serializable object");
        let ns = object.metadata().namespace.clone();
        let stored = lock(&self.shared.store).create(rt, ns.as_deref(), body, true);
        let stored = stored.unwrap_or_else(|e| panic!("seeding {}: {}", rt.plural, e.message));
        self.shared
            .changed
            .send_replace(lock(&self.shared.store).resource_version());
        serde_json::from_value(stored).expect("stored object parses")
    }

    /// The stored object, if any (`namespace` is ignored for cluster-scoped types).
    pub fn get<K: Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        let found = lock(&self.shared.store)
            .get(resource_type::<K>(), namespace, name)
            .ok();
        found.map(|v| serde_json::from_value(v).expect("stored object parses"))
    }

    /// All stored objects of a type, ordered by namespace and name.
    pub fn list<K: Resource + DeserializeOwned>(&self) -> Vec<K> {
        let all = (LabelSelector::default(), FieldSelector::default());
        let values = lock(&self.shared.store).select(resource_type::<K>(), None, &all.0, &all.1);
        values
            .into_iter()
            .map(|v| serde_json::from_value(v).expect("stored object parses"))
            .collect()
    }

    /// Every change to objects of a type since the server started, oldest
    /// first: each stored version (`ADDED`, `MODIFIED`) and each deleted
    /// object (`DELETED`), seeds included. What any client could ever have
    /// read, so a test can check each version, not just the last.
    pub fn history<K: Resource + DeserializeOwned>(&self) -> Vec<(&'static str, K)> {
        let rt = resource_type::<K>();
        let store = lock(&self.shared.store);
        let events = store.events_since(0).filter(|e| e.plural == rt.plural);
        events
            .map(|e| {
                let object =
                    serde_json::from_value(e.object.clone()).expect("stored object parses");
                (e.kind, object)
            })
            .collect()
    }

    /// Adds a failure rule; rules fire in the order added.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).push(fault);
    }

    /// Injected failures not yet delivered.
    pub fn pending_faults(&self) -> usize {
        lock(&self.shared.faults).pending()
    }

    /// Every request seen so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// Number of write requests (create, update, patch, delete) received,
    /// whether they succeeded or not; dry runs are not counted.
    pub fn writes(&self) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.verb.is_write() && !r.dry_run)
            .count()
    }

    /// Makes `/version` answer Kubernetes `1.<minor>` (1.34 until set).
    pub fn set_version(&self, minor: u32) {
        *lock(&self.shared.version) = version_info(minor);
    }

    /// Forgets the request log (e.g. after a test's setup phase).
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// Makes the server behave as if the feature behind a ResourceSlice
    /// device field were disabled: the field is silently dropped from every
    /// device on create and update, as upstream drops disabled fields.
    pub fn drop_device_field(&self, field: &str) {
        let mut store = lock(&self.shared.store);
        store.strategy.dropped_device_fields.push(field.to_string());
    }

    /// The store's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
