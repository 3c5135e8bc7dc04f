//! The permissions of the `k8s` workload, node and metrics calls (`scale`, `rollout`,
//! `set_image`, `drain`, `top_pods`, ...): the kind they are given, its subresources,
//! and the fixed resources they touch.

use starlark_syntax::syntax::ast::AstExpr;

use super::{Analyzer, Args, Frame, Ns};
use crate::rbac::Scope;

/// What one call needs a verb on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum On {
    /// The kind given as the first argument, with a subresource suffix ("" or "/scale").
    Kind(&'static str),
    /// A fixed resource (resolved by name) in the call's namespace.
    Fixed(&'static str, &'static str),
    /// A fixed resource in every namespace (drain lists and evicts pods cluster-wide).
    Everywhere(&'static str, &'static str),
    /// A metrics.k8s.io resource (not in the catalog: served by metrics-server).
    Metrics(&'static str),
}

/// The verbs each call needs. `action` is `rollout`'s literal action (None when it is
/// computed), `port`/`rm` whether `deploy` exposes a port and `run` deletes its pod.
pub(super) fn needs(
    method: &str,
    action: Option<&str>,
    port: bool,
    rm: bool,
) -> Option<Vec<(On, &'static [&'static str])>> {
    let kind_rw: &[&str] = &["get", "patch"];
    Some(match method {
        "scale" => vec![(On::Kind(""), &["get"]), (On::Kind("/scale"), &["patch"])],
        "set_image" | "set_env" | "set_resources" => vec![(On::Kind(""), kind_rw)],
        "describe" => vec![
            (On::Kind(""), &["get"]),
            (On::Fixed("events", ""), &["list"]),
        ],
        "expose" => vec![
            (On::Kind(""), &["get"]),
            (On::Fixed("services", ""), &["create"]),
        ],
        "autoscale" => vec![(On::Fixed("horizontalpodautoscalers", ""), &["create"])],
        "rollout" => {
            let history = (On::Fixed("replicasets", ""), &["list"] as &[&str]);
            match action {
                Some("" | "status") => vec![(On::Kind(""), &["get"])],
                Some("restart" | "pause" | "resume") => vec![(On::Kind(""), &["patch"])],
                Some("history") => vec![(On::Kind(""), &["get"]), history],
                // undo, or an action only known at run time.
                _ => vec![(On::Kind(""), kind_rw), history],
            }
        }
        "deploy" => {
            let mut v = vec![(
                On::Fixed("deployments", ""),
                &["create", "patch"] as &[&str],
            )];
            if port {
                v.push((On::Fixed("services", ""), &["create", "patch"]));
            }
            v
        }
        "run" => {
            let pod_verbs: &[&str] = if rm {
                &["create", "get", "delete"]
            } else {
                &["create", "get"]
            };
            vec![
                (On::Fixed("pods", ""), pod_verbs),
                (On::Fixed("pods", "/log"), &["get"]),
            ]
        }
        "cordon" | "uncordon" => vec![(On::Fixed("nodes", ""), &["patch"])],
        "taint" | "untaint" => vec![(On::Fixed("nodes", ""), kind_rw)],
        "drain" => vec![
            (On::Fixed("nodes", ""), &["patch"]),
            (On::Everywhere("pods", ""), &["get", "list"]),
            (On::Everywhere("pods", "/eviction"), &["create"]),
        ],
        "top_nodes" => vec![
            (On::Metrics("nodes"), &["list"]),
            (On::Fixed("nodes", ""), &["list"]),
        ],
        "top_pods" => vec![
            (On::Metrics("pods"), &["list"]),
            (On::Fixed("pods", ""), &["list"]),
        ],
        _ => return None,
    })
}

impl<'a> Analyzer<'a> {
    /// Adds the rules of one workload, node or metrics call; false when `method` is
    /// not one.
    pub(super) fn workload_call(
        &mut self,
        frame: &Frame<'a>,
        expr: &'a AstExpr,
        args: &Args<'a>,
        method: &str,
        client_ns: Option<&str>,
        name: &str,
    ) -> bool {
        let action = match args.arg(2, "action") {
            Some(e) => self.const_str(e),
            None => Some(String::new()),
        };
        let port = args.get("port").is_some();
        let rm = args.get("rm").is_some();
        let Some(needs) = needs(method, action.as_deref(), port, rm) else {
            return false;
        };
        let ns = self.ns_in(frame, args.get("namespace"));
        for (on, verbs) in needs {
            match on {
                On::Kind(sub) => {
                    let Some((r, kind)) = self.kind(frame.module, args.arg(0, "kind"), expr, name)
                    else {
                        continue;
                    };
                    let scope = self.scope(&r, &ns, client_ns);
                    let site = self.site(frame.module, expr, format!("{name}({kind:?})"));
                    let resource = format!("{}{sub}", r.api_resource.plural);
                    self.out
                        .rules
                        .add(&r.api_resource.group, &resource, verbs, scope, &[], site);
                }
                On::Fixed(kind, sub) | On::Everywhere(kind, sub) => {
                    let Ok(r) = self.catalog.resolve(kind).cloned() else {
                        continue;
                    };
                    let scope = match on {
                        On::Everywhere(..) => Scope::Cluster,
                        _ => self.scope(&r, &ns, client_ns),
                    };
                    let site = self.site(frame.module, expr, format!("{name}()"));
                    let resource = format!("{}{sub}", r.api_resource.plural);
                    self.out
                        .rules
                        .add(&r.api_resource.group, &resource, verbs, scope, &[], site);
                }
                On::Metrics(resource) => {
                    let scope = match (resource, &ns) {
                        ("nodes", _) => Scope::Cluster,
                        (_, Ns::Literal(n)) if n == "*" => Scope::Cluster,
                        _ => match self.catalog.resolve("pods").cloned() {
                            Ok(pods) => self.scope(&pods, &ns, client_ns),
                            Err(_) => Scope::Cluster,
                        },
                    };
                    let site = self.site(frame.module, expr, format!("{name}()"));
                    self.out
                        .rules
                        .add("metrics.k8s.io", resource, verbs, scope, &[], site);
                }
            }
        }
        true
    }
}
