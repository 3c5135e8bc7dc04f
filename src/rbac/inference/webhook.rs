//! The `k8s.webhook()` options that shape a webhook's deployment (the port, the path,
//! which configurations it needs): read from the script, never run.

use starlark_syntax::syntax::ast::AstExpr;

use super::{Analyzer, Args};
use crate::control::webhook::option::WebhookOption as O;

/// What deploying a script's webhook depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookFacts {
    /// The path as written, when it is a literal.
    pub path: Option<String>,
    pub port: u16,
    pub validates: bool,
    pub mutates: bool,
    /// `Fail` or `Ignore` (what the generated configurations use too).
    pub failure_policy: String,
    /// The handlers' budget in whole seconds, rounded up.
    pub timeout_seconds: u64,
    /// True when the script names certificate files (so the Deployment mounts them).
    pub tls_files: bool,
    /// The group and resource the script's controller watches, if it has one: what the
    /// webhook admits when no rule is given.
    pub watched: Option<(String, String)>,
}

impl<'a> Analyzer<'a> {
    /// The facts of the script's first `k8s.webhook()` call, if any.
    pub(super) fn webhook(&mut self) {
        let mut found: Vec<(usize, &'a AstExpr)> = Vec::new();
        for (module, expr) in self.all_exprs() {
            if let Some((callee, _)) = Args::of(expr)
                && self
                    .client_method(callee)
                    .is_some_and(|(m, _, _)| m == "webhook")
            {
                found.push((module, expr));
            }
        }
        for &(module, extra) in found.iter().skip(1) {
            self.warn(
                module,
                extra,
                "a second k8s.webhook() call: a script serves only one webhook".into(),
            );
        }
        let Some(&(module, call)) = found.first() else {
            return;
        };
        let Some((_, args)) = Args::of(call) else {
            return;
        };
        let path = args.arg(0, O::Path.name()).and_then(|e| self.const_str(e));
        if path.is_none() {
            self.warn(
                module,
                call,
                "k8s.webhook(): the path is not a literal string; the configurations get \"/\""
                    .into(),
            );
        }
        let port = match args.get(O::Port.name()) {
            None => crate::control::webhook::spec::DEFAULT_PORT,
            Some(p) => {
                if let Some(n) = self.const_int(p).and_then(|n| u16::try_from(n).ok()) {
                    n
                } else {
                    self.warn(
                        module,
                        p,
                        "k8s.webhook(): port is not a literal port number; assuming 9443".into(),
                    );
                    crate::control::webhook::spec::DEFAULT_PORT
                }
            }
        };
        let handler = |option: O| args.get(option.name()).is_some_and(|e| !is_none(e));
        let failure_policy = args
            .get(O::FailurePolicy.name())
            .and_then(|e| self.const_str(e))
            .unwrap_or_else(|| "Fail".to_owned());
        let timeout = args
            .get(O::Timeout.name())
            .and_then(|e| self.const_str(e))
            .and_then(|s| crate::duration::parse(&s).ok())
            .unwrap_or(crate::control::webhook::spec::DEFAULT_TIMEOUT);
        let facts = WebhookFacts {
            path,
            port,
            validates: handler(O::Validate),
            mutates: handler(O::Mutate),
            failure_policy,
            timeout_seconds: timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0),
            tls_files: handler(O::TlsCert),
            watched: self.primary.as_ref().map(|p| {
                let ar = &p.resource.api_resource;
                (ar.group.clone(), ar.plural.clone())
            }),
        };
        self.out.webhook = Some(Box::new(facts));
    }
}

fn is_none(e: &AstExpr) -> bool {
    matches!(&e.node, starlark_syntax::syntax::ast::ExprP::Identifier(id) if id.node.ident == "None")
}
