//! The client a hosted script runs with: the operator's own connection, impersonating
//! the controller's ServiceAccount, so the API server enforces that account's RBAC.

/// The user name Kubernetes gives a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A client that sends every request as the ServiceAccount `namespace/name` (the
/// `Impersonate-User` header on the operator's own connections), so the API server
/// enforces that account's RBAC. No groups are sent: for a ServiceAccount the API server
/// adds its fixed groups itself, so the operator needs `impersonate` on serviceaccounts
/// only, never on groups.
///
/// Every hosted controller's client goes through `base`, the operator's client, and so
/// shares its connection pool and TLS set-up: a thousand controllers do not hold a
/// thousand pools of idle connections (with their read buffers), and `base`'s timeouts
/// apply to every request.
///
/// # Errors
/// `name` or `namespace` cannot be sent in a header.
pub fn impersonating(
    base: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<kube::Client, hyper::header::InvalidHeaderValue> {
    let user = hyper::header::HeaderValue::from_str(&service_account_user(namespace, name))?;
    let base = base.clone();
    let service = tower::service_fn(move |mut request: hyper::Request<kube::client::Body>| {
        let (base, user) = (base.clone(), user.clone());
        async move {
            request.headers_mut().insert(IMPERSONATE_USER, user);
            base.send(request).await
        }
    });
    Ok(kube::Client::new(service, namespace))
}

const IMPERSONATE_USER: &str = "impersonate-user";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_service_account_user() {
        assert_eq!(
            service_account_user("team", "starkite-x"),
            "system:serviceaccount:team:starkite-x"
        );
    }
}
