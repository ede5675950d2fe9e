//! `ainic-dra node`: the node agent (DaemonSet). Serves the kubelet DRA
//! plugin, publishes this node's ResourceSlices and, with
//! `--device-plugin`, the classic device plugin; runs until SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::slices::ModelArgs;
use ainic_dra_daemon::follow::Lifetime;
use ainic_dra_node::agent::{self, AgentConfig};
use ainic_dra_node::classic::args::DevicePluginArgs;
use ainic_dra_node::plugin::resolve::Scope;
use ainic_dra_node::{BoxError, NodeConfig};
use dra_model::health::{HealthPolicy, ThresholdSpec};

/// Flags of `ainic-dra node`.
#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// This node's name (pool name of its devices).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,

    /// Root of sysfs.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,

    /// Where this process finds the host's device nodes (`/host/dev` when
    /// the host's `/dev/infiniband` is mounted at `/host/dev/infiniband`).
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    pub dev_root: PathBuf,

    /// The host's own device directory: the host paths written into CDI
    /// specs, which the runtime reads on the host.
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    pub host_dev_root: PathBuf,

    /// Kubeconfig file; default: in-cluster config, then `$KUBECONFIG`/`~/.kube/config`.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Directory of the plugin's DRA socket (`dra.sock`).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins/ainic.amd.com"
    )]
    pub plugin_dir: PathBuf,

    /// The kubelet's plugin registry directory (`<driver>-reg.sock` goes here).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    pub registry_dir: PathBuf,

    /// Where transient CDI specs of prepared claims are written.
    #[arg(long, value_name = "DIR", default_value = "/var/run/cdi")]
    pub cdi_dir: PathBuf,

    /// Where the device-metadata files of prepared claims are written
    /// (`--device-metadata`), bind-mounted from here into containers: a
    /// tmpfs such as `/var/run`, seen at the same path by the runtime, and a
    /// directory of its own (what in it is not laid out as a claim's
    /// directory is left alone). They are rebuilt from the checkpoint when
    /// lost. Default: `/var/run/ainic-dra/<driver name>`. Claims prepared
    /// before this flag existed keep their files in
    /// `<plugin dir>/dra-device-metadata` until unprepared.
    #[arg(long, value_name = "DIR")]
    pub metadata_dir: Option<PathBuf>,

    /// Where the checkpoint of prepared claims is kept (must survive restarts).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/ainic-dra")]
    pub state_dir: PathBuf,

    /// Where this boot's ID is read: the checkpoint records the boot it was
    /// written in, and what a reboot voids (netdevs in pod namespaces,
    /// device numbers, CDI specs on tmpfs) is not trusted from another.
    #[arg(long, value_name = "FILE", default_value = ainic_dra_node::checkpoint::store::KERNEL_BOOT_ID)]
    pub boot_id_file: PathBuf,

    /// This agent's own name for its kubelet sockets (the chart gives the
    /// pod's UID): `<driver>-<ID>-reg.sock` and `dra-<ID>.sock` instead of
    /// the kubelet's defaults, so that a new agent of a rolling update
    /// registers beside the old one (kubelet 1.33 and later use the newest
    /// registration) and takes the state directory over when the old one
    /// exits. Unset: the default names, and the state directory is locked
    /// before anything else.
    #[arg(long, env = "AINIC_DRA_INSTANCE_ID", value_name = "ID", value_parser = check_instance_id)]
    pub instance_id: Option<String>,

    /// The DaemonSet this agent belongs to, NAMESPACE/NAME (the chart sets
    /// it). When it is deleted (`helm uninstall`) and no claim is prepared
    /// on the node, the agent removes its CDI specs and state files on exit;
    /// any other exit keeps them for the next agent.
    #[arg(long, env = "AINIC_DRA_DAEMONSET", value_name = "NAMESPACE/NAME", value_parser = check_daemonset)]
    pub daemonset: Option<String>,

    /// Seconds to wait for another agent to release the state directory
    /// (its lock, `agent.lock`) before giving up; 0 gives up at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub state_lock_wait: u64,

    /// Address for `/healthz`, `/readyz` and `/metrics` (`IP:PORT`; the IP
    /// may be bracketed, IPv4 or IPv6, as in `[$(HOST_IP)]:8080`); empty
    /// to disable. The agent runs on the host network: the default is
    /// loopback, the chart gives the node's own IP (docs/configuration.md).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = check_http_addr)]
    pub http_addr: String,

    /// Seconds between health reports; also between re-reads of sysfs
    /// when the kernel's link events or uevents cannot be had.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub refresh_interval: u64,

    /// Seconds between cheap re-reads of the facts no kernel event
    /// announces (PCIe link, NUMA, firmware, RDMA ports of each PF) while
    /// the kernel's link events and uevents arrive (each event rediscovers
    /// at once); a difference rediscovers everything.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub rescan_interval: u64,

    /// Seconds between full rediscoveries of sysfs while the kernel's link
    /// events and uevents arrive: the safety net for facts of VFs that
    /// change with no event and that the cheap rescan does not read.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub full_rescan_interval: u64,

    /// Seconds between checks of the published ResourceSlices (and of the
    /// API server's release) when nothing changed; a check that finds them
    /// as published writes nothing. A safety net: the agent watches its own
    /// slices and repairs any change to them at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub resync_interval: u64,

    /// Mean seconds each of the agent's watches (its slices, Node and
    /// DaemonSet) lasts before the API server ends it and the agent resumes
    /// it; each asks for a time within a third of this either way. Every
    /// watch is a request: at rest they are nearly all an agent makes.
    #[arg(long, value_name = "SECONDS", default_value_t = 2700, value_parser = clap::value_parser!(u64).range(3..))]
    pub watch_timeout: u64,

    /// Seconds between reads of the fabric config file (`--fabric-config`)
    /// to see whether it changed: an edited ConfigMap takes effect without
    /// a restart (the kubelet itself updates a mounted ConfigMap within
    /// about a minute).
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub fabric_config_poll_interval: u64,

    /// Seconds between sweeps for prepared claims that are gone (deleted,
    /// recreated, or allocated elsewhere without an unprepare); each is
    /// unprepared, freeing its device. 0 turns the sweep off.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub orphan_sweep_interval: u64,

    /// Mount each prepared request's device metadata (KEP-5304: attributes
    /// and network data, `metadata.json`) read-only into the containers
    /// using it, at /var/run/kubernetes.io/dra-device-attributes/….
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub device_metadata: bool,

    /// The container runtime's NRI socket (e.g. /var/run/nri/nri.sock):
    /// the agent registers an NRI plugin there that moves the netdevs of
    /// claims in exclusive netdev mode (NicConfig `mode: netdev`) into
    /// their pod's network namespace at pod sandbox start and back at
    /// stop. Unset: no plugin, and such claims are refused at prepare.
    #[arg(long, value_name = "PATH")]
    pub nri_socket: Option<PathBuf>,

    /// The NRI plugin's index: its place (two digits) among the runtime's
    /// plugins.
    #[arg(long, value_name = "NN", default_value = "50", value_parser = check_nri_index)]
    pub nri_plugin_index: String,

    /// Judge each NIC's health by its hardware error counters too (RDMA
    /// port counters and the netdev's carrier_changes of each PF, read
    /// every --refresh-interval): degraded or unhealthy by the rates of
    /// --health-threshold, reported to the kubelet, tainted, counted in
    /// metrics and announced by Events on the Node.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub health_counters: bool,

    /// A counter's thresholds, in errors per minute over --health-window:
    /// COUNTER=DEGRADED,UNHEALTHY (`-` for a level never reached) or
    /// COUNTER=off; replaces that counter's default or adds a counter.
    /// COUNTER is a port counter (`symbol_error`, `counters/link_downed`,
    /// `hw_counters/<name>`) or a netdev one (`carrier_changes`,
    /// `statistics/<name>`). Repeatable. Defaults: carrier_changes=2,6
    /// link_downed=1,3 link_error_recovery=1,10
    /// local_link_integrity_errors=1,10 excessive_buffer_overrun_errors=1,10
    /// symbol_error=10,600 port_rcv_errors=10,600.
    #[arg(long = "health-threshold", value_name = "COUNTER=DEGRADED,UNHEALTHY")]
    pub health_thresholds: Vec<ThresholdSpec>,

    /// Seconds the counter rates are measured over.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub health_window: u64,

    /// Seconds a NIC must go without crossing a level's thresholds before
    /// it leaves that level (recovery without flapping).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub health_quiet_period: u64,

    /// Flags that shape the published devices.
    #[command(flatten)]
    pub model: ModelArgs,

    /// Flags of the classic device plugin path.
    #[command(flatten)]
    pub device_plugin: DevicePluginArgs,
}

/// `IP:PORT`, `[IPv6]:PORT`, or `[IPv4]:PORT` (so a template can bracket
/// an address of either family); empty for none.
fn parse_http_addr(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let invalid = |e: &dyn std::fmt::Display| format!("invalid address {s:?}: {e}");
    if let Some((ip, port)) = s.strip_prefix('[').and_then(|r| r.split_once("]:")) {
        let ip: std::net::IpAddr = ip.parse().map_err(|e| invalid(&e))?;
        let port: u16 = port.parse().map_err(|e| invalid(&e))?;
        return Ok(Some(SocketAddr::new(ip, port)));
    }
    s.parse().map(Some).map_err(|e| invalid(&e))
}

/// Where the device-metadata directories of drivers go by default.
const METADATA_ROOT: &str = "/var/run/ainic-dra";

/// Refuses a metadata directory that is relative (CDI specs name it to
/// the runtime on the host), a system directory, or one of `others` (the
/// agent's other directories), inside one or holding one: start-up and an
/// uninstall remove what in it looks like a claim's directory.
fn check_metadata_dir(dir: &Path, others: &[(&str, &PathBuf)]) -> Result<()> {
    let shown = dir.display();
    anyhow::ensure!(
        dir.is_absolute(),
        "--metadata-dir {shown}: must be an absolute path (CDI specs name it to the container runtime)"
    );
    let system = [
        "/", "/run", "/var", "/var/run", "/var/lib", "/tmp", "/dev", "/etc",
    ];
    anyhow::ensure!(
        !system.iter().any(|s| dir == Path::new(s)),
        "--metadata-dir {shown}: a system directory; give the agent a directory of its own (default {METADATA_ROOT}/<driver name>)"
    );
    for (flag, other) in others {
        let overlap = dir.starts_with(other) || other.starts_with(dir);
        anyhow::ensure!(
            !overlap,
            "--metadata-dir {shown} overlaps {flag} {}: give it a directory of its own",
            other.display()
        );
    }
    Ok(())
}

fn check_nri_index(s: &str) -> Result<String, String> {
    nri::Identity::new("ainic-dra", s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// An instance ID goes into socket file names: letters, digits, `-`, at
/// most 36 characters (a UID), so the registration socket's path stays
/// under the 108 bytes a unix socket path may have.
fn check_instance_id(s: &str) -> Result<String, String> {
    let ok =
        !s.is_empty() && s.len() <= 36 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then(|| s.to_string()).ok_or_else(|| {
        format!("invalid instance ID {s:?}: 1 to 36 letters, digits or '-' (a pod UID)")
    })
}

fn check_daemonset(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(s.to_string())
        }
        _ => Err(format!("invalid DaemonSet {s:?}: expected NAMESPACE/NAME")),
    }
}

fn check_http_addr(s: &str) -> Result<String, String> {
    parse_http_addr(s).map(|_| s.to_string())
}

impl NodeArgs {
    fn dev_roots(&self) -> ainic_dra_node::cdi::DevRoots {
        ainic_dra_node::cdi::DevRoots {
            seen_at: self.dev_root.clone(),
            on_host: self.host_dev_root.clone(),
        }
    }

    /// The counter health policy, or `None` when turned off.
    fn counter_health(&self) -> Result<Option<HealthPolicy>> {
        if !self.health_counters {
            return Ok(None);
        }
        let policy = HealthPolicy::new(
            &self.health_thresholds,
            Duration::from_secs(self.health_window),
            Duration::from_secs(self.health_quiet_period),
        )?;
        Ok(Some(policy))
    }

    /// `--metadata-dir`, or the default for the driver's name; refused
    /// where it is not a directory of its own.
    fn metadata_dir(&self) -> Result<PathBuf> {
        let dir = (self.metadata_dir.clone())
            .unwrap_or_else(|| Path::new(METADATA_ROOT).join(&self.model.driver_name));
        let others = [
            ("--plugin-dir", &self.plugin_dir),
            ("--registry-dir", &self.registry_dir),
            ("--cdi-dir", &self.cdi_dir),
            ("--state-dir", &self.state_dir),
        ];
        check_metadata_dir(&dir, &others)?;
        Ok(dir)
    }

    fn config(&self) -> Result<NodeConfig> {
        Ok(NodeConfig {
            scope: Scope {
                driver: self.model.driver_name.clone(),
                pool: self.node_name.clone(),
            },
            sysfs_root: self.sysfs_root.clone(),
            dev: self.dev_roots(),
            plugin_dir: self.plugin_dir.clone(),
            registry_dir: self.registry_dir.clone(),
            cdi_dir: self.cdi_dir.clone(),
            metadata_dir: self.metadata_dir()?,
            state_dir: self.state_dir.clone(),
            boot_id_file: self.boot_id_file.clone(),
            state_lock_wait: Duration::from_secs(self.state_lock_wait),
            instance: self.instance_id.clone(),
            http_addr: parse_http_addr(&self.http_addr).expect("checked by clap"),
            refresh_every: Duration::from_secs(self.refresh_interval.max(1)),
            rescan_every: Duration::from_secs(self.rescan_interval.max(1)),
            full_rescan_every: Duration::from_secs(self.full_rescan_interval.max(1)),
            sweep_every: (self.orphan_sweep_interval > 0)
                .then(|| Duration::from_secs(self.orphan_sweep_interval)),
            device_metadata: self.device_metadata,
            nri: self
                .nri_socket
                .clone()
                .map(|socket| ainic_dra_node::NriConfig {
                    socket,
                    index: self.nri_plugin_index.clone(),
                }),
            counter_health: self.counter_health()?,
        })
    }
}

/// Runs the agent until SIGTERM/SIGINT.
pub fn run(args: NodeArgs) -> Result<()> {
    // Two workers and a small blocking pool: the agent's work is short
    // socket and file I/O, and every extra thread costs stack and a malloc
    // arena (RSS), which the DaemonSet pays on every node.
    ainic_dra_daemon::memory::tune();
    let nofile = ainic_dra_node::limits::raise_nofile();
    tracing::info!(soft = ?nofile.soft, hard = ?nofile.hard, "open-file limits");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let mut classic = args
        .device_plugin
        .settings(&args.cdi_dir, &args.dev_roots())?;
    if let Some(classic) = &mut classic {
        classic.instance = args.instance_id.clone();
    }
    let model_args = args.model.clone();
    let node_name = args.node_name.clone();
    let config = AgentConfig {
        node: args.config()?,
        model: Arc::new(move |labels, fabric| {
            model_args.config_with(&node_name, labels, fabric.cloned())
        }),
        fabric_config: args.model.fabric_config.clone(),
        fabric_poll_every: Duration::from_secs(args.fabric_config_poll_interval.max(1)),
        classic,
        resync_every: Duration::from_secs(args.resync_interval.max(1)),
        kubernetes_version: args.model.kubernetes_version,
        daemonset: args.daemonset.as_ref().and_then(|d| {
            d.split_once('/')
                .map(|(ns, name)| (ns.to_string(), name.to_string()))
        }),
        watches: Lifetime {
            timeout: Duration::from_secs(args.watch_timeout),
            ..Lifetime::default()
        },
    };
    runtime.block_on(async move {
        // Built on a worker while the kubelet's sockets come up here.
        let kubeconfig = args.kubeconfig;
        let client =
            tokio::spawn(
                async move { ainic_dra_daemon::client::connect(kubeconfig.as_deref()).await },
            );
        let client = async {
            match client.await {
                Ok(built) => built.map_err(BoxError::from),
                Err(panicked) => Err(BoxError::from(panicked)),
            }
        };
        Ok(agent::run(client, config).await?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        node: NodeArgs,
    }

    #[test]
    fn flags_parse_into_a_config() {
        let w = Wrapper::try_parse_from([
            "x",
            "--node-name",
            "node-a",
            "--http-addr",
            "127.0.0.1:9",
            "--state-dir",
            "/s",
        ])
        .unwrap();
        let c = w.node.config().unwrap();
        assert_eq!(c.scope.pool, "node-a");
        assert_eq!(c.scope.driver, "ainic.amd.com");
        assert_eq!(c.http_addr, Some("127.0.0.1:9".parse().unwrap()));
        assert_eq!(c.state_dir, PathBuf::from("/s"));
        let off = Wrapper::try_parse_from(["x", "--node-name", "n", "--http-addr", ""]).unwrap();
        assert_eq!(off.node.config().unwrap().http_addr, None);
        assert!(Wrapper::try_parse_from(["x", "--node-name", "n", "--http-addr", "nope"]).is_err());
        let default = Wrapper::try_parse_from(["x", "--node-name", "n"]).unwrap();
        assert_eq!(
            default.node.config().unwrap().http_addr,
            Some("127.0.0.1:8080".parse().unwrap()),
            "loopback unless told: the agent is on the host network"
        );
        for (given, meant) in [
            ("[10.1.2.3]:8080", "10.1.2.3:8080"),
            ("[fd00::7]:8080", "[fd00::7]:8080"),
        ] {
            let w = Wrapper::try_parse_from(["x", "--node-name", "n", "--http-addr", given]);
            assert_eq!(
                w.unwrap().node.config().unwrap().http_addr,
                Some(meant.parse().unwrap())
            );
        }
        for bad in ["[]:8080", "[10.1.2.3]", "[10.1.2.3]:x", "[host]:80"] {
            assert!(
                Wrapper::try_parse_from(["x", "--node-name", "n", "--http-addr", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn health_flags_parse_into_a_policy_or_none() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["x", "--node-name", "n"];
            args.extend_from_slice(extra);
            Wrapper::try_parse_from(args)
        };
        let defaults = parse(&[]).unwrap().node.config().unwrap();
        assert_eq!(defaults.counter_health, Some(HealthPolicy::default()));
        let set = parse(&[
            "--health-threshold",
            "symbol_error=5,50",
            "--health-threshold=link_downed=off",
            "--health-window",
            "30",
            "--health-quiet-period",
            "120",
        ])
        .unwrap();
        let policy = set.node.config().unwrap().counter_health.unwrap();
        assert_eq!(policy.window(), Duration::from_secs(30));
        assert_eq!(policy.quiet(), Duration::from_secs(120));
        assert!(
            policy
                .thresholds()
                .iter()
                .all(|t| t.counter.label() != "link_downed")
        );
        let off = parse(&["--health-counters", "false"]).unwrap();
        assert_eq!(off.node.config().unwrap().counter_health, None);
        let Err(bad) = parse(&["--health-threshold", "symbol_error=9,1"]) else {
            panic!("a degraded rate above the unhealthy one was accepted");
        };
        assert!(bad.to_string().contains("degraded rate is above"), "{bad}");
        let zero = parse(&["--health-window", "0"]).unwrap();
        assert!(zero.node.config().is_err());
    }

    #[test]
    fn the_metadata_dir_is_the_drivers_own_and_a_directory_of_its_own() {
        let config = |extra: &[&str]| {
            let args = ["x", "--node-name", "n"].iter().chain(extra);
            Wrapper::try_parse_from(args).unwrap().node.config()
        };
        let dir = |extra: &[&str]| config(extra).unwrap().metadata_dir;
        assert_eq!(dir(&[]), PathBuf::from("/var/run/ainic-dra/ainic.amd.com"));
        assert_eq!(
            dir(&["--driver-name", "nic.example.com"]),
            PathBuf::from("/var/run/ainic-dra/nic.example.com")
        );
        assert_eq!(
            dir(&["--metadata-dir", "/run/md"]),
            PathBuf::from("/run/md")
        );
        for (bad, says) in [
            ("md", "must be an absolute path"),
            ("/var/run", "a system directory"),
            ("/", "a system directory"),
            (
                "/var/lib/kubelet/plugins/ainic.amd.com/md",
                "overlaps --plugin-dir",
            ),
            ("/var/lib", "a system directory"),
            ("/var/lib/ainic-dra", "overlaps --state-dir"),
            ("/var/run/cdi/md", "overlaps --cdi-dir"),
        ] {
            let Err(error) = config(&["--metadata-dir", bad]) else {
                panic!("{bad} was taken");
            };
            let error = error.to_string();
            assert!(
                error.contains(says) && error.contains(bad),
                "{bad}: {error}"
            );
        }
    }
}
