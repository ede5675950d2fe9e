//! The node side of the placed claims: the kubelet simulator asks each
//! node's agent to prepare the claims of its pods, the demo reads back
//! what a container would get from the CDI specs, then everything is
//! unprepared and the CDI directories must be empty again.

use std::path::Path;

use anyhow::{Result, bail};
use testkit::kubelet::{ClaimRef, DraPluginClient};

use super::kubelet::{self, Prepared};
use super::schedule::claim_ref;
use super::show::Story;
use super::usecases::Placed;
use super::world::World;

/// Claims whose container view the demo prints.
const SHOWN: [&str; 2] = ["trainer-0", "share-0"];

fn claims_of(placed: &Placed, node: &str) -> Vec<ClaimRef> {
    placed
        .claims
        .iter()
        .filter(|(n, _)| n == node)
        .map(|(_, c)| claim_ref(c))
        .collect()
}

/// Prepares every placed claim on its node and shows two containers' view.
pub(crate) async fn prepare_all(
    story: &Story,
    world: &World,
    plugins: &[(String, &DraPluginClient)],
    placed: &Placed,
) -> Result<()> {
    for ((node, plugin), dirs) in plugins.iter().zip(&world.nodes) {
        let claims = claims_of(placed, node);
        if claims.is_empty() {
            story.step(&format!("{node}: no pods, nothing to prepare"));
            continue;
        }
        let prepared = kubelet::prepare(plugin, &claims).await?;
        let specs = kubelet::claim_specs(&dirs.cdi);
        // A fabric partition claim has nothing to attach on a node: it is
        // prepared with no devices and gets no spec.
        let with_devices = prepared.values().filter(|d| !d.is_empty()).count();
        if specs.len() != with_devices {
            bail!(
                "{node}: {with_devices} claims prepared with devices but {} CDI specs written",
                specs.len()
            );
        }
        let metadata = kubelet::spec_files(&dirs.cdi).len() - specs.len();
        let empty = claims.len() - with_devices;
        story.ok(&format!(
            "{node}: {} prepared, one CDI spec each in {} (and {} mounting device metadata){}",
            count(with_devices, "claim"),
            dirs.cdi.display(),
            count(metadata, "spec"),
            if empty > 0 {
                format!(
                    "; {} with no device here (a fabric partition)",
                    count(empty, "claim")
                )
            } else {
                String::new()
            },
        ));
        snapshot(&world.base, node, &dirs.cdi)?;
        for claim in claims.iter().filter(|c| SHOWN.contains(&c.name.as_str())) {
            show_container(story, &dirs.cdi, claim, &prepared[&claim.uid])?;
        }
    }
    Ok(())
}

fn show_container(
    story: &Story,
    cdi_dir: &Path,
    claim: &ClaimRef,
    devices: &[Prepared],
) -> Result<()> {
    let ids: Vec<String> = devices.iter().flat_map(|d| d.cdi_ids.clone()).collect();
    let names: Vec<&str> = devices.iter().map(|d| d.device.as_str()).collect();
    story.step(&format!(
        "a container of {} ({}) gets:",
        claim.name,
        names.join(", ")
    ));
    let edits = kubelet::container_edits(cdi_dir, &ids)?;
    if edits.env.is_empty() {
        bail!(
            "the CDI spec of {} gives the container no environment",
            claim.name
        );
    }
    let mut lines = vec![format!("CDI devices: {}", ids.join(" "))];
    lines.extend(
        edits
            .device_nodes
            .iter()
            .map(|n| format!("device node: {n}")),
    );
    lines.extend(edits.env.iter().map(|e| format!("env: {e}")));
    lines.extend(edits.mounts.iter().map(|m| format!("mount: {m}")));
    story.note(&lines.join("\n"));
    Ok(())
}

/// Copies the prepared CDI specs to `<base>/cdi-prepared/<node>/` so that
/// `--keep` shows them after unprepare removed the originals.
fn snapshot(base: &Path, node: &str, cdi_dir: &Path) -> Result<()> {
    let target = base.join("cdi-prepared").join(node);
    std::fs::create_dir_all(&target)?;
    for name in kubelet::spec_files(cdi_dir) {
        std::fs::copy(cdi_dir.join(&name), target.join(&name))?;
    }
    Ok(())
}

/// Unprepares every placed claim; the CDI dirs must end up empty.
pub(crate) async fn unprepare_all(
    story: &Story,
    world: &World,
    plugins: &[(String, &DraPluginClient)],
    placed: &Placed,
) -> Result<()> {
    for ((node, plugin), dirs) in plugins.iter().zip(&world.nodes) {
        let claims = claims_of(placed, node);
        if claims.is_empty() {
            continue;
        }
        kubelet::unprepare(plugin, &claims).await?;
        let left = kubelet::spec_files(&dirs.cdi);
        if !left.is_empty() {
            bail!("{node}: CDI specs left after unprepare: {left:?}");
        }
        story.ok(&format!(
            "{node}: {} unprepared, CDI dir empty",
            count(claims.len(), "claim")
        ));
    }
    Ok(())
}

/// `1 claim`, `2 claims`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
