//! The whole node agent as one task: the DRA plugin ([`super::start`]),
//! the ResourceSlice publisher and, when asked, the classic device plugin,
//! all following the same inventory, until SIGTERM/SIGINT.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dra_model::ModelConfig;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;

use super::http::metrics::Metrics;
use super::plugin::claims::KubeClaims;
use super::publisher::{Backoff, PublisherConfig, PublisherMetrics, RunOptions, SlicePublisher};
use super::{NodeConfig, shutdown_signal, start};
use crate::classic::ClassicSettings;

/// What the agent runs.
pub struct AgentConfig {
    /// The DRA plugin's settings.
    pub node: NodeConfig,
    /// Builds the device model once the node's labels are known.
    pub model: Box<dyn FnOnce(BTreeMap<String, String>) -> Result<ModelConfig> + Send>,
    /// The classic device plugin, when `--device-plugin` is set.
    pub classic: Option<ClassicSettings>,
    /// How often the publisher re-checks its slices in the API even when
    /// nothing changed (repairs slices someone else changed or deleted).
    pub resync_every: Duration,
}

/// The node's labels (fabric facts may come from them); empty when the
/// Node cannot be read, which the publisher will report on its own.
async fn node_labels(client: &kube::Client, node: &str) -> BTreeMap<String, String> {
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    match nodes.get_opt(node).await {
        Ok(Some(n)) => n.metadata.labels.unwrap_or_default(),
        Ok(None) => {
            tracing::warn!(
                node,
                "node object not found; building the model without its labels"
            );
            BTreeMap::new()
        }
        Err(error) => {
            tracing::warn!(node, %error, "cannot read the node object; building the model without its labels");
            BTreeMap::new()
        }
    }
}

/// Runs every part of the agent until a shutdown signal.
pub async fn run(client: kube::Client, config: AgentConfig) -> Result<()> {
    let node_name = config.node.scope.pool.clone();
    let driver_name = config.node.scope.driver.clone();
    let model = (config.model)(node_labels(&client, &node_name).await)?;

    let mut metrics = Metrics::default();
    let publisher_metrics = PublisherMetrics::default();
    publisher_metrics.register(metrics.registry_mut());
    let metrics = Arc::new(metrics);

    // A classic spec left by a run with --cdi-enabled: nothing would keep
    // its device numbers current now.
    if config.classic.as_ref().is_none_or(|s| s.cdi_dir.is_none()) {
        crate::classic::cdi::remove(&config.node.cdi_dir);
    }

    let claims = Arc::new(KubeClaims::new(client.clone()));
    let started = start(config.node, claims, metrics).await?;
    let (stop_tx, stop_rx) = watch::channel(false);

    // With the classic path on, DRA publishes only the devices left to it.
    let dra_split = config.classic.as_ref().map(|s| s.config.clone());
    let classic = match config.classic {
        Some(mut settings) => {
            // The scoring's rails come from the same fabric facts as DRA's.
            settings.fabric = Some(model.clone());
            Some(
                crate::classic::start(settings, started.inventory.clone(), stop_rx.clone())
                    .context("failed to start the classic device plugin")?,
            )
        }
        None => None,
    };

    let publisher = SlicePublisher::new(
        client,
        PublisherConfig {
            node_name,
            driver_name,
            backoff: Backoff::default(),
        },
    )
    .with_metrics(publisher_metrics);
    let inventory = started.inventory.clone();
    let build = move || {
        let mut current = inventory.borrow().clone();
        if let Some(split) = &dra_split {
            current = Arc::new(dra_model::classic::dra_share(split, &current));
        }
        Ok(crate::cli::slices::build_checked(&current, &model)?.slices)
    };
    let mut options = RunOptions::new(config.resync_every);
    options.follow = Some(started.inventory.clone());
    let mut stopped = stop_rx.clone();
    let stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let publishing = tokio::spawn(super::publisher::run(publisher, build, options, stop));

    shutdown_signal().await;
    tracing::info!("shutting down");
    stop_tx.send_replace(true);
    let _ = publishing.await;
    for socket in &started.sockets {
        if let Err(error) = std::fs::remove_file(socket) {
            tracing::warn!(socket = %socket.display(), %error, "cannot remove socket");
        }
    }
    if let Some(mut tasks) = classic {
        while tasks.join_next().await.is_some() {}
    }
    Ok(())
}
