//! The webhook's TLS certificates: a CA of its own and a serving
//! certificate it signs for the names the API server dials, made at start
//! and kept in a Secret so that every replica serves the same one and a
//! restart keeps it. Pure: generating, reading a Secret's data, deciding
//! when to renew; `tls` does the API calls.
//!
//! Both certificates are ECDSA P-256, valid [`VALIDITY_DAYS`] days, and
//! renewed together when fewer than [`RENEW_BEFORE_DAYS`] days are left
//! or the names changed. The new set keeps the CA it replaces as
//! `ca-previous.crt`, and the caBundle holds both, so the API server
//! trusts a replica that still serves the old certificate until it
//! reloads the new one (within a minute).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Days a new certificate is valid.
pub const VALIDITY_DAYS: i64 = 5 * 365;
/// Renew when fewer days than this are left.
pub const RENEW_BEFORE_DAYS: i64 = 90;
/// Secret key of the CA certificate (PEM).
pub const KEY_CA: &str = "ca.crt";
/// Secret key of the CA this one replaced, trusted until the next renewal.
pub const KEY_PREVIOUS_CA: &str = "ca-previous.crt";
/// Secret key of the serving certificate (PEM), as `kubernetes.io/tls`.
pub const KEY_CERT: &str = "tls.crt";
/// Secret key of the serving key (PEM, PKCS#8).
pub const KEY_KEY: &str = "tls.key";
/// Annotation: the names the serving certificate is for, comma-separated.
pub const ANNOTATION_HOSTS: &str = "ainic.amd.com/webhook-hosts";
/// Annotation: when both certificates expire, in Unix seconds.
pub const ANNOTATION_NOT_AFTER: &str = "ainic.amd.com/webhook-not-after";

const DAY: i64 = 24 * 3600;

/// A CA and the serving certificate it signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSet {
    /// The CA certificate, PEM.
    pub ca: String,
    /// The CA it replaced, PEM, still trusted.
    pub previous_ca: Option<String>,
    /// The serving certificate, PEM.
    pub cert: String,
    /// Its private key, PEM.
    pub key: String,
    /// The DNS names and IP addresses it is for.
    pub hosts: Vec<String>,
    /// Unix seconds when it expires.
    pub not_after: i64,
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused a name or failed to sign.
    #[error("cannot make the webhook certificate for {hosts}: {source}")]
    Generate {
        /// The names asked for.
        hosts: String,
        /// What rcgen said.
        source: rcgen::Error,
    },
    /// The time could not be represented.
    #[error("invalid certificate validity: {0}")]
    Time(String),
}

impl CertSet {
    /// A new CA and a serving certificate for `hosts`, valid from `now`
    /// (Unix seconds, an hour back for clock skew), keeping `previous_ca`.
    pub fn generate(
        hosts: &[String],
        now: i64,
        previous_ca: Option<String>,
    ) -> Result<CertSet, CertError> {
        let fail = |source| CertError::Generate {
            hosts: hosts.join(","),
            source,
        };
        let not_after = now + VALIDITY_DAYS * DAY;
        let at = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| CertError::Time(e.to_string()))
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "ainic-dra webhook CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.not_before = at(now - 3600)?;
        ca.not_after = at(not_after)?;
        let ca_key = KeyPair::generate().map_err(fail)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf = CertificateParams::new(hosts.to_vec()).map_err(fail)?;
        let first = hosts.first().cloned().unwrap_or_default();
        leaf.distinguished_name.push(DnType::CommonName, first);
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.not_before = at(now - 3600)?;
        leaf.not_after = at(not_after)?;
        let leaf_key = KeyPair::generate().map_err(fail)?;
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(fail)?;
        Ok(CertSet {
            ca: ca_cert.pem(),
            previous_ca,
            cert: leaf_cert.pem(),
            key: leaf_key.serialize_pem(),
            hosts: hosts.to_vec(),
            not_after,
        })
    }

    /// The set a Secret holds; `None` when a key or annotation is missing.
    pub fn from_secret(secret: &Secret) -> Option<CertSet> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
        let annotations = secret.metadata.annotations.as_ref()?;
        Some(CertSet {
            ca: text(KEY_CA)?,
            previous_ca: text(KEY_PREVIOUS_CA),
            cert: text(KEY_CERT)?,
            key: text(KEY_KEY)?,
            hosts: split_hosts(annotations.get(ANNOTATION_HOSTS)?),
            not_after: annotations.get(ANNOTATION_NOT_AFTER)?.parse().ok()?,
        })
    }

    /// The Secret's data and annotations for this set.
    pub fn secret_parts(&self) -> (BTreeMap<String, ByteString>, BTreeMap<String, String>) {
        let mut data = BTreeMap::from([
            (KEY_CA.to_string(), bytes(&self.ca)),
            (KEY_CERT.to_string(), bytes(&self.cert)),
            (KEY_KEY.to_string(), bytes(&self.key)),
        ]);
        if let Some(previous) = &self.previous_ca {
            data.insert(KEY_PREVIOUS_CA.to_string(), bytes(previous));
        }
        let annotations = BTreeMap::from([
            (ANNOTATION_HOSTS.to_string(), self.hosts.join(",")),
            (ANNOTATION_NOT_AFTER.to_string(), self.not_after.to_string()),
        ]);
        (data, annotations)
    }

    /// Why this set must be replaced for `hosts` at `now`, if it must.
    pub fn renewal_reason(&self, hosts: &[String], now: i64) -> Option<String> {
        if self.hosts != hosts {
            return Some(format!(
                "it is for {}, the webhook is reached as {}",
                self.hosts.join(","),
                hosts.join(",")
            ));
        }
        let left = (self.not_after - now) / DAY;
        (left < RENEW_BEFORE_DAYS).then(|| format!("it expires in {left} days"))
    }

    /// What the API server trusts: this CA, then the one it replaced.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = self.ca.clone();
        if let Some(previous) = &self.previous_ca {
            bundle.push_str(previous);
        }
        bundle
    }
}

fn bytes(text: &str) -> ByteString {
    ByteString(text.as_bytes().to_vec())
}

fn split_hosts(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn hosts() -> Vec<String> {
        vec![
            "ainic-dra-webhook.ainic-system.svc".into(),
            "127.0.0.1".into(),
        ]
    }

    #[test]
    fn a_set_round_trips_through_its_secret() {
        let set = CertSet::generate(&hosts(), NOW, Some("old CA\n".into())).unwrap();
        assert!(set.ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(set.key.starts_with("-----BEGIN PRIVATE KEY-----"));
        let (data, annotations) = set.secret_parts();
        let mut secret = Secret {
            data: Some(data),
            ..Secret::default()
        };
        secret.metadata.annotations = Some(annotations);
        assert_eq!(CertSet::from_secret(&secret), Some(set.clone()));
        assert_eq!(set.ca_bundle(), format!("{}old CA\n", set.ca));
        // A Secret someone else made (no annotations) is not taken as ours.
        secret.metadata.annotations = None;
        assert_eq!(CertSet::from_secret(&secret), None);
    }

    #[test]
    fn the_serving_certificate_verifies_under_the_ca_for_each_name() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let set = CertSet::generate(&hosts(), NOW, None).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(set.ca.as_bytes()).unwrap())
            .unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        let leaf = CertificateDer::from_pem_slice(set.cert.as_bytes()).unwrap();
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(NOW as u64 + 60));
        for host in hosts() {
            let name = ServerName::try_from(host.clone()).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &name, &[], at)
                .unwrap_or_else(|e| panic!("{host}: {e}"));
        }
        let other = ServerName::try_from("elsewhere.example").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &other, &[], at)
                .is_err()
        );
    }

    #[test]
    fn renewal_comes_near_expiry_or_when_the_names_change() {
        let set = CertSet::generate(&hosts(), NOW, None).unwrap();
        assert_eq!(set.renewal_reason(&hosts(), NOW), None);
        let late = set.not_after - (RENEW_BEFORE_DAYS - 1) * DAY;
        let why = set.renewal_reason(&hosts(), late).unwrap();
        assert!(why.contains("expires in 89 days"), "{why}");
        let why = set.renewal_reason(&hosts()[..1], NOW).unwrap();
        assert!(why.contains("reached as ainic-dra-webhook"), "{why}");
    }
}
