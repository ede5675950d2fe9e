//! API errors and the `Status` bodies the real API server answers them with.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// An API failure: HTTP code, `reason` and message as the real server words them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `(name, group, kind)` for `details`, when one object is concerned.
    pub details: Option<(String, String, String)>,
}

impl ApiError {
    fn about(
        rt: &ResourceType,
        name: &str,
        code: u16,
        reason: &'static str,
        message: String,
    ) -> Self {
        let details = Some((
            name.to_string(),
            rt.group.to_string(),
            rt.plural.to_string(),
        ));
        Self {
            code,
            reason,
            message,
            details,
        }
    }

    /// 404: the named object does not exist.
    pub(super) fn not_found(rt: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", rt.qualified_name());
        Self::about(rt, name, 404, "NotFound", message)
    }

    /// 409: create of a name that exists.
    pub(super) fn already_exists(rt: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", rt.qualified_name());
        Self::about(rt, name, 409, "AlreadyExists", message)
    }

    /// 409: optimistic-concurrency failure (stale resourceVersion, failed precondition).
    pub(super) fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            rt.qualified_name()
        );
        Self::about(rt, name, 409, "Conflict", message)
    }

    /// 409 for a stale resourceVersion, worded as upstream.
    pub(super) fn modified(rt: &ResourceType, name: &str) -> Self {
        let why = "the object has been modified; please apply your changes to the latest version and try again";
        Self::conflict(rt, name, why)
    }

    /// 422: the object fails validation.
    pub(super) fn invalid(rt: &ResourceType, name: &str, field: &str, detail: &str) -> Self {
        let group = if rt.group.is_empty() {
            String::new()
        } else {
            format!(".{}", rt.group)
        };
        let message = format!(
            "{}{group} \"{name}\" is invalid: {field}: {detail}",
            rt.kind
        );
        Self::about(rt, name, 422, "Invalid", message)
    }

    /// 400: malformed request.
    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::plain(400, "BadRequest", message)
    }

    /// An error with no object details (404 for unknown paths, 405, 415, injected faults).
    pub(super) fn plain(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// The `reason` upstream uses for an HTTP code (for injected faults).
    pub(super) fn reason_for(code: u16) -> &'static str {
        match code {
            400 => "BadRequest",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        }
    }

    /// The `meta/v1` `Status` object for this failure.
    pub(super) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((name, group, kind)) = &self.details {
            status["details"] = json!({"name": name, "group": group, "kind": kind});
        }
        status
    }
}
