//! Where ResourceClaims come from: the API server in production, a map in
//! unit tests. The kubelet names a claim; the driver reads its allocation.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// Why a claim could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClaimFetchError {
    /// The claim does not exist (any more).
    #[error("resource claim {namespace}/{name} not found")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The API server could not be asked.
    #[error("failed to get resource claim {namespace}/{name}: {message}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What the client said.
        message: String,
    },
}

/// A claim's status that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("failed to write the status of resource claim {namespace}/{name}: {message}")]
pub struct StatusWriteError {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// What the client said.
    pub message: String,
}

/// Reads ResourceClaims and writes the driver's part of their status.
pub trait ClaimSource: Send + Sync {
    /// GETs one claim.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ResourceClaim, ClaimFetchError>>;

    /// Server-side applies `body` (a partial ResourceClaim) to the claim's
    /// status as field manager `manager`; a claim that is gone is no error.
    fn apply_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        manager: &'a str,
        body: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), StatusWriteError>>;
}

/// The API server, through `kube`.
#[derive(Clone)]
pub struct KubeClaims {
    client: kube::Client,
}

impl KubeClaims {
    /// Uses `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl ClaimSource for KubeClaims {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ResourceClaim, ClaimFetchError>> {
        Box::pin(async move {
            let api: kube::Api<ResourceClaim> =
                kube::Api::namespaced(self.client.clone(), namespace);
            match api.get_opt(name).await {
                Ok(Some(claim)) => Ok(claim),
                Ok(None) => Err(ClaimFetchError::NotFound {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                }),
                Err(e) => Err(ClaimFetchError::Api {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    message: e.to_string(),
                }),
            }
        })
    }

    fn apply_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        manager: &'a str,
        body: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), StatusWriteError>> {
        Box::pin(async move {
            use kube::api::{Patch, PatchParams};
            let api: kube::Api<ResourceClaim> =
                kube::Api::namespaced(self.client.clone(), namespace);
            let params = PatchParams::apply(manager).force();
            match api.patch_status(name, &params, &Patch::Apply(&body)).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(StatusWriteError {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    message: e.to_string(),
                }),
            }
        })
    }
}

/// Claims kept in memory, keyed by `namespace/name`; counts GETs.
#[cfg(test)]
#[derive(Default)]
pub struct FakeClaims {
    claims: std::sync::Mutex<std::collections::BTreeMap<String, ResourceClaim>>,
    gets: std::sync::atomic::AtomicUsize,
    held: std::sync::Mutex<Option<Held>>,
    applied: std::sync::Mutex<Vec<(String, serde_json::Value)>>,
}

/// GETs held until released, to stop a prepare in the middle.
#[cfg(test)]
#[derive(Clone)]
pub struct Held {
    /// Notified when a GET starts waiting.
    pub started: Arc<tokio::sync::Notify>,
    /// One permit per GET let through.
    pub release: Arc<tokio::sync::Semaphore>,
}

#[cfg(test)]
impl FakeClaims {
    /// Stores (or replaces) a claim.
    pub fn put(&self, claim: ResourceClaim) {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default()
        );
        self.claims.lock().unwrap().insert(key, claim);
    }

    /// Deletes a claim.
    pub fn delete(&self, namespace: &str, name: &str) {
        self.claims
            .lock()
            .unwrap()
            .remove(&format!("{namespace}/{name}"));
    }

    /// Holds every later GET until [`Held::release`] has a permit for it.
    pub fn hold(&self) -> Held {
        let held = Held {
            started: Arc::default(),
            release: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.held.lock().unwrap() = Some(held.clone());
        held
    }

    /// Every status applied: (`namespace/name`, body), in order.
    pub fn applied(&self) -> Vec<(String, serde_json::Value)> {
        self.applied.lock().unwrap().clone()
    }

    /// How many GETs were served.
    pub fn gets(&self) -> usize {
        self.gets.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
impl ClaimSource for FakeClaims {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ResourceClaim, ClaimFetchError>> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let found = self
            .claims
            .lock()
            .unwrap()
            .get(&format!("{namespace}/{name}"))
            .cloned();
        let held = self.held.lock().unwrap().clone();
        Box::pin(async move {
            if let Some(held) = held {
                held.started.notify_one();
                held.release.acquire().await.expect("not closed").forget();
            }
            found.ok_or_else(|| ClaimFetchError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
        })
    }

    fn apply_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        _manager: &'a str,
        body: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), StatusWriteError>> {
        let key = format!("{namespace}/{name}");
        self.applied.lock().unwrap().push((key, body));
        Box::pin(async { Ok(()) })
    }
}

/// Shared handle to a claim source.
pub type SharedClaims = Arc<dyn ClaimSource>;
