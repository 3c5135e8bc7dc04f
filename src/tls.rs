//! TLS for the servers kite runs itself: a rustls acceptor from PEM text, and a
//! self-made CA with a serving certificate it signs (for `k8s.webhook` without
//! certificate files, and for the Secret `kite kube gen-webhook-artifacts` emits).

use std::sync::Arc;

use k8s_openapi::jiff::{Timestamp, ToSpan, tz::TimeZone};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why TLS material could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate chain did not parse as PEM certificates.
    #[error("{what}: not a PEM certificate: {reason}")]
    ParseCertificate { what: String, reason: String },
    /// The key did not parse as a PEM private key.
    #[error("{what}: not a PEM private key: {reason}")]
    ParseKey { what: String, reason: String },
    /// rustls refused the pair (e.g. the key does not match the certificate).
    #[error("{what}: {reason}")]
    Configure { what: String, reason: String },
    /// rcgen could not issue a certificate.
    #[error("making a certificate: {0}")]
    Issue(#[from] rcgen::Error),
    /// The validity period does not fit the calendar (a broken clock).
    #[error("making a certificate: its validity is outside the calendar")]
    Date,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A serving certificate and the CA that signed it, all PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The CA certificate: what clients trust (a webhook configuration's caBundle).
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// A TLS acceptor serving `cert` (a PEM chain) with `key`; `what` names their source in
/// errors (e.g. the file names).
///
/// # Errors
/// Text that is not PEM, or a key that does not fit the certificate.
pub fn acceptor(cert: &str, key: &str, what: &str) -> Result<TlsAcceptor> {
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::ParseCertificate {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(Error::ParseCertificate {
            what: what.to_owned(),
            reason: "no CERTIFICATE block".to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| Error::ParseKey {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    let configure = |e: rustls::Error| Error::Configure {
        what: what.to_owned(),
        reason: e.to_string(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(configure)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(configure)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A new CA (named `name-ca`) and a serving certificate it signs for `hosts` (DNS names
/// or IP addresses), valid for `days`.
///
/// # Errors
/// rcgen failures, or a clock outside the calendar.
pub fn issue(name: &str, hosts: &[String], days: i64) -> Result<Issued> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name}-ca"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(&mut ca_params, days)?;
    let ca = ca_params.clone().self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, name);
    set_validity(&mut params, days)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Issued {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Valid from a day ago (clock skew) to `days` from now; returns the end.
///
/// # Errors
/// [`Error::Date`] when `days` reaches past the calendar.
pub fn set_validity(params: &mut CertificateParams, days: i64) -> Result<Timestamp> {
    let date = |t: Timestamp| {
        let d = t.to_zoned(TimeZone::UTC).date();
        rcgen::date_time_ymd(
            d.year().into(),
            d.month().unsigned_abs(),
            d.day().unsigned_abs(),
        )
    };
    let now = Timestamp::now();
    let before = now.checked_sub(24.hours()).map_err(|_| Error::Date)?;
    let after = now
        .checked_add((days * 24).hours())
        .map_err(|_| Error::Date)?;
    params.not_before = date(before);
    params.not_after = date(after);
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_pairs_serve_and_garbage_is_named() {
        let issued = issue("w", &["127.0.0.1".to_owned(), "localhost".to_owned()], 1).unwrap();
        assert!(issued.ca.contains("BEGIN CERTIFICATE"));
        assert!(acceptor(&issued.cert, &issued.key, "self-made").is_ok());
        let e = acceptor("junk", &issued.key, "a.crt")
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("a.crt: not a PEM certificate"), "{e}");
        let other = issue("x", &["localhost".to_owned()], 1).unwrap();
        let e = acceptor(&issued.cert, &other.key, "mixed")
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("mixed: "), "{e}");
    }
}
