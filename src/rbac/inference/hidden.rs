//! Uses of `k8s` that hide which calls a script makes: an alias (`f = k8s.patch`),
//! `getattr(k8s, ...)`, the client passed around as a value, a client used without a
//! name (`k8s.config(...).list(...)`), or `k8s` loaded under another name. Inference
//! reads calls from the syntax, so each of these is unresolved (NotInferable for the
//! operator), naming its line, rather than silently granted too little or too much.

use std::collections::HashSet;

use starlark_syntax::codemap::Span;
use starlark_syntax::syntax::ast::{ExprP, StmtP};

use super::{Analyzer, each_assignment};
use crate::rbac::source::dotted;

impl Analyzer<'_> {
    /// Marks every use of a client that is not a direct call of one of its functions.
    pub(super) fn hidden_calls(&mut self) {
        let mut callees: HashSet<(usize, Span)> = HashSet::new();
        let mut receivers: HashSet<(usize, Span)> = HashSet::new();
        let mut assigned: HashSet<(usize, Span)> = HashSet::new();
        let exprs = self.all_exprs();
        for &(m, e) in &exprs {
            match &e.node {
                ExprP::Call(callee, _) => {
                    callees.insert((m, callee.span));
                }
                ExprP::Dot(recv, _) => {
                    receivers.insert((m, recv.span));
                }
                _ => {}
            }
        }
        for (m, module) in self.source.modules.iter().enumerate() {
            each_assignment(module.ast.statement(), &mut |_, rhs| {
                assigned.insert((m, rhs.span));
            });
            self.renamed_loads(m, module.ast.statement());
        }
        let is_client = |a: &Self, name: &str| name == "k8s" || a.clients.contains_key(name);
        for (m, e) in exprs {
            match &e.node {
                ExprP::Identifier(id)
                    if is_client(self, &id.node.ident) && !receivers.contains(&(m, e.span)) =>
                {
                    let name = id.node.ident.clone();
                    self.unresolved(
                        m,
                        e,
                        format!(
                            "{name} is used as a value (passed on, aliased or given to getattr): the calls made through it cannot be seen, so their permissions cannot be inferred; call {name}.<function>(...) directly"
                        ),
                    );
                }
                ExprP::Dot(recv, attr)
                    if attr.node != "obj"
                        && dotted(recv).is_some_and(|r| is_client(self, &r))
                        && !callees.contains(&(m, e.span)) =>
                {
                    let name = format!("{}.{}", dotted(recv).unwrap_or_default(), attr.node);
                    self.unresolved(
                        m,
                        e,
                        format!(
                            "{name} is used as a value (an alias): the calls made through it cannot be seen, so their permissions cannot be inferred; call {name}(...) directly"
                        ),
                    );
                }
                ExprP::Call(callee, _)
                    if self
                        .client_method(callee)
                        .is_some_and(|(method, _, _)| method == "config")
                        && !(dotted(callee).as_deref() == Some("k8s.config")
                            && assigned.contains(&(m, e.span))) =>
                {
                    self.unresolved(
                        m,
                        e,
                        "a client made here is used without being assigned to a name: its calls cannot be followed; assign it first (c = k8s.config(...)) and call c.<function>(...)".into(),
                    );
                }
                _ => {}
            }
        }
    }

    /// `load("k8s", kube = "k8s")`: the client under another name.
    fn renamed_loads(&mut self, m: usize, stmt: &starlark_syntax::syntax::ast::AstStmt) {
        if let StmtP::Load(load) = &stmt.node {
            let module = load.module.node.as_str();
            if matches!(module, "k8s" | "@kite//k8s") {
                for arg in &load.args {
                    if arg.their.node == "k8s" && arg.local.node.ident != "k8s" {
                        let local = arg.local.node.ident.clone();
                        let w = format!(
                            "{}: load({module:?}) binds k8s as {local:?}: its calls cannot be seen, so their permissions cannot be inferred; load it as k8s",
                            crate::script::host::position(
                                &self.source.modules[m].ast.file_span(arg.local.span)
                            )
                        );
                        self.push_unresolved(w);
                    }
                }
            }
        }
        stmt.visit_stmt(|child| self.renamed_loads(m, child));
    }
}
