//! Every YAML example in docs/ and examples/ is exercised, not just parsed:
//! claims and classes are allocated with `ainic-dra simulate` on a node
//! built from a bundled topology, the results the docs show are compared
//! with what simulate returns, Helm values are rendered through the chart,
//! and config files go through the agent's own parsers.
//!
//! A fenced block's info string says what it is: `yaml` alone = Kubernetes
//! objects; `yaml helm-values`, `yaml fabric-config`,
//! `yaml device-plugin-config`; `yaml simulate-output example=FILE` = the
//! allocation results of `examples/FILE` on the walkthrough node (`node-a`),
//! or with `node=node-v` on the `sriov-vfs` one; `yaml unsatisfiable` =
//! objects whose claims the walkthrough node cannot satisfy (simulate must
//! exit with status 3).

#[path = "helm/objects.rs"]
mod objects;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One fenced YAML block of a Markdown file.
#[derive(Debug)]
struct Block {
    origin: String,
    tags: Vec<String>,
    text: String,
}

impl Block {
    fn tag_value(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    }
}

fn yaml_blocks(markdown: &str, file: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match current.as_mut() {
            Some(_) if trimmed.starts_with("```") => blocks.extend(current.take()),
            Some(block) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            None => {
                let Some(info) = trimmed.strip_prefix("```") else {
                    continue;
                };
                let mut words = info.split_whitespace();
                let lang = words.next().unwrap_or("");
                assert_ne!(lang, "yml", "{file}:{}: write ```yaml", n + 1);
                if lang == "yaml" {
                    current = Some(Block {
                        origin: format!("{file}:{}", n + 1),
                        tags: words.map(str::to_string).collect(),
                        text: String::new(),
                    });
                }
            }
        }
    }
    assert!(current.is_none(), "{file}: unclosed code block");
    blocks
}

fn doc_blocks() -> Vec<Block> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    let mut blocks = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        blocks.extend(yaml_blocks(&std::fs::read_to_string(&file).unwrap(), &name));
    }
    blocks
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The walkthrough node of docs/use-cases.md, or the SR-IOV one.
struct Node {
    dir: tempfile::TempDir,
    name: &'static str,
    gates: &'static str,
}

impl Node {
    fn walkthrough() -> Node {
        let node = Node {
            dir: tempfile::tempdir().unwrap(),
            name: "node-a",
            gates: "DRAConsumableCapacity=true",
        };
        let fabric = repo("docs/walkthrough/config/fabric.yaml");
        let out = bin()
            .args([
                "slices",
                "--topology",
                "mi300x-8gpu-8nic",
                "--node-name",
                "node-a",
            ])
            .args([
                "--gpu-pairing-attribute",
                "gpu.amd.com/pciAddr",
                "--pf-queue-pairs",
                "16384",
            ])
            .arg("--fabric-config")
            .arg(&fabric)
            .args(["--feature-gates", node.gates, "--shared-pfs", "enp228s0"])
            .output()
            .unwrap();
        std::fs::write(
            node.dir.path().join("nic-slices.yaml"),
            ok(out, "slices").stdout,
        )
        .unwrap();
        // The tenant classes the docs' tenant examples name
        // (`ainic-dra deviceclasses --tenant team-a --tenant team-b`).
        let tenants = ["team-a".to_string(), "team-b".to_string()];
        let classes: Vec<_> = dra_model::deviceclass::device_classes("ainic.amd.com", &tenants)
            .into_iter()
            .skip(dra_model::deviceclass::device_classes("ainic.amd.com", &[]).len())
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap();
                v["apiVersion"] = json!("resource.k8s.io/v1");
                v["kind"] = json!("DeviceClass");
                v
            })
            .collect();
        std::fs::write(
            node.dir.path().join("tenant-classes.json"),
            serde_json::to_vec(&classes).unwrap(),
        )
        .unwrap();
        node
    }

    fn sriov() -> Node {
        let node = Node {
            dir: tempfile::tempdir().unwrap(),
            name: "node-v",
            gates: "",
        };
        let out = bin()
            .args(["slices", "--topology", "sriov-vfs", "--node-name", "node-v"])
            .output()
            .unwrap();
        std::fs::write(node.dir.path().join("vfs.yaml"), ok(out, "slices").stdout).unwrap();
        node
    }

    fn simulate(&self, inputs: &[&Path]) -> Output {
        let mut cmd = bin();
        cmd.args([
            "simulate",
            "--node",
            self.name,
            "-o",
            "json",
            "--feature-gates",
            self.gates,
        ]);
        cmd.arg("-f").arg(self.dir.path());
        cmd.arg("-f").arg(repo("deploy/deviceclasses"));
        if self.name == "node-a" {
            cmd.arg("-f").arg(repo("docs/walkthrough"));
        }
        for input in inputs {
            cmd.arg("-f").arg(input);
        }
        cmd.output().unwrap()
    }

    fn allocate(&self, inputs: &[&Path], what: &str) -> Vec<Value> {
        let out = ok(self.simulate(inputs), what);
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// `status.allocation.devices.results` of each claim, `shareID` left out
/// (it is random).
fn results(claims: &[Value]) -> Vec<Value> {
    claims
        .iter()
        .flat_map(|c| {
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .unwrap()
                .clone()
        })
        .map(|mut r| {
            r.as_object_mut().unwrap().remove("shareID");
            r
        })
        .collect()
}

/// Checks every NicConfig in the objects' `config` lists.
fn check_nic_configs(objects: &[Value], origin: &str) {
    for object in objects {
        let configs = match object["kind"].as_str() {
            Some("DeviceClass") => &object["spec"]["config"],
            Some("ResourceClaim") => &object["spec"]["devices"]["config"],
            Some("ResourceClaimTemplate") => &object["spec"]["spec"]["devices"]["config"],
            _ => continue,
        };
        for config in configs.as_array().into_iter().flatten() {
            let opaque = &config["opaque"];
            if opaque["driver"] == "ainic.amd.com" {
                let parsed = dra_model::nic_config::NicConfigObject::parse(&opaque["parameters"])
                    .unwrap_or_else(|e| panic!("{origin}: NicConfig rejected: {e}"));
                assert_eq!(
                    parsed.api_version,
                    dra_model::nic_config::API_VERSION,
                    "{origin}"
                );
                assert_eq!(parsed.kind, dra_model::nic_config::KIND, "{origin}");
            }
        }
    }
}

/// Kubernetes objects from a docs block: claims are allocated; a block of
/// DeviceClasses only is exercised by one claim per class.
fn exercise_objects(block: &Block, node: &Node) {
    let objects = documents(&block.text);
    assert!(!objects.is_empty(), "{}: empty block", block.origin);
    check_nic_configs(&objects, &block.origin);
    let path = node.dir.path().join("block").join("objects.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut inputs = objects.clone();
    let has_claims = objects.iter().any(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ResourceClaim" | "ResourceClaimTemplate")
        )
    });
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        assert!(
            matches!(
                kind,
                "ResourceClaim" | "ResourceClaimTemplate" | "DeviceClass" | "Pod"
            ),
            "{}: unexpected kind {kind:?}",
            block.origin
        );
        if kind == "DeviceClass" && !has_claims {
            objects::check_typed(object).unwrap_or_else(|e| panic!("{}: {e}", block.origin));
            let class = object["metadata"]["name"].as_str().unwrap();
            inputs.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": format!("uses-{class}"), "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": class}}]}}}));
        }
    }
    std::fs::write(&path, serde_json::to_vec(&inputs).unwrap()).unwrap();
    let claims = node.allocate(&[&path], &block.origin);
    assert!(!claims.is_empty(), "{}", block.origin);
    std::fs::remove_file(&path).unwrap();
}

/// The block's text in a file of its own (kept until the test ends).
fn block_file(block: &Block) -> tempfile::TempPath {
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), &block.text).unwrap();
    file.into_temp_path()
}

fn is_kubernetes(text: &str) -> bool {
    documents(text).iter().all(|d| d.get("kind").is_some())
}

/// A block that is not a Kubernetes object (docs/classic.md has two): a
/// container's `resources`, or a classic device plugin config file.
fn exercise_fragment(block: &Block) {
    let value: Value = serde_yaml_ng::from_str(&block.text).unwrap();
    if value["resources"].get("limits").is_some() {
        let resources: k8s_openapi::api::core::v1::ResourceRequirements =
            serde_json::from_value(value["resources"].clone())
                .unwrap_or_else(|e| panic!("{}: {e}", block.origin));
        let defaults = dra_model::classic::ClassicConfig::default();
        for name in resources.limits.unwrap().keys() {
            assert!(
                defaults.resources.iter().any(|r| r.name.as_str() == name),
                "{}: {name} is not a classic resource",
                block.origin
            );
        }
    } else if value.get("resources").is_some() || value.get("dra").is_some() {
        dra_model::classic::ClassicConfig::from_yaml(&block.text, Path::new(&block.origin))
            .unwrap_or_else(|e| panic!("{e}"));
    } else {
        panic!(
            "{}: a yaml block the test does not know how to exercise",
            block.origin
        );
    }
}

fn exercise_helm_values(block: &Block) {
    let values: Value = serde_yaml_ng::from_str(&block.text).unwrap();
    let rendered = testkit::testbed::helm::template(
        &repo("deploy/helm/ainic-dra"),
        "ainic-dra",
        "ainic-system",
        &values,
        "1.37.0",
    )
    .unwrap_or_else(|e| panic!("{}: {e}", block.origin));
    for r in &rendered {
        objects::check_typed(&r.object).unwrap_or_else(|e| panic!("{}: {e}", block.origin));
    }
    let daemonset = rendered
        .iter()
        .find(|r| r.object["kind"] == "DaemonSet")
        .unwrap();
    // `$(HOST_IP)` expanded as the kubelet does, from the pod's status.hostIP.
    let args: Vec<String> = daemonset.object["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().replace("$(HOST_IP)", "10.0.0.5"))
        .collect();
    ok(
        bin().args(&args).arg("--help").output().unwrap(),
        &block.origin,
    );
    let config = rendered.iter().find(|r| r.object["kind"] == "ConfigMap");
    if let Some(text) = config.and_then(|c| c.object["data"]["device-plugin.yaml"].as_str()) {
        dra_model::classic::ClassicConfig::from_yaml(text, Path::new(&block.origin))
            .unwrap_or_else(|e| panic!("{}: {e}", block.origin));
    }
}

fn exercise_simulate_output(block: &Block, walkthrough: &Node, sriov: &Node) {
    let node = match block.tag_value("node") {
        None | Some("node-a") => walkthrough,
        Some("node-v") => sriov,
        Some(other) => panic!("{}: no simulate node {other}", block.origin),
    };
    let example = block
        .tag_value("example")
        .expect("simulate-output needs example=FILE");
    let shown: Value = serde_yaml_ng::from_str(&block.text).unwrap();
    let mut shown = shown.as_array().unwrap().clone();
    for r in &mut shown {
        r.as_object_mut().unwrap().remove("shareID");
    }
    let claims = node.allocate(&[&repo(&format!("examples/{example}"))], &block.origin);
    assert_eq!(
        results(&claims),
        shown,
        "{}: docs disagree with simulate",
        block.origin
    );
}

/// Kueue objects: a Topology's levels and a flavor's node labels name
/// only labels the fabric controller keeps, or the hostname.
fn exercise_kueue(block: &Block) {
    let objects = documents(&block.text);
    let known = |label: &str| {
        dra_model::partitions::NODE_LABELS.contains(&label) || label == "kubernetes.io/hostname"
    };
    for object in &objects {
        assert!(
            object["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("kueue.x-k8s.io/")),
            "{}: not a Kueue object",
            block.origin
        );
        let levels = object["spec"]["levels"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let labels = levels
            .iter()
            .filter_map(|l| l["nodeLabel"].as_str().map(str::to_owned))
            .chain(
                (object["spec"]["nodeLabels"]
                    .as_object()
                    .into_iter()
                    .flatten())
                .map(|(k, _)| k.clone()),
            );
        for label in labels {
            assert!(
                known(&label),
                "{}: label {label} is not kept by the controller",
                block.origin
            );
        }
    }
    assert!(
        objects.iter().any(|o| o["kind"] == "Topology"),
        "{}: no Topology",
        block.origin
    );
}

#[test]
fn every_yaml_block_in_the_docs_is_exercised() {
    let node = Node::walkthrough();
    let sriov = Node::sriov();
    let blocks = doc_blocks();
    assert!(blocks.len() >= 10, "found only {} blocks", blocks.len());
    let mut outputs = 0;
    for block in &blocks {
        match block.tags.first().map(String::as_str) {
            None if is_kubernetes(&block.text) => exercise_objects(block, &node),
            None => exercise_fragment(block),
            Some("helm-values") => exercise_helm_values(block),
            Some("fabric-config") => {
                dra_model::fabric::FabricFile::parse(&block.text, &block.origin)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Some("device-plugin-config") => {
                dra_model::classic::ClassicConfig::from_yaml(&block.text, Path::new(&block.origin))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Some("simulate-output") => {
                exercise_simulate_output(block, &node, &sriov);
                outputs += 1;
            }
            Some("kueue") => exercise_kueue(block),
            Some("unsatisfiable") => {
                let out = node.simulate(&[&block_file(block)]);
                assert_eq!(out.status.code(), Some(3), "{}: {out:?}", block.origin);
            }
            Some(other) => panic!("{}: unknown block tag {other:?}", block.origin),
        }
    }
    assert!(
        outputs >= 6,
        "use-cases.md shows {outputs} simulate outputs"
    );
}

#[test]
fn every_example_file_allocates() {
    let walkthrough = Node::walkthrough();
    let sriov = Node::sriov();
    let mut seen = 0;
    for entry in std::fs::read_dir(repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let objects = documents(&std::fs::read_to_string(&path).unwrap());
        check_nic_configs(&objects, &name);
        let node = if name == "vfs.yaml" || name == "same-rail.yaml" {
            &sriov
        } else {
            &walkthrough
        };
        let claims = node.allocate(&[&path], &name);
        let wanted = objects
            .iter()
            .filter(|o| {
                matches!(
                    o["kind"].as_str(),
                    Some("ResourceClaim" | "ResourceClaimTemplate")
                )
            })
            .count();
        assert_eq!(claims.len(), wanted, "{name}");
        assert!(
            results(&claims).iter().all(|r| r["pool"] == node.name),
            "{name}"
        );
        seen += 1;
    }
    assert!(seen >= 7, "only {seen} examples");
}

#[test]
fn walkthrough_inputs_are_valid() {
    let fabric = std::fs::read_to_string(repo("docs/walkthrough/config/fabric.yaml")).unwrap();
    let parsed = dra_model::fabric::FabricFile::parse(&fabric, "fabric.yaml").unwrap();
    assert_eq!(parsed.nodes["node-c"].fabric.as_deref(), Some("pod-b"));
    for file in ["gpu-slice.yaml", "gpu-class.yaml"] {
        let text = std::fs::read_to_string(repo(&format!("docs/walkthrough/{file}"))).unwrap();
        for object in documents(&text) {
            match object["kind"].as_str() {
                Some("ResourceSlice") => {
                    let _: k8s_openapi::api::resource::v1::ResourceSlice =
                        serde_json::from_value(object).unwrap();
                }
                _ => objects::check_typed(&object).unwrap(),
            }
        }
    }
}

#[test]
fn a_claim_outside_the_partition_is_explained() {
    // docs/use-cases.md: node-c is in pod-b, so the pod-a claim fails there.
    let node = Node {
        dir: tempfile::tempdir().unwrap(),
        name: "node-c",
        gates: "",
    };
    let out = bin()
        .args([
            "slices",
            "--topology",
            "mi300x-8gpu-8nic",
            "--node-name",
            "node-c",
            "--fabric-config",
        ])
        .arg(repo("docs/walkthrough/config/fabric.yaml"))
        .output()
        .unwrap();
    std::fs::write(node.dir.path().join("c.yaml"), ok(out, "slices").stdout).unwrap();
    let out = node.simulate(&[&repo("examples/fabric-partition.yaml")]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let docs = std::fs::read_to_string(repo("docs/use-cases.md")).unwrap();
    let said = stderr.lines().last().unwrap();
    let said = flat(said.split_once("request nic:").unwrap().1);
    let docs_flat = flat(&docs);
    assert!(
        docs_flat.contains(&said),
        "use-cases.md should quote: {said}"
    );
}

#[test]
fn a_rail_constraint_that_cannot_be_met_is_explained() {
    // docs/use-cases.md: node-a has one NIC per rail and no VFs, so the
    // same-rail claim written for PFs fails there, naming the constraint.
    let node = Node::walkthrough();
    let docs = std::fs::read_to_string(repo("docs/use-cases.md")).unwrap();
    let claim = yaml_blocks(&docs, "use-cases.md")
        .into_iter()
        .find(|b| {
            b.tags == ["unsatisfiable"] && b.text.contains("name: data-and-storage-on-one-rail")
        })
        .expect("use-cases.md shows the PF same-rail claim");
    let out = node.simulate(&[&block_file(&claim)]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = stderr.lines().last().unwrap();
    assert!(
        said.contains("satisfy matchAttribute ainic.amd.com/rail"),
        "{said}"
    );
    let said = flat(said.split_once("request storage:").unwrap().1);
    assert!(
        flat(&docs).contains(&said),
        "use-cases.md should quote: {said}"
    );
}

/// Text as one line: comment markers gone, whitespace runs collapsed.
fn flat(text: &str) -> String {
    text.lines()
        .map(|l| l.trim().trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn block_parser_reads_tags_and_skips_other_languages() {
    let md = "x\n```sh\nnot: yaml\n```\n```yaml simulate-output example=a.yaml\n- a: 1\n```\n";
    let blocks = yaml_blocks(md, "t.md");
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].tag_value("example"), Some("a.yaml"));
    assert_eq!(blocks[0].text, "- a: 1\n");
}
