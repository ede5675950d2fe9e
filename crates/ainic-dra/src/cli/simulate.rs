//! `ainic-dra simulate`: what kube-scheduler would allocate for a pod's
//! claims on one node, or where it would put several pods one after
//! another, from Kubernetes objects in files (no cluster).
//!
//! Exit 0 prints the claims with `status.allocation` set (or each pod's
//! node and devices); exit 3 explains which request cannot be satisfied
//! and why (or which pods stay pending); exit 2 is invalid input.

use std::path::{Path, PathBuf};

use allocator::{Answer, Features, Release, Scenario};
use anyhow::Result;
use clap::{Args, ValueEnum};
use dra_model::FeatureGate;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::Value;

use ainic_dra_daemon::edge::Exit;

/// Arguments of `ainic-dra simulate`.
#[derive(Args, Debug)]
#[command(
    after_help = "Inputs: Node, DeviceClass, ResourceSlice, ResourceClaim objects (resource.k8s.io/v1; \
YAML with several documents, JSON, or kind: List), and Pods. Claims that already have \
status.allocation hold their devices.\n\n\
With --node: every other claim is allocated on that node, together, all or nothing, as \
kube-scheduler does for one pod (a ResourceClaimTemplate counts as a claim named after it; Pods \
are ignored; none pending: nothing to do, an empty list).\n\n\
Without --node: the Pods are placed one after another, in input order, as the scheduler binds \
them: each pod's claims (spec.resourceClaims: shared claims by name, its own from templates) go \
on the first Node, by name, that takes them all beside what earlier pods hold; a shared claim \
allocated for one pod keeps its devices and nodes for the next. The scheduler scores the nodes \
that fit and may pick another one. Nodes that are cordoned or have a NoSchedule/NoExecute taint \
the pod does not tolerate are skipped; node affinity and non-DRA resources are not looked at. A pod \
whose status names its generated claims uses those claims from the input.\n\n\
The answer follows the allocator of the Kubernetes release given by --kubernetes-version (default \
1.37): its default feature gates and its rules (counters in slices of their own and taint effect \
None from 1.35, list-typed attributes under their gate from 1.36). --feature-gates overrides single \
gates.\n\n\
Exit status: 0 = allocated (the claims are printed with status.allocation; without --node \
each pod's node and devices), 3 = cannot be allocated (stderr names the request and why; \
without --node the pods that stay pending, after the placements), 2 = invalid input.\n\n\
Examples:\n  ainic-dra slices --topology mi300x-8gpu-8nic --node-name n1 > slices.yaml\n  \
ainic-dra simulate --node n1 -f slices.yaml -f gpu-slices.yaml -f deploy/deviceclasses -f examples/gpu-nic-pcieroot.yaml\n  \
ainic-dra simulate --kubernetes-version 1.34 --feature-gates DRAConsumableCapacity=true --node n1 -f objects/\n  \
ainic-dra simulate -f nodes.yaml -f slices/ -f deploy/deviceclasses -f examples/fabric-job/job.yaml"
)]
pub struct SimulateArgs {
    /// The node to allocate on (its Node object, if given, supplies
    /// labels). Without it the input's Pods are placed on its Nodes.
    #[arg(long, value_name = "NAME")]
    node: Option<String>,

    /// The Kubernetes release whose scheduler to imitate: its default
    /// feature gates and allocation rules (1.34, 1.35, 1.36, 1.37).
    #[arg(long, value_name = "1.3x", default_value = "1.37")]
    kubernetes_version: String,

    /// Feature gates over the release's defaults, upstream syntax, e.g.
    /// `DRAConsumableCapacity=true`.
    #[arg(long, value_name = "NAME=BOOL,...", default_value = "")]
    feature_gates: String,

    /// Files or directories (their *.yaml, *.yml, *.json files) to read.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE_OR_DIR",
        required = true
    )]
    files: Vec<PathBuf>,

    /// Output format of the allocated claims.
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// Output formats of `simulate`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// One YAML document per claim.
    Yaml,
    /// A JSON list of ResourceClaim objects.
    Json,
}

/// The allocator's features for a release and `--feature-gates`; a gate
/// the allocator does not know is accepted when the driver knows it (it
/// changes only what is published), else an error naming it.
pub fn features(release: Release, gates: &str) -> Result<Features> {
    let mut features = Features::for_release(release);
    for entry in gates.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry.split_once('=').ok_or_else(|| {
            invalid(format!(
                "--feature-gates: invalid entry {entry:?}: expected Name=true or Name=false"
            ))
        })?;
        let enabled = match value.trim() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(invalid(format!(
                    "--feature-gates: invalid entry {entry:?}: expected Name=true or Name=false"
                )));
            }
        };
        let name = name.trim();
        if !features.set(name, enabled) && !driver_knows(name) {
            return Err(invalid(format!(
                "--feature-gates: unknown feature gate {name:?} (known: {})",
                Features::GATE_NAMES.join(", ")
            )));
        }
    }
    Ok(features)
}

fn driver_knows(gate: &str) -> bool {
    FeatureGate::ALL.iter().any(|g| g.name() == gate)
}

fn invalid(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: 2,
        message: message.into(),
    }
    .into()
}

/// Runs the simulation and prints the allocated claims.
pub fn run(args: SimulateArgs) -> Result<()> {
    let release = Release::parse_known(&args.kubernetes_version)
        .map_err(|e| invalid(format!("--kubernetes-version: {e}")))?;
    let features = features(release, &args.feature_gates)?;
    let mut objects = Vec::new();
    for path in &args.files {
        for file in files_of(path)? {
            objects.extend(read_file(&file)?);
        }
    }
    let scenario = Scenario::from_objects(objects).map_err(|e| invalid(e.to_string()))?;
    let Some(node) = &args.node else {
        return place(&scenario, features, args.output);
    };
    match scenario.solve(features, node) {
        Answer::Allocated(claims) => {
            print!("{}", render(&claims, args.output)?);
            Ok(())
        }
        Answer::Unallocatable(message) => Err(Exit { code: 3, message }.into()),
        Answer::Invalid(message) => Err(invalid(message)),
    }
}

/// Places the pods and prints each one's node and devices.
fn place(scenario: &Scenario, features: Features, format: Format) -> Result<()> {
    if scenario.pods.is_empty() {
        return Err(invalid(
            "no --node given and no Pods to place: name a node, or give Pods and Nodes",
        ));
    }
    let placements =
        allocator::place_pods(scenario, features).map_err(|e| invalid(e.to_string()))?;
    let report: Vec<PodReport> = placements.iter().map(placement_report).collect();
    print!("{}", render_values(&report, format)?);
    let pending: Vec<String> = placements
        .iter()
        .filter_map(|p| {
            p.outcome
                .as_ref()
                .err()
                .map(|why| format!("pod {}: {why}", p.pod))
        })
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    Err(Exit {
        code: 3,
        message: format!(
            "{} of {} pods stay pending:\n{}",
            pending.len(),
            placements.len(),
            pending.join("\n")
        ),
    }
    .into())
}

/// One pod of `simulate`'s placement report.
#[derive(serde::Serialize)]
struct PodReport<'a> {
    pod: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    claims: Vec<ClaimReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending: Option<&'a str>,
}

/// A claim of a placed pod: `request: driver/pool/device` per device.
#[derive(serde::Serialize)]
struct ClaimReport {
    claim: String,
    devices: Vec<String>,
}

fn placement_report(placement: &allocator::Placement) -> PodReport<'_> {
    let mut report = PodReport {
        pod: &placement.pod,
        node: None,
        claims: Vec::new(),
        pending: None,
    };
    match &placement.outcome {
        Err(why) => report.pending = Some(why),
        Ok((node, claims)) => {
            report.node = Some(node);
            report.claims = claims.iter().map(claim_report).collect();
        }
    }
    report
}

fn claim_report(claim: &ResourceClaim) -> ClaimReport {
    let results = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    ClaimReport {
        claim: claim.metadata.name.clone().unwrap_or_default(),
        devices: results
            .iter()
            .map(|r| format!("{}: {}/{}/{}", r.request, r.driver, r.pool, r.device))
            .collect(),
    }
}

fn render_values<T: serde::Serialize>(values: &[T], format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(values)?),
        Format::Yaml => serde_yaml_ng::to_string(values)?,
    })
}

fn render(claims: &[ResourceClaim], format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(claims)?),
        Format::Yaml => {
            let docs = claims
                .iter()
                .map(serde_yaml_ng::to_string)
                .collect::<Result<Vec<_>, _>>()?;
            docs.join("---\n")
        }
    })
}

/// `path` itself, or the YAML/JSON files directly in it, sorted by name.
fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| invalid(format!("cannot list {}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

fn read_file(path: &Path) -> Result<Vec<Value>> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read {origin}: {e}")))?;
    allocator::documents(&text).map_err(|e| invalid(format!("{origin}: {e}")))
}
