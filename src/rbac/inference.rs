//! The walk over a script that turns its `k8s` calls and `control()` options into rules.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::json;
use starlark_syntax::syntax::ast::{
    ArgumentP, AssignTargetP, AstExpr, AstLiteral, AstNoPayload, DefP, ExprP, ParameterP, StmtP,
};

use self::control::Grant;
use super::catalog::Catalog;
use super::rule::{Rules, Scope, Site};
use super::source::{self, Index, Source, dotted, literal_str};
use super::{Result, parse_rule};
use crate::control::option::ControlOption;
use crate::k8s::discovery::Resource;
use crate::script::vars::Vars;

/// What inference found.
#[derive(Debug, Default)]
pub struct Inference {
    pub rules: Rules,
    /// Problems to show the user, each starting with `file:line:col`.
    pub warnings: Vec<String>,
    /// The warnings about calls whose permissions could not be inferred at all (a kind
    /// that is computed or unknown): the rules are incomplete by these.
    pub unresolved: Vec<String>,
    /// The `k8s.control()` options deployment depends on; None if the script has none.
    pub control: Option<ControlFacts>,
    /// The `k8s.webhook()` options deployment depends on; None if the script has none.
    /// (Boxed: most scripts have none, and an Inference travels in enums.)
    pub webhook: Option<Box<WebhookFacts>>,
    /// The script and every file it loads, relative to the script's directory; the script first.
    pub files: Vec<PathBuf>,
}

/// The `k8s.control()` options that shape a deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlFacts {
    /// The kind as written, when it is a literal.
    pub kind: Option<String>,
    pub health_port: Option<u16>,
    pub leader_election: bool,
}

/// `k8s.obj` builders that make an object, by their apiVersion and kind.
const BUILDERS: &[(&str, &str, &str)] = &[
    ("deployment", "apps/v1", "Deployment"),
    ("stateful_set", "apps/v1", "StatefulSet"),
    ("daemon_set", "apps/v1", "DaemonSet"),
    ("job", "batch/v1", "Job"),
    ("cron_job", "batch/v1", "CronJob"),
    ("pod", "v1", "Pod"),
    ("service", "v1", "Service"),
    ("config_map", "v1", "ConfigMap"),
    ("secret", "v1", "Secret"),
    ("namespace", "v1", "Namespace"),
    ("service_account", "v1", "ServiceAccount"),
    ("role", "rbac.authorization.k8s.io/v1", "Role"),
    (
        "cluster_role",
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
    ),
    (
        "role_binding",
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
    ),
    (
        "cluster_role_binding",
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
    ),
    ("ingress", "networking.k8s.io/v1", "Ingress"),
    ("lease", "coordination.k8s.io/v1", "Lease"),
    ("crd", "apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("pod_disruption_budget", "policy/v1", "PodDisruptionBudget"),
    ("pdb", "policy/v1", "PodDisruptionBudget"),
    ("persistent_volume", "v1", "PersistentVolume"),
    ("persistent_volume_claim", "v1", "PersistentVolumeClaim"),
    ("storage_class", "storage.k8s.io/v1", "StorageClass"),
    ("device_class", "resource.k8s.io/v1", "DeviceClass"),
    ("resource_claim", "resource.k8s.io/v1", "ResourceClaim"),
    (
        "resource_claim_template",
        "resource.k8s.io/v1",
        "ResourceClaimTemplate",
    ),
    ("resource_slice", "resource.k8s.io/v1", "ResourceSlice"),
    (
        "gateway_class",
        "gateway.networking.k8s.io/v1",
        "GatewayClass",
    ),
    ("gateway", "gateway.networking.k8s.io/v1", "Gateway"),
    ("http_route", "gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("grpc_route", "gateway.networking.k8s.io/v1", "GRPCRoute"),
    (
        "reference_grant",
        "gateway.networking.k8s.io/v1",
        "ReferenceGrant",
    ),
    (
        "validating_admission_policy",
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    ),
    (
        "vap",
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    ),
    (
        "validating_admission_policy_binding",
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "mutating_admission_policy",
        "admissionregistration.k8s.io/v1alpha1",
        "MutatingAdmissionPolicy",
    ),
    (
        "map",
        "admissionregistration.k8s.io/v1alpha1",
        "MutatingAdmissionPolicy",
    ),
    (
        "mutating_admission_policy_binding",
        "admissionregistration.k8s.io/v1alpha1",
        "MutatingAdmissionPolicyBinding",
    ),
];

/// Infers the rules `path` needs. `catalog` holds the kinds it may name; `extra` are
/// `--rule` texts added as they are.
///
/// # Errors
/// An unreadable or unparsable file, or a malformed `--rule`. Anything inference cannot
/// decide is a warning in the result instead.
pub fn infer(path: &Path, catalog: Catalog, vars: &Vars, extra: &[String]) -> Result<Inference> {
    let source = Source::read(path)?;
    infer_source(
        path,
        &source,
        catalog,
        vars,
        extra,
        WatchNamespace::default(),
    )
}

/// [`infer`] for script text without a file, shown as `name` (which also names the
/// default leader-election lease, as the script's file name would). `watch` says
/// which namespace the script's `k8s.control()` watches when it is run by the operator.
///
/// # Errors
/// A syntax error.
pub fn infer_text(
    name: &str,
    text: &str,
    catalog: Catalog,
    vars: &Vars,
    watch: WatchNamespace<'_>,
) -> Result<Inference> {
    let source = Source::from_text(name, text)?;
    infer_source(Path::new(name), &source, catalog, vars, &[], watch)
}

/// The namespace a hosted `k8s.control()` watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchNamespace<'a> {
    /// Replaces whatever the script names (`spec.control.namespace`).
    pub replace: Option<&'a str>,
    /// Used when the script names none (a StarlarkController's own namespace).
    pub default: Option<&'a str>,
}

fn infer_source(
    path: &Path,
    source: &Source,
    catalog: Catalog,
    vars: &Vars,
    extra: &[String],
    watch: WatchNamespace<'_>,
) -> Result<Inference> {
    let index = Index::new(source);
    let mut a = Analyzer {
        source,
        index,
        catalog,
        vars,
        out: Inference::default(),
        clients: HashMap::new(),
        primary: None,
        namespace_override: watch.replace.map(str::to_owned),
        control_default: watch.default.map(str::to_owned),
        seen_warnings: HashSet::new(),
        seen_unresolved: HashSet::new(),
    };
    for file in &source.outside {
        a.out.warnings.push(format!(
            "{file}: loaded from outside the script's directory; it cannot be copied into an image beside the script"
        ));
    }
    a.out.files = source.modules.iter().map(|m| m.rel.clone()).collect();
    a.collect_crds_and_clients();
    let control = a.find_control();
    let handler_names = control
        .as_ref()
        .map(|(_, c)| Analyzer::handler_names(c))
        .unwrap_or_default();
    if let Some((module, call)) = control {
        a.control(path, module, call);
    }
    a.webhook();
    a.scan_calls(&handler_names);
    a.hidden_calls();
    if let Some((module, call)) = control {
        a.children(module, call);
    }
    for text in extra {
        let (group, resource, verbs) = parse_rule(text)?;
        let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
        let site = Site {
            position: "--rule".into(),
            what: text.clone(),
        };
        a.out
            .rules
            .add(&group, &resource, &verbs, Scope::Cluster, &[], site);
    }
    Ok(a.out)
}

/// A call's arguments, split by kind.
struct Args<'a> {
    positional: Vec<&'a AstExpr>,
    named: Vec<(&'a str, &'a AstExpr)>,
}

impl<'a> Args<'a> {
    fn of(expr: &'a AstExpr) -> Option<(&'a AstExpr, Args<'a>)> {
        let ExprP::Call(callee, args) = &expr.node else {
            return None;
        };
        let mut out = Args {
            positional: Vec::new(),
            named: Vec::new(),
        };
        for arg in &args.args {
            match &arg.node {
                ArgumentP::Positional(e) => out.positional.push(e),
                ArgumentP::Named(n, e) => out.named.push((n.node.as_str(), e)),
                ArgumentP::Args(_) | ArgumentP::KwArgs(_) => {}
            }
        }
        Some((callee, out))
    }

    fn get(&self, name: &str) -> Option<&'a AstExpr> {
        self.named.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
    }

    /// The value a `k8s.control()` option is given by keyword.
    fn option(&self, option: ControlOption) -> Option<&'a AstExpr> {
        self.get(option.name())
    }

    /// The argument at `index` by position, or by `name`.
    fn arg(&self, index: usize, name: &str) -> Option<&'a AstExpr> {
        self.positional
            .get(index)
            .copied()
            .or_else(|| self.get(name))
    }
}

/// Where an object's namespace comes from.
#[derive(Clone, Debug)]
enum Ns {
    /// Not given: the client's default namespace.
    Absent,
    Literal(String),
    /// Computed at run time: any namespace.
    Dynamic,
    /// The namespace of the controller's own objects.
    Primary,
}

/// The function being walked: its assignments, and which parameter is the watched object.
struct Frame<'a> {
    module: usize,
    locals: HashMap<String, Vec<&'a AstExpr>>,
    primary_param: Option<String>,
}

impl Frame<'_> {
    /// Top-level code, or code where names are not followed.
    fn bare(module: usize) -> Self {
        Frame {
            module,
            locals: HashMap::new(),
            primary_param: None,
        }
    }
}

struct Primary {
    resource: Resource,
    scope: Scope,
    /// As written in the script.
    kind: String,
}

struct Analyzer<'a> {
    source: &'a Source,
    index: Index<'a>,
    catalog: Catalog,
    vars: &'a Vars,
    out: Inference,
    /// Names bound to `k8s.config(...)` clients, with their literal default namespace.
    clients: HashMap<String, Option<String>>,
    primary: Option<Primary>,
    /// A namespace that replaces the one `k8s.control()` names (the operator's override).
    namespace_override: Option<String>,
    /// The namespace `k8s.control()` watches when it names none (a StarlarkController's).
    control_default: Option<String>,
    /// What `out.warnings` and `out.unresolved` hold, for de-duplication in constant
    /// time: a script of many unresolved calls stays linear.
    seen_warnings: HashSet<String>,
    seen_unresolved: HashSet<String>,
}

impl<'a> Analyzer<'a> {
    fn position(&self, module: usize, expr: &AstExpr) -> String {
        let m = &self.source.modules[module];
        crate::script::host::position(&m.ast.file_span(expr.span))
    }

    fn site(&self, module: usize, expr: &AstExpr, what: String) -> Site {
        Site {
            position: self.position(module, expr),
            what,
        }
    }

    fn warn(&mut self, module: usize, expr: &AstExpr, message: String) {
        let w = format!("{}: {message}", self.position(module, expr));
        if self.seen_warnings.insert(w.clone()) {
            self.out.warnings.push(w);
        }
    }

    /// A warning about permissions that could not be inferred.
    fn unresolved(&mut self, module: usize, expr: &AstExpr, message: String) {
        let w = format!("{}: {message}", self.position(module, expr));
        self.push_unresolved(w);
    }

    /// An unresolved warning, already placed (`file:line:col: message`).
    fn push_unresolved(&mut self, w: String) {
        if self.seen_unresolved.insert(w.clone()) {
            self.out.unresolved.push(w.clone());
        }
        if self.seen_warnings.insert(w.clone()) {
            self.out.warnings.push(w);
        }
    }

    /// Every expression of every module, with its module.
    fn all_exprs(&self) -> Vec<(usize, &'a AstExpr)> {
        let mut out = Vec::new();
        for (i, m) in self.source.modules.iter().enumerate() {
            source::each_expr(m.ast.statement(), &mut |e| out.push((i, e)));
        }
        out
    }

    /// Follows a name to the one expression a top-level assignment binds it to, a few
    /// steps at most, so that `A = B` and `B = A` end.
    fn resolve<'e>(&'e self, expr: &'e AstExpr) -> Option<&'e AstExpr> {
        let mut e = expr;
        for _ in 0..5 {
            match &e.node {
                ExprP::Identifier(id)
                    if !matches!(id.node.ident.as_str(), "True" | "False" | "None") =>
                {
                    match self.index.globals.get(&id.node.ident)?.as_slice() {
                        [only] => e = only,
                        _ => return None,
                    }
                }
                _ => return Some(e),
            }
        }
        None
    }

    /// The value of a string expression when it is known without running the script.
    fn const_str(&self, expr: &AstExpr) -> Option<String> {
        let e = self.resolve(expr)?;
        match literal_str(e) {
            Some(s) => Some(s.to_owned()),
            None => self.var_call(e, "var_str"),
        }
    }

    /// `var_x("name", default)` with the values the user gave.
    fn var_call(&self, expr: &AstExpr, func: &str) -> Option<String> {
        let (callee, args) = Args::of(expr)?;
        if dotted(callee)? != func {
            return None;
        }
        let name = literal_str(args.arg(0, "name")?)?;
        if let Some(v) = self.vars.get(name) {
            return Some(match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        let default = args.arg(1, "default")?;
        match &default.node {
            ExprP::Literal(AstLiteral::String(s)) => Some(s.node.clone()),
            ExprP::Literal(AstLiteral::Int(i)) => Some(i.node.to_string()),
            ExprP::Identifier(id) if id.node.ident == "True" => Some("true".into()),
            ExprP::Identifier(id) if id.node.ident == "False" => Some("false".into()),
            _ => None,
        }
    }

    fn const_int(&self, expr: &AstExpr) -> Option<i64> {
        let e = self.resolve(expr)?;
        match &e.node {
            ExprP::Literal(AstLiteral::Int(i)) => i.node.to_string().parse().ok(),
            _ => self.var_call(e, "var_int")?.parse().ok(),
        }
    }

    fn const_bool(&self, expr: &AstExpr) -> Option<bool> {
        let e = self.resolve(expr)?;
        match &e.node {
            ExprP::Identifier(id) if id.node.ident == "True" => Some(true),
            ExprP::Identifier(id) if id.node.ident == "False" => Some(false),
            _ => match self.var_call(e, "var_bool")?.as_str() {
                "true" | "True" | "1" | "yes" => Some(true),
                _ => Some(false),
            },
        }
    }

    /// CRDs the script defines with `k8s.obj.crd(...)`, and its `k8s.config(...)` clients.
    fn collect_crds_and_clients(&mut self) {
        for (module, expr) in self.all_exprs() {
            let Some((callee, args)) = Args::of(expr) else {
                continue;
            };
            if dotted(callee).as_deref() != Some("k8s.obj.crd") {
                continue;
            }
            let field = |k: &str| args.get(k).and_then(|e| self.const_str(e));
            let short: Vec<String> = match args.get("short_names").map(|e| &e.node) {
                Some(ExprP::List(items)) => {
                    items.iter().filter_map(|e| self.const_str(e)).collect()
                }
                _ => Vec::new(),
            };
            let crd = json!({"kind": "CustomResourceDefinition", "spec": {
                "group": field("group"), "scope": field("scope").unwrap_or_else(|| "Namespaced".into()),
                "names": {"kind": field("kind"), "plural": field("plural"), "singular": field("singular"), "shortNames": short},
                "versions": [{"name": field("version"), "storage": true, "subresources": {"status": {}}}]}});
            if let Err(e) = self.catalog.add_crd(&crd) {
                self.unresolved(module, expr, format!("k8s.obj.crd(): its kind cannot be known without running the script ({e}); give the CRD with --crd FILE"));
            }
        }
        for m in &self.source.modules {
            each_assignment(m.ast.statement(), &mut |name, rhs| {
                if let Some((callee, args)) = Args::of(rhs)
                    && dotted(callee).as_deref() == Some("k8s.config")
                {
                    let ns = args.get("namespace").and_then(|e| self.const_str(e));
                    self.clients.insert(name.to_owned(), ns);
                }
            });
        }
    }

    /// The method a call makes on a `k8s` client, with the client's default namespace.
    fn client_method(&self, callee: &AstExpr) -> Option<(String, Option<String>, String)> {
        let ExprP::Dot(recv, method) = &callee.node else {
            return None;
        };
        let name = dotted(recv)?;
        let default_ns = if name == "k8s" {
            None
        } else {
            self.clients.get(&name)?.clone()
        };
        let m = method
            .node
            .strip_prefix("try_")
            .unwrap_or(&method.node)
            .to_owned();
        Some((m, default_ns, format!("{name}.{}", method.node)))
    }

    fn find_control(&mut self) -> Option<(usize, &'a AstExpr)> {
        let mut found: Vec<(usize, &'a AstExpr)> = Vec::new();
        for (module, expr) in self.all_exprs() {
            if let Some((callee, _)) = Args::of(expr)
                && self
                    .client_method(callee)
                    .is_some_and(|(m, _, _)| m == "control")
            {
                found.push((module, expr));
            }
        }
        for &(module, extra) in found.iter().skip(1) {
            self.unresolved(module, extra, "a second k8s.control() call: which one runs cannot be known without running the script, so its permissions cannot be inferred; keep one".into());
        }
        found.first().copied()
    }

    /// Names of the functions given as handlers.
    fn handler_names(call: &AstExpr) -> HashSet<String> {
        let Some((_, args)) = Args::of(call) else {
            return HashSet::new();
        };
        control::given(&args, Grant::Handler)
            .filter_map(|(_, e)| match &e.node {
                ExprP::Identifier(id) => Some(id.node.ident.clone()),
                _ => None,
            })
            .collect()
    }

    fn scope(&self, resource: &Resource, ns: &Ns, client_default: Option<&str>) -> Scope {
        if !resource.namespaced {
            return Scope::Cluster;
        }
        match ns {
            // namespace="*": every namespace (list and watch).
            Ns::Literal(s) if s == "*" => Scope::Cluster,
            Ns::Literal(s) => Scope::Namespace(s.clone()),
            Ns::Absent => client_default.map_or(Scope::Own, |s| Scope::Namespace(s.to_owned())),
            // Confined to one namespace, a computed one is granted only there: anything
            // else it computes at run time is refused by the API server.
            Ns::Dynamic if self.control_default.is_some() => Scope::Own,
            Ns::Dynamic => Scope::Cluster,
            Ns::Primary => self
                .primary
                .as_ref()
                .map_or(Scope::Cluster, |p| p.scope.clone()),
        }
    }

    /// Like [`Self::ns_arg`], and also knows `obj.metadata.namespace` of the watched
    /// object (directly or through a local), which is the primary's namespace.
    fn ns_in(&self, frame: &Frame<'_>, expr: Option<&AstExpr>) -> Ns {
        match self.ns_arg(expr) {
            Ns::Dynamic if expr.is_some_and(|e| Self::is_primary_namespace(frame, e, 0)) => {
                Ns::Primary
            }
            ns => ns,
        }
    }

    fn is_primary_namespace(frame: &Frame<'_>, expr: &AstExpr, depth: usize) -> bool {
        if depth > 4 {
            return false;
        }
        let field = |e: &'_ AstExpr, name: &str| -> Option<AstExpr> {
            match &e.node {
                ExprP::Dot(obj, f) if f.node == name => Some((**obj).clone()),
                ExprP::Index(pair) if literal_str(&pair.1) == Some(name) => Some(pair.0.clone()),
                _ => None,
            }
        };
        if let ExprP::Identifier(id) = &expr.node
            && let Some(assigned) = frame.locals.get(&id.node.ident)
        {
            return assigned.len() == 1
                && Self::is_primary_namespace(frame, assigned[0], depth + 1);
        }
        let Some(meta) = field(expr, "namespace") else {
            return false;
        };
        let Some(obj) = field(&meta, "metadata") else {
            return false;
        };
        matches!(&obj.node, ExprP::Identifier(id) if frame.primary_param.as_deref() == Some(id.node.ident.as_str()))
    }

    fn ns_arg(&self, expr: Option<&AstExpr>) -> Ns {
        match expr {
            None => Ns::Absent,
            Some(e) if matches!(&e.node, ExprP::Identifier(id) if id.node.ident == "None") => {
                Ns::Absent
            }
            Some(e) => self.const_str(e).map_or(Ns::Dynamic, Ns::Literal),
        }
    }

    /// The resource a kind argument names, or a warning.
    fn kind(
        &mut self,
        module: usize,
        expr: Option<&AstExpr>,
        call: &AstExpr,
        what: &str,
    ) -> Option<(Resource, String)> {
        let Some(expr) = expr else {
            self.unresolved(module, call, format!("{what}(): no kind given"));
            return None;
        };
        let Some(kind) = self.const_str(expr) else {
            self.unresolved(module, expr, format!("{what}(): the kind is not a literal string, so its permissions cannot be inferred; grant them with --rule GROUP/RESOURCE:VERBS"));
            return None;
        };
        match self.catalog.resolve(&kind) {
            Ok(r) => Some((r.clone(), kind)),
            Err(e) => {
                self.unresolved(module, expr, format!("{what}(): {e}; give its CRD with --crd FILE or grant it with --rule GROUP/RESOURCE:VERBS"));
                None
            }
        }
    }
}

/// Calls `f(name, rhs)` for every `name = rhs` anywhere under `stmt`.
fn each_assignment<'a>(
    stmt: &'a starlark_syntax::syntax::ast::AstStmt,
    f: &mut impl FnMut(&'a str, &'a AstExpr),
) {
    if let StmtP::Assign(a) = &stmt.node
        && let AssignTargetP::Identifier(id) = &a.lhs.node
    {
        f(&id.node.ident, &a.rhs);
    }
    stmt.visit_stmt(|child| each_assignment(child, f));
}

/// The last ordinary parameter of a handler: the object it is called with.
fn object_param(def: &DefP<AstNoPayload>) -> Option<String> {
    def.params.iter().rev().find_map(|p| match &p.node {
        ParameterP::Normal(id, _, _) => Some(id.node.ident.clone()),
        _ => None,
    })
}

mod calls;
mod control;
pub mod coverage;
mod hidden;
mod pod_io;
mod webhook;
mod workload;

pub use webhook::WebhookFacts;

#[cfg(test)]
mod tests;
