//! A CA and a serving certificate for 127.0.0.1 made for one test, written to files a
//! script can serve, with the CA ready for a webhook configuration's caBundle.

use std::path::PathBuf;

use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The files and the CA of one test's webhook.
pub struct Served {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA certificate, base64 of its PEM, as `caBundle` wants it.
    pub ca_bundle: String,
    dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh CA and a certificate for 127.0.0.1 and localhost, signed by it.
pub fn serving_127() -> Served {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kite-test-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.clone().self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let dir = std::env::temp_dir().join(super::unique_name("kite-certs"));
    std::fs::create_dir_all(&dir).unwrap();
    let cert_path = dir.join("tls.crt");
    let key_path = dir.join("tls.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    Served {
        cert: cert_path,
        key: key_path,
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca.pem()),
        dir,
    }
}
