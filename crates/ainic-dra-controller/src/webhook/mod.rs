//! The NicConfig admission webhook, served by every controller replica
//! (not only the leader: it keeps no state): a ResourceClaim,
//! ResourceClaimTemplate or DeviceClass whose NicConfig the node agent
//! would refuse at prepare is refused when it is written, with the
//! agent's own message (`dra_model::admission`).
//!
//! Why a webhook and not a ValidatingAdmissionPolicy: a claim's verdict
//! depends on the DeviceClass each request names (pinned fields, what the
//! class grants), which a policy cannot look up per request, and on checks
//! (CIDR prefixes, interface names, unknown fields) that CEL would have to
//! repeat in other words. The webhook runs the agent's own function.
//!
//! TLS ([`certs`], [`tls`]): the replicas share a CA and serving
//! certificate in a Secret, made by the first to start and renewed ahead
//! of expiry; each replica puts the CA into the caBundle of the chart's
//! ValidatingWebhookConfiguration and reloads the serving key without a
//! restart, every [`REFRESH`].

pub mod certs;
pub mod review;
pub mod server;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::net::TcpListener;

use server::WebhookState;
use tls::ServingCert;

/// How often the Secret and the caBundle are checked.
pub const REFRESH: Duration = Duration::from_secs(60);
/// Wait before trying again after a failed check.
pub const RETRY: Duration = Duration::from_secs(5);

/// Where and how the webhook serves.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// The DRA driver whose NicConfig entries are judged.
    pub driver: String,
    /// Namespace of the Secret (the controller's).
    pub namespace: String,
    /// The Secret holding the certificates.
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose caBundle is kept.
    pub configuration: String,
    /// The names the API server dials (Service DNS names, or the IP of a
    /// URL): the serving certificate's subject alternative names.
    pub hosts: Vec<String>,
}

/// Listens on the webhook's address, trying again every [`RETRY`] while
/// it cannot (another process holds the port, as a second controller on a
/// host-network node would). The caller's other work goes on meanwhile:
/// without the webhook the API server admits claims unjudged (the chart's
/// failurePolicy is Ignore) and the node agent still refuses a bad
/// NicConfig at prepare, so a taken port must not stop the partitions and
/// tenants the controller keeps.
pub async fn listen(config: &WebhookConfig) -> TcpListener {
    loop {
        match TcpListener::bind(config.addr).await {
            Ok(listener) => return listener,
            Err(error) => {
                tracing::error!(
                    addr = %config.addr,
                    %error,
                    "cannot listen for the admission webhook; claims are admitted unjudged \
                     until it can (prepare still refuses a bad NicConfig); trying again"
                );
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Listens (see [`listen`]), then serves the webhook (a task of its own
/// under `tasks`) and keeps its certificates, forever.
pub async fn run(client: kube::Client, config: WebhookConfig, tasks: ainic_dra_daemon::Tasks) {
    let listener = listen(&config).await;
    let serving = Arc::new(ServingCert::default());
    let state = Arc::new(WebhookState {
        client: client.clone(),
        driver: config.driver.clone(),
        serving: serving.clone(),
    });
    tracing::info!(addr = %config.addr, hosts = %config.hosts.join(","), "admission webhook serving");
    tasks.spawn_critical("webhook server", server::serve(listener, state));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client);
    loop {
        let wait = match refresh(&secrets, &configs, &config, &serving).await {
            Ok(()) => REFRESH,
            Err(error) => {
                tracing::error!(%error, "admission webhook certificate not in place; trying again");
                RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// One round: the Secret made or renewed if due, its certificate served,
/// its CA in the caBundle.
async fn refresh(
    secrets: &Api<Secret>,
    configs: &Api<ValidatingWebhookConfiguration>,
    config: &WebhookConfig,
    serving: &ServingCert,
) -> Result<(), tls::TlsError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let set = tls::ensure_secret(secrets, &config.secret, &config.hosts, now).await?;
    // Trust first, then serve: the API server must know the CA before a
    // replica presents a certificate it signed.
    let changed = tls::inject_ca_bundle(configs, &config.configuration, &set.ca_bundle()).await?;
    if changed > 0 {
        tracing::info!(configuration = %config.configuration, webhooks = changed, "caBundle set");
    }
    if serving.install(&set, &config.secret)? {
        tracing::info!(secret = %config.secret, "serving the webhook certificate");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(addr: SocketAddr) -> WebhookConfig {
        WebhookConfig {
            addr,
            driver: "ainic.amd.com".into(),
            namespace: "ainic-dra".into(),
            secret: "webhook-tls".into(),
            configuration: "nicconfig".into(),
            hosts: vec!["127.0.0.1".into()],
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_taken_port_is_tried_again_until_it_is_free() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = config(holder.local_addr().unwrap());
        let listening = tokio::spawn(async move { listen(&config).await });
        tokio::time::sleep(RETRY * 3).await;
        assert!(!listening.is_finished(), "listened on a taken port");
        let addr = holder.local_addr().unwrap();
        drop(holder);
        let listener = tokio::time::timeout(RETRY * 2, listening)
            .await
            .expect("still not listening once the port is free")
            .unwrap();
        assert_eq!(listener.local_addr().unwrap(), addr);
    }
}
