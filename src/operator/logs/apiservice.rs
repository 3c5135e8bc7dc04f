//! The logs API's registration with the API server's aggregation layer: the
//! APIService, and for a local run an ExternalName Service that sends the API server
//! to `localhost`; withdrawn when the run ends.

use base64::Engine as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::{CALL_TIMEOUT, Error, GROUP, Result, SERVICE, VERSION};

/// The field manager of the registration.
const MANAGER: &str = "kite-operator-logs";

/// The APIService's name.
pub fn name() -> String {
    format!("{VERSION}.{GROUP}")
}

fn apiservices(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Points the APIService at this operator, trusting `ca`: through the Service the
/// install made (port 443), or for a `local` run through an ExternalName Service to
/// `localhost:port`.
///
/// # Errors
/// [`Error::Register`] or [`Error::RegisterTimeout`].
pub async fn register(
    client: &kube::Client,
    namespace: &str,
    port: u16,
    ca: &str,
    local: bool,
) -> Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    if local {
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        });
        let api: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), namespace);
        let what = format!("Service {namespace}/{SERVICE}");
        bounded(&what, api.patch(SERVICE, &params, &Patch::Apply(&service))).await?;
    }
    let apiservice = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name(), "labels": {"app.kubernetes.io/managed-by": "kite"}},
        "spec": {
            "group": GROUP, "version": VERSION,
            "service": {"namespace": namespace, "name": SERVICE, "port": if local { port } else { 443 }},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
            "groupPriorityMinimum": 1000, "versionPriority": 15,
        },
    });
    let what = format!("APIService {}", name());
    bounded(
        &what,
        apiservices(client).patch(&name(), &params, &Patch::Apply(&apiservice)),
    )
    .await?;
    Ok(())
}

/// Removes the APIService (and a local run's Service) if it still trusts `ca`, i.e.
/// is this run's: an aggregated API nobody serves makes discovery fail, and namespaces
/// cannot finish deleting. Returns the command that removes it when that fails.
pub async fn withdraw(
    client: &kube::Client,
    namespace: &str,
    ca: &str,
    local: bool,
) -> Option<String> {
    let ours = base64::engine::general_purpose::STANDARD.encode(ca);
    let api = apiservices(client);
    let current = tokio::time::timeout(CALL_TIMEOUT, api.get_opt(&name())).await;
    let command = format!("kubectl delete apiservice {}", name());
    let registered = match current {
        Ok(Ok(Some(obj))) => obj.data["spec"]["caBundle"].as_str() == Some(ours.as_str()),
        Ok(Ok(None)) => false,
        _ => return Some(command),
    };
    if registered {
        let deleted =
            tokio::time::timeout(CALL_TIMEOUT, api.delete(&name(), &DeleteParams::default())).await;
        if !matches!(deleted, Ok(Ok(_))) {
            return Some(command);
        }
        if local {
            let services: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(client.clone(), namespace);
            let _ = tokio::time::timeout(
                CALL_TIMEOUT,
                services.delete(SERVICE, &DeleteParams::default()),
            )
            .await;
        }
    }
    None
}

async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| Error::RegisterTimeout {
            what: what.to_owned(),
        })?
        .map_err(|source| Error::Register {
            what: what.to_owned(),
            source,
        })
}
