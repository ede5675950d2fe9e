//! `ainic-dra demo`: the whole driver on this machine, no cluster needed
//! (see the `demo` crate).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

/// Arguments of `ainic-dra demo`.
#[derive(Args, Debug)]
#[command(
    after_help = "Lays out three nodes of the bundled mi300x-8gpu-8nic topology as sysfs trees, \
runs a real node agent for each against an in-process API server and kubelet simulator, allocates \
the example claims of every use case as kube-scheduler would, prepares them (CDI specs), shows what \
a container gets, and unprepares. Exit 0 when every step turned out as it should."
)]
pub struct DemoArgs {
    /// Keep every file (sysfs trees, agent logs, CDI specs, slices and
    /// claims as YAML) in this directory, which must be empty or absent.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    runtime.block_on(ainic_dra_demo::run(args.keep.as_deref()))
}
