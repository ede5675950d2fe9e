//! Sticky tenant binding of shared PFs, judged by the real kube-scheduler
//! with binding conditions (on by default in 1.37): four shared PFs that
//! no config assigns, `ainic-dra controller` answering their binding
//! conditions, and two tenants whose pods all ask for shares at once,
//! preferring a PF already theirs (`firstAvailable`: `ainic-shared-<tenant>`,
//! then `ainic-shared`). Round after round, no PF ever holds the running
//! pods of both tenants, every pod gets a share, and when the pods go the
//! bindings go too.
//!
//! Runs on a control plane of its own: the controller labels every Node.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testkit::testbed::{UpOptions, Version, cluster, wait};

use crate::support::{DRIVER, NodeAgent, expected_slices, own_bed, published, start_controller};

const NODE: &str = "stk-1";
const GROUP_LABEL: &str = "testbed.ainic.amd.com/group";
/// The shared PFs: NICs 4 to 7. With three pods per tenant, one tenant can
/// bind at most three, so the other always finds one.
const SHARED: &str = "0000:84:00.0,0000:a4:00.0,0000:c4:00.0,0000:e4:00.0";
const TENANTS: [(&str, &str); 2] = [("stk-a", "team-a"), ("stk-b", "team-b")];
const PODS_PER_TENANT: usize = 3;
const ROUNDS: usize = 3;

fn template(tenant: &str) -> ResourceClaimTemplate {
    let share = |name: &str, class: String| {
        json!({"name": name, "deviceClassName": class,
               "capacity": {"requests": {format!("{DRIVER}/bandwidth"): "10G"}}})
    };
    serde_json::from_value(json!({
        "metadata": {"name": "share"},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "firstAvailable": [
            share("own", format!("ainic-shared-{tenant}")),
            share("open", "ainic-shared".to_string()),
        ]}]}}},
    }))
    .unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {GROUP_LABEL: "sticky"},
            "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": "share"}],
            "containers": [{"name": "main", "image": "testbed.invalid/app:none",
                            "resources": {"claims": [{"name": "nic"}]}}],
        },
    }))
    .unwrap()
}

/// For every bound pod of `namespace`: its PF. Pods not bound yet are
/// counted in the second value.
async fn bound_pods(client: &Client, namespace: &str) -> (Vec<String>, usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let mut pfs = Vec::new();
    let mut waiting = 0;
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none()
        {
            waiting += 1;
            continue;
        }
        let claim = (pod.status.and_then(|s| s.resource_claim_statuses))
            .and_then(|c| c.into_iter().find_map(|s| s.resource_claim_name))
            .expect("a bound pod has its claim");
        let claim = claims.get(&claim).await.unwrap();
        let results = (claim.status.and_then(|s| s.allocation))
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default();
        pfs.extend(results.into_iter().map(|r| r.device));
    }
    (pfs, waiting)
}

/// The tenants whose bound pods use each PF; fails when two share one.
async fn check_no_pf_shared(client: &Client) -> (BTreeMap<String, BTreeSet<&'static str>>, usize) {
    let mut users: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    let mut waiting = 0;
    for (namespace, tenant) in TENANTS {
        let (pfs, left) = bound_pods(client, namespace).await;
        waiting += left;
        for pf in pfs {
            users.entry(pf).or_default().insert(tenant);
        }
    }
    for (pf, tenants) in &users {
        assert!(
            tenants.len() <= 1,
            "PF {pf} runs pods of tenants {tenants:?}"
        );
    }
    (users, waiting)
}

async fn bound_labels(client: &Client) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(NODE).await.unwrap();
    let prefix = format!("{DRIVER}/bound-tenant.");
    (node.metadata.labels.unwrap_or_default().into_iter())
        .filter(|(k, _)| k.starts_with(&prefix))
        .collect()
}

#[tokio::test]
async fn two_tenants_asking_at_once_never_share_a_pf() {
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        ..UpOptions::default()
    })
    .await;
    let client = bed.client().await;
    let flags = ["--shared-pfs", SHARED, "--sticky-tenants"];
    let labels = BTreeMap::from([(GROUP_LABEL.to_string(), "sticky".to_string())]);
    let agent = NodeAgent::start(bed, NODE, "mi300x-8gpu-8nic", &labels, &flags).await;
    let expected = expected_slices("mi300x-8gpu-8nic", NODE, &flags);
    let sticky = (expected.iter())
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter(|d| d.binding_conditions.is_some())
        .count();
    assert_eq!(sticky, 4, "four PFs carry binding conditions");
    published(&client, &agent, expected.len()).await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let _controller = start_controller(bed, log.path()).await;
    let pp = PostParams::default();
    for (namespace, tenant) in TENANTS {
        let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(
            json!({"metadata": {"name": namespace, "labels": {"ainic.amd.com/tenant": tenant}}}),
        )
        .unwrap();
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&pp, &ns)
            .await
            .unwrap();
        cluster::namespace(&client, namespace).await;
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), namespace);
        templates.create(&pp, &template(tenant)).await.unwrap();
    }
    for round in 0..ROUNDS {
        let started = Instant::now();
        // Interleaved, the other tenant first every other round.
        for i in 0..PODS_PER_TENANT {
            for t in 0..2 {
                let (namespace, _) = TENANTS[(t + round) % 2];
                let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
                pods.create(&pp, &pod(&format!("r{round}-{i}")))
                    .await
                    .unwrap();
            }
        }
        let users = wait::until(
            &format!("round {round}: every pod bound"),
            Duration::from_secs(180),
            || async {
                let (users, waiting) = check_no_pf_shared(&client).await;
                if waiting == 0 {
                    Ok(users)
                } else {
                    Err(format!("{waiting} pods waiting; PFs {users:?}"))
                }
            },
        )
        .await;
        let labels = bound_labels(&client).await;
        eprintln!(
            "round {round}: {} pods bound in {:.1} s; PFs by tenant {users:?}; bindings {labels:?}",
            2 * PODS_PER_TENANT,
            started.elapsed().as_secs_f64()
        );
        for (pf, tenants) in &users {
            let tenant = tenants.iter().next().unwrap();
            assert_eq!(
                labels
                    .get(&format!("{DRIVER}/bound-tenant.{pf}"))
                    .map(String::as_str),
                Some(*tenant)
            );
        }
        for (namespace, _) in TENANTS {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            pods.delete_collection(&now, &ListParams::default())
                .await
                .unwrap();
        }
        wait::until(
            &format!("round {round}: bindings released"),
            wait::DEADLINE,
            || async {
                let labels = bound_labels(&client).await;
                if labels.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{labels:?}"))
                }
            },
        )
        .await;
    }
    let log = std::fs::read_to_string(log.path()).unwrap_or_default();
    let conflicts = log
        .lines()
        .filter(|l| l.contains("tenant binding answered") && l.contains("Conflict"))
        .count();
    eprintln!("controller answered {conflicts} claims with tenant-conflict over {ROUNDS} rounds");
}
