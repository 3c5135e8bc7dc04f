//! The webhook's TLS material and the approval key, kept in one Secret in the
//! operator's namespace: a CA the operator makes itself (its certificate goes into the
//! webhook configuration's caBundle) and a serving certificate it signs, reissued
//! before it expires or when the names it must cover change, as controller-runtime's
//! cert rotation does.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The Secret's name.
pub const SECRET: &str = "kite-operator-webhook";
/// Reissue the serving certificate when it has less than this left.
const RENEW_BEFORE: Duration = Duration::from_hours(720);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const HOSTS_ANNOTATION: &str = "starkite.io/serving-hosts";
const NOT_AFTER_ANNOTATION: &str = "starkite.io/serving-not-after";
/// What the serving certificate may be used for. Replicas also present it to each
/// other as a client (forwarded log requests), so a certificate made for serving only
/// is renewed.
const USAGES_ANNOTATION: &str = "starkite.io/serving-usages";
const USAGES: &str = "serverAuth,clientAuth";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading Secret {namespace}/{SECRET}: {source}")]
    ReadSecret {
        namespace: String,
        source: kube::Error,
    },
    #[error("writing Secret {namespace}/{SECRET}: {source}")]
    WriteSecret {
        namespace: String,
        source: kube::Error,
    },
    #[error("Secret {namespace}/{SECRET}: no answer within 10s")]
    Timeout { namespace: String },
    #[error("making the webhook certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("the certificate's validity is outside the calendar")]
    Date,
    #[error("Secret {namespace}/{SECRET} key {key} is missing or not UTF-8")]
    ReadKey { namespace: String, key: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the Secret holds.
#[derive(Clone)]
pub struct Certs {
    /// PEM: the CA certificate, for the caBundle.
    pub ca: String,
    /// PEM: the serving certificate and its key.
    pub cert: String,
    pub key: String,
    /// The approvals' HMAC key.
    pub approval_key: Vec<u8>,
}

/// The operator's Secret, made or renewed as needed, covering `hosts` (DNS names or IP
/// addresses). Several operators may race to make it; the first one wins and the
/// others use it.
///
/// # Errors
/// API errors, or an unusable Secret.
pub async fn certs(client: &kube::Client, namespace: &str, hosts: &[String]) -> Result<Certs> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let timeout = || Error::Timeout {
        namespace: namespace.into(),
    };
    for _ in 0..3 {
        let existing = tokio::time::timeout(CALL_TIMEOUT, api.get_opt(SECRET))
            .await
            .map_err(|_| timeout())?
            .map_err(|source| Error::ReadSecret {
                namespace: namespace.into(),
                source,
            })?;
        let (secret, create) = match existing {
            Some(s) if current(&s, hosts) => return read(&s, namespace),
            Some(s) => (renew(s, hosts)?, false),
            None => (fresh(hosts)?, true),
        };
        let write = async {
            if create {
                api.create(&PostParams::default(), &secret).await
            } else {
                // Carries the resourceVersion read: a concurrent renewal conflicts.
                api.replace(SECRET, &PostParams::default(), &secret).await
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, write).await {
            Err(_) => return Err(timeout()),
            Ok(Ok(s)) => {
                tracing::info!(secret = %format!("{namespace}/{SECRET}"), hosts = ?hosts, "issued the webhook's serving certificate");
                return read(&s, namespace);
            }
            // Another operator made or renewed it meanwhile: use theirs.
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {}
            Ok(Err(source)) => {
                return Err(Error::WriteSecret {
                    namespace: namespace.into(),
                    source,
                });
            }
        }
    }
    Err(timeout())
}

/// Whether the serving certificate covers `hosts` and is far from expiring.
fn current(s: &Secret, hosts: &[String]) -> bool {
    let notes = s.metadata.annotations.clone().unwrap_or_default();
    let covered: Vec<&str> = notes
        .get(HOSTS_ANNOTATION)
        .map(|h| h.split(',').collect())
        .unwrap_or_default();
    let fresh_enough = notes
        .get(NOT_AFTER_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_some_and(|t| {
            let left = t.as_second() - Timestamp::now().as_second();
            left > RENEW_BEFORE.as_secs().cast_signed()
        });
    let has = |k: &str| s.data.as_ref().is_some_and(|d| d.contains_key(k));
    fresh_enough
        && notes.get(USAGES_ANNOTATION).map(String::as_str) == Some(USAGES)
        && hosts.iter().all(|h| covered.contains(&h.as_str()))
        && ["ca.crt", "ca.key", "tls.crt", "tls.key", "approval.key"]
            .iter()
            .all(|k| has(k))
}

fn read(s: &Secret, namespace: &str) -> Result<Certs> {
    let data = s.data.clone().unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| Error::ReadKey {
                namespace: namespace.into(),
                key: k.into(),
            })
    };
    let approval_key = data
        .get("approval.key")
        .map(|b| b.0.clone())
        .filter(|k| k.len() >= 32)
        .ok_or_else(|| Error::ReadKey {
            namespace: namespace.into(),
            key: "approval.key".into(),
        })?;
    Ok(Certs {
        ca: text("ca.crt")?,
        cert: text("tls.crt")?,
        key: text("tls.key")?,
        approval_key,
    })
}

/// A new Secret: a new CA, serving certificate and approval key.
fn fresh(hosts: &[String]) -> Result<Secret> {
    let ca_key = KeyPair::generate()?;
    let ca = ca_params()?.self_signed(&ca_key)?;
    let mut approval_key = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut approval_key)
        .map_err(|_| rcgen::Error::RingUnspecified)?;
    let mut data = BTreeMap::new();
    data.insert("ca.crt".to_owned(), ByteString(ca.pem().into_bytes()));
    data.insert(
        "ca.key".to_owned(),
        ByteString(ca_key.serialize_pem().into_bytes()),
    );
    data.insert("approval.key".to_owned(), ByteString(approval_key));
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "kite-operator".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    serve(secret, &ca_key, hosts)
}

/// The Secret with a new serving certificate from its CA (the CA and the approval key
/// stay, so webhook configurations and approvals stay valid).
fn renew(s: Secret, hosts: &[String]) -> Result<Secret> {
    let ca_key = s
        .data
        .as_ref()
        .and_then(|d| d.get("ca.key"))
        .and_then(|b| std::str::from_utf8(&b.0).ok())
        .and_then(|pem| KeyPair::from_pem(pem).ok());
    let has_approval_key = s
        .data
        .as_ref()
        .is_some_and(|d| d.get("approval.key").is_some_and(|k| k.0.len() >= 32));
    match ca_key {
        Some(key) if has_approval_key => {
            let mut s = serve(s, &key, hosts)?;
            s.metadata.managed_fields = None;
            Ok(s)
        }
        // Unusable: start again (approvals made with a lost key no longer verify).
        _ => {
            let mut new = fresh(hosts)?;
            new.metadata.resource_version = s.metadata.resource_version;
            Ok(new)
        }
    }
}

/// `secret` with a serving certificate for `hosts` (and those it covered), signed by the CA key.
fn serve(mut secret: Secret, ca_key: &KeyPair, hosts: &[String]) -> Result<Secret> {
    let mut all: Vec<String> = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOSTS_ANNOTATION))
        .map(|h| {
            h.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for h in hosts {
        if !all.contains(h) {
            all.push(h.clone());
        }
    }
    let issuer = Issuer::new(ca_params()?, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(all.clone())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kite-operator-webhook");
    let not_after = set_validity(&mut params, 365)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer)?;
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    data.insert("tls.crt".into(), ByteString(cert.pem().into_bytes()));
    data.insert(
        "tls.key".into(),
        ByteString(key.serialize_pem().into_bytes()),
    );
    let notes = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    notes.insert(HOSTS_ANNOTATION.into(), all.join(","));
    notes.insert(NOT_AFTER_ANNOTATION.into(), not_after.to_string());
    notes.insert(USAGES_ANNOTATION.into(), USAGES.into());
    Ok(secret)
}

/// The CA's parameters: the same every time, so a serving certificate signed later
/// names the issuer the CA certificate names.
fn ca_params() -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kite-operator-webhook-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(&mut params, 3650)?;
    Ok(params)
}

/// Valid from a day ago (clock skew) to `days` from now; returns the end.
fn set_validity(params: &mut CertificateParams, days: i64) -> Result<Timestamp> {
    crate::tls::set_validity(params, days).map_err(|_| Error::Date)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::ToSpan;

    use super::*;

    fn secret(hosts: &[&str]) -> Secret {
        let hosts: Vec<String> = hosts.iter().map(std::string::ToString::to_string).collect();
        fresh(&hosts).unwrap()
    }

    #[test]
    fn a_fresh_secret_covers_its_hosts_and_is_current() {
        let s = secret(&["127.0.0.1", "localhost"]);
        assert!(current(&s, &["127.0.0.1".into()]));
        assert!(
            !current(&s, &["kite.ns.svc".into()]),
            "a new name needs a new certificate"
        );
        let certs = read(&s, "ns").unwrap();
        assert!(certs.ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.key.contains("PRIVATE KEY"));
        assert_eq!(certs.approval_key.len(), 32);
    }

    #[test]
    fn renewal_keeps_the_ca_and_the_approval_key_and_adds_names() {
        let s = secret(&["127.0.0.1"]);
        let before = read(&s, "ns").unwrap();
        let renewed = renew(s, &["kite.ns.svc".into()]).unwrap();
        let after = read(&renewed, "ns").unwrap();
        assert_eq!(before.ca, after.ca);
        assert_eq!(before.approval_key, after.approval_key);
        assert_ne!(before.cert, after.cert);
        assert!(current(
            &renewed,
            &["127.0.0.1".into(), "kite.ns.svc".into()]
        ));
    }

    #[test]
    fn an_expiring_or_broken_secret_is_not_current() {
        let mut s = secret(&["127.0.0.1"]);
        let soon = Timestamp::now().checked_add(24.hours()).unwrap();
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NOT_AFTER_ANNOTATION.into(), soon.to_string());
        assert!(!current(&s, &["127.0.0.1".into()]));
        let mut broken = secret(&["127.0.0.1"]);
        broken.data.as_mut().unwrap().remove("approval.key");
        assert!(!current(&broken, &["127.0.0.1".into()]));
        let remade = renew(broken, &["127.0.0.1".into()]).unwrap();
        assert!(current(&remade, &["127.0.0.1".into()]));
    }
}
