//! The kubelet's part of the demo, through testkit's kubelet simulator
//! over the agents' real unix sockets: plugin registration,
//! `NodePrepareResources` / `NodeUnprepareResources` (DRAPlugin v1), and
//! reading back the CDI spec the runtime would apply to a container.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use testkit::kubelet::{ClaimRef, DraPluginClient, KubeletSim};

/// One prepared device as the kubelet got it back.
pub(crate) struct Prepared {
    /// DRA device name.
    pub device: String,
    /// CDI device IDs the runtime is told to inject.
    pub cdi_ids: Vec<String>,
}

/// Registers the plugin found in `registry`, as the kubelet's plugin watcher does.
pub(crate) async fn register(registry: &Path, driver: &str) -> Result<DraPluginClient> {
    KubeletSim::register_driver(registry, driver)
        .await
        .with_context(|| format!("the plugin in {} did not register", registry.display()))
}

/// Prepares `claims`; every claim must succeed. Keyed by claim UID.
pub(crate) async fn prepare(
    plugin: &DraPluginClient,
    claims: &[ClaimRef],
) -> Result<BTreeMap<String, Vec<Prepared>>> {
    let response = plugin.prepare_v1(claims).await?;
    let mut out = BTreeMap::new();
    for claim in claims {
        let Some(answer) = response.claims.get(&claim.uid) else {
            bail!("no answer for claim {}", claim.name);
        };
        if !answer.error.is_empty() {
            bail!("claim {} not prepared: {}", claim.name, answer.error);
        }
        let devices = answer
            .devices
            .iter()
            .map(|d| Prepared {
                device: d.device_name.clone(),
                cdi_ids: d.cdi_device_ids.clone(),
            })
            .collect();
        out.insert(claim.uid.clone(), devices);
    }
    Ok(out)
}

/// Unprepares `claims`; every claim must succeed.
pub(crate) async fn unprepare(plugin: &DraPluginClient, claims: &[ClaimRef]) -> Result<()> {
    let response = plugin.unprepare_v1(claims).await?;
    for claim in claims {
        match response.claims.get(&claim.uid) {
            Some(answer) if answer.error.is_empty() => {}
            Some(answer) => bail!("claim {} not unprepared: {}", claim.name, answer.error),
            None => bail!("no answer for claim {}", claim.name),
        }
    }
    Ok(())
}

/// What a container gets from some CDI devices: device nodes and
/// environment, from the spec's claim-wide edits and each device's.
#[derive(Default)]
pub(crate) struct ContainerEdits {
    /// `path (major:minor)` of each device node.
    pub device_nodes: Vec<String>,
    /// `NAME=value`.
    pub env: Vec<String>,
    /// `host path -> container path (options)` of each mount.
    pub mounts: Vec<String>,
}

/// Reads the CDI spec files in `cdi_dir` and collects the edits for
/// `cdi_ids` (`amd.com/ainic=<name>`), as a runtime would.
pub(crate) fn container_edits(cdi_dir: &Path, cdi_ids: &[String]) -> Result<ContainerEdits> {
    let mut edits = ContainerEdits::default();
    for entry in std::fs::read_dir(cdi_dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let spec: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a JSON CDI spec", path.display()))?;
        let kind = spec["kind"].as_str().unwrap_or_default();
        let devices = spec["devices"].as_array().cloned().unwrap_or_default();
        let wanted: Vec<&Value> = devices
            .iter()
            .filter(|d| {
                let id = format!("{kind}={}", d["name"].as_str().unwrap_or_default());
                cdi_ids.contains(&id)
            })
            .collect();
        if wanted.is_empty() {
            continue;
        }
        add(&mut edits, &spec["containerEdits"]);
        for device in wanted {
            add(&mut edits, &device["containerEdits"]);
        }
    }
    Ok(edits)
}

fn add(edits: &mut ContainerEdits, container_edits: &Value) {
    for node in container_edits["deviceNodes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        edits.device_nodes.push(format!(
            "{} ({}:{})",
            node["path"].as_str().unwrap_or_default(),
            node["major"],
            node["minor"]
        ));
    }
    for env in container_edits["env"].as_array().into_iter().flatten() {
        edits.env.push(env.as_str().unwrap_or_default().to_string());
    }
    for mount in container_edits["mounts"].as_array().into_iter().flatten() {
        let options: Vec<&str> = (mount["options"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        edits.mounts.push(format!(
            "{} ({})",
            mount["containerPath"].as_str().unwrap_or_default(),
            options.join(",")
        ));
    }
}

/// Names of the claim specs in a CDI dir (`ainic.amd.com-<uid>.json`).
pub(crate) fn claim_specs(cdi_dir: &Path) -> Vec<String> {
    let mut names = spec_files(cdi_dir);
    names.retain(|n| n.starts_with("ainic.amd.com-"));
    names
}

/// Names of the files in a CDI dir (empty when it does not exist).
pub(crate) fn spec_files(cdi_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cdi_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_the_claim_wide_ones_plus_the_named_devices() {
        let dir = tempfile::tempdir().unwrap();
        let spec = serde_json::json!({
            "cdiVersion": "0.5.0", "kind": "amd.com/ainic",
            "containerEdits": {"env": ["A=1"], "deviceNodes": [{"path": "/dev/infiniband/rdma_cm", "major": 10, "minor": 58}]},
            "devices": [
                {"name": "u-pf-1", "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs1", "major": 231, "minor": 193}]}},
                {"name": "u-pf-2", "containerEdits": {"env": ["B=2"]}},
            ],
        });
        std::fs::write(dir.path().join("ainic.amd.com-u.json"), spec.to_string()).unwrap();
        let edits = container_edits(dir.path(), &["amd.com/ainic=u-pf-1".to_string()]).unwrap();
        assert_eq!(edits.env, ["A=1"]);
        assert_eq!(
            edits.device_nodes,
            [
                "/dev/infiniband/rdma_cm (10:58)",
                "/dev/infiniband/uverbs1 (231:193)"
            ]
        );
        let none = container_edits(dir.path(), &["amd.com/ainic=other".to_string()]).unwrap();
        assert!(none.env.is_empty() && none.device_nodes.is_empty());
    }
}
