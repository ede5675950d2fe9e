//! The controller's command line, the same in the `ainic-dra-controller`
//! binary (what the image runs) and in `ainic-dra controller` (a default
//! build of the workstation CLI): its flags and the process around
//! [`crate::run`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use dra_model::{FeatureGate, FeatureGates, Release};

use crate::webhook::WebhookConfig;
use crate::{self as controller, ControllerConfig};
use ainic_dra_daemon::Backoff;

/// Flags of `ainic-dra-controller` (and `ainic-dra controller`).
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Runs as a Deployment (one replica leads, the others wait on the Lease).\n\
    Example outside a cluster:\n  \
    ainic-dra-controller --kubeconfig ~/.kube/config --namespace ainic-system --identity $(hostname)"
)]
pub struct ControllerArgs {
    /// Kubeconfig; in-cluster config when not given.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// DRA driver name whose node slices are read and whose partition
    /// slices are written.
    #[arg(long, value_name = "NAME", default_value = dra_model::names::DEFAULT_DRIVER)]
    pub driver_name: String,

    /// Namespace of the leader-election Lease (the controller's own).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "ainic-dra-controller")]
    pub lease_name: String,

    /// DeviceClass of partition claims: an unallocated claim asking it for
    /// more nodes than any partition has free gets a Warning Event saying
    /// so.
    #[arg(long, value_name = "NAME", default_value = "ainic-fabric")]
    pub fabric_class: String,

    /// Namespace label whose value is the namespace's tenant: a sticky
    /// shared PF (`ainic-dra node --sticky-tenants`) is bound to the tenant
    /// of the first claim taking a share (a namespace without the label is
    /// a tenant of its own).
    #[arg(long, value_name = "KEY", default_value = "ainic.amd.com/tenant")]
    pub tenant_label: String,

    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub identity: String,

    /// Seconds between passes when nothing changed (watches trigger passes
    /// at once otherwise).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub resync_interval: u64,

    /// Kubernetes feature gates over the API server's release defaults;
    /// with `DRAConsumableCapacity` on, several jobs share a partition up
    /// to its node count.
    #[arg(long, value_name = "NAME=BOOL,...", default_value = "")]
    pub feature_gates: FeatureGates,

    /// The Kubernetes release whose defaults apply; the API server's when
    /// not given.
    #[arg(long, value_name = "1.MINOR")]
    pub kubernetes_version: Option<Release>,

    /// Serve the NicConfig admission webhook (HTTPS) on this address, e.g.
    /// `0.0.0.0:9443`; every replica serves it. Empty: no webhook.
    #[arg(long, value_name = "IP:PORT", default_value = "")]
    pub webhook_addr: String,

    /// Secret (in `--namespace`) holding the webhook's CA and serving
    /// certificate; made when missing, renewed ahead of expiry.
    #[arg(long, value_name = "NAME", default_value = "ainic-dra-webhook-tls")]
    pub webhook_secret: String,

    /// ValidatingWebhookConfiguration whose caBundle the controller keeps.
    #[arg(long, value_name = "NAME", default_value = "ainic-dra-nicconfig")]
    pub webhook_configuration: String,

    /// Names the API server reaches the webhook by (the serving
    /// certificate's DNS names or IP addresses); default
    /// `ainic-dra-webhook.<namespace>.svc`.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub webhook_hosts: Vec<String>,
}

impl ControllerArgs {
    /// The webhook's settings, or `None` when `--webhook-addr` is empty.
    fn webhook(&self) -> Result<Option<WebhookConfig>> {
        if self.webhook_addr.is_empty() {
            return Ok(None);
        }
        let addr = self.webhook_addr.parse().with_context(|| {
            format!(
                "--webhook-addr {:?} is not an IP:PORT address",
                self.webhook_addr
            )
        })?;
        let mut hosts = self.webhook_hosts.clone();
        if hosts.is_empty() {
            hosts.push(format!("ainic-dra-webhook.{}.svc", self.namespace));
        }
        Ok(Some(WebhookConfig {
            addr,
            driver: self.driver_name.clone(),
            namespace: self.namespace.clone(),
            secret: self.webhook_secret.clone(),
            configuration: self.webhook_configuration.clone(),
            hosts,
        }))
    }
}

/// Runs the controller until SIGTERM/SIGINT.
pub fn run(args: ControllerArgs) -> Result<()> {
    // One malloc arena, trimmed after each pass (ainic_dra_daemon::memory): a pass
    // reads every slice, node and claim, and frees them all at its end.
    ainic_dra_daemon::memory::tune();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let webhook = args.webhook()?;
    runtime.block_on(async move {
        let client = ainic_dra_daemon::client::connect(args.kubeconfig.as_deref()).await?;
        let (_stop, mut never) = tokio::sync::watch::channel(false);
        let release = match args.kubernetes_version {
            Some(release) => release,
            None => {
                ainic_dra_daemon::server_version::learn(&client, Backoff::default(), &mut never)
                    .await
                    .unwrap_or(Release::NEWEST)
            }
        };
        let gates = args.feature_gates.clone().with_release(release);
        let config = ControllerConfig {
            driver: args.driver_name.clone(),
            namespace: args.namespace.clone(),
            lease_name: args.lease_name.clone(),
            identity: args.identity.clone(),
            resync_every: Duration::from_secs(args.resync_interval.max(1)),
            shared: gates.enabled(FeatureGate::DraConsumableCapacity),
            fabric_class: args.fabric_class.clone(),
            tenant_label: args.tenant_label.clone(),
        };
        tracing::info!(?config, "controller starting");
        let shutdown = ainic_dra_daemon::shutdown_signal();
        controller::run(client, config, webhook, shutdown).await?;
        Ok(())
    })
}
