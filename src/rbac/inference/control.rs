//! The permissions kite's controller runtime needs for a `k8s.control()` call.

use std::path::Path;

use starlark_syntax::syntax::ast::{AstExpr, ExprP};

use super::{Analyzer, Args, ControlFacts, Frame, Ns, Primary, source};
use crate::control::option::ControlOption as O;
use crate::rbac::rule::Scope;
use crate::rbac::source::{dotted, literal_str};

/// The verbs of a child kind: the runtime's informer (list, watch), server-side apply
/// (patch, and create when the child is new) and pruning (delete).
const CHILD_VERBS: &[&str] = &["list", "watch", "create", "patch", "delete"];
/// Events the runtime records (Reconciled, ReconcileFailed, FinalizeFailed); an identical
/// event is aggregated by reading it and patching its count.
const EVENT_VERBS: &[&str] = &["create", "get", "patch"];

/// What an option asks of the API server, beyond what its handler's own calls ask.
/// Options that share a grant are looked up through [`given`]; a grant of one option
/// alone is where that option is read by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grant {
    /// list and watch of the kind, and the events recorded about its objects.
    Watch,
    /// A handler: the object it is given is the primary, so a namespace read from it is
    /// the primary's.
    Handler,
    /// The objects reconcile builds, which the runtime applies, watches and prunes.
    Children,
    /// patch of the primary, to add and remove the finalizer.
    Finalizer,
    /// list and watch of each kind it names, where the primary is watched.
    Watches,
    /// Where the primary's grants are given: its namespace.
    Scope,
    /// The lease leader election takes, and its name and namespace.
    Lease,
}

/// What each option asks for. A match over every option, with no default, so that a
/// new option cannot leave the Role too narrow for want of a decision here.
pub(super) const fn grants(option: O) -> &'static [Grant] {
    match option {
        O::Kind => &[Grant::Watch],
        O::Reconcile => &[Grant::Handler, Grant::Children],
        O::OnCreate | O::OnUpdate | O::OnDelete => &[Grant::Handler],
        O::Finalize => &[Grant::Handler, Grant::Finalizer],
        O::Finalizer => &[Grant::Finalizer],
        O::Namespace => &[Grant::Scope],
        O::WatchOwned | O::WatchRelated => &[Grant::Watches],
        O::LeaderElection | O::LeaderElectionId | O::LeaderElectionNamespace => &[Grant::Lease],
        // The health server shapes the Deployment's probes (ControlFacts), not the Role.
        O::HealthPort
        // Selectors narrow what is listed, not what may be.
        | O::Labels
        | O::FieldSelector
        // How often and how many at once: the same verbs either way.
        | O::Poll
        | O::Resync
        | O::GenerationChanged
        | O::Workers
        | O::MaxRetries
        | O::Backoff
        // Its calls are inferred as those of any function the top level reaches, its
        // object not taken for the primary: a namespace read from it is granted
        // everywhere, wider than needed but never narrower.
        | O::Predicate
        // The holder's name in the lease, which Lease already grants.
        | O::Identity => &[],
    }
}

/// The options `args` gives that ask for `grant`, with their values, in [`O::ALL`]'s order.
pub(super) fn given<'a>(args: &Args<'a>, grant: Grant) -> impl Iterator<Item = (O, &'a AstExpr)> {
    O::ALL
        .iter()
        .filter(move |o| grants(**o).contains(&grant))
        .filter_map(|o| Some((*o, args.option(*o)?)))
}

impl<'a> Analyzer<'a> {
    /// The primary kind and the rules every controller with these options needs.
    #[expect(
        clippy::too_many_lines,
        reason = "the facts and rules of each k8s.control() option in turn (kind, finalizer, namespace, health_port, leader_election, watch_owned, watch_related), a closed set"
    )]
    pub(super) fn control(&mut self, script: &Path, module: usize, call: &'a AstExpr) {
        let Some((_, args)) = Args::of(call) else {
            return;
        };
        let kind_expr = args.arg(0, O::Kind.name());
        let kind_text = kind_expr.and_then(|e| self.const_str(e));
        let mut facts = ControlFacts {
            kind: kind_text.clone(),
            ..Default::default()
        };
        if let Some(p) = args.option(O::HealthPort) {
            match self.const_int(p).and_then(|n| u16::try_from(n).ok()) {
                // 0: no health server, so no probes.
                Some(n) => facts.health_port = Some(n).filter(|p| *p != 0),
                None => self.warn(module, p, "k8s.control(): health_port is not a literal port number; the Deployment gets no probes".into()),
            }
        }
        if let Some(le) = args.option(O::LeaderElection) {
            match self.const_bool(le) {
                Some(b) => facts.leader_election = b,
                None => self.warn(
                    module,
                    le,
                    "k8s.control(): leader_election is not a literal True or False; assuming False"
                        .into(),
                ),
            }
        }
        let ns = match (&self.namespace_override, args.option(O::Namespace)) {
            (Some(o), _) => Ns::Literal(o.clone()),
            (None, None) if self.control_default.is_some() => {
                Ns::Literal(self.control_default.clone().unwrap_or_default())
            }
            (None, arg) => self.ns_arg(arg),
        };
        let resolved = self.kind(module, kind_expr, call, "k8s.control");
        if let Some((resource, kind)) = resolved {
            // The runtime watches every namespace unless told one.
            let scope = match (&ns, resource.namespaced) {
                // "*" is every namespace, as for k8s.list.
                (Ns::Literal(s), true) if s != "*" => Scope::Namespace(s.clone()),
                _ => Scope::Cluster,
            };
            if matches!(ns, Ns::Dynamic) {
                self.warn(module, args.option(O::Namespace).unwrap_or(call), "k8s.control(): the namespace is not a literal, so the watch is granted in every namespace".into());
            }
            let ar = resource.api_resource.clone();
            let site = |s: &Self, what: &str| {
                s.site(module, call, format!("k8s.control({kind:?}) {what}"))
            };
            self.out.rules.add(
                &ar.group,
                &ar.plural,
                &["list", "watch"],
                scope.clone(),
                &[],
                site(self, "watch"),
            );
            if given(&args, Grant::Finalizer).next().is_some() {
                self.out.rules.add(
                    &ar.group,
                    &ar.plural,
                    &["patch"],
                    scope.clone(),
                    &[],
                    site(self, "finalizer"),
                );
            }
            let events = if resource.namespaced {
                scope.clone()
            } else {
                Scope::Namespace("default".into())
            };
            self.out.rules.add(
                "",
                "events",
                EVENT_VERBS,
                events,
                &[],
                site(self, "events (ReconcileFailed, Reconciled)"),
            );
            self.primary = Some(Primary {
                resource,
                scope,
                kind,
            });
        }
        let primary_scope = self
            .primary
            .as_ref()
            .map_or(Scope::Cluster, |p| p.scope.clone());
        for (key, list) in given(&args, Grant::Watches) {
            for kind in watched_kinds(list) {
                if let Some((r, k)) =
                    self.kind(module, Some(kind), call, &format!("k8s.control({key})"))
                {
                    let scope = if r.namespaced {
                        primary_scope.clone()
                    } else {
                        Scope::Cluster
                    };
                    let site = self.site(module, kind, format!("k8s.control({key}={k:?})"));
                    self.out.rules.add(
                        &r.api_resource.group,
                        &r.api_resource.plural,
                        &["list", "watch"],
                        scope,
                        &[],
                        site,
                    );
                }
            }
        }
        if facts.leader_election {
            self.lease(script, module, call, &args, kind_text.as_deref(), &ns);
        }
        self.out.control = Some(facts);
    }

    fn lease(
        &mut self,
        script: &Path,
        module: usize,
        call: &AstExpr,
        args: &Args,
        kind: Option<&str>,
        ns: &Ns,
    ) {
        let scope = match args.option(O::LeaderElectionNamespace) {
            Some(e) => {
                if let Some(s) = self.const_str(e) {
                    Scope::Namespace(s)
                } else {
                    self.warn(module, e, "k8s.control(): leader_election_namespace is not a literal; leases are granted in every namespace".into());
                    Scope::Cluster
                }
            }
            None => match ns {
                Ns::Literal(s) => Scope::Namespace(s.clone()),
                // Without a namespace, the lease lives where the controller runs.
                _ => Scope::Own,
            },
        };
        let name = match args.option(O::LeaderElectionId) {
            Some(e) => self.const_str(e),
            None => kind.map(|k| crate::control::standalone::default_lease_name(script, k)),
        };
        let site = self.site(module, call, "k8s.control(leader_election=True)".into());
        let group = "coordination.k8s.io";
        // create cannot be limited by name: the name is not known before the object exists.
        self.out.rules.add(
            group,
            "leases",
            &["create"],
            scope.clone(),
            &[],
            site.clone(),
        );
        let names: Vec<String> = name.into_iter().collect();
        self.out
            .rules
            .add(group, "leases", &["get", "update"], scope, &names, site);
    }

    /// Children: objects built in code reachable from reconcile, which the runtime applies,
    /// watches and prunes, and whose readiness it writes to the primary's Ready condition.
    pub(super) fn children(&mut self, module: usize, call: &'a AstExpr) {
        let Some((_, args)) = Args::of(call) else {
            return;
        };
        let Some(reconcile) = args.option(O::Reconcile) else {
            return;
        };
        let Some(primary) = self.primary.as_ref() else {
            return;
        };
        let (pscope, presource) = (primary.scope.clone(), primary.resource.clone());
        let primary = Primary {
            resource: presource.clone(),
            scope: pscope.clone(),
            kind: primary.kind.clone(),
        };
        let mut bodies: Vec<(usize, &'a AstExpr)> = Vec::new();
        if let ExprP::Lambda(l) = &reconcile.node {
            source::each_subexpr(&l.body, &mut |e| bodies.push((module, e)));
        }
        for (m, def) in self.index.reachable(&[reconcile], &[]) {
            source::each_expr(&def.body, &mut |e| bodies.push((m, e)));
        }
        let outermost = self.passed(&bodies);
        let inside = |m: usize, e: &AstExpr| {
            let at =
                outermost.partition_point(|&(pm, span)| (pm, span.begin()) <= (m, e.span.begin()));
            at > 0 && {
                let (pm, span) = outermost[at - 1];
                pm == m && e.span.end() <= span.end()
            }
        };
        let mut any = false;
        for (m, e) in bodies {
            if inside(m, e) {
                continue;
            }
            let target = match &e.node {
                ExprP::Call(callee, _) => match dotted(callee)
                    .as_deref()
                    .and_then(|d| d.strip_prefix("k8s.obj."))
                {
                    Some(b) if b != "crd" && super::BUILDERS.iter().any(|(n, ..)| *n == b) => {
                        self.object(&Frame::bare(m), e, 0)
                    }
                    _ => continue,
                },
                ExprP::Dict(_) if dict_kind(e).is_some() => self.object(&Frame::bare(m), e, 0),
                _ => continue,
            };
            for (r, _) in target.unwrap_or_default() {
                any = true;
                let scope = if r.namespaced {
                    pscope.clone()
                } else {
                    Scope::Cluster
                };
                let site = self.site(
                    m,
                    e,
                    format!("child {} built for reconcile", r.api_resource.kind),
                );
                self.out.rules.add(
                    &r.api_resource.group,
                    &r.api_resource.plural,
                    CHILD_VERBS,
                    scope,
                    &[],
                    site,
                );
            }
        }
        if any {
            self.parent_rules(module, call, &primary);
        }
    }

    /// The spans of what reconcile hands straight to a k8s call, the outermost only,
    /// sorted.
    fn passed(
        &self,
        bodies: &[(usize, &'a AstExpr)],
    ) -> Vec<(usize, starlark_syntax::codemap::Span)> {
        // An object handed straight to a k8s call (k8s.create(k8s.obj.config_map(...)))
        // is that call's business, not a child the runtime applies.
        let mut passed: Vec<(usize, starlark_syntax::codemap::Span)> = Vec::new();
        for &(m, e) in bodies {
            if let Some((callee, args)) = Args::of(e)
                && self.client_method(callee).is_some()
            {
                passed.extend(
                    args.positional
                        .iter()
                        .chain(args.named.iter().map(|(_, a)| a))
                        .map(|a| (m, a.span)),
                );
            }
        }
        // Syntax spans are nested or disjoint, so the outermost ones, sorted, answer
        // "inside any?" by a binary search: linear in the script overall.
        passed.sort_by_key(|&(m, span)| (m, span.begin(), std::cmp::Reverse(span.end())));
        let mut outermost: Vec<(usize, starlark_syntax::codemap::Span)> = Vec::new();
        for (m, span) in passed {
            match outermost.last() {
                Some(&(lm, last)) if lm == m && span.end() <= last.end() => {}
                _ => outermost.push((m, span)),
            }
        }
        outermost
    }

    /// What the runtime writes to a parent with children: its ApplySet labels and its
    /// Ready condition, and a re-read after a conflicting Ready write.
    fn parent_rules(&mut self, module: usize, call: &'a AstExpr, primary: &Primary) {
        let ar = &primary.resource.api_resource;
        let kind = primary.kind.clone();
        let site = self.site(
            module,
            call,
            format!("k8s.control({kind:?}) children: ApplySet labels on the parent"),
        );
        self.out.rules.add(
            &ar.group,
            &ar.plural,
            &["patch"],
            primary.scope.clone(),
            &[],
            site,
        );
        let status = if primary.resource.subresources.iter().any(|s| s == "status") {
            format!("{}/status", ar.plural)
        } else {
            ar.plural.clone()
        };
        let site = self.site(
            module,
            call,
            format!("k8s.control({kind:?}) children: the Ready condition"),
        );
        self.out.rules.add(
            &ar.group,
            &status,
            &["patch"],
            primary.scope.clone(),
            &[],
            site,
        );
        // A Ready write that conflicts with another writer re-reads the parent.
        let site = self.site(
            module,
            call,
            format!("k8s.control({kind:?}) children: re-reading the parent after a conflicting Ready write"),
        );
        self.out.rules.add(
            &ar.group,
            &ar.plural,
            &["get"],
            primary.scope.clone(),
            &[],
            site,
        );
    }
}

/// `["kind", ...]`, `[("kind", fn), ...]` or `{"kind": fn}`: the kind expressions.
fn watched_kinds(expr: &AstExpr) -> Vec<&AstExpr> {
    match &expr.node {
        ExprP::List(items) | ExprP::Tuple(items) => items
            .iter()
            .map(|i| match &i.node {
                ExprP::Tuple(pair) | ExprP::List(pair) if !pair.is_empty() => &pair[0],
                _ => i,
            })
            .collect(),
        ExprP::Dict(pairs) => pairs.iter().map(|(k, _)| k).collect(),
        _ => vec![expr],
    }
}

/// `{"apiVersion": "...", "kind": "...", ...}` literals: (apiVersion, kind).
pub(super) fn dict_kind(expr: &AstExpr) -> Option<(&str, &str)> {
    let ExprP::Dict(pairs) = &expr.node else {
        return None;
    };
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| literal_str(k) == Some(name))
            .and_then(|(_, v)| literal_str(v))
    };
    Some((field("apiVersion")?, field("kind")?))
}
