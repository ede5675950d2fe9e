//! Watch: a chunked stream of `{"type": ..., "object": ...}` lines.
//!
//! Without `resourceVersion` (or with `0`) the stream starts with a synthetic
//! `ADDED` for every matching object, as upstream does; with a version it
//! replays stored events newer than it. The stream ends after
//! `timeoutSeconds` (default 300) or when the client goes away.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{Channel, Either};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};

use super::http::{Body, Shared, json_response, lock};
use super::resources::{ResourceType, Route};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;

/// What one watch selects.
struct Filter {
    rt: &'static ResourceType,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, plural: &str, obj: &Value) -> bool {
        let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        plural == self.rt.plural
            && self.namespace.as_deref().is_none_or(|n| Some(n) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

/// Events for `filter` after `since`, and the store's version they reach.
fn pending(shared: &Shared, filter: &Filter, since: Option<u64>) -> (Vec<Value>, u64) {
    let store = lock(&shared.store);
    let events = match since {
        None => {
            let objects = store.select(
                filter.rt,
                filter.namespace.as_deref(),
                &filter.labels,
                &filter.fields,
            );
            objects
                .into_iter()
                .map(|o| json!({"type": "ADDED", "object": o}))
                .collect()
        }
        Some(rv) => store
            .events_since(rv)
            .filter(|e| filter.matches(e.plural, &e.object))
            .map(|e| json!({"type": e.kind, "object": e.object}))
            .collect(),
    };
    (events, store.resource_version())
}

async fn stream(
    shared: Arc<Shared>,
    filter: Filter,
    since: Option<u64>,
    timeout: Duration,
    mut tx: http_body_util::channel::Sender<Bytes>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changed = shared.changed.subscribe();
    let mut since = since;
    loop {
        changed.mark_unchanged();
        let (events, reached) = pending(&shared, &filter, since);
        since = Some(reached);
        for event in events {
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            if tx.send(Frame::data(Bytes::from(line))).await.is_err() {
                return;
            }
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => continue,
            _ => return,
        }
    }
}

/// Answers a watch request with a streaming body.
pub(crate) fn start(
    shared: Arc<Shared>,
    route: &Route,
    query: &HashMap<String, String>,
) -> Response<Body> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or_default();
    let parsed = LabelSelector::parse(get("labelSelector"))
        .and_then(|l| FieldSelector::parse(get("fieldSelector"), route.rt).map(|f| (l, f)));
    let (labels, fields) = match parsed {
        Ok(selectors) => selectors,
        Err(e) => return json_response(400, &ApiError::bad_request(e).to_status()),
    };
    let since = match get("resourceVersion") {
        "" | "0" => None,
        rv => match rv.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                return json_response(
                    400,
                    &ApiError::bad_request("invalid resourceVersion").to_status(),
                );
            }
        },
    };
    let timeout = Duration::from_secs(get("timeoutSeconds").parse().unwrap_or(300));
    let filter = Filter {
        rt: route.rt,
        namespace: route.namespace.clone(),
        labels,
        fields,
    };
    let (tx, body) = Channel::new(16);
    tokio::spawn(stream(shared, filter, since, timeout, tx));
    let mut response = Response::new(Either::Right(body));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
