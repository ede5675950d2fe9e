//! The resource types the stand-in serves and how request paths map onto them.
//!
//! Each served type is described once by a [`ResourceType`]: where it lives in
//! the REST tree, whether it is namespaced, which field selectors the real API
//! server accepts for it, and which fields are immutable after creation.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Static description of one served resource type.
#[derive(Debug)]
pub(crate) struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version inside the group.
    pub version: &'static str,
    /// Plural lower-case name used in URLs.
    pub plural: &'static str,
    /// Object kind.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the type has a `/status` subresource (main updates keep status).
    pub has_status: bool,
    /// Field selector labels besides `metadata.name` / `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// JSON paths (dotted) that may not change on update.
    pub immutable: &'static [&'static str],
    /// Parses a JSON body into the typed object and back, dropping unknown fields.
    pub normalize: fn(Value) -> Result<Value, String>,
}

impl ResourceType {
    /// `apiVersion` as written in objects.
    pub(super) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` as used in API error messages (`nodes` for the core group).
    pub(super) fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `label` may be used in a field selector for this type.
    pub(super) fn supports_field(&self, label: &str) -> bool {
        label == "metadata.name"
            || (self.namespaced && label == "metadata.namespace")
            || self.field_labels.contains(&label)
    }
}

fn normalize_as<T: DeserializeOwned + Serialize>(value: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(value).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Every resource type the stand-in serves.
pub(crate) static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceslices",
        kind: "ResourceSlice",
        namespaced: false,
        has_status: false,
        field_labels: &["spec.nodeName", "spec.driver"],
        immutable: &["spec.driver", "spec.nodeName", "spec.pool.name"],
        normalize: normalize_as::<ResourceSlice>,
    },
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceclaims",
        kind: "ResourceClaim",
        namespaced: true,
        has_status: true,
        field_labels: &[],
        immutable: &["spec"],
        normalize: normalize_as::<ResourceClaim>,
    },
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "deviceclasses",
        kind: "DeviceClass",
        namespaced: false,
        has_status: false,
        field_labels: &[],
        immutable: &[],
        normalize: normalize_as::<DeviceClass>,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        kind: "Node",
        namespaced: false,
        has_status: true,
        field_labels: &["spec.unschedulable"],
        immutable: &[],
        normalize: normalize_as::<Node>,
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        has_status: false,
        field_labels: &[],
        immutable: &[],
        normalize: normalize_as::<Event>,
    },
];

/// Looks a served type up by its plural URL name.
pub(crate) fn by_plural(plural: &str) -> Option<&'static ResourceType> {
    RESOURCES.iter().find(|r| r.plural == plural)
}

/// A request path resolved to a resource type.
#[derive(Debug)]
pub(crate) struct Route {
    /// The addressed type.
    pub rt: &'static ResourceType,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Object name from the path, if any.
    pub name: Option<String>,
    /// Subresource (`status`), if any.
    pub subresource: Option<String>,
}

/// Resolves `/api/v1/...` or `/apis/<group>/<version>/...`; `None` = not served.
pub(crate) fn route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    let rt = RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)?;
    if namespace.is_some() && !rt.namespaced {
        return None;
    }
    if subresource
        .as_deref()
        .is_some_and(|s| s != "status" || !rt.has_status)
    {
        return None;
    }
    Some(Route {
        rt,
        namespace,
        name,
        subresource,
    })
}

/// Reads a dotted path (`spec.pool.name`) out of a JSON object.
pub(crate) fn lookup<'a>(value: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(value, |v, key| v.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_cluster_scoped_and_namespaced_paths() {
        let r = route("/apis/resource.k8s.io/v1/resourceslices/a").unwrap();
        assert_eq!(
            (r.rt.plural, r.name.as_deref()),
            ("resourceslices", Some("a"))
        );
        let r = route("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status").unwrap();
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        assert!(route("/api/v1/nodes").is_some());
        assert!(route("/apis/resource.k8s.io/v1/resourceclaims").is_some());
        let r = route("/apis/events.k8s.io/v1/namespaces/default/events").unwrap();
        assert_eq!(r.rt.kind, "Event");
    }

    #[test]
    fn rejects_unknown_types_scopes_and_subresources() {
        assert!(route("/api/v1/pods").is_none());
        assert!(route("/apis/resource.k8s.io/v1beta1/resourceslices").is_none());
        assert!(route("/apis/resource.k8s.io/v1/namespaces/ns/resourceslices").is_none());
        assert!(route("/apis/resource.k8s.io/v1/resourceslices/a/status").is_none());
    }
}
