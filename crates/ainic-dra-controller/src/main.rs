//! `ainic-dra-controller`: the fabric controller as a binary of its own,
//! what the chart's controller Deployment runs. The node agent's binary
//! (`ainic-dra`) leaves the controller out of the image's build, so that
//! the agent on every node maps none of its code (see docs/benchmarks.md,
//! "a binary per deployable").

use std::process::ExitCode;

use clap::Parser;

use ainic_dra_controller::cli::{ControllerArgs, run};
use ainic_dra_daemon::edge::{exit_code, init_logging};

/// The ainic-dra fabric controller: one DRA device per RDMA fabric
/// partition, node partition labels, the NicConfig admission webhook.
#[derive(Parser, Debug)]
#[command(name = "ainic-dra-controller", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `ainic_dra_controller=debug`.
    #[arg(long, env = "AINIC_DRA_LOG", default_value = "warn")]
    log: String,

    #[command(flatten)]
    args: ControllerArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    exit_code("ainic-dra-controller", run(cli.args))
}
