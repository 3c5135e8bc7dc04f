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

/// The largest script the operator hosts. Far above any real controller (the seed's
/// are a few KiB); it bounds what one author can make the operator parse and analyse.
pub const MAX_SCRIPT_BYTES: usize = 256 << 10;

/// How long parsing, linting and inferring one script may take. Analysis is linear in
/// the script and capped in size, so this is only reached by a pathological script;
/// it runs on a blocking thread, never on the async runtime.
const ANALYSIS_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// The message for a script over [`MAX_SCRIPT_BYTES`], or None.
pub fn too_large(script: &str) -> Option<String> {
    (script.len() > MAX_SCRIPT_BYTES).then(|| {
        format!(
            "the script is {} bytes; kite operator hosts scripts of at most {MAX_SCRIPT_BYTES} bytes (256 KiB)",
            script.len()
        )
    })
}

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
    Runnable(Box<Runnable>),
    /// Not assessed: the namespace's analysis turn was held, and the resource is
    /// queued for it ([`Turn::Take`]).
    Busy,
}

/// How an assessment gets its namespace's analysis turn.
pub enum Turn<'a> {
    /// Waits for it: at admission, which holds no reconcile slot and has its own
    /// bound per namespace and deadline.
    Wait,
    /// Takes one that is free, or queues this resource to be woken when one is given
    /// back and is [`Assessment::Busy`]: a reconcile, which must not hold one of the
    /// operator's reconcile slots while a tenant's analyses run.
    Take(&'a super::registry::Key),
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

/// Assesses `cr` with its `script` (as [`read_script`] returned it), in its
/// namespace's analysis turn, had as `how` says.
pub async fn assessment<K: Tenant>(
    ctx: &Context,
    cr: &K,
    script: Result<String, String>,
    how: Turn<'_>,
) -> Assessment {
    let spec = cr.common_spec();
    let home = cr.home(&ctx.operator_namespace);
    if spec.suspend {
        return Assessment::Suspended;
    }
    if let Some(message) = spec.service_account_name.as_deref().and_then(bad_account) {
        return Assessment::Invalid {
            reason: "ServiceAccountInvalid",
            message,
        };
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
    if let Some(message) = too_large(&script) {
        return Assessment::Invalid {
            reason: "ScriptTooLarge",
            message,
        };
    }
    let file_name = format!("{}.star", cr.name_any());
    // Before anything parses it: a parser or a walk that recursed too deep would abort
    // the process.
    if let Some(message) = crate::script::deep::too_deep(&file_name, &script) {
        return Assessment::Invalid {
            reason: "ScriptInvalid",
            message,
        };
    }
    let watch = Watch {
        replace: watch_override,
        default: K::CONFINED.then(|| home.clone()),
    };
    // Held by the analysis thread itself: a timed-out analysis keeps its namespace's
    // turn until it really ends.
    let turn = match how {
        Turn::Wait => ctx.admission_analyses.turn(&home).await,
        Turn::Take(key) => match ctx.analyses.take_or_queue(&home, key) {
            Some(turn) => turn,
            None => return Assessment::Busy,
        },
    };
    let turn = std::sync::Arc::new(turn);
    let inference = match analyse(ctx, &spec, &file_name, &script, watch, turn).await {
        Ok(i) => i,
        Err((reason, message)) => return Assessment::Invalid { reason, message },
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
    Assessment::Runnable(Box::new(Runnable {
        script,
        file_name,
        inference,
        resolved,
    }))
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
    all.extend(script_permissions(cr, operator_namespace));
    all
}

/// What naming the script needs, whatever the script holds: reading the ConfigMap a
/// `spec.scriptFrom` names.
pub fn script_permissions<K: Tenant>(cr: &K, operator_namespace: &str) -> Vec<Permission> {
    let spec = cr.common_spec();
    let home = cr.home(operator_namespace);
    let mut all = Vec::new();
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

/// The namespaces of [`WatchNamespace`], owned, to cross to a blocking thread.
struct Watch {
    replace: Option<String>,
    default: Option<String>,
}

/// Lints the script against the hosted library and infers its RBAC, with the kinds
/// built in and whatever the cluster serves, on a blocking thread under
/// [`ANALYSIS_BUDGET`]: a large script never holds an async worker (where the
/// webhook, the probes and every hosted controller's I/O run).
///
/// # Errors
/// (reason, message): ScriptInvalid (lint or inference), ScriptTooComplex (budget).
async fn analyse(
    ctx: &Context,
    spec: &StarlarkControllerSpec,
    file_name: &str,
    script: &str,
    watch: Watch,
    turn: std::sync::Arc<super::turns::Turn>,
) -> Result<Inference, (&'static str, String)> {
    let watch = std::sync::Arc::new(watch);
    let run = |resources: Vec<crate::k8s::discovery::Resource>, lint: bool| {
        let (file_name, script, vars, watch, turn) = (
            file_name.to_owned(),
            script.to_owned(),
            Vars::from_map(spec.vars.clone()),
            watch.clone(),
            turn.clone(),
        );
        // A thread of its own with a deep stack (script::deep), never an async worker.
        let work = crate::script::deep::spawn_deep(move || {
            let _turn = turn;
            if lint
                && let Err(e) = crate::script::check::check_text(
                    crate::library::hosted::library(),
                    &file_name,
                    &script,
                )
            {
                return Err(("ScriptInvalid", e.to_string().trim_end().to_owned()));
            }
            let mut catalog = Catalog::builtin();
            catalog.add_discovered(resources);
            let watch = WatchNamespace {
                replace: watch.replace.as_deref(),
                default: watch.default.as_deref(),
            };
            crate::rbac::infer_text(&file_name, &script, catalog, &vars, watch)
                .map_err(|e| ("ScriptInvalid", e.to_string()))
        });
        async move {
            let work = work.map_err(|e| ("ScriptInvalid", e))?;
            match tokio::time::timeout(ANALYSIS_BUDGET, work).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(("ScriptInvalid", "analysing the script failed".to_owned())),
                Err(_) => Err((
                    "ScriptTooComplex",
                    format!(
                        "analysing the script took longer than {}s; simplify it",
                        ANALYSIS_BUDGET.as_secs()
                    ),
                )),
            }
        }
    };
    let first = run(ctx.discovery.all().await.unwrap_or_default(), true).await?;
    if first.warnings.iter().any(|w| w.contains("--crd")) {
        // A CRD created since discovery was cached: look again once, but at most every
        // 30 s whatever scripts name (the cache is every hosted controller's).
        ctx.discovery
            .invalidate_if_older(std::time::Duration::from_secs(30));
        return run(ctx.discovery.all().await.unwrap_or_default(), false).await;
    }
    Ok(first)
}

/// Why `name` cannot be a ServiceAccount's (a DNS-1123 subdomain), if it cannot: the
/// operator sends it in a header to impersonate it, and such a name never fails there.
fn bad_account(name: &str) -> Option<String> {
    let parts_ok = name.split('.').all(|part| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    });
    (name.is_empty() || name.len() > 253 || !parts_ok).then(|| {
        let shown: String = name.chars().take(80).collect();
        format!(
            "spec.serviceAccountName: {shown:?} is not a ServiceAccount name (lower-case letters, digits, '-' and '.', at most 253 characters, a letter or digit at each end)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::bad_account;

    #[test]
    fn service_account_names_are_checked_before_they_reach_a_header() {
        for good in ["default", "sa-x", "a.b-c", "x9"] {
            assert_eq!(bad_account(good), None, "{good}");
        }
        for bad in [
            "",
            "x\u{7f}",
            "Upper",
            "-a",
            "a-",
            "a..b",
            "a b",
            &"a".repeat(254),
        ] {
            let m = bad_account(bad).unwrap_or_default();
            assert!(m.contains("spec.serviceAccountName"), "{bad:?}: {m}");
        }
    }
}
