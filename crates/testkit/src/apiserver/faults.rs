//! Fault injection and the request log.
//!
//! A [`Fault`] makes the next N requests that match it (by verb and/or
//! resource) fail with a chosen HTTP code before they touch the store. Every
//! request, failed or not, lands in the log as a [`RequestRecord`].

use std::fmt;

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// GET of one object.
    Get,
    /// POST to a collection.
    Create,
    /// PUT of one object.
    Update,
    /// PATCH of one object.
    Patch,
    /// DELETE of one object.
    Delete,
}

impl Verb {
    /// Whether the verb changes stored state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Get => "get",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        };
        f.write_str(name)
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// The verb.
    pub verb: Verb,
    /// Plural resource name (`resourceslices`, `nodes`, ...).
    pub resource: String,
    /// Namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// Object name, when one object was addressed (for creates: the stored name).
    pub name: Option<String>,
    /// `/status` when the status subresource was addressed.
    pub subresource: Option<String>,
    /// HTTP status code of the answer.
    pub code: u16,
    /// Whether a [`Fault`] produced the answer.
    pub injected: bool,
    /// A dry run (`dryRun=All`): nothing was stored.
    pub dry_run: bool,
}

/// A rule: fail the next `times` requests that match `verb` and `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    verb: Option<Verb>,
    resource: Option<String>,
    code: u16,
    times: usize,
}

impl Fault {
    /// Fails the next matching request with HTTP `code` (409, 429, 500, 503, ...).
    pub fn status(code: u16) -> Self {
        Self {
            verb: None,
            resource: None,
            code,
            times: 1,
        }
    }

    /// Only requests with this verb match.
    pub fn on(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this plural resource name match.
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_string());
        self
    }

    /// Fails this many matching requests instead of one.
    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        self.times > 0
            && self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

/// Pending faults; the first matching rule fires and is used up.
#[derive(Debug, Default)]
pub(crate) struct Faults(Vec<Fault>);

impl Faults {
    /// Adds a rule after the existing ones.
    pub(super) fn push(&mut self, fault: Fault) {
        self.0.push(fault);
    }

    /// The HTTP code to fail this request with, if a rule matches (consuming one use).
    pub(super) fn take(&mut self, verb: Verb, resource: &str) -> Option<u16> {
        let fault = self.0.iter_mut().find(|f| f.matches(verb, resource))?;
        fault.times -= 1;
        let code = fault.code;
        self.0.retain(|f| f.times > 0);
        Some(code)
    }

    /// How many injected failures are still to come.
    pub(super) fn pending(&self) -> usize {
        self.0.iter().map(|f| f.times).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_fires_only_for_matching_requests_and_is_used_up() {
        let mut faults = Faults::default();
        faults.push(
            Fault::status(503)
                .on(Verb::Create)
                .resource("resourceslices")
                .times(2),
        );
        assert_eq!(faults.take(Verb::Update, "resourceslices"), None);
        assert_eq!(faults.take(Verb::Create, "nodes"), None);
        assert_eq!(faults.take(Verb::Create, "resourceslices"), Some(503));
        assert_eq!(faults.pending(), 1);
        assert_eq!(faults.take(Verb::Create, "resourceslices"), Some(503));
        assert_eq!(faults.take(Verb::Create, "resourceslices"), None);
    }
}
