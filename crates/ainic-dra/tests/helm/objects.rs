//! Strict typing of rendered objects: each must deserialize as the
//! k8s-openapi type its apiVersion/kind names, and serializing it back must
//! give the same document, so a misspelt or misplaced field (which the
//! API server would reject or silently drop) fails the test.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::resource::v1::DeviceClass;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Checks `object` against the type its `apiVersion`/`kind` name.
pub fn check_typed(object: &Value) -> Result<(), String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "ServiceAccount") => roundtrip::<ServiceAccount>(object),
        ("v1", "ConfigMap") => roundtrip::<ConfigMap>(object),
        ("v1", "Service") => roundtrip::<Service>(object),
        ("apps/v1", "DaemonSet") => roundtrip::<DaemonSet>(object),
        ("apps/v1", "Deployment") => roundtrip::<Deployment>(object),
        ("batch/v1", "Job") => roundtrip::<Job>(object),
        ("rbac.authorization.k8s.io/v1", "Role") => roundtrip::<Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => roundtrip::<RoleBinding>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => roundtrip::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            roundtrip::<ClusterRoleBinding>(object)
        }
        ("resource.k8s.io/v1", "DeviceClass") => roundtrip::<DeviceClass>(object),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            roundtrip::<ValidatingAdmissionPolicy>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            roundtrip::<ValidatingAdmissionPolicyBinding>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            roundtrip::<ValidatingWebhookConfiguration>(object)
        }
        other => Err(format!("unexpected object type {other:?}")),
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(object: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut lost = Vec::new();
    missing_paths(object, &back, "", &mut lost);
    if lost.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "fields unknown to the type or changed: {}",
            lost.join(", ")
        ))
    }
}

/// Paths under `original` whose value is absent or different in `typed`
/// (nulls in the original count as absent).
fn missing_paths(original: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (original, typed) {
        (Value::Null, _) => {}
        (Value::Object(o), Value::Object(t)) => {
            for (k, v) in o {
                let at = format!("{path}.{k}");
                match t.get(k) {
                    Some(tv) => missing_paths(v, tv, &at, out),
                    None if v.is_null() => {}
                    None => out.push(at),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) if o.len() == t.len() => {
            for (i, (ov, tv)) in o.iter().zip(t).enumerate() {
                missing_paths(ov, tv, &format!("{path}[{i}]"), out);
            }
        }
        (o, t) if o == t => {}
        _ => out.push(path.to_string()),
    }
}

#[test]
fn a_misplaced_field_is_caught() {
    let good = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "a", "namespace": "b"}
    });
    assert_eq!(check_typed(&good), Ok(()));
    let bad = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "a", "namespce": "b"}
    });
    let err = check_typed(&bad).unwrap_err();
    assert!(err.contains(".metadata.namespce"), "{err}");
    let wrong_kind = serde_json::json!({"apiVersion": "v1", "kind": "Pod"});
    assert!(check_typed(&wrong_kind).is_err());
}
