//! `ainic-dra why POD` (`kubectl ainic why POD`): reads the pod and what
//! the scheduler looked at from the live cluster — only GET and LIST, it
//! never writes — and prints the `why` crate's report: a table for a person,
//! JSON or YAML for a machine.

use std::fmt::Write as _;
use std::path::PathBuf;

use allocator::Release;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Api;
use kube::api::ListParams;

use ainic_dra_why::{self as why, Cluster, Report, Settings};

/// Arguments of `ainic-dra why`.
#[derive(Args, Debug)]
#[command(
    after_help = "Reads (never writes) the pod, its claims and templates, the DeviceClasses, \
ResourceSlices, Nodes, every ResourceClaim and the pod's events, then follows kube-scheduler's \
steps (DynamicResources PreEnqueue and PreFilter; per node NodeUnschedulable, TaintToleration, \
NodeAffinity and DynamicResources with the allocator `simulate` uses) and says, per group of \
nodes, which request cannot be satisfied, why, and what would fix it. It predicts the scheduler's \
message and says whether the pod's PodScheduled condition agrees. CPU, memory and other non-DRA \
resources are not looked at.\n\n\
As a kubectl plugin (the binary installed or linked as kubectl-ainic on the PATH):\n  \
kubectl ainic why trainer-0 -n training\n  \
kubectl ainic why trainer-0 -n training -o json"
)]
pub struct WhyArgs {
    /// The pod.
    #[arg(value_name = "POD")]
    pod: String,

    /// Its namespace; default: the kubeconfig context's, else `default`.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,

    /// Kubeconfig file; default `$KUBECONFIG`, `~/.kube/config`, or in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,

    /// Kubeconfig context; default the current one.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,

    /// Output: a table for a person, JSON or YAML for a machine.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,

    /// The cluster's release, whose scheduler rules apply; default the API
    /// server's.
    #[arg(long, value_name = "1.3x")]
    kubernetes_version: Option<String>,

    /// Feature gates the cluster changed from its release's defaults.
    #[arg(long, value_name = "NAME=BOOL,...", default_value = "")]
    feature_gates: String,

    /// DRA driver name.
    #[arg(long, value_name = "NAME", default_value = dra_model::names::DEFAULT_DRIVER)]
    driver_name: String,

    /// DeviceClass of fabric partitions.
    #[arg(long, value_name = "NAME", default_value = "ainic-fabric")]
    fabric_class: String,

    /// Namespace label naming a namespace's tenant.
    #[arg(long, value_name = "KEY", default_value = "ainic.amd.com/tenant")]
    tenant_label: String,
}

/// Output formats of `why`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// Grouped by reason, for a person.
    Table,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
}

/// Runs `why` and prints the report.
pub fn run(args: WhyArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let report = runtime.block_on(ask(&args))?;
    let text = match args.output {
        Format::Table => render_table(&report),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        Format::Yaml => serde_yaml_ng::to_string(&report)?,
    };
    print!("{text}");
    Ok(())
}

async fn ask(args: &WhyArgs) -> Result<Report> {
    let (client, default_namespace) = client(args).await?;
    let namespace = args.namespace.clone().unwrap_or(default_namespace);
    let release = match &args.kubernetes_version {
        Some(v) => {
            Release::parse_known(v).map_err(|e| anyhow::anyhow!("--kubernetes-version: {e}"))?
        }
        None => {
            let version = client
                .apiserver_version()
                .await
                .context("failed to read the API server's version")?;
            let text = format!("{}.{}", version.major, version.minor.trim_end_matches('+'));
            Release::parse_known(&text).unwrap_or(Release::NEWEST)
        }
    };
    let settings = Settings {
        features: super::simulate::features(release, &args.feature_gates)?,
        driver: args.driver_name.clone(),
        fabric_class: args.fabric_class.clone(),
        tenant_label: args.tenant_label.clone(),
    };
    let cluster = read(&client, &namespace, &args.pod).await?;
    Ok(why::explain(&cluster, &settings))
}

/// A client for `--kubeconfig`/`--context`, and the context's namespace.
async fn client(args: &WhyArgs) -> Result<(kube::Client, String)> {
    ainic_dra_daemon::client::install_crypto_provider();
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("failed to load the kubeconfig context")?,
        None => kube::Config::infer().await.context(
            "no kubeconfig given and none found ($KUBECONFIG, ~/.kube/config, in-cluster)",
        )?,
    };
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).context("failed to build the Kubernetes client")?;
    Ok((client, namespace))
}

async fn list<K>(api: Api<K>, what: &str, params: &ListParams) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(params)
        .await
        .with_context(|| format!("failed to list {what}"))?
        .items)
}

/// Reads everything `why` looks at.
async fn read(client: &kube::Client, namespace: &str, pod: &str) -> Result<Cluster> {
    let c = || client.clone();
    let all = ListParams::default();
    let pod: Pod = Api::namespaced(c(), namespace)
        .get_opt(pod)
        .await
        .with_context(|| format!("failed to read pod {namespace}/{pod}"))?
        .with_context(|| format!("pod {namespace}/{pod} not found"))?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let events = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    Ok(Cluster {
        namespace: Api::<Namespace>::all(c())
            .get_opt(namespace)
            .await
            .ok()
            .flatten(),
        nodes: list(Api::<Node>::all(c()), "nodes", &all).await?,
        classes: list(Api::<DeviceClass>::all(c()), "device classes", &all).await?,
        slices: list(Api::<ResourceSlice>::all(c()), "resource slices", &all).await?,
        claims: list(Api::<ResourceClaim>::all(c()), "resource claims", &all).await?,
        templates: list(
            Api::<ResourceClaimTemplate>::namespaced(c(), namespace),
            "resource claim templates",
            &all,
        )
        .await?,
        // Served from 1.37 in v1 (earlier: alpha or beta, usually off): none then.
        taint_rules: list(Api::<DeviceTaintRule>::all(c()), "device taint rules", &all)
            .await
            .unwrap_or_default(),
        events: list(Api::<Event>::namespaced(c(), namespace), "events", &events)
            .await
            .unwrap_or_default(),
        pod,
    })
}

/// The report for a person.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "POD        {}  ({})",
        report.pod,
        if report.phase.is_empty() {
            "unknown phase"
        } else {
            &report.phase
        }
    );
    if let Some(node) = &report.node {
        let _ = writeln!(out, "SCHEDULED  on node {node}: not pending");
        return out;
    }
    match &report.scheduler {
        Some(s) => {
            let _ = writeln!(out, "SCHEDULER  {}: {}", s.reason, s.message);
        }
        None => {
            let _ = writeln!(
                out,
                "SCHEDULER  (no PodScheduled condition: the pod has not been tried)"
            );
        }
    }
    let verdict = if report.agrees {
        "agrees with the scheduler"
    } else {
        "DIFFERS from the scheduler"
    };
    match &report.predicted {
        Some(p) => {
            let _ = writeln!(out, "WHY        {p}  ({verdict})");
        }
        None => {
            let _ = writeln!(
                out,
                "WHY        the scheduler does not try the pod yet  ({verdict})"
            );
        }
    }
    write_blocked(&mut out, report);
    write_groups(&mut out, report);
    if !report.fits.is_empty() {
        let _ = writeln!(
            out,
            "\nFITS       {} (DRA, taints and node selectors allow them; look at CPU, memory and other resources)",
            report.fits.join(",")
        );
    }
    for fix in &report.fixes {
        let _ = writeln!(out, "FIX        {fix}");
    }
    for event in &report.events {
        let _ = writeln!(out, "EVENT      {event}");
    }
    out
}

/// What stops the pod before any node is looked at, with its fixes.
fn write_blocked(out: &mut String, report: &Report) {
    if let Some(b) = &report.blocked {
        let _ = writeln!(out, "\nBEFORE ANY NODE ({:?})\n  {}", b.stage, b.reason);
        if let Some(detail) = &b.detail {
            let _ = writeln!(out, "  {detail}");
        }
        for fix in &b.fixes {
            let _ = writeln!(out, "  fix: {fix}");
        }
    }
}

/// The nodes that refuse the pod, grouped by reason, with fixes.
fn write_groups(out: &mut String, report: &Report) {
    if !report.groups.is_empty() {
        let width = (report.groups.iter())
            .map(|g| g.nodes.join(",").len())
            .max()
            .unwrap_or(0)
            .clamp(5, 40);
        let _ = writeln!(out, "\n{:<width$}  REASON", "NODES");
        for g in &report.groups {
            let _ = writeln!(out, "{:<width$}  {}", g.nodes.join(","), g.reason);
            if let Some(detail) = &g.detail {
                let _ = writeln!(out, "{:<width$}    {detail}", "");
            }
            if let Some(fix) = &g.fix {
                let _ = writeln!(out, "{:<width$}    fix: {fix}", "");
            }
        }
    }
}
