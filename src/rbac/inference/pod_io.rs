//! The permissions of the `k8s` pod I/O calls: `logs`, `logs_follow`, `exec`, `cp` and
//! `port_forward` read the pod (to pick its container) and use a pod subresource.

use starlark_syntax::syntax::ast::AstExpr;

use super::{Analyzer, Args, Frame};

/// The subresource and verbs each pod I/O call uses; None for other methods.
///
/// Websocket upgrades (exec, port-forward) reach the API server as a GET: RBAC checks
/// `get`, and since Kubernetes 1.35 (`AuthorizePodWebsocketUpgradeCreatePermission`) a
/// second check asks for `create` as well; either one missing refuses the call (403),
/// so both are granted. The audit log records only the `get`.
pub(super) fn subresource(method: &str) -> Option<(&'static str, &'static [&'static str])> {
    Some(match method {
        "logs" | "logs_follow" => ("pods/log", &["get"]),
        // cp runs tar in the container through exec.
        "exec" | "cp" => ("pods/exec", &["create", "get"]),
        "port_forward" => ("pods/portforward", &["create", "get"]),
        _ => return None,
    })
}

impl<'a> Analyzer<'a> {
    /// Adds the rules of one pod I/O call; false when `method` is not one.
    pub(super) fn pod_io(
        &mut self,
        frame: &Frame<'a>,
        expr: &'a AstExpr,
        args: &Args<'a>,
        method: &str,
        client_ns: Option<&str>,
        name: &str,
    ) -> bool {
        let Some((subresource, verbs)) = subresource(method) else {
            return false;
        };
        let Ok(pods) = self.catalog.resolve("pods").cloned() else {
            return false;
        };
        let ns = self.ns_in(frame, args.get("namespace"));
        let scope = self.scope(&pods, &ns, client_ns);
        let site = self.site(frame.module, expr, format!("{name}()"));
        self.out
            .rules
            .add("", "pods", &["get"], scope.clone(), &[], site.clone());
        self.out.rules.add("", subresource, verbs, scope, &[], site);
        true
    }
}
