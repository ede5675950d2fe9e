//! One AdmissionReview, judged: the object of a request (a ResourceClaim,
//! ResourceClaimTemplate or DeviceClass, in `resource.k8s.io/v1`: the
//! webhook's rules ask the API server to convert other versions first),
//! the DeviceClasses it needs, and the verdict of
//! `dra_model::admission` with the agent's own message. Pure: the server
//! fetches the classes and sends the answer.

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceClassSpec, ResourceClaimSpec, ResourceClaimTemplateSpec,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// `apiVersion` of the reviews this webhook answers.
pub const REVIEW_VERSION: &str = "admission.k8s.io/v1";

/// The part of an `AdmissionReview` request the webhook reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// The object's kind (after conversion to the rule's version).
    pub kind: Kind,
    /// Object name; empty for a `generateName` create.
    #[serde(default)]
    pub name: String,
    /// Object namespace; empty for cluster-scoped objects.
    #[serde(default)]
    pub namespace: String,
    /// The object as written (absent for DELETE).
    #[serde(default)]
    pub object: Option<Value>,
}

/// Group, version and kind of the reviewed object.
#[derive(Clone, Debug, Deserialize)]
pub struct Kind {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    pub kind: String,
}

/// An `AdmissionReview` as the API server sends it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1`.
    pub api_version: String,
    /// The request.
    pub request: Option<AdmissionRequest>,
}

/// What is reviewed, parsed.
#[derive(Clone, Debug)]
pub enum Subject {
    /// A ResourceClaim: `claim ns/name`, its spec.
    Claim(String, ResourceClaimSpec),
    /// A ResourceClaimTemplate: `ResourceClaimTemplate ns/name`, the
    /// claim spec it stamps out.
    Template(String, ResourceClaimSpec),
    /// A DeviceClass: `DeviceClass name`, its spec.
    Class(String, DeviceClassSpec),
    /// Anything else (a kind the rules should not send, a DELETE): allowed.
    Other,
}

/// The answer to one review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted, with warnings for the client (a class that could not be read).
    Allowed(Vec<String>),
    /// Refused, with the message.
    Denied(String),
}

/// An object of a kind the webhook judges that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {kind} {name}: {source}")]
pub struct UnreadableObject {
    /// `ResourceClaim`, `ResourceClaimTemplate` or `DeviceClass`.
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    /// What the parser said.
    pub source: serde_json::Error,
}

/// Parses the object of `request`; an object of the right kind that does
/// not parse is an error naming it (the API server validated it already,
/// so this means a version the webhook does not read).
pub fn subject(request: &AdmissionRequest) -> Result<Subject, UnreadableObject> {
    let Some(object) = &request.object else {
        return Ok(Subject::Other);
    };
    let ours = request.kind.group == "resource.k8s.io" && request.kind.version == "v1";
    let name = (object.pointer("/metadata/name").and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .or_else(|| {
            object
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
        })
        .unwrap_or(&request.name);
    let namespaced = format!("{}/{name}", request.namespace);
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let kind = request.kind.kind.as_str();
    let unreadable = |source| UnreadableObject {
        kind: kind.to_string(),
        name: namespaced.clone(),
        source,
    };
    Ok(match kind {
        _ if !ours => Subject::Other,
        "ResourceClaim" => Subject::Claim(
            format!("claim {namespaced}"),
            serde_json::from_value(spec).map_err(unreadable)?,
        ),
        "ResourceClaimTemplate" => {
            let template: ResourceClaimTemplateSpec =
                serde_json::from_value(spec).map_err(unreadable)?;
            Subject::Template(
                format!("ResourceClaimTemplate {namespaced}"),
                template.spec.unwrap_or_default(),
            )
        }
        "DeviceClass" => Subject::Class(
            format!("DeviceClass {name}"),
            serde_json::from_value(spec).map_err(unreadable)?,
        ),
        _ => Subject::Other,
    })
}

/// The DeviceClasses judging `subject` needs, by name.
pub fn classes_needed(subject: &Subject) -> Vec<String> {
    let (Subject::Claim(_, spec) | Subject::Template(_, spec)) = subject else {
        return Vec::new();
    };
    let mut names: Vec<String> = (dra_model::admission::targets(spec).into_iter())
        .map(|t| t.class)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Judges `subject` for `driver` with the `classes` that exist among
/// those it names.
pub fn judge(subject: &Subject, driver: &str, classes: &[DeviceClass]) -> Verdict {
    let (label, result) = match subject {
        Subject::Claim(label, spec) | Subject::Template(label, spec) => (
            label,
            dra_model::admission::check_claim(spec, driver, classes),
        ),
        Subject::Class(label, spec) => (label, dra_model::admission::check_class(spec, driver)),
        Subject::Other => return Verdict::Allowed(Vec::new()),
    };
    match result {
        Ok(()) => Verdict::Allowed(Vec::new()),
        Err(error) => Verdict::Denied(format!("{label}: {error}")),
    }
}

/// The `AdmissionReview` answering request `uid` with `verdict`.
pub fn response(uid: &str, verdict: &Verdict) -> Value {
    let answer = match verdict {
        Verdict::Allowed(warnings) if warnings.is_empty() => {
            json!({"uid": uid, "allowed": true})
        }
        Verdict::Allowed(warnings) => json!({"uid": uid, "allowed": true, "warnings": warnings}),
        Verdict::Denied(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 422, "reason": "Invalid", "message": message},
        }),
    };
    json!({"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": answer})
}

#[cfg(test)]
mod tests;
