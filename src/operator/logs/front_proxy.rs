//! The aggregation layer's front proxy as the logs API trusts it: the client CA and
//! names the API server publishes in `kube-system/extension-apiserver-authentication`,
//! and the caller the proxy names in its request headers.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::TlsAcceptor;

use super::{Error, Result};
use crate::operator::approval::Author;

/// Where the API server publishes how it proxies.
const CONFIG_MAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// How requests from the API server's front proxy are recognised.
#[derive(Debug, Clone)]
pub struct FrontProxy {
    /// PEM: the CA that signs the proxy's client certificate.
    ca: String,
    /// Common names the proxy's certificate may have (empty: any the CA signed).
    allowed_names: Vec<String>,
    user_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_prefixes: Vec<String>,
}

impl FrontProxy {
    /// Reads the API server's front-proxy settings.
    ///
    /// # Errors
    /// [`Error::ReadFrontProxy`] when the ConfigMap cannot be read, or names no
    /// request-header CA (the API server was started without the aggregation layer's
    /// flags).
    pub async fn read(client: &kube::Client) -> Result<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), CONFIG_MAP.0);
        let what = format!("{}/{}", CONFIG_MAP.0, CONFIG_MAP.1);
        let cm = tokio::time::timeout(super::CALL_TIMEOUT, api.get(CONFIG_MAP.1))
            .await
            .map_err(|_| Error::ReadFrontProxy {
                what: what.clone(),
                reason: "timed out".into(),
            })?
            .map_err(|e| Error::ReadFrontProxy {
                what: what.clone(),
                reason: e.to_string(),
            })?;
        Self::from_data(&cm.data.unwrap_or_default()).ok_or_else(|| Error::ReadFrontProxy {
            what,
            reason: "it has no requestheader-client-ca-file: start the API server with --requestheader-client-ca-file and --proxy-client-cert-file (the aggregation layer)".into(),
        })
    }

    fn from_data(data: &BTreeMap<String, String>) -> Option<Self> {
        let list = |key: &str, default: &str| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .unwrap_or_else(|| vec![default.to_owned()])
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.to_ascii_lowercase())
                .collect()
        };
        let ca = data.get("requestheader-client-ca-file")?.clone();
        Some(FrontProxy {
            ca,
            allowed_names: data
                .get("requestheader-allowed-names")
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .unwrap_or_default(),
            user_headers: list("requestheader-username-headers", "x-remote-user"),
            group_headers: list("requestheader-group-headers", "x-remote-group"),
            extra_prefixes: list("requestheader-extra-headers-prefix", "x-remote-extra-"),
        })
    }

    /// A TLS acceptor serving `cert` and `key` that accepts only clients with a
    /// certificate the front-proxy CA or `peer_ca` (the operator's own, which its
    /// replicas present) signed.
    ///
    /// # Errors
    /// [`Error::Tls`] for a CA, certificate or key that cannot be used.
    pub fn acceptor(&self, cert: &str, key: &str, peer_ca: &str) -> Result<TlsAcceptor> {
        let tls = |reason: String| Error::Tls(reason);
        let mut roots = RootCertStore::empty();
        for (what, pem) in [
            ("the front-proxy CA", &self.ca),
            ("the operator's CA", &peer_ca.to_owned()),
        ] {
            for ca in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots
                    .add(ca.map_err(|e| tls(format!("{what}: {e}")))?)
                    .map_err(|e| tls(format!("{what}: {e}")))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| tls(format!("the front-proxy CA: {e}")))?;
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| tls(format!("the serving certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| tls(format!("the serving key: {e}")))?;
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| tls(e.to_string()))?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Whether the verified client certificate `der` has a name the API server allows
    /// for its front proxy.
    pub fn allows(&self, der: &[u8]) -> bool {
        if self.allowed_names.is_empty() {
            return true;
        }
        common_name(der).is_some_and(|cn| self.allowed_names.contains(&cn))
    }

    /// The caller the proxy names (None: no user header, so not a proxied request).
    pub fn caller(&self, headers: &hyper::HeaderMap) -> Option<Author> {
        let first = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let username = self.user_headers.iter().find_map(|h| first(h))?.to_owned();
        if username.is_empty() {
            return None;
        }
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()).iter())
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            let name = name.as_str();
            if let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| name.strip_prefix(p.as_str()))
                && let Ok(v) = value.to_str()
            {
                let key = percent_decode(key);
                extra.entry(key).or_default().push(v.to_owned());
            }
        }
        Some(Author {
            username,
            uid: String::new(),
            groups,
            extra,
        })
    }
}

/// The common name of the certificate `der`.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The DER of the first certificate in `pem`.
///
/// # Errors
/// [`Error::Tls`] when there is none.
pub fn first_certificate(pem: &str) -> Result<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(std::result::Result::ok)
        .map(|c| c.to_vec())
        .ok_or_else(|| Error::Tls("the serving certificate has no CERTIFICATE block".into()))
}

/// An extra header's key as the proxy escapes it (`%2F` for `/`, as Go's
/// `url.PathEscape`; a `+` stays a `+`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(Some(h)), Some(Some(l))) = (
                bytes.get(i + 1).map(|b| hex(*b)),
                bytes.get(i + 2).map(|b| hex(*b)),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy() -> FrontProxy {
        let data = BTreeMap::from([
            ("requestheader-client-ca-file".to_owned(), "CA".to_owned()),
            (
                "requestheader-allowed-names".to_owned(),
                r#"["front-proxy-client"]"#.to_owned(),
            ),
            (
                "requestheader-username-headers".to_owned(),
                r#"["X-Remote-User"]"#.to_owned(),
            ),
            (
                "requestheader-group-headers".to_owned(),
                r#"["X-Remote-Group"]"#.to_owned(),
            ),
            (
                "requestheader-extra-headers-prefix".to_owned(),
                r#"["X-Remote-Extra-"]"#.to_owned(),
            ),
        ]);
        FrontProxy::from_data(&data).unwrap()
    }

    #[test]
    fn the_caller_comes_from_the_configured_headers() {
        let mut h = hyper::HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "dev".parse().unwrap());
        h.append("x-remote-group", "system:authenticated".parse().unwrap());
        h.insert("x-remote-extra-scopes%2Fa+b", "x".parse().unwrap());
        let a = proxy().caller(&h).unwrap();
        assert_eq!(a.username, "alice");
        assert_eq!(a.groups, ["dev", "system:authenticated"]);
        assert_eq!(a.extra["scopes/a+b"], ["x"]);
        assert!(proxy().caller(&hyper::HeaderMap::new()).is_none());
    }

    #[test]
    fn only_the_allowed_names_pass() {
        let issued = |cn: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            p.self_signed(&key).unwrap().der().to_vec()
        };
        assert_eq!(
            common_name(&issued("kite-operator-webhook")).as_deref(),
            Some("kite-operator-webhook")
        );
        assert_eq!(common_name(b"not a certificate"), None);
        assert!(proxy().allows(&issued("front-proxy-client")));
        assert!(!proxy().allows(&issued("someone-else")));
        assert!(!proxy().allows(b"not a certificate"));
    }

    #[test]
    fn no_ca_no_front_proxy() {
        assert!(FrontProxy::from_data(&BTreeMap::new()).is_none());
    }
}
