//! The permissions each `k8s` call in the script needs.

use std::collections::{HashMap, HashSet};

use starlark_syntax::syntax::ast::{AstExpr, ExprP, ParameterP, StmtP};

use super::control::dict_kind;
use super::{Analyzer, Args, BUILDERS, Frame, Ns, object_param, source};
use crate::k8s::discovery::Resource;
use crate::rbac::source::{dotted, literal_str, local_assignments};

/// The most kinds one object expression may stand for before it counts as unknowable.
const MAX_TARGETS: usize = 64;

/// The methods that write the object they are given.
pub(super) const OBJECT_WRITES: &[&str] = &["create", "apply", "status", "event"];

/// The verbs kite's client sends for each `k8s` method that takes a kind.
pub(super) fn kind_verbs(method: &str) -> Option<&'static [&'static str]> {
    Some(match method {
        "get" | "wait_for" => &["get"],
        "list" => &["list"],
        // A list for the current state, then a watch from its resourceVersion.
        "watch" => &["list", "watch"],
        "delete" => &["delete"],
        "patch" | "label" | "annotate" => &["patch"],
        _ => return None,
    })
}

impl<'a> Analyzer<'a> {
    /// Every `k8s` call in code that can run: top-level code and the functions it reaches.
    pub(super) fn scan_calls(&mut self, handlers: &HashSet<String>) {
        let mut roots: Vec<&'a AstExpr> = Vec::new();
        let mut top: Vec<(usize, &'a AstExpr)> = Vec::new();
        for (i, m) in self.source.modules.iter().enumerate() {
            for stmt in source::top_level(m.ast.statement()) {
                if let StmtP::Def(def) = &stmt.node {
                    // Default values are evaluated where the function is defined: at
                    // the top level (`def r(o, _ = k8s.get(...))`).
                    for p in &def.params {
                        if let ParameterP::Normal(_, _, Some(default)) = &p.node {
                            source::each_subexpr(default, &mut |e| {
                                roots.push(e);
                                top.push((i, e));
                            });
                        }
                    }
                    continue;
                }
                source::each_expr(stmt, &mut |e| {
                    roots.push(e);
                    top.push((i, e));
                });
            }
        }
        for (i, e) in top {
            self.call(&Frame::bare(i), e);
        }
        // kite calls a main() the script defines but never calls.
        let main_defined = source::top_level(self.source.modules[0].ast.statement())
            .iter()
            .any(|s| matches!(&s.node, StmtP::Def(d) if d.name.node.ident == "main"));
        let auto_main: &[&str] = if main_defined { &["main"] } else { &[] };
        for (m, def) in self.index.reachable(&roots, auto_main) {
            let frame = Frame {
                module: m,
                locals: local_assignments(&def.body),
                primary_param: handlers
                    .contains(&def.name.node.ident)
                    .then(|| object_param(def))
                    .flatten(),
            };
            let mut exprs = Vec::new();
            source::each_expr(&def.body, &mut |e| exprs.push(e));
            for e in exprs {
                self.call(&frame, e);
            }
        }
    }

    fn call(&mut self, frame: &Frame<'a>, expr: &'a AstExpr) {
        let Some((callee, args)) = Args::of(expr) else {
            return;
        };
        let Some((method, client_ns, name)) = self.client_method(callee) else {
            return;
        };
        let module = frame.module;
        if self.pod_io(frame, expr, &args, &method, client_ns.as_deref(), &name) {
            return;
        }
        if self.workload_call(frame, expr, &args, &method, client_ns.as_deref(), &name) {
            return;
        }
        if let Some(verbs) = kind_verbs(&method) {
            let kind_expr = args.arg(0, "kind");
            let Some((r, kind)) = self.kind(module, kind_expr, expr, &name) else {
                return;
            };
            let scope = self.scope(
                &r,
                &self.ns_arg(args.get("namespace")),
                client_ns.as_deref(),
            );
            let site = self.site(module, expr, format!("{name}({kind:?})"));
            self.out.rules.add(
                &r.api_resource.group,
                &r.api_resource.plural,
                verbs,
                scope,
                &[],
                site,
            );
            return;
        }
        let (verbs, status): (&[&str], bool) = match method.as_str() {
            "create" => (&["create"], false),
            // Server-side apply is a PATCH; when it creates the object the API server also
            // checks create.
            "apply" => (&["create", "patch"], false),
            "status" => (&["patch"], true),
            "event" => {
                // Without a namespace the event goes to its object's namespace.
                let ns = match self.ns_in(frame, args.get("namespace")) {
                    Ns::Absent => match args.arg(0, "obj").and_then(|o| self.object(frame, o, 0)) {
                        Some(targets) if targets.iter().all(|(_, n)| matches!(n, Ns::Primary)) => {
                            Ns::Primary
                        }
                        _ => Ns::Dynamic,
                    },
                    ns => ns,
                };
                let events = self.catalog.resolve("events").ok().cloned();
                let scope = match events {
                    Some(r) => self.scope(&r, &ns, None),
                    None => crate::rbac::Scope::Cluster,
                };
                let site = self.site(module, expr, format!("{name}()"));
                self.out
                    .rules
                    .add("", "events", &["create", "get", "patch"], scope, &[], site);
                return;
            }
            _ => {
                // Every function is covered somewhere (coverage.rs); one that is not
                // must not pass as needing nothing.
                if super::coverage::coverage(&method).is_none() {
                    self.unresolved(
                        module,
                        expr,
                        format!(
                            "{name}(): kite does not know which permissions this function needs"
                        ),
                    );
                }
                return;
            }
        };
        let Some(obj) = args.arg(0, "manifest").or_else(|| args.arg(0, "obj")) else {
            return;
        };
        let Some(targets) = self.object(frame, obj, 0) else {
            self.unresolved(module, obj, format!("{name}(): the object's kind cannot be known without running the script; grant it with --rule GROUP/RESOURCE:VERBS"));
            return;
        };
        let call_ns = args.get("namespace").map(|e| self.ns_in(frame, Some(e)));
        for (r, ns) in targets {
            let ns = call_ns.clone().unwrap_or(ns);
            let scope = self.scope(&r, &ns, client_ns.as_deref());
            let ar = &r.api_resource;
            let resource = if status {
                format!("{}/status", ar.plural)
            } else {
                ar.plural.clone()
            };
            let site = self.site(module, expr, format!("{name}({})", ar.kind));
            self.out
                .rules
                .add(&ar.group, &resource, verbs, scope, &[], site);
        }
    }

    /// The kinds (and namespaces) an object expression can hold, if known statically.
    ///
    /// Each expression is worked out once per question (a name assigned many times, from
    /// names assigned many times, would otherwise be followed along every path: 64
    /// assignments four deep is 17 million), and the answers are de-duplicated and
    /// capped, so this stays linear in the script.
    pub(super) fn object(
        &mut self,
        frame: &Frame<'a>,
        expr: &'a AstExpr,
        depth: usize,
    ) -> Option<Vec<(Resource, Ns)>> {
        let mut memo = HashMap::new();
        self.object_in(frame, expr, depth, &mut memo)
    }

    fn object_in(
        &mut self,
        frame: &Frame<'a>,
        expr: &'a AstExpr,
        depth: usize,
        memo: &mut HashMap<usize, Option<Vec<(Resource, Ns)>>>,
    ) -> Option<Vec<(Resource, Ns)>> {
        if depth > 4 {
            return None;
        }
        let key = std::ptr::from_ref(expr) as usize;
        if let Some(known) = memo.get(&key) {
            return known.clone();
        }
        // Asked again while being worked out (a cycle): nothing more to learn there.
        memo.insert(key, Some(Vec::new()));
        let found = self.object_once(frame, expr, depth, memo).map(|mut all| {
            let mut seen = HashSet::new();
            all.retain(|(r, ns)| {
                seen.insert(format!(
                    "{}/{}/{}/{ns:?}",
                    r.api_resource.group, r.api_resource.version, r.api_resource.plural
                ))
            });
            all
        });
        let found = found.filter(|all| all.len() <= MAX_TARGETS);
        memo.insert(key, found.clone());
        found
    }

    fn object_once(
        &mut self,
        frame: &Frame<'a>,
        expr: &'a AstExpr,
        depth: usize,
        memo: &mut HashMap<usize, Option<Vec<(Resource, Ns)>>>,
    ) -> Option<Vec<(Resource, Ns)>> {
        match &expr.node {
            ExprP::Call(callee, _) => {
                // What k8s.apply/create/get return is the object they were given or named.
                if let Some((method, ..)) = self.client_method(callee) {
                    let (_, args) = Args::of(expr)?;
                    return match method.as_str() {
                        "apply" | "create" => {
                            self.object_in(frame, args.arg(0, "manifest")?, depth + 1, memo)
                        }
                        "get" => {
                            let kind = self.const_str(args.arg(0, "kind")?)?;
                            let r = self.catalog.resolve(&kind).ok()?.clone();
                            Some(vec![(r, self.ns_arg(args.get("namespace")))])
                        }
                        _ => None,
                    };
                }
                let d = dotted(callee)?;
                let builder = d.strip_prefix("k8s.obj.")?;
                let &(_, api_version, kind) = BUILDERS.iter().find(|(n, ..)| *n == builder)?;
                let (_, args) = Args::of(expr)?;
                let r = match self.catalog.resolve_gvk(api_version, kind) {
                    Ok(r) => r.clone(),
                    Err(e) => {
                        self.unresolved(frame.module, expr, e);
                        return None;
                    }
                };
                Some(vec![(r, self.ns_arg(args.get("namespace")))])
            }
            ExprP::Dict(pairs) => {
                let (api_version, kind) = dict_kind(expr)?;
                let r = match self.catalog.resolve_gvk(api_version, kind) {
                    Ok(r) => r.clone(),
                    Err(e) => {
                        self.unresolved(
                            frame.module,
                            expr,
                            format!("{e}; give its CRD with --crd FILE"),
                        );
                        return None;
                    }
                };
                let meta = pairs
                    .iter()
                    .find(|(k, _)| literal_str(k) == Some("metadata"))
                    .map(|(_, v)| v);
                let ns = match meta.map(|m| &m.node) {
                    Some(ExprP::Dict(fields)) => self.ns_arg(
                        fields
                            .iter()
                            .find(|(k, _)| literal_str(k) == Some("namespace"))
                            .map(|(_, v)| v),
                    ),
                    Some(_) => Ns::Dynamic,
                    None => Ns::Absent,
                };
                Some(vec![(r, ns)])
            }
            ExprP::List(items) | ExprP::Tuple(items) => {
                let mut out = Vec::new();
                for i in items {
                    out.extend(self.object_in(frame, i, depth + 1, memo)?);
                }
                Some(out)
            }
            ExprP::Identifier(id) => {
                let name = &id.node.ident;
                if frame.primary_param.as_ref() == Some(name) {
                    let p = self.primary.as_ref()?;
                    return Some(vec![(p.resource.clone(), Ns::Primary)]);
                }
                let assigned = match frame.locals.get(name) {
                    Some(v) => v.clone(),
                    None => self.index.globals.get(name)?.clone(),
                };
                let mut out = Vec::new();
                for e in assigned {
                    out.extend(self.object_in(frame, e, depth + 1, memo)?);
                }
                (!out.is_empty()).then_some(out)
            }
            _ => None,
        }
    }
}
