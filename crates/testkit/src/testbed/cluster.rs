//! Objects a test makes in the real API server in place of the machines
//! it does not have: Nodes without kubelets (created and marked Ready, as
//! upstream's own DRA integration tests do), namespaces ready for pods, and
//! the node-bound service-account token a DaemonSet pod would get.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::wait;

/// Creates namespace `name` (if missing) and waits for its `default`
/// service account, without which pods are refused.
pub async fn namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("cannot create namespace {name}: {e}"),
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait::until(
        &format!("service account default in {name}"),
        wait::DEADLINE,
        || async {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Creates a Node without a kubelet, marks it Ready with room for pods and
/// clears its taints.
/// Nothing renews it: the testbed runs no node-lifecycle controller.
pub async fn fake_node(client: &kube::Client, name: &str, labels: &BTreeMap<String, String>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut all_labels = labels.clone();
    all_labels.insert("kubernetes.io/hostname".into(), name.into());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all_labels},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap_or_else(|e| panic!("cannot create node {name}: {e}"));
    let resources = json!({"cpu": "64", "memory": "512Gi", "pods": "110"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "fake node of the testbed",
            "lastHeartbeatTime": now(), "lastTransitionTime": now(),
        }],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("cannot mark node {name} Ready: {e}"));
    // The API server's TaintNodesByCondition admission taints every new
    // node not-ready; a kubelet's node controller would lift it.
    let untaint = json!({"spec": {"taints": null}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&untaint))
        .await
        .unwrap_or_else(|e| panic!("cannot clear the taints of node {name}: {e}"));
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A token of service account `namespace/account` bound to a pod on
/// `node`, as the kubelet gives a DaemonSet pod: it carries the
/// `authentication.kubernetes.io/node-name` claim that the chart's
/// admission policy checks. The pod (`agent-<node>`) is created, bound to
/// the node, and never runs.
pub async fn node_bound_token(
    client: &kube::Client,
    namespace: &str,
    account: &str,
    node: &str,
) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod_name = format!("agent-{node}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": pod_name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "automountServiceAccountToken": false,
            "containers": [{"name": "agent", "image": "testbed.invalid/ainic-dra:none"}],
        },
    }))
    .unwrap();
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("cannot create pod {namespace}/{pod_name}: {e}"));
    let spec = json!({
        "expirationSeconds": 3600,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                           "uid": created.metadata.uid},
    });
    request_token(client, namespace, account, spec).await
}

/// A token of `namespace/account` for a TokenRequest with `spec`.
async fn request_token(
    client: &kube::Client,
    namespace: &str,
    account: &str,
    spec: serde_json::Value,
) -> String {
    let request: TokenRequest = serde_json::from_value(json!({"spec": spec})).unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let answer = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("cannot get a token for {namespace}/{account}: {e}"));
    answer
        .status
        .and_then(|s| s.token)
        .expect("the token request answered a token")
}

/// A token of service account `namespace/account` (as a Deployment's pod
/// gets it, not bound to a node), valid for an hour.
pub async fn account_token(client: &kube::Client, namespace: &str, account: &str) -> String {
    request_token(
        client,
        namespace,
        account,
        json!({"expirationSeconds": 3600}),
    )
    .await
}
