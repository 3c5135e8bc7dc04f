//! The client a hosted script runs with: the operator's own connection, impersonating
//! the controller's ServiceAccount, so the API server enforces that account's RBAC.

use std::time::Duration;

/// The user name Kubernetes gives a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A client that sends every request as the ServiceAccount `namespace/name` (the
/// `Impersonate-User` header on the operator's connection). No groups are sent: for a
/// ServiceAccount the API server adds its fixed groups itself, so the operator needs
/// `impersonate` on serviceaccounts only, never on groups.
///
/// # Errors
/// The client cannot be built from `base`.
pub fn impersonating(
    base: &kube::Config,
    namespace: &str,
    name: &str,
) -> Result<kube::Client, kube::Error> {
    let mut config = base.clone();
    config.auth_info.impersonate = Some(service_account_user(namespace, name));
    config.auth_info.impersonate_groups = None;
    namespace.clone_into(&mut config.default_namespace);
    config.read_timeout = Some(crate::k8s::session::READ_TIMEOUT);
    config.connect_timeout = Some(Duration::from_secs(10));
    kube::Client::try_from(config)
}

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
