//! The API client both deployables use: one request limit, one TLS
//! crypto provider.

use std::path::Path;

/// Most API requests in flight at once; more wait their turn. The kube
/// client speaks HTTP/1.1, one request per connection, and keeps each
/// connection a burst opened idle for 90 s with its TLS state and
/// buffers: unlimited, 100 claims prepared at once opened about 100
/// connections (100 TLS handshakes with the API server) and left about
/// 3 MB of heap in them (a heap profile after the prepare bench). A watch
/// counts only until its response headers arrive.
pub const API_REQUESTS_IN_FLIGHT: usize = 8;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The kubeconfig given could not be read.
    #[error("failed to read kubeconfig {path}")]
    Read {
        /// The file.
        path: String,
        /// What reading it said.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig given was read but does not describe a usable cluster.
    #[error("invalid kubeconfig {path}")]
    Invalid {
        /// The file.
        path: String,
        /// What loading it said.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and none was found in the environment.
    #[error("no kubeconfig given and no in-cluster or default kubeconfig found")]
    NotFound(#[source] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("failed to build the Kubernetes client")]
    Build(#[source] kube::Error),
}

/// Builds a `kube::Client` from `kubeconfig` or the environment, with at
/// most [`API_REQUESTS_IN_FLIGHT`] requests at once.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    install_crypto_provider();
    let config = match kubeconfig {
        Some(path) => {
            let shown = || path.display().to_string();
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
                    path: shown(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Invalid {
                    path: shown(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(ClientError::NotFound)?,
    };
    let limit = tower::limit::ConcurrencyLimitLayer::new(API_REQUESTS_IN_FLIGHT);
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
    Ok(builder.with_layer(&limit).build())
}

/// Makes ring the process's TLS crypto provider. rustls panics when it must
/// choose between several compiled-in providers itself (test builds link
/// aws-lc too, through a test-only dependency); the shipped agent has ring
/// alone and says so here. A second call (or a provider chosen earlier) is
/// fine.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
