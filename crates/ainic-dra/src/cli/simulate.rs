//! `ainic-dra simulate`: what kube-scheduler would allocate for a pod's
//! claims on one node, from Kubernetes objects in files (no cluster).
//!
//! Exit 0 prints the claims with `status.allocation` set; exit 3 explains
//! which request cannot be satisfied and why; exit 2 is invalid input.

use std::path::{Path, PathBuf};

use allocator::{AllocateError, Allocator, Features, NodeFacts};
use anyhow::Result;
use clap::{Args, ValueEnum};
use dra_model::{FeatureGate, FeatureGates};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimStatus, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::Value;

use super::Exit;

/// Arguments of `ainic-dra simulate`.
#[derive(Args, Debug)]
#[command(
    after_help = "Inputs: Node, DeviceClass, ResourceSlice, ResourceClaim objects (resource.k8s.io/v1; \
YAML with several documents, JSON, or kind: List). A ResourceClaimTemplate counts as a claim named \
after it; Pods are ignored. Claims that already have status.allocation hold their devices; all \
others are allocated together, all or nothing, as kube-scheduler does for one pod.\n\n\
Exit status: 0 = allocated (the claims are printed with status.allocation), \
3 = cannot be allocated (stderr names the request and why), 2 = invalid input.\n\n\
Examples:\n  ainic-dra slices --topology mi300x-8gpu-8nic --node-name n1 > slices.yaml\n  \
ainic-dra simulate --node n1 -f slices.yaml -f gpu-slices.yaml -f deploy/deviceclasses -f examples/gpu-nic-pcieroot.yaml"
)]
pub struct SimulateArgs {
    /// The node to allocate on (its Node object, if given, supplies labels).
    #[arg(long, value_name = "NAME")]
    node: String,

    /// Kubernetes feature gates, upstream syntax, e.g.
    /// `DRAConsumableCapacity=true`. Defaults as in Kubernetes 1.34.
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

/// Parsed here rather than by clap, so that a bad value is one line and exit 2.
fn parse_gates(s: &str) -> Result<FeatureGates> {
    s.parse()
        .map_err(|e: dra_model::FeatureGateError| invalid(format!("--feature-gates: {e}")))
}

/// The allocator's gates from the command line's.
fn features(gates: &FeatureGates) -> Features {
    let mut features = Features::default();
    for gate in FeatureGate::ALL {
        features.set(gate.name(), gates.enabled(gate));
    }
    features
}

fn invalid(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: 2,
        message: message.into(),
    }
    .into()
}

/// The objects read from the inputs, by kind.
#[derive(Default)]
struct Inputs {
    nodes: Vec<Node>,
    classes: Vec<DeviceClass>,
    slices: Vec<ResourceSlice>,
    claims: Vec<ResourceClaim>,
}

/// Runs the simulation and prints the allocated claims.
pub fn run(args: SimulateArgs) -> Result<()> {
    let gates = parse_gates(&args.feature_gates)?;
    let mut inputs = Inputs::default();
    for path in &args.files {
        for file in files_of(path)? {
            read_file(&file, &mut inputs)?;
        }
    }
    let node = node_facts(&inputs.nodes, &args.node)?;
    let (held, mut pending): (Vec<ResourceClaim>, Vec<ResourceClaim>) = inputs
        .claims
        .into_iter()
        .partition(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()));
    let allocator = Allocator::new(features(&gates), &inputs.slices, &inputs.classes, &held)
        .map_err(|e| invalid(format!("invalid input: {e}")))?;
    if pending.is_empty() {
        return Err(invalid(
            "no ResourceClaim without status.allocation in the input: nothing to allocate",
        ));
    }
    let results = match allocator.allocate(&node, &pending) {
        Ok(results) => results,
        Err(AllocateError::Input(e)) => return Err(invalid(format!("invalid input: {e}"))),
        Err(AllocateError::Unsatisfiable(f)) => {
            let message = format!(
                "cannot allocate the claims on node {}: {}",
                node.name, f.explanation
            );
            return Err(Exit { code: 3, message }.into());
        }
    };
    for (claim, result) in pending.iter_mut().zip(results) {
        let status = claim
            .status
            .get_or_insert_with(ResourceClaimStatus::default);
        status.allocation = Some(result);
    }
    print!("{}", render(&pending, args.output)?);
    Ok(())
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

fn node_facts(nodes: &[Node], name: &str) -> Result<NodeFacts> {
    match nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
    {
        Some(node) => Ok(NodeFacts::from_node(node)),
        None if nodes.is_empty() => Ok(NodeFacts::named(name)),
        None => Err(invalid(format!(
            "node {name} is not among the {} Node objects in the input",
            nodes.len()
        ))),
    }
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

fn read_file(path: &Path, inputs: &mut Inputs) -> Result<()> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read {origin}: {e}")))?;
    for (index, value) in documents(&text)
        .map_err(|e| invalid(format!("{origin}: {e}")))?
        .into_iter()
        .enumerate()
    {
        add_object(value, inputs)
            .map_err(|e| invalid(format!("{origin}: object #{}: {e}", index + 1)))?;
    }
    Ok(())
}

/// The objects of a JSON or multi-document YAML text, `kind: List` and
/// JSON arrays flattened, empty documents skipped.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let trimmed = text.trim_start();
    let raw: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        vec![serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?]
    } else {
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| format!("invalid YAML: {e}"))?;
            docs.push(serde_json::to_value(value).map_err(|e| format!("invalid YAML: {e}"))?);
        }
        docs
    };
    let mut out = Vec::new();
    let mut queue: Vec<Value> = raw.into_iter().rev().collect();
    while let Some(value) = queue.pop() {
        match value {
            Value::Null => {}
            Value::Array(items) => queue.extend(items.into_iter().rev()),
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = map
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                queue.extend(items.into_iter().rev());
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

fn add_object(value: Value, inputs: &mut Inputs) -> Result<(), String> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let expect = |wanted: &str| {
        if api_version == wanted {
            Ok(())
        } else {
            Err(format!(
                "{kind} has apiVersion {api_version:?}, expected {wanted}"
            ))
        }
    };
    let parse_error = |e: serde_json::Error| format!("invalid {kind}: {e}");
    match kind.as_str() {
        "Node" => {
            expect("v1")?;
            inputs
                .nodes
                .push(serde_json::from_value(value).map_err(parse_error)?);
        }
        "Pod" => tracing::debug!("ignoring Pod"),
        "DeviceClass" => {
            expect("resource.k8s.io/v1")?;
            inputs
                .classes
                .push(serde_json::from_value(value).map_err(parse_error)?);
        }
        "ResourceSlice" => {
            expect("resource.k8s.io/v1")?;
            inputs
                .slices
                .push(serde_json::from_value(value).map_err(parse_error)?);
        }
        "ResourceClaim" => {
            expect("resource.k8s.io/v1")?;
            inputs
                .claims
                .push(serde_json::from_value(value).map_err(parse_error)?);
        }
        "ResourceClaimTemplate" => {
            expect("resource.k8s.io/v1")?;
            let template: ResourceClaimTemplate =
                serde_json::from_value(value).map_err(parse_error)?;
            inputs.claims.push(claim_from_template(template));
        }
        "" => return Err("object has no kind".into()),
        other => {
            return Err(format!(
                "unsupported kind {other} (expected Node, DeviceClass, ResourceSlice, ResourceClaim)"
            ));
        }
    }
    Ok(())
}

/// The claim a template stamps out, named after the template.
fn claim_from_template(template: ResourceClaimTemplate) -> ResourceClaim {
    let spec = template.spec.unwrap_or_default();
    ResourceClaim {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: template.metadata.name,
            namespace: template.metadata.namespace,
            labels: spec.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: spec.metadata.and_then(|m| m.annotations),
            ..Default::default()
        },
        spec: spec.spec,
        status: None,
    }
}
