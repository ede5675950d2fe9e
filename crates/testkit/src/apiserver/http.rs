//! The HTTP face of the stand-in: request parsing, dispatch to the store,
//! fault injection, logging and JSON responses.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use http_body_util::{BodyExt, Channel, Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response};
use serde_json::Value;

use super::faults::{Faults, RequestRecord, Verb};
use super::resources::{Route, route};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::Store;
use super::watch;

/// Response body: a whole JSON document, or a watch stream.
pub(crate) type Body = Either<Full<Bytes>, Channel<Bytes>>;

/// State shared by all connections.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The objects.
    pub store: Mutex<Store>,
    /// Pending injected failures.
    pub faults: Mutex<Faults>,
    /// Every request seen.
    pub log: Mutex<Vec<RequestRecord>>,
    /// Latest resourceVersion, for waking watches.
    pub changed: tokio::sync::watch::Sender<u64>,
    /// What `/version` answers.
    pub version: Mutex<Value>,
    /// Connections accepted so far.
    pub connections: std::sync::atomic::AtomicUsize,
}

/// Locks a mutex, ignoring poisoning (a panicked test thread must not hide state).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    let pairs = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty());
    pairs
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

fn verb_of(method: &Method, route: &Route, query: &HashMap<String, String>) -> Option<Verb> {
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    Some(match (method.as_str(), route.name.is_some()) {
        ("GET", false) if watch => Verb::Watch,
        ("GET", false) => Verb::List,
        ("GET", true) => Verb::Get,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        _ => return None,
    })
}

/// A JSON response with `code`.
pub(crate) fn json_response(code: u16, body: &Value) -> Response<Body> {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    let mut response = Response::new(Either::Left(Full::new(bytes)));
    *response.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(error: &ApiError) -> Response<Body> {
    json_response(error.code, &error.to_status())
}

fn selectors(
    route: &Route,
    query: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or_default();
    let labels = LabelSelector::parse(get("labelSelector")).map_err(ApiError::bad_request)?;
    let fields =
        FieldSelector::parse(get("fieldSelector"), route.rt).map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// Runs one non-watch request against the store; returns (code, body).
fn dispatch(
    shared: &Shared,
    verb: Verb,
    route: &Route,
    query: &HashMap<String, String>,
    content_type: &str,
    body: Value,
) -> Result<(u16, Value), ApiError> {
    let (rt, ns) = (route.rt, route.namespace.as_deref());
    let name = route.name.as_deref().unwrap_or_default();
    let sub = route.subresource.as_deref();
    let mut store = lock(&shared.store);
    let result = match verb {
        Verb::List => {
            let (labels, fields) = selectors(route, query)?;
            Ok((200, store.list(rt, ns, &labels, &fields)))
        }
        Verb::Get => store.get(rt, ns, name).map(|o| (200, o)),
        Verb::Create if sub.is_none() && dry_run(query) => {
            store.create_dry_run(rt, ns, body).map(|o| (201, o))
        }
        Verb::Create if sub.is_none() => store.create(rt, ns, body, false).map(|o| (201, o)),
        Verb::Update => store.update(rt, ns, name, body, sub).map(|o| (200, o)),
        Verb::Patch => store
            .patch(rt, ns, name, content_type, body, sub)
            .map(|o| (200, o)),
        Verb::Delete if sub.is_none() => store.delete(rt, ns, name, &body).map(|o| (200, o)),
        _ => Err(ApiError::plain(
            405,
            "MethodNotAllowed",
            "the server does not allow this method",
        )),
    };
    if verb.is_write() && !dry_run(query) {
        shared.changed.send_replace(store.resource_version());
    }
    result
}

/// `dryRun=All`: validate and answer, store nothing.
fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|d| d == "All")
}

fn record_name(route: &Route, verb: Verb, body: &Value, result: Option<&Value>) -> Option<String> {
    if verb != Verb::Create {
        return route.name.clone();
    }
    let from = result.unwrap_or(body);
    from.pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Serves one HTTP request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, incoming) = req.into_parts();
    let query = parse_query(parts.uri.query());
    let not_found = ApiError::plain(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    if parts.uri.path() == "/version" && parts.method == Method::GET {
        return Ok(json_response(200, &lock(&shared.version)));
    }
    let Some(route) = route(parts.uri.path()) else {
        return Ok(error_response(&not_found));
    };
    let Some(verb) = verb_of(&parts.method, &route, &query) else {
        let error = ApiError::plain(
            405,
            "MethodNotAllowed",
            "the server does not allow this method",
        );
        return Ok(error_response(&error));
    };
    let mut record = RequestRecord {
        verb,
        resource: route.rt.plural.to_string(),
        namespace: route.namespace.clone(),
        name: route.name.clone(),
        subresource: route.subresource.clone(),
        code: 200,
        injected: false,
        dry_run: dry_run(&query),
    };
    let injected = lock(&shared.faults).take(verb, route.rt.plural);
    if let Some(code) = injected {
        let message = format!("injected failure for {verb} {}", route.rt.plural);
        let error = ApiError::plain(code, ApiError::reason_for(code), message);
        record.code = code;
        record.injected = true;
        lock(&shared.log).push(record);
        return Ok(error_response(&error));
    }
    if verb == Verb::Watch {
        let response = watch::start(shared.clone(), &route, &query);
        record.code = response.status().as_u16();
        lock(&shared.log).push(record);
        return Ok(response);
    }
    let content_type = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_string())
        .unwrap_or_default();
    let bytes = incoming
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let body: Result<Value, _> = if bytes.is_empty() {
        Ok(Value::Object(Default::default()))
    } else {
        serde_json::from_slice(&bytes)
    };
    let outcome = body
        .map_err(|e| ApiError::bad_request(format!("request body is not JSON: {e}")))
        .and_then(|body| {
            let result = dispatch(&shared, verb, &route, &query, &content_type, body.clone());
            record.name = record_name(&route, verb, &body, result.as_ref().ok().map(|r| &r.1));
            result
        });
    let response = match &outcome {
        Ok((code, body)) => json_response(*code, body),
        Err(error) => error_response(error),
    };
    record.code = response.status().as_u16();
    lock(&shared.log).push(record);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let q = parse_query(Some(
            "labelSelector=app%20in%20(a%2Cb)&fieldSelector=spec.nodeName%3Dn1&x",
        ));
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert_eq!(q["fieldSelector"], "spec.nodeName=n1");
        assert_eq!(q["x"], "");
    }
}
