//! What a controller resource's script would need, worked out the same way by the
//! admission webhook (to check its author) and by the reconciler (to grant it): read
//! the script, lint it, infer its RBAC, and keep a StarlarkController in its namespace.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use super::authority::{self, Permission};
use super::confinement;
use super::reconciler::Context;
use super::resource::StarlarkControllerSpec;
use super::tenant::Tenant;
use crate::rbac::{Catalog, Inference, Rules, WatchNamespace};
use crate::script::vars::Vars;

/// The verdict on a script, before the ceiling and the author are considered.
pub enum Assessment {
    /// `spec.suspend`: nothing runs.
    Suspended,
    /// The script cannot run: `reason` (ScriptNotFound, OutsideNamespace, ScriptInvalid,
    /// NotInferable) and a message naming the line.
    Invalid {
        reason: &'static str,
        message: String,
    },
    /// A StarlarkController's script needs something outside its namespace.
    Outside(String),
    /// It can run, with these permissions.
    Runnable(Runnable),
}

/// A script that can run.
pub struct Runnable {
    pub script: String,
    pub file_name: String,
    pub inference: Inference,
    /// The rules, with the default namespace filled in.
    pub resolved: Rules,
}

/// The script a spec names: inline, or from a ConfigMap in `home`; `Err` is a message
/// for the user.
///
/// # Errors
/// Reading the ConfigMap failed.
pub async fn read_script(
    client: &kube::Client,
    spec: &StarlarkControllerSpec,
    home: &str,
) -> kube::Result<Result<String, String>> {
    if let Some(s) = &spec.script {
        return Ok(Ok(s.clone()));
    }
    let Some(from) = &spec.script_from else {
        return Ok(Err("spec.script or spec.scriptFrom is required".into()));
    };
    let r = &from.config_map_key_ref;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), home);
    let found = tokio::time::timeout(std::time::Duration::from_secs(10), api.get_opt(&r.name))
        .await
        .map_err(|_| {
            kube::Error::Service(
                format!("reading ConfigMap {home}/{}: no answer within 10s", r.name).into(),
            )
        })??;
    match found {
        None => Ok(Err(format!("ConfigMap {home}/{} does not exist", r.name))),
        Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(text) => Ok(Ok(text.clone())),
            None => Ok(Err(format!(
                "ConfigMap {home}/{} has no key {:?}",
                r.name, r.key
            ))),
        },
    }
}

/// Assesses `cr` with its `script` (as [`read_script`] returned it).
pub async fn assessment<K: Tenant>(
    ctx: &Context,
    cr: &K,
    script: Result<String, String>,
) -> Assessment {
    let spec = cr.common_spec();
    let home = cr.home(&ctx.operator_namespace);
    if spec.suspend {
        return Assessment::Suspended;
    }
    let script = match script {
        Ok(s) => s,
        Err(message) => {
            return Assessment::Invalid {
                reason: "ScriptNotFound",
                message,
            };
        }
    };
    let watch_override = spec.control.as_ref().and_then(|c| c.namespace.clone());
    if K::CONFINED
        && let Some(other) = watch_override.as_deref().filter(|other| *other != home)
    {
        let message = format!(
            "spec.control.namespace: {other:?} is not the StarlarkController's own namespace {home:?}; \
             a StarlarkController is confined to its namespace (use a ClusterStarlarkController)"
        );
        return Assessment::Invalid {
            reason: "OutsideNamespace",
            message,
        };
    }
    let file_name = format!("{}.star", cr.name_any());
    if let Err(e) = crate::script::check::check_text(crate::library::library(), &file_name, &script)
    {
        return Assessment::Invalid {
            reason: "ScriptInvalid",
            message: e.to_string().trim_end().to_owned(),
        };
    }
    let watch = WatchNamespace {
        replace: watch_override.as_deref(),
        default: K::CONFINED.then_some(home.as_str()),
    };
    let inference = match infer(ctx, &spec, &file_name, &script, watch).await {
        Ok(i) => i,
        Err(e) => {
            return Assessment::Invalid {
                reason: "ScriptInvalid",
                message: e.to_string(),
            };
        }
    };
    if let Some(message) = confinement::first_unresolved(&inference) {
        return Assessment::Invalid {
            reason: "NotInferable",
            message,
        };
    }
    let resolved = inference.rules.resolved(&home);
    if K::CONFINED
        && let Some(message) = confinement::first_outside(&resolved, &home)
    {
        return Assessment::Outside(message);
    }
    Assessment::Runnable(Runnable {
        script,
        file_name,
        inference,
        resolved,
    })
}

/// Every permission running `cr` as `runnable` gives: what its script is granted, the
/// use of an existing ServiceAccount, and reading its script's ConfigMap. The author
/// must hold each one.
pub fn permissions<K: Tenant>(
    cr: &K,
    runnable: &Runnable,
    operator_namespace: &str,
) -> Vec<Permission> {
    let spec = cr.common_spec();
    let home = cr.home(operator_namespace);
    let mut all = authority::permissions(&runnable.resolved);
    if let Some(sa) = &spec.service_account_name {
        all.push(authority::impersonation(&home, sa));
    }
    if let Some(from) = &spec.script_from {
        all.push(Permission {
            verb: "get".into(),
            group: String::new(),
            resource: "configmaps".into(),
            subresource: String::new(),
            namespace: home.clone(),
            name: from.config_map_key_ref.name.clone(),
            why: "spec.scriptFrom".into(),
        });
    }
    all
}

/// The kinds the script may name: built in, and whatever the cluster serves.
async fn infer(
    ctx: &Context,
    spec: &StarlarkControllerSpec,
    file_name: &str,
    script: &str,
    watch: WatchNamespace<'_>,
) -> crate::rbac::Result<Inference> {
    let vars = Vars::from_map(spec.vars.clone());
    let run = |resources| {
        let mut catalog = Catalog::builtin();
        catalog.add_discovered(resources);
        crate::rbac::infer_text(file_name, script, catalog, &vars, watch)
    };
    let first = run(ctx.discovery.all().await.unwrap_or_default())?;
    if first.warnings.iter().any(|w| w.contains("--crd")) {
        // A CRD created since discovery was cached: look again once.
        ctx.discovery.invalidate();
        return run(ctx.discovery.all().await.unwrap_or_default());
    }
    Ok(first)
}
