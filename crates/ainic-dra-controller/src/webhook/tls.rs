//! The webhook's certificates against the API server: the Secret every
//! replica shares (made by whichever replica gets there first, renewed by
//! whichever sees it due), the caBundle of the chart's
//! ValidatingWebhookConfiguration, and the serving key the TLS listener
//! picks up when either changes.

use std::sync::{Arc, RwLock};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certs::CertSet;

/// Why the certificates could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// An API call failed.
    #[error("failed to {action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The client's error.
        source: kube::Error,
    },
    /// A certificate could not be made.
    #[error(transparent)]
    Cert(#[from] super::certs::CertError),
    /// The stored key or certificate does not load.
    #[error("the webhook certificate in Secret {secret} does not load: {reason}")]
    Load {
        /// The Secret.
        secret: String,
        /// Why.
        reason: String,
    },
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> TlsError {
    let action = action.into();
    move |source| TlsError::Api { action, source }
}

/// The certificate set in Secret `name`, made or renewed first when it
/// is missing, not ours, or due ([`CertSet::renewal_reason`]). Two
/// replicas racing: the loser's write conflicts and it takes the winner's.
pub async fn ensure_secret(
    secrets: &Api<Secret>,
    name: &str,
    hosts: &[String],
    now: i64,
) -> Result<CertSet, TlsError> {
    for _ in 0..3 {
        let found =
            (secrets.get_opt(name).await).map_err(api_error(format!("read Secret {name}")))?;
        let current = found.as_ref().and_then(CertSet::from_secret);
        let why = match &current {
            None if found.is_some() => "it holds no certificate of ours".to_string(),
            None => "it does not exist".to_string(),
            Some(set) => match set.renewal_reason(hosts, now) {
                None => return Ok(current.expect("matched Some")),
                Some(why) => why,
            },
        };
        let previous = current.map(|set| set.ca);
        let set = CertSet::generate(hosts, now, previous)?;
        let (data, annotations) = set.secret_parts();
        let mut secret = found.unwrap_or_default();
        secret.metadata.name = Some(name.to_string());
        secret.metadata.annotations = Some(annotations);
        secret.type_ = Some("kubernetes.io/tls".into());
        secret.data = Some(data);
        let written = if secret.metadata.resource_version.is_some() {
            secrets.replace(name, &PostParams::default(), &secret).await
        } else {
            secrets.create(&PostParams::default(), &secret).await
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = name, reason = %why, hosts = %hosts.join(","), "webhook certificate made");
                return Ok(set);
            }
            // Another replica wrote first: read what it wrote.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(api_error(format!("write Secret {name}"))(e)),
        }
    }
    Err(TlsError::Load {
        secret: name.to_string(),
        reason: "it kept changing while it was written".into(),
    })
}

/// Sets the caBundle of every webhook of configuration `name` to
/// `bundle` where it differs (a replace at the version read: a
/// concurrent change makes it fail, and the next round tries again);
/// returns how many it changed.
pub async fn inject_ca_bundle(
    configs: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    bundle: &str,
) -> Result<usize, TlsError> {
    let mut config = (configs.get(name).await).map_err(api_error(format!(
        "read ValidatingWebhookConfiguration {name}"
    )))?;
    let wanted = k8s_openapi::ByteString(bundle.as_bytes().to_vec());
    let mut changed = 0;
    for webhook in config.webhooks.iter_mut().flatten() {
        if webhook.client_config.ca_bundle.as_ref() != Some(&wanted) {
            webhook.client_config.ca_bundle = Some(wanted.clone());
            changed += 1;
        }
    }
    if changed == 0 {
        return Ok(0);
    }
    configs
        .replace(name, &PostParams::default(), &config)
        .await
        .map_err(api_error(format!(
            "set the caBundle of ValidatingWebhookConfiguration {name}"
        )))?;
    Ok(changed)
}

/// The serving certificate the TLS listener presents; replaced in place
/// when the Secret changes.
#[derive(Debug, Default)]
pub struct ServingCert {
    current: RwLock<Option<(CertSet, Arc<CertifiedKey>)>>,
}

impl ServingCert {
    /// Serves `set` from now on, unless it is the one served already;
    /// returns whether it changed.
    pub fn install(&self, set: &CertSet, secret: &str) -> Result<bool, TlsError> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(served, _)| served == set) {
            return Ok(false);
        }
        let load = |reason: String| TlsError::Load {
            secret: secret.to_string(),
            reason,
        };
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(set.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| load(format!("tls.crt: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(set.key.as_bytes())
            .map_err(|e| load(format!("tls.key: {e}")))?;
        let key = any_supported_type(&key).map_err(|e| load(format!("tls.key: {e}")))?;
        *current = Some((set.clone(), Arc::new(CertifiedKey::new(chain, key))));
        Ok(true)
    }

    /// Whether a certificate is installed (the listener answers only then).
    pub fn ready(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        current.as_ref().map(|(_, key)| key.clone())
    }
}
