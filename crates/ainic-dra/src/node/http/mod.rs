//! The node agent's HTTP endpoint (`--http-addr`): `/healthz` (the process
//! serves), `/readyz` (the kubelet accepted the plugin and the sockets are
//! up) and `/metrics` (Prometheus text format).

pub mod metrics;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::node::plugin::registration::Registration;
use metrics::Metrics;

/// What the endpoint reports from.
#[derive(Clone)]
pub struct HttpState {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Registration with the kubelet.
    pub registration: watch::Receiver<Registration>,
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

/// Answers one request.
pub fn route(state: &HttpState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n".into());
    }
    match path {
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match &*state.registration.borrow() {
            Registration::Registered => reply(StatusCode::OK, TEXT, "ok\n".into()),
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
/// serving future.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let server = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let response = route(&state, req.method(), req.uri().path());
                    async move { Ok::<_, Infallible>(response) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "http connection ended");
                }
            });
        }
    };
    Ok((bound, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (watch::Sender<Registration>, HttpState) {
        let (tx, rx) = watch::channel(Registration::Pending);
        let state = HttpState {
            metrics: Arc::new(Metrics::default()),
            registration: rx,
        };
        (tx, state)
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
