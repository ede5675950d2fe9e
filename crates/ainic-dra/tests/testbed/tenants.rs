//! Tenants fenced on shared NICs (use case 4), judged by the real API
//! server and kube-scheduler. The chart is installed with tenants team-a
//! and team-b: the tenant admission policy refuses a claim or template
//! from one tenant's namespace (or an unlabelled one) naming another
//! tenant's class, on 1.34 and 1.37, whichever API version it is sent
//! through (1.34's beta versions turned on for it); and on 1.37 a node whose fabric config fences one NIC to each
//! tenant gets team-a's pods only team-a's NIC, team-b's only team-b's, and
//! everyone else only the unfenced NICs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version, cluster, wait};

use crate::support::{DRIVER, NodeAgent, helm_install, install_chart, published};

const LABEL: &str = "ainic.amd.com/tenant";
const GROUP_LABEL: &str = "testbed.ainic.amd.com/group";
const GROUP: &str = "tenants";
const NODE: &str = "ten-1";
/// The NICs the fabric config fences: team-a's, then team-b's.
const FENCED: [&str; 2] = ["0000:04:00.0", "0000:24:00.0"];

/// Creates namespace `name` with the tenant label `tenant` (or none).
/// Pods need its default service account, which only the 1.37 bed's
/// controller manager makes.
async fn tenant_namespace(bed: &Testbed, name: &str, tenant: Option<&str>) {
    let client = bed.client().await;
    let labels: BTreeMap<&str, &str> = tenant.map(|t| (LABEL, t)).into_iter().collect();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("cannot create namespace {name}: {e}"),
    }
    if bed.version() == Version::V1_37 {
        cluster::namespace(&client, name).await;
    }
}

fn claim(name: &str, class: &str) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": class}}]}},
    }))
    .unwrap()
}

/// The admission refusal of a create, or `None` when it was admitted.
fn refusal<T>(result: Result<T, kube::Error>) -> Option<String> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Some(e.message),
        Err(e) => panic!("request failed outside admission: {e}"),
    }
}

/// The policy's checks on `bed` (chart installed), through v1 and every
/// older resource.k8s.io version in `older`, which must all be served.
async fn admission_checks(bed: &Testbed, older: &[&str]) {
    let client = bed.client().await;
    tenant_namespace(bed, "ten-a", Some("team-a")).await;
    tenant_namespace(bed, "ten-none", None).await;
    let pp = PostParams::default();
    let a: Api<ResourceClaim> = Api::namespaced(client.clone(), "ten-a");

    let refused = refusal(a.create(&pp, &claim("steal", "ainic-pf-team-b")).await)
        .expect("team-a may not use team-b's class");
    assert!(
        refused.contains("request nic names DeviceClass ainic-pf-team-b of tenant team-b")
            && refused.contains("namespace ten-a is tenant team-a"),
        "{refused}"
    );
    assert_eq!(
        refusal(a.create(&pp, &claim("own", "ainic-pf-team-a")).await),
        None
    );
    assert_eq!(
        refusal(a.create(&pp, &claim("open", "ainic-pf")).await),
        None
    );

    // A subrequest naming a tenant class from an unlabelled namespace.
    let none: Api<ResourceClaim> = Api::namespaced(client.clone(), "ten-none");
    let fallback: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "fallback"},
        "spec": {"devices": {"requests": [{"name": "nic", "firstAvailable": [
            {"name": "open", "deviceClassName": "ainic-pf"},
            {"name": "fenced", "deviceClassName": "ainic-shared-team-a"}]}]}},
    }))
    .unwrap();
    let refused = refusal(none.create(&pp, &fallback).await).expect("a subrequest is checked");
    assert!(
        refused.contains("request nic/fenced names DeviceClass ainic-shared-team-a")
            && refused.contains("has no label ainic.amd.com/tenant"),
        "{refused}"
    );

    // Templates are checked too: the claims made from them would be.
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), "ten-a");
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "vf-of-b"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "vf", "exactly": {"deviceClassName": "ainic-vf-team-b"}}]}}},
    }))
    .unwrap();
    let refused = refusal(templates.create(&pp, &template).await).expect("template refused");
    assert!(
        refused.contains("ResourceClaimTemplate ten-a/vf-of-b"),
        "{refused}"
    );

    // An older API version is no way around the policy.
    assert_eq!(for_older_versions(&client, "ten-a").await, older);
}

/// Sends team-b's class from team-a's namespace through every older
/// resource.k8s.io version the server serves; returns those versions.
async fn for_older_versions(client: &Client, namespace: &str) -> Vec<&'static str> {
    let mut checked = Vec::new();
    let groups = client.list_api_group_resources("resource.k8s.io/v1").await;
    assert!(groups.is_ok(), "resource.k8s.io/v1 is served");
    for version in ["v1beta2", "v1beta1"] {
        let gvk = GroupVersionKind::gvk("resource.k8s.io", version, "ResourceClaim");
        let served = client
            .list_api_group_resources(&format!("resource.k8s.io/{version}"))
            .await
            .is_ok_and(|l| l.resources.iter().any(|r| r.name == "resourceclaims"));
        if !served {
            continue;
        }
        let request: Value = if version == "v1beta1" {
            json!({"name": "nic", "deviceClassName": "ainic-pf-team-b"})
        } else {
            json!({"name": "nic", "exactly": {"deviceClassName": "ainic-pf-team-b"}})
        };
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("resource.k8s.io/{version}"), "kind": "ResourceClaim",
            "metadata": {"name": format!("steal-{version}")},
            "spec": {"devices": {"requests": [request]}},
        }))
        .unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk));
        let refused = refusal(api.create(&PostParams::default(), &object).await)
            .unwrap_or_else(|| panic!("a {version} claim got past the tenant policy"));
        assert!(refused.contains("of tenant team-b"), "{version}: {refused}");
        checked.push(version);
    }
    checked
}

/// On 1.34, with the beta versions turned on (they are off by default),
/// on an API server of its own.
#[tokio::test]
async fn the_tenant_policy_refuses_cross_tenant_classes_on_1_34() {
    let bed = tokio::task::spawn_blocking(|| {
        Testbed::up(&UpOptions {
            version: Some(Version::V1_34),
            runtime_config: Some(
                "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true".into(),
            ),
            no_scheduler: true,
            ..UpOptions::default()
        })
    })
    .await
    .unwrap();
    helm_install(&bed).await;
    admission_checks(&bed, &["v1beta2", "v1beta1"]).await;
}

/// On 1.37, where only v1 is served by default.
#[tokio::test]
async fn the_tenant_policy_refuses_cross_tenant_classes_on_1_37() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    admission_checks(bed, &[]).await;
}

/// A pod on our node group using the claim template `template`.
fn pod(name: &str, template: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {GROUP_LABEL: GROUP},
            "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": "testbed.invalid/app:none",
                            "resources": {"claims": [{"name": "nic"}]}}],
        },
    }))
    .unwrap()
}

/// A template asking for every device of `class` (`All`), or one.
fn template(name: &str, class: &str, all: bool) -> ResourceClaimTemplate {
    let mode = if all {
        json!("All")
    } else {
        json!("ExactCount")
    };
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": class, "allocationMode": mode}}]}}},
    }))
    .unwrap()
}

/// The PCI addresses of the NICs allocated to the claim of `pod`.
async fn allocated(client: &Client, namespace: &str, pod: &str) -> Result<Vec<String>, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let status = pods.get(pod).await.map_err(|e| e.to_string())?.status;
    let Some(claim) = (status.and_then(|s| s.resource_claim_statuses))
        .and_then(|c| c.into_iter().find_map(|s| s.resource_claim_name))
    else {
        return Err("no claim yet".into());
    };
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims.get(&claim).await.map_err(|e| e.to_string())?;
    let Some(allocation) = claim.status.and_then(|s| s.allocation) else {
        return Err(format!(
            "claim {} not allocated yet",
            claim.metadata.name.unwrap_or_default()
        ));
    };
    let mut devices: Vec<String> = (allocation.devices.and_then(|d| d.results))
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            r.device
                .trim_start_matches("pf-")
                .replacen('-', ":", 2)
                .replacen('-', ".", 1)
        })
        .collect();
    devices.sort();
    Ok(devices)
}

#[tokio::test]
async fn the_real_scheduler_gives_fenced_nics_only_to_their_tenant() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fabric.yaml");
    std::fs::write(
        &config,
        format!(
            "nodes:\n  {NODE}:\n    nics:\n      \"{}\": {{tenant: team-a}}\n      \"{}\": {{tenant: team-b}}\n",
            FENCED[0], FENCED[1]
        ),
    )
    .unwrap();
    let flags = ["--fabric-config", config.to_str().unwrap()];
    let labels = BTreeMap::from([(GROUP_LABEL.to_string(), GROUP.to_string())]);
    let agent = NodeAgent::start(bed, NODE, "mi300x-8gpu-8nic", &labels, &flags).await;
    let expected = crate::support::expected_slices("mi300x-8gpu-8nic", NODE, &flags);
    let slices = published(&client, &agent, expected.len()).await;
    let tenants: Vec<(String, String)> = (slices.iter())
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter_map(|d| {
            let t = d.attributes.as_ref()?.get(&format!("{DRIVER}/tenant"))?;
            Some((d.name.clone(), t.string.clone()?))
        })
        .collect();
    assert_eq!(
        tenants,
        [
            ("pf-0000-04-00-0".to_string(), "team-a".to_string()),
            ("pf-0000-24-00-0".to_string(), "team-b".to_string())
        ]
    );

    let jobs = [
        ("ten-a", Some("team-a"), "ainic-pf-team-a", false),
        ("ten-b", Some("team-b"), "ainic-pf-team-b", false),
        ("ten-open", None, "ainic-pf", true),
    ];
    let pp = PostParams::default();
    for (ns, tenant, class, all) in jobs {
        tenant_namespace(bed, ns, tenant).await;
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), ns);
        templates
            .create(&pp, &template("nic", class, all))
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        pods.create(&pp, &pod("first", "nic")).await.unwrap();
    }
    let got = |ns: &'static str| {
        let client = client.clone();
        async move {
            wait::until(
                &format!("the pod of {ns} allocated"),
                wait::DEADLINE,
                || allocated(&client, ns, "first"),
            )
            .await
        }
    };
    assert_eq!(got("ten-a").await, [FENCED[0]]);
    assert_eq!(got("ten-b").await, [FENCED[1]]);
    let open = got("ten-open").await;
    assert_eq!(open.len(), 6, "{open:?}");
    assert!(
        !open.iter().any(|d| FENCED.contains(&d.as_str())),
        "{open:?}"
    );

    // team-a's one NIC is taken: its second pod waits rather than get
    // another tenant's NIC or an open one.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ten-a");
    pods.create(&pp, &pod("second", "nic")).await.unwrap();
    let reason = wait::until(
        "team-a's second pod unschedulable",
        wait::DEADLINE,
        || async {
            let pod = pods.get("second").await.map_err(|e| e.to_string())?;
            (pod.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter())
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .ok_or_else(|| "no PodScheduled=False yet".to_string())
        },
    )
    .await;
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    assert!(
        pods.get("second")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .is_none()
    );
}
