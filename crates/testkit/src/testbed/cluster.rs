//! Objects a test makes in the real API server in place of the machines
//! it does not have: Nodes without kubelets (created and marked Ready, as
//! upstream's own DRA integration tests do), namespaces ready for pods, and
//! the node-bound service-account token a DaemonSet pod would get; and
//! admission policies of the test's own, to know when the API server
//! enforces the chart's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
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

/// Creates admission policy `name` and its binding: they refuse the
/// creation of a ConfigMap named `name`, in any namespace.
pub async fn configmap_refusing_policy(client: &kube::Client, name: &str) {
    let policy = json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "named",
                "expression": format!("object.metadata.name == '{name}'")}],
            "validations": [{"expression": "false", "message": name}],
        },
    });
    let binding = json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    });
    let post = PostParams::default();
    let policy = serde_json::from_value(policy).expect("a policy");
    let created = policies(client).create(&post, &policy).await;
    created.unwrap_or_else(|e| panic!("cannot create admission policy {name}: {e}"));
    let binding = serde_json::from_value(binding).expect("a binding");
    let bound = bindings(client).create(&post, &binding).await;
    bound.unwrap_or_else(|e| panic!("cannot create admission policy binding {name}: {e}"));
}

/// Deletes admission policy `name` and its binding.
pub async fn delete_policy(client: &kube::Client, name: &str) {
    let gone = DeleteParams::default();
    let unbound = bindings(client).delete(name, &gone).await;
    unbound.unwrap_or_else(|e| panic!("cannot delete admission policy binding {name}: {e}"));
    let deleted = policies(client).delete(name, &gone).await;
    deleted.unwrap_or_else(|e| panic!("cannot delete admission policy {name}: {e}"));
}

/// Creates ConfigMap `name` in `namespace`: `Some(message)` when admission
/// refused it, `None` when it was created (and then deleted again).
pub async fn configmap_refusal(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let map = serde_json::from_value(json!({"metadata": {"name": name}})).expect("a ConfigMap");
    match maps.create(&PostParams::default(), &map).await {
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Some(e.message),
        Ok(_) => {
            let deleted = maps.delete(name, &DeleteParams::default()).await;
            deleted.unwrap_or_else(|e| panic!("cannot delete ConfigMap {namespace}/{name}: {e}"));
            None
        }
        Err(e) => panic!("cannot create ConfigMap {namespace}/{name}: {e}"),
    }
}

/// Waits until the API server enforces every admission policy and binding
/// created before this call.
///
/// The API server compiles policies from its informers' caches about once
/// a second, and helm creates objects of one kind in parallel, so one
/// policy in force says nothing of its siblings. This creates a policy of
/// its own ([`configmap_refusing_policy`], named `policy-fence-<pid>-<n>`),
/// waits until a ConfigMap in `namespace` is refused, and deletes it: a
/// cache holding it holds everything created earlier, since each watch
/// delivers in order.
pub async fn admission_policies_in_force(client: &kube::Client, namespace: &str) {
    static FENCES: AtomicU32 = AtomicU32::new(0);
    let n = FENCES.fetch_add(1, Ordering::Relaxed);
    let fence = format!("policy-fence-{}-{n}", std::process::id());
    configmap_refusing_policy(client, &fence).await;
    wait::until(
        "the admission policies in force",
        wait::DEADLINE,
        || async {
            match configmap_refusal(client, namespace, &fence).await {
                Some(_) => Ok(()),
                None => Err(format!("ConfigMap {fence} admitted: policy not loaded yet")),
            }
        },
    )
    .await;
    delete_policy(client, &fence).await;
}

fn policies(client: &kube::Client) -> Api<ValidatingAdmissionPolicy> {
    Api::all(client.clone())
}

fn bindings(client: &kube::Client) -> Api<ValidatingAdmissionPolicyBinding> {
    Api::all(client.clone())
}
