//! The shipped YAML is correct for what the model publishes: DeviceClasses
//! in `deploy/deviceclasses/` equal the generated ones, and every example
//! claim parses as Kubernetes objects and references only attributes and
//! capacities the driver publishes, and only classes that exist.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dra_model::deviceclass::device_classes;
use dra_model::fabric::{FabricFile, FabricSources};
use dra_model::{FeatureGate, FeatureGates, ModelConfig, ModelOptions, build_slices, sample};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceClass, ResourceClaim, ResourceClaimTemplate,
};
use serde::Deserialize;

const DRIVER: &str = "ainic.amd.com";
const PAIRING: &str = "gpu.amd.com/pciAddr";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no yaml in {}", dir.display());
    files
}

fn documents(path: &Path) -> Vec<serde_yaml_ng::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            serde_yaml_ng::Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// Attribute and capacity names the model publishes with every option on.
fn published() -> BTreeSet<String> {
    let mut o = ModelOptions::new("node-a");
    o.gates = FeatureGates::new()
        .with(FeatureGate::DraConsumableCapacity, true)
        .with(FeatureGate::DraPartitionableDevices, true);
    o.gpu_pairing_attribute = Some(PAIRING.into());
    o.pf_queue_pairs = Some(16384);
    o.vf_queue_pairs = Some(1024);
    o.shared_pfs = vec!["enp16s0".into()];
    let file = FabricFile::parse("defaults: {fabric: pod-a, leafSwitch: leaf-1}", "test").unwrap();
    o.fabric = FabricSources {
        file: Some(file),
        ..FabricSources::default()
    };
    let set = build_slices(&sample::inventory(2, 2), &ModelConfig::new(o).unwrap());
    set.devices()
        .flat_map(|d| {
            let attrs = d.attributes.iter().flatten().map(|(k, _)| k.clone());
            let caps = d.capacity.iter().flatten().map(|(k, _)| k.clone());
            attrs.chain(caps).collect::<Vec<_>>()
        })
        .collect()
}

/// `device.attributes["D"].N`, `device.capacity["D"].N` and
/// `"N" in device.attributes["D"]` in a CEL expression, as `D/N`.
fn cel_references(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["device.attributes[\"", "device.capacity[\""] {
        for (i, _) in expr.match_indices(kind) {
            let rest = &expr[i + kind.len()..];
            let Some((domain, after)) = rest.split_once("\"]") else {
                continue;
            };
            if let Some(field) = after.strip_prefix('.') {
                let name: String = field
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push(format!("{domain}/{name}"));
            }
            // `"name" in device.attributes["domain"]`
            let before = expr[..i].trim_end();
            if let Some(b) = before
                .strip_suffix(" in")
                .map(str::trim_end)
                .and_then(|b| b.strip_suffix('"'))
            {
                let name = &b[b.rfind('"').map_or(0, |q| q + 1)..];
                out.push(format!("{domain}/{name}"));
            }
        }
    }
    out
}

fn claim_references(claim: &DeviceClaim) -> (Vec<String>, Vec<String>) {
    let mut attrs = Vec::new();
    let mut classes = Vec::new();
    for c in claim.constraints.iter().flatten() {
        attrs.extend(c.match_attribute.clone());
        attrs.extend(c.distinct_attribute.clone());
    }
    for r in claim.requests.iter().flatten() {
        let exact = r
            .exactly
            .iter()
            .map(|e| (&e.device_class_name, &e.selectors, &e.capacity));
        let subs = r
            .first_available
            .iter()
            .flatten()
            .map(|s| (&s.device_class_name, &s.selectors, &s.capacity));
        for (class, selectors, capacity) in exact.chain(subs) {
            classes.push(class.clone());
            for s in selectors.iter().flatten() {
                attrs.extend(s.cel.iter().flat_map(|c| cel_references(&c.expression)));
            }
            attrs.extend(
                capacity
                    .iter()
                    .flat_map(|c| c.requests.iter().flatten().map(|(k, _)| k.clone())),
            );
        }
    }
    (attrs, classes)
}

/// Names in our domains (or the pairing attribute) that the model does not publish.
fn unpublished(names: Vec<String>, published: &BTreeSet<String>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| {
            n.starts_with("ainic.amd.com/")
                || n.starts_with("resource.kubernetes.io/")
                || n == PAIRING
        })
        .filter(|n| !published.contains(n))
        .collect()
}

#[test]
fn a_misspelt_attribute_is_caught() {
    let claim: DeviceClaim = serde_yaml_ng::from_str(
        r#"
requests:
- name: nic
  exactly:
    deviceClassName: ainic-pf
    selectors:
    - cel: {expression: 'device.attributes["ainic.amd.com"].linkSpeed > 100'}
constraints:
- matchAttribute: resource.kubernetes.io/pcieRoot
"#,
    )
    .unwrap();
    let (attrs, _) = claim_references(&claim);
    assert_eq!(
        unpublished(attrs, &published()),
        ["ainic.amd.com/linkSpeed"]
    );
}

#[test]
fn cel_reference_scanner_finds_fields_and_presence_tests() {
    let refs = cel_references(
        r#""numaNode" in device.attributes["resource.kubernetes.io"] && device.capacity["ainic.amd.com"].bandwidth.compareTo(quantity("1G")) > 0"#,
    );
    assert_eq!(
        refs,
        ["resource.kubernetes.io/numaNode", "ainic.amd.com/bandwidth"]
    );
}

#[test]
fn example_claims_parse_and_reference_published_names() {
    let published = published();
    let classes: BTreeSet<String> = device_classes(DRIVER, &[])
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    let mut claims_seen = 0;
    for path in yaml_files(&repo().join("examples")) {
        for doc in documents(&path) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let at = format!("{} ({kind})", path.display());
            let claim: DeviceClaim = match kind.as_str() {
                "ResourceClaim" => serde_yaml_ng::from_value::<ResourceClaim>(doc)
                    .map(|c| c.spec.and_then(|s| s.devices)),
                "ResourceClaimTemplate" => serde_yaml_ng::from_value::<ResourceClaimTemplate>(doc)
                    .map(|t| t.spec.and_then(|s| s.spec).and_then(|s| s.devices)),
                "Pod" => {
                    serde_yaml_ng::from_value::<Pod>(doc).unwrap_or_else(|e| panic!("{at}: {e}"));
                    continue;
                }
                other => panic!("{at}: unexpected kind {other:?}"),
            }
            .unwrap_or_else(|e| panic!("{at}: {e}"))
            .unwrap_or_default();
            claims_seen += 1;
            let (attrs, used_classes) = claim_references(&claim);
            assert!(!used_classes.is_empty(), "{at}: no request");
            let missing = unpublished(attrs, &published);
            assert!(missing.is_empty(), "{at}: not published: {missing:?}");
            for class in used_classes {
                let foreign = class.starts_with("gpu.");
                assert!(
                    foreign || classes.contains(&class),
                    "{at}: unknown device class {class}"
                );
            }
        }
    }
    assert!(claims_seen >= 7, "only {claims_seen} claims found");
}

#[test]
fn shipped_device_classes_match_the_generated_ones() {
    let generated = device_classes(DRIVER, &[]);
    let files = yaml_files(&repo().join("deploy/deviceclasses"));
    assert_eq!(files.len(), generated.len());
    for class in generated {
        let name = class.metadata.name.clone().unwrap();
        let path = repo().join(format!("deploy/deviceclasses/{name}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let shipped: DeviceClass =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            shipped,
            class,
            "{} is out of date: regenerate with `ainic-dra deviceclasses`",
            path.display()
        );
    }
}
