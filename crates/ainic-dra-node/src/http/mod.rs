//! The node agent's HTTP endpoint (`--http-addr`): `/healthz` (the process
//! serves), `/readyz` (the kubelet accepted the plugin, the sockets are up
//! and the devices published are as configured: the Node was read and the
//! fabric config and node labels are valid) and `/metrics` (Prometheus
//! text format). What it answers is here; how it accepts and bounds
//! connections is [`server`].

pub(crate) mod metrics;
pub(crate) mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::plugin::registration::Registration;
use metrics::Metrics;

/// What the endpoint reports from.
#[derive(Clone)]
pub(crate) struct HttpState {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Registration with the kubelet.
    pub registration: watch::Receiver<Registration>,
    /// Why the devices published are less than configured (Node not read
    /// yet, invalid fabric config or node labels); `None` when they are as
    /// configured.
    pub published: watch::Receiver<Option<String>>,
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

/// Answers one request.
pub(crate) fn route(state: &HttpState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n".into());
    }
    match path {
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match &*state.registration.borrow() {
            Registration::Registered => match &*state.published.borrow() {
                None => reply(StatusCode::OK, TEXT, "ok\n".into()),
                Some(why) => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{why}\n")),
            },
            Registration::Pending => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                "waiting for the kubelet to register the plugin\n".into(),
            ),
            Registration::Rejected(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("kubelet rejected the plugin: {why}\n"),
            ),
        },
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            state.metrics.encode(),
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

/// Binds `addr`; returns the bound address (port 0 picks one) and the
/// serving future, bounded by [`server::Limits::for_nofile`] of this
/// process's open-file limit.
pub(crate) async fn serve(
    addr: SocketAddr,
    state: HttpState,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let limits = server::Limits::for_nofile(crate::limits::nofile().soft);
    tracing::debug!(?limits, "http limits");
    Ok((bound, server::run(listener, state, limits)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (watch::Sender<Registration>, HttpState) {
        let (tx, rx) = watch::channel(Registration::Pending);
        let state = HttpState {
            metrics: Arc::new(Metrics::default()),
            registration: rx,
            published: watch::channel(None).1,
        };
        (tx, state)
    }

    /// Issue 29 item 1: the agent reported ready while it published fenced
    /// NICs without their tenant (its fabric config dropped as invalid).
    #[test]
    fn not_ready_while_the_devices_published_are_less_than_configured() {
        let (tx, mut state) = state();
        tx.send_replace(Registration::Registered);
        let (why, published) = watch::channel(Some("fabric config f.yaml invalid".to_string()));
        state.published = published;
        let answer = route(&state, &Method::GET, "/readyz");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        why.send_replace(None);
        assert_eq!(
            route(&state, &Method::GET, "/readyz").status(),
            StatusCode::OK
        );
    }

    #[test]
    fn ready_only_after_registration() {
        let (tx, state) = state();
        assert_eq!(
            route(&state, &Method::GET, "/healthz").status(),
            StatusCode::OK
        );
        assert_eq!(
            route(&state, &Method::GET, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        tx.send_replace(Registration::Registered);
        assert_eq!(
            route(&state, &Method::GET, "/readyz").status(),
            StatusCode::OK
        );
        tx.send_replace(Registration::Rejected("version".into()));
        assert_eq!(
            route(&state, &Method::GET, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            route(&state, &Method::GET, "/nope").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route(&state, &Method::POST, "/healthz").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
