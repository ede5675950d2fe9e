//! `ainic-dra`: the node agent and the command-line tools of the AMD AI NIC
//! DRA driver. Each subcommand lives in its own file under `cli/`.

use std::process::ExitCode;

mod cli;

use clap::{Parser, Subcommand};

/// Kubernetes DRA driver and classic device plugin for AMD AI NICs (AINIC).
#[derive(Parser, Debug)]
#[command(name = "ainic-dra", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `ainic_dra=debug`.
    #[arg(long, global = true, env = "AINIC_DRA_LOG", default_value = "warn")]
    log: String,

    #[command(subcommand)]
    command: Command,
}

// Parsed once at start and moved into its command: the size of the
// biggest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Show the GPU x NIC PCIe affinity matrix of a node (like `nvidia-smi topo -m`).
    Topo(cli::topo::TopoArgs),
    /// List the AINIC functions and GPUs found in a sysfs tree, with all their facts.
    Discover(cli::discover::DiscoverArgs),
    /// Print the ResourceSlices the node agent would publish for a sysfs tree.
    Slices(cli::slices::SlicesArgs),
    /// Print the DeviceClasses shipped with the driver (exclusive PFs, VFs, shared PFs, fabric partitions).
    Deviceclasses(cli::deviceclasses::DeviceClassesArgs),
    /// Run the node agent: kubelet DRA plugin, ResourceSlice publisher, classic device plugin.
    Node(cli::node::NodeArgs),
    /// Run the fabric controller: one DRA device per RDMA fabric partition, node partition labels.
    #[cfg(feature = "controller")]
    Controller(ainic_dra_controller::cli::ControllerArgs),
    /// `controller` in a build without it (the image's node agent): says
    /// where it is.
    #[cfg(not(feature = "controller"))]
    #[command(name = "controller", hide = true, disable_help_flag = true)]
    NoController {
        /// Whatever was passed to it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Delete the driver's ResourceSlices once its node agents are gone (the chart's post-delete Job).
    Cleanup(cli::cleanup::CleanupArgs),
    /// Allocate ResourceClaims on a node as kube-scheduler would, from objects in files.
    #[cfg(feature = "tools")]
    Simulate(cli::simulate::SimulateArgs),
    /// Explain why a pod is pending, from the live cluster (read-only; also `kubectl ainic why`).
    #[cfg(feature = "tools")]
    Why(cli::why::WhyArgs),
    /// `simulate` or `why` in a build without them (the image): says so.
    #[cfg(not(feature = "tools"))]
    #[command(
        name = "simulate",
        alias = "why",
        hide = true,
        disable_help_flag = true
    )]
    Tools {
        /// Whatever was passed to it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// See the whole driver work on this machine: simulated nodes, real agents, no cluster.
    #[cfg(feature = "demo")]
    Demo(cli::demo::DemoArgs),
}

/// The name the binary answers to: `kubectl ainic` when run as the
/// kubectl plugin `kubectl-ainic` (kubectl passes the words after `ainic`
/// as they are, so the first one is the subcommand), else `ainic-dra`.
fn invoked_as() -> &'static str {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let base = std::path::Path::new(&argv0).file_name().unwrap_or_default();
    if base == "kubectl-ainic" {
        "kubectl ainic"
    } else {
        "ainic-dra"
    }
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let name = invoked_as();
    let matches = Cli::command().name(name).bin_name(name).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    ainic_dra_daemon::edge::init_logging(&cli.log);
    let result = match cli.command {
        Command::Topo(args) => cli::topo::run(args),
        Command::Discover(args) => cli::discover::run(args),
        Command::Slices(args) => cli::slices::run(args),
        Command::Deviceclasses(args) => cli::deviceclasses::run(args),
        Command::Node(args) => cli::node::run(args),
        #[cfg(feature = "controller")]
        Command::Controller(args) => ainic_dra_controller::cli::run(args),
        #[cfg(not(feature = "controller"))]
        Command::NoController { .. } => Err(anyhow::anyhow!(
            "the fabric controller is not in this build (the image's node agent leaves it out); the image runs it as /usr/bin/ainic-dra-controller, with the same flags"
        )),
        Command::Cleanup(args) => cli::cleanup::run(args),
        #[cfg(feature = "tools")]
        Command::Simulate(args) => cli::simulate::run(args),
        #[cfg(feature = "tools")]
        Command::Why(args) => cli::why::run(args),
        #[cfg(feature = "demo")]
        Command::Demo(args) => cli::demo::run(args),
        #[cfg(not(feature = "tools"))]
        Command::Tools { .. } => Err(anyhow::anyhow!(
            "simulate and why are not in this build (the image leaves out the workstation tools); use a build with the default features, e.g. `cargo install --path crates/ainic-dra`"
        )),
    };
    ainic_dra_daemon::edge::exit_code("ainic-dra", result)
}
