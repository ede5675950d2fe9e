//! The chart's ValidatingAdmissionPolicies and RBAC in the real API
//! server: an agent holding its node-bound token writes its own node's
//! slices and no other node's; a token bound to no node is refused; the
//! controller writes only its own `fabric/*` pools of our driver; other
//! users are not the policies' business.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use testkit::testbed::{Testbed, Version, client_from, cluster, wait};

use crate::support::{ACCOUNT, DRIVER, NAMESPACE, install_chart};

/// A slice in the pool of `node` (as an agent publishes it), or, without
/// a node, in pool `name` for all nodes.
fn slice(name: &str, node: Option<&str>) -> ResourceSlice {
    let pool = node.unwrap_or(name);
    let mut spec = json!({"driver": DRIVER,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}});
    match node {
        Some(node) => spec["nodeName"] = json!(node),
        None => spec["allNodes"] = json!(true),
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The message of a refused write, or `None` when it was accepted.
pub(crate) fn refusal<T>(result: Result<T, kube::Error>) -> Option<String> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(e)) => Some(format!("{} {}", e.code, e.message)),
        Err(e) => panic!("request failed outside admission: {e}"),
    }
}

#[tokio::test]
async fn an_agent_writes_only_its_own_nodes_slices() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let admin = bed.client().await;
    for node in ["adm-a", "adm-b"] {
        cluster::fake_node(&admin, node, &BTreeMap::new()).await;
    }
    let token = cluster::node_bound_token(&admin, NAMESPACE, ACCOUNT, "adm-a").await;
    let agent = client_from(&bed.write_kubeconfig("adm-a", "adm-a", &token)).await;
    let slices: Api<ResourceSlice> = Api::all(agent.clone());
    let admin_slices: Api<ResourceSlice> = Api::all(admin.clone());
    let pp = PostParams::default();

    assert_eq!(
        refusal(slices.create(&pp, &slice("adm-a-own", Some("adm-a"))).await),
        None
    );
    let other = refusal(
        slices
            .create(&pp, &slice("adm-a-other", Some("adm-b")))
            .await,
    )
    .expect("a slice of another node is refused");
    assert!(
        other.contains("may only write ResourceSlices of its own pool adm-a, not pool adm-b"),
        "{other}"
    );
    assert!(refusal(slices.create(&pp, &slice("adm-a-all", None)).await).is_some());

    // Taking over another node's slice by rewriting its nodeName, or
    // deleting it, is refused too.
    admin_slices
        .create(&pp, &slice("adm-b-own", Some("adm-b")))
        .await
        .unwrap();
    let mut stolen = admin_slices.get("adm-b-own").await.unwrap();
    stolen.spec.node_name = Some("adm-a".into());
    // (The API server refuses that before the policy runs: nodeName is
    // immutable.)
    let takeover = refusal(slices.replace("adm-b-own", &pp, &stolen).await)
        .expect("rewriting another node's slice is refused");
    assert!(takeover.contains("immutable"), "{takeover}");
    assert!(refusal(slices.delete("adm-b-own", &DeleteParams::default()).await).is_some());
    // (Read as the admin: the agent lists and watches, it never gets.)
    let mut own = admin_slices.get("adm-a-own").await.unwrap();
    own.spec.pool.generation = 2;
    assert_eq!(refusal(slices.replace("adm-a-own", &pp, &own).await), None);
    assert_eq!(
        refusal(slices.delete("adm-a-own", &DeleteParams::default()).await),
        None
    );

    // The agent's two watches (its node's labels, its own slices) are
    // allowed by the chart's RBAC and the server's field selectors.
    use ainic_dra_daemon::follow::{Seen, watch};
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(agent.clone());
    let mut node_events = watch(nodes, "metadata.name=adm-a".into(), "node");
    assert_eq!(node_events.recv().await, Some(Seen::Restarted));
    match node_events.recv().await {
        Some(Seen::Applied(node)) => assert_eq!(node.metadata.name.as_deref(), Some("adm-a")),
        other => panic!("no replay of the node: {other:?}"),
    }
    let fields = format!("spec.nodeName=adm-a,spec.driver={DRIVER}");
    let mut slice_events = watch(slices.clone(), fields, "slices");
    assert_eq!(slice_events.recv().await, Some(Seen::Restarted));
    slices
        .create(&pp, &slice("adm-a-watched", Some("adm-a")))
        .await
        .unwrap();
    match slice_events.recv().await {
        Some(Seen::Applied(s)) => {
            assert_eq!(s.metadata.name.as_deref(), Some("adm-a-watched"))
        }
        other => panic!("the new slice was not seen: {other:?}"),
    }
    slices
        .delete("adm-a-watched", &DeleteParams::default())
        .await
        .unwrap();

    // The admin is not matched by the policy.
    assert_eq!(
        refusal(admin_slices.create(&pp, &slice("adm-admin", None)).await),
        None
    );
    admin_slices
        .delete("adm-admin", &DeleteParams::default())
        .await
        .unwrap();
    admin_slices
        .delete("adm-b-own", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_token_bound_to_no_node_is_refused() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let admin = bed.client().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let token = accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .unwrap();
    let agent = client_from(&bed.write_kubeconfig("adm-unbound", "adm-unbound", &token)).await;
    let slices: Api<ResourceSlice> = Api::all(agent);
    let refused = refusal(
        slices
            .create(&PostParams::default(), &slice("adm-unbound", Some("adm-c")))
            .await,
    )
    .expect("a token without a node is refused");
    assert!(refused.contains("names no node"), "{refused}");
}

/// A slice in the controller's pools (no node), as it publishes them.
fn partition_slice(pool: &str, driver: &str) -> ResourceSlice {
    serde_json::from_value(json!({"metadata": {"name": pool.replace('/', "-")},
        "spec": {"driver": driver, "allNodes": true,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}}}))
    .unwrap()
}

#[tokio::test]
async fn the_controller_writes_only_its_own_pools() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let admin = bed.client().await;
    let account = format!("{}-controller", crate::support::RELEASE);
    let token = cluster::account_token(&admin, NAMESPACE, &account).await;
    let controller = client_from(&bed.write_kubeconfig("adm-controller", &account, &token)).await;
    let slices: Api<ResourceSlice> = Api::all(controller);
    let admin_slices: Api<ResourceSlice> = Api::all(admin.clone());
    let pp = PostParams::default();

    // The policy is loaded a moment after the chart: wait for a refusal.
    // Node `adm-c` is this test's alone: the agent test above watches
    // `adm-a`'s slices at the same time on the same server.
    let node_slice = slice("adm-ctl-node", Some("adm-c"));
    let refused = wait::until(
        "the controller's policy in force",
        wait::DEADLINE,
        || async {
            match refusal(slices.create(&pp, &node_slice).await) {
                Some(message) => Ok(message),
                None => {
                    let _ = admin_slices
                        .delete("adm-ctl-node", &DeleteParams::default())
                        .await;
                    Err("admitted: the policy is not loaded yet".to_string())
                }
            }
        },
    )
    .await;
    assert!(
        refused.contains("may only write ResourceSlices of driver ainic.amd.com in pools fabric/"),
        "{refused}"
    );
    let other_driver = refusal(
        slices
            .create(&pp, &partition_slice("fabric/adm", "gpu.example.com"))
            .await,
    );
    assert!(other_driver.is_some_and(|m| m.contains("gpu.example.com pool fabric/adm")));
    assert!(
        refusal(
            slices
                .create(&pp, &partition_slice("adm-pool", DRIVER))
                .await
        )
        .is_some()
    );

    // Its own pools: created, changed and deleted.
    let own = partition_slice("fabric/adm-x", DRIVER);
    assert_eq!(refusal(slices.create(&pp, &own).await), None);
    let mut stored = admin_slices.get("fabric-adm-x").await.unwrap();
    stored.spec.pool.generation = 2;
    assert_eq!(
        refusal(slices.replace("fabric-adm-x", &pp, &stored).await),
        None
    );
    assert_eq!(
        refusal(
            slices
                .delete("fabric-adm-x", &DeleteParams::default())
                .await
        ),
        None
    );

    // An agent's slice is not the controller's to delete.
    admin_slices
        .create(&pp, &slice("adm-ctl-agent", Some("adm-c")))
        .await
        .unwrap();
    assert!(
        refusal(
            slices
                .delete("adm-ctl-agent", &DeleteParams::default())
                .await
        )
        .is_some()
    );
    admin_slices
        .delete("adm-ctl-agent", &DeleteParams::default())
        .await
        .unwrap();
}

/// The wait every chart install ends with: policies created together, as
/// helm creates them (in parallel), are all enforced once it returns.
/// Before it, a test ran when the API server enforced one of the chart's
/// policies (the one its probe hit) but not yet another (CI, 1.34: node B's
/// device status was admitted).
#[tokio::test]
async fn every_policy_created_before_the_wait_is_in_force_after_it() {
    let bed = Testbed::shared(Version::V1_34);
    install_chart(bed).await;
    let admin = bed.client().await;
    let names: Vec<String> = (0..8).map(|i| format!("fenced-{i}")).collect();
    let created = names
        .iter()
        .map(|name| cluster::configmap_refusing_policy(&admin, name));
    futures::future::join_all(created).await;

    cluster::admission_policies_in_force(&admin, NAMESPACE).await;
    for name in &names {
        let refused = cluster::configmap_refusal(&admin, NAMESPACE, name).await;
        assert!(refused.is_some(), "ConfigMap {name} was admitted");
    }
    for name in &names {
        cluster::delete_policy(&admin, name).await;
    }
}
