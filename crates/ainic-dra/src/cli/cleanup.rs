//! `ainic-dra cleanup`: what `helm uninstall` runs last (the chart's
//! post-delete Job). It waits until the node agents have exited, then
//! deletes every ResourceSlice of the driver: an agent that stops keeps
//! its node's slices (a rolling update must not unpublish them), so
//! nothing else would remove them once no agent is left.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, ListParams};

/// Arguments of `ainic-dra cleanup`.
#[derive(Args, Debug)]
pub struct CleanupArgs {
    /// The driver whose ResourceSlices are deleted (their `spec.driver`).
    #[arg(long, default_value = "ainic.amd.com")]
    pub driver_name: String,

    /// The namespace of the node agents waited for.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// Label selector of the node agents' pods.
    #[arg(long, default_value = "app.kubernetes.io/component=node-agent")]
    pub agents: String,

    /// Seconds to wait for the agents to exit before giving up (an agent
    /// still running would publish its slices again).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub wait: u64,

    /// Kubeconfig file; in-cluster config when unset.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// Runs `cleanup`.
pub fn run(args: CleanupArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    runtime.block_on(async move {
        let client = ainic_dra_daemon::client::connect(args.kubeconfig.as_deref()).await?;
        wait_for_agents(&client, &args).await?;
        let deleted = delete_slices(&client, &args.driver_name).await?;
        println!(
            "deleted {deleted} ResourceSlices of driver {}",
            args.driver_name
        );
        Ok(())
    })
}

async fn wait_for_agents(client: &kube::Client, args: &CleanupArgs) -> Result<()> {
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &args.namespace);
    let params = ListParams::default().labels(&args.agents);
    let start = Instant::now();
    loop {
        let left = pods
            .list(&params)
            .await
            .with_context(|| format!("failed to list pods {} in {}", args.agents, args.namespace))?
            .items
            .len();
        if left == 0 {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(args.wait) {
            bail!(
                "{left} node agent pods ({}) still exist in {} after {} s; their slices are left",
                args.agents,
                args.namespace,
                args.wait
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn delete_slices(client: &kube::Client, driver: &str) -> Result<usize> {
    let slices: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.driver={driver}"));
    let found = slices
        .list_metadata(&params)
        .await
        .with_context(|| format!("failed to list the ResourceSlices of {driver}"))?;
    let mut deleted = 0;
    for slice in found.items {
        let Some(name) = slice.metadata.name else {
            continue;
        };
        match slices.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| format!("failed to delete ResourceSlice {name}"));
            }
        }
    }
    Ok(deleted)
}
