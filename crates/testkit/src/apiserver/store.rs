//! The object store: what etcd plus the generic registry do for the served types.
//!
//! One global resourceVersion counter; server-set metadata (uid,
//! resourceVersion, creationTimestamp, generation); optimistic concurrency on
//! update; immutable fields; status subresources; delete preconditions; and
//! the one defaulting rule that matters for ResourceSlices (taint `timeAdded`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::patch::{json_patch, merge_patch};
use super::resources::{ResourceType, lookup};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::strategy::{Strategy, now};

/// `(plural, namespace or "", name)`.
type Key = (String, String, String);

/// What a watch sees: event type, the type's plural and the object.
#[derive(Debug, Clone)]
pub(crate) struct StoredEvent {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// Plural of the object's type.
    pub plural: &'static str,
    /// The object after the change (before, for deletes).
    pub object: Value,
    /// Its resourceVersion, as a number.
    pub rv: u64,
}

/// All stored objects and the counters the server hands out.
#[derive(Debug)]
pub(crate) struct Store {
    resource_version: u64,
    objects: BTreeMap<Key, Value>,
    rng: u64,
    events: Vec<StoredEvent>,
    /// Type-specific write rules.
    pub strategy: Strategy,
}

fn key(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Key {
    let ns = if rt.namespaced {
        namespace.unwrap_or_default()
    } else {
        ""
    };
    (rt.plural.to_string(), ns.to_string(), name.to_string())
}

fn str_field<'a>(obj: &'a Value, path: &str) -> &'a str {
    lookup(obj, path)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 253
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

impl Store {
    /// An empty store; `seed` varies the generated names and uids.
    pub(super) fn new(seed: u64) -> Self {
        Self {
            resource_version: 1,
            objects: BTreeMap::new(),
            rng: seed | 1,
            events: Vec::new(),
            strategy: Strategy::default(),
        }
    }

    /// The current (latest) resourceVersion.
    pub(super) fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// Events with resourceVersion greater than `since`, oldest first.
    ///
    /// Found by bisection: every write bumps the one counter, so events are
    /// recorded in resourceVersion order. A scan of every event (under the
    /// store's lock, at each wake of each watch) made the benches that
    /// hold thousands of claims measure this stand-in, not the agent.
    pub(super) fn events_since(&self, since: u64) -> impl Iterator<Item = &StoredEvent> {
        let start = self.events.partition_point(|e| e.rv <= since);
        self.events[start..].iter()
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: good enough for names and uids in tests.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn new_uid(&mut self) -> String {
        let (a, b) = (self.next_random(), self.next_random());
        let hex = format!("{a:016x}{b:016x}");
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }

    fn generated_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let r = self.next_random();
        (0..5)
            .map(|i| ALPHABET[((r >> (i * 8)) % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }

    fn bump(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn record(&mut self, kind: &'static str, rt: &'static ResourceType, object: &Value) {
        let object = object.clone();
        let rv = str_field(&object, "metadata.resourceVersion")
            .parse()
            .unwrap_or(0);
        self.events.push(StoredEvent {
            kind,
            plural: rt.plural,
            object,
            rv,
        });
    }

    /// GET one object.
    pub(super) fn get(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let found = self.objects.get(&key(rt, ns, name));
        found.cloned().ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Objects of a type (in `ns`, or all namespaces) matching both selectors, by name.
    pub(super) fn select(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((plural, o_ns, _), _)| plural == rt.plural && ns.is_none_or(|n| n == o_ns))
            .map(|(_, obj)| obj)
            .filter(|obj| labels.matches(obj) && fields.matches(obj))
            .cloned()
            .collect()
    }

    /// LIST: a `<Kind>List` object.
    pub(super) fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Value {
        json!({
            "apiVersion": rt.api_version(),
            "kind": format!("{}List", rt.kind),
            "metadata": {"resourceVersion": self.resource_version.to_string()},
            "items": self.select(rt, ns, labels, fields),
        })
    }

    /// Parses the body as the typed object and stamps `apiVersion`/`kind`.
    fn normalize(rt: &ResourceType, body: Value) -> Result<Value, ApiError> {
        let mut obj = (rt.normalize)(body)
            .map_err(|e| ApiError::bad_request(format!("invalid {} body: {e}", rt.kind)))?;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        Ok(obj)
    }

    fn check_namespace(
        rt: &ResourceType,
        obj: &mut Value,
        ns: Option<&str>,
    ) -> Result<(), ApiError> {
        let meta = &mut obj["metadata"];
        if !rt.namespaced {
            meta.as_object_mut().map(|m| m.remove("namespace"));
            return Ok(());
        }
        let url_ns =
            ns.ok_or_else(|| ApiError::plain(405, "MethodNotAllowed", "namespace required"))?;
        match meta.get("namespace").and_then(Value::as_str) {
            Some(body_ns) if !body_ns.is_empty() && body_ns != url_ns => {
                Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {
                meta["namespace"] = json!(url_ns);
                Ok(())
            }
        }
    }

    /// POST: stores a new object. `keep_status` is for seeding; API creates drop status.
    pub(super) fn create(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        body: Value,
        keep_status: bool,
    ) -> Result<Value, ApiError> {
        self.create_or_try(rt, ns, body, keep_status, false)
    }

    /// What [`Store::create`] would store, without storing it (a dry run:
    /// no uid, resourceVersion or event).
    pub(super) fn create_dry_run(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> Result<Value, ApiError> {
        self.create_or_try(rt, ns, body, false, true)
    }

    fn create_or_try(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        body: Value,
        keep_status: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut obj = Self::normalize(rt, body)?;
        Self::check_namespace(rt, &mut obj, ns)?;
        let mut name = str_field(&obj, "metadata.name").to_string();
        if name.is_empty() {
            let prefix = str_field(&obj, "metadata.generateName").to_string();
            if prefix.is_empty() {
                let detail = "Required value: name or generateName is required";
                return Err(ApiError::invalid(rt, "", "metadata.name", detail));
            }
            name = format!("{prefix}{}", self.generated_suffix());
        }
        if !is_dns_subdomain(&name) {
            let detail = format!("Invalid value: {name:?}: must be a lowercase RFC 1123 subdomain");
            return Err(ApiError::invalid(rt, &name, "metadata.name", &detail));
        }
        let k = key(rt, ns, &name);
        if self.objects.contains_key(&k) {
            return Err(ApiError::already_exists(rt, &name));
        }
        if dry_run {
            let mut obj = obj;
            obj["metadata"]["name"] = json!(name);
            if rt.has_status {
                obj.as_object_mut().map(|o| o.remove("status"));
            }
            self.strategy.prepare(rt, &mut obj);
            return Ok(obj);
        }
        let uid = self.new_uid();
        let rv = self.bump();
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(uid);
        meta["resourceVersion"] = json!(rv);
        meta["creationTimestamp"] = now();
        meta["generation"] = json!(1);
        if rt.has_status && !keep_status {
            obj.as_object_mut().map(|o| o.remove("status"));
        }
        self.strategy.prepare(rt, &mut obj);
        self.objects.insert(k, obj.clone());
        self.record("ADDED", rt, &obj);
        Ok(obj)
    }

    /// Merges the submitted object with the stored one as the registry does.
    fn merged_for_update(
        strategy: &Strategy,
        rt: &ResourceType,
        old: &Value,
        new: Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let name = str_field(old, "metadata.name");
        let mut result = if subresource == Some("status") {
            let mut r = old.clone();
            r["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            r
        } else {
            let mut r = new;
            if rt.has_status {
                r["status"] = old.get("status").cloned().unwrap_or(Value::Null);
            }
            r
        };
        if result.get("status") == Some(&Value::Null) {
            result.as_object_mut().map(|o| o.remove("status"));
        }
        for path in rt.immutable {
            if lookup(old, path) != lookup(&result, path) {
                return Err(ApiError::invalid(rt, name, path, "field is immutable"));
            }
        }
        for field in ["uid", "creationTimestamp", "namespace", "resourceVersion"] {
            result["metadata"][field] = old["metadata"][field].clone();
        }
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_changed = old.get("spec") != result.get("spec");
        result["metadata"]["generation"] = json!(generation + i64::from(spec_changed));
        if result["metadata"]["namespace"].is_null() {
            result["metadata"]
                .as_object_mut()
                .map(|m| m.remove("namespace"));
        }
        strategy.prepare(rt, &mut result);
        Ok(result)
    }

    /// PUT (main resource or `status`): optimistic concurrency on resourceVersion.
    pub(super) fn update(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let old = self.get(rt, ns, name)?;
        let new = Self::normalize(rt, body)?;
        let body_name = str_field(&new, "metadata.name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_rv = str_field(&new, "metadata.resourceVersion");
        if !body_rv.is_empty() && body_rv != str_field(&old, "metadata.resourceVersion") {
            return Err(ApiError::modified(rt, name));
        }
        let mut result = Self::merged_for_update(&self.strategy, rt, &old, new, subresource)?;
        result["metadata"]["name"] = json!(name);
        if result == old {
            return Ok(old); // a no-op update does not change resourceVersion
        }
        result["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(key(rt, ns, name), result.clone());
        self.record("MODIFIED", rt, &result);
        Ok(result)
    }

    /// PATCH: applies the patch to the stored object, then updates.
    pub(super) fn patch(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        content_type: &str,
        patch: Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut doc = self.get(rt, ns, name)?;
        match content_type {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                merge_patch(&mut doc, &patch)
            }
            // Server-side apply, approximated for one field manager: the
            // applied fields are merged in (lists replaced), and a UID in
            // the body must be the object's, as the real server demands.
            "application/apply-patch+yaml" => {
                let want = patch.pointer("/metadata/uid").and_then(Value::as_str);
                let have = doc.pointer("/metadata/uid").and_then(Value::as_str);
                if let (Some(want), Some(have)) = (want, have)
                    && want != have
                {
                    let message = format!(
                        "Precondition failed: UID in object meta: {want}, UID in existing object meta: {have}"
                    );
                    return Err(ApiError::plain(409, "Conflict", message));
                }
                merge_patch(&mut doc, &patch)
            }
            "application/json-patch+json" => json_patch(&mut doc, &patch)
                .map_err(|e| ApiError::plain(422, "Invalid", format!("json patch failed: {e}")))?,
            other => {
                let message = format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json; got {other}"
                );
                return Err(ApiError::plain(415, "UnsupportedMediaType", message));
            }
        }
        self.update(rt, ns, name, doc, subresource)
    }

    /// DELETE with optional `preconditions` (uid, resourceVersion) from DeleteOptions.
    pub(super) fn delete(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        options: &Value,
    ) -> Result<Value, ApiError> {
        let old = self.get(rt, ns, name)?;
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            let wanted = lookup(options, &format!("preconditions.{field}")).and_then(Value::as_str);
            let actual = str_field(&old, &format!("metadata.{field}"));
            if let Some(wanted) = wanted.filter(|w| *w != actual) {
                let why = format!(
                    "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                );
                return Err(ApiError::conflict(rt, name, &why));
            }
        }
        self.objects.remove(&key(rt, ns, name));
        let mut gone = old;
        gone["metadata"]["resourceVersion"] = json!(self.bump());
        self.record("DELETED", rt, &gone);
        Ok(gone)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
