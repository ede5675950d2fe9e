//! The webhook's HTTPS listener: TLS with the serving certificate of
//! [`ServingCert`], HTTP/1.1, `POST /validate` for AdmissionReviews and
//! `GET /healthz` for the readiness probe. Bounded like the agent's
//! endpoint: at most [`MAX_CONNECTIONS`] at once, a handshake and each
//! request's headers within [`HEADER_TIMEOUT`], a body of at most
//! [`MAX_BODY`] (the API server's own request limit).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use k8s_openapi::api::resource::v1::DeviceClass;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::review::{self, AdmissionReview, Verdict};
use super::tls::ServingCert;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Time allowed for the TLS handshake and for each request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest AdmissionReview read (the API server refuses bigger objects).
pub const MAX_BODY: usize = 3 * 1024 * 1024 + 64 * 1024;

/// What the handler needs.
pub struct WebhookState {
    /// Reads the DeviceClasses a claim names.
    pub client: kube::Client,
    /// The DRA driver whose NicConfig entries are judged.
    pub driver: String,
    /// The certificate presented.
    pub serving: Arc<ServingCert>,
}

/// The TLS settings: TLS 1.2 and 1.3 with ring, HTTP/1.1 by ALPN, the
/// certificate resolved per handshake (so a renewal needs no restart).
pub fn tls_acceptor(serving: Arc<ServingCert>) -> TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_no_client_auth()
        .with_cert_resolver(serving);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// Serves connections from `listener` forever.
pub async fn serve(listener: TcpListener, state: Arc<WebhookState>) {
    let acceptor = tls_acceptor(state.serving.clone());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut wait = Duration::from_millis(5);
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                wait = Duration::from_millis(5);
                stream
            }
            Err(error) => {
                tracing::debug!(%error, "webhook accept failed");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => return tracing::debug!(%error, "webhook TLS handshake failed"),
                Err(_) => return tracing::debug!("webhook TLS handshake timed out"),
            };
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            if let Err(error) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%error, "webhook connection ended");
            }
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    reply(
        status,
        "text/plain; charset=utf-8",
        format!("{body}\n").into_bytes(),
    )
}

/// Answers one request.
async fn handle(state: &WebhookState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok"),
        (&Method::POST, "/validate") => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(error) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        &format!("cannot read the body: {error}"),
                    );
                }
            };
            match serde_json::from_slice::<AdmissionReview>(&body) {
                Ok(review) => answer(state, review).await,
                Err(error) => text(
                    StatusCode::BAD_REQUEST,
                    &format!("not an AdmissionReview: {error}"),
                ),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "only POST /validate and GET /healthz",
        ),
    }
}

/// Judges one review, reading the DeviceClasses it names.
async fn answer(state: &WebhookState, review: AdmissionReview) -> Response<Full<Bytes>> {
    let Some(request) = review.request else {
        return text(
            StatusCode::BAD_REQUEST,
            "the AdmissionReview has no request",
        );
    };
    let verdict = match review::subject(&request) {
        Err(error) => Verdict::Allowed(vec![format!("{} not judged: {error}", state.driver)]),
        Ok(subject) => {
            let (classes, warnings) = read_classes(state, &review::classes_needed(&subject)).await;
            match review::judge(&subject, &state.driver, &classes) {
                Verdict::Allowed(_) => Verdict::Allowed(warnings),
                denied => denied,
            }
        }
    };
    if let Verdict::Denied(message) = &verdict {
        tracing::info!(kind = %request.kind.kind, namespace = %request.namespace, name = %request.name, %message, "refused a NicConfig");
    }
    let body = review::response(&request.uid, &verdict);
    reply(
        StatusCode::OK,
        "application/json",
        serde_json::to_vec(&body).expect("JSON values serialize"),
    )
}

/// The classes that exist among `names`, and a warning per class that
/// could not be read (judged as not created yet).
async fn read_classes(state: &WebhookState, names: &[String]) -> (Vec<DeviceClass>, Vec<String>) {
    let api: kube::Api<DeviceClass> = kube::Api::all(state.client.clone());
    let mut classes = Vec::new();
    let mut warnings = Vec::new();
    for name in names {
        match api.get_opt(name).await {
            Ok(Some(class)) => classes.push(class),
            Ok(None) => {}
            Err(error) => warnings.push(format!(
                "{}: DeviceClass {name} could not be read ({error}); the NicConfig was checked without it",
                state.driver
            )),
        }
    }
    (classes, warnings)
}
