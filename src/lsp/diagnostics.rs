//! Diagnostics: what `kite check` reports (parse errors, undefined names, bad
//! arguments to known builtins), plus members a module does not have (`k8s.gett`).

use std::collections::HashSet;

use lsp_types::{Diagnostic, DiagnosticSeverity, NumberOrString};
use starlark::analysis::{AstModuleLint, EvalSeverity};
use starlark::codemap::{FileSpan, Span};
use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{AstExpr, AstNoPayload, ExprP};
use starlark_syntax::syntax::uniplate::Visit;

use super::docs::Index;
use super::outline::{BindingKind, outline};
use super::text::Lines;

/// The problems of one document, named `name` in messages.
pub fn diagnose(index: &Index, name: &str, text: &str) -> Vec<Diagnostic> {
    let lines = Lines::new(text);
    // A test file is read as `kite test` reads it: assertions known, `assert` accepted
    // (the rewrite keeps every position).
    let (library, text) = if crate::test_runner::is_test_file(name) {
        (
            crate::test_runner::library(),
            crate::test_runner::rewrite(text),
        )
    } else {
        (crate::library::library(), std::borrow::Cow::Borrowed(text))
    };
    let ast = match AstModule::parse(name, text.to_string(), &crate::script::loader::dialect()) {
        Ok(ast) => ast,
        Err(e) => {
            let (begin, end) = e.span().map_or((0, 0), |s| bytes(s.span));
            return vec![diagnostic(
                &lines,
                (begin, end),
                DiagnosticSeverity::ERROR,
                "parse",
                e.without_diagnostic().to_string(),
            )];
        }
    };
    let names: HashSet<String> = library
        .globals()
        .names()
        .map(|n| n.as_str().to_owned())
        .collect();
    let mut out = Vec::new();
    for lint in ast.lint(Some(&names)) {
        // As `kite check`: an unknown name always fails at run time, so it is an error.
        let severity = if lint.severity == EvalSeverity::Error
            || matches!(
                lint.short_name.as_str(),
                "using-undefined" | "undefined-variable"
            ) {
            DiagnosticSeverity::ERROR
        } else if lint.severity == EvalSeverity::Warning {
            DiagnosticSeverity::WARNING
        } else {
            DiagnosticSeverity::HINT
        };
        out.push(diagnostic(
            &lines,
            bytes(lint.location.span),
            severity,
            &lint.short_name,
            lint.problem,
        ));
    }
    let mut spans: HashSet<(usize, usize)> = HashSet::new();
    for (span, problem) in crate::script::lint::check_calls(library, &ast) {
        // Missing members are reported below, for every use and every namespace, not
        // only for calls in `kite check`'s closed namespaces: once is enough.
        if problem.contains(" has no function ") {
            continue;
        }
        let range = call_range(&span);
        spans.insert(range);
        out.push(diagnostic(
            &lines,
            range,
            DiagnosticSeverity::ERROR,
            "call",
            problem,
        ));
    }
    for (range, problem) in unknown_members(index, &text, &ast) {
        out.push(diagnostic(
            &lines,
            range,
            DiagnosticSeverity::ERROR,
            "no-member",
            problem,
        ));
    }
    out
}

/// A call's problem is shown on the callee (`k8s.obj.deployment`), not on the whole
/// call, which may span many lines.
fn call_range(span: &FileSpan) -> (usize, usize) {
    let (begin, end) = bytes(span.span);
    let source = span.file.source_span(span.span);
    let callee = source.find('(').unwrap_or(source.len());
    (begin, end.min(begin + callee))
}

fn bytes(span: Span) -> (usize, usize) {
    (span.begin().get() as usize, span.end().get() as usize)
}

fn diagnostic(
    lines: &Lines,
    (begin, end): (usize, usize),
    severity: DiagnosticSeverity,
    code: &str,
    message: String,
) -> Diagnostic {
    Diagnostic {
        range: lines.range(begin, end),
        severity: Some(severity),
        code: Some(NumberOrString::String(code.to_owned())),
        source: Some("kite".to_owned()),
        message,
        ..Diagnostic::default()
    }
}

/// `module.name` where the module (or `k8s`, `k8s.obj`) has no such member: each with
/// the byte range of the member's name.
fn unknown_members(index: &Index, text: &str, ast: &AstModule) -> Vec<((usize, usize), String)> {
    let own = outline(text);
    let mut found = Vec::new();
    walk(Visit::Stmt(ast.statement()), &mut |expr: &AstExpr| {
        let ExprP::Dot(inner, attr) = &expr.node else {
            return;
        };
        let Some(scope) = dotted_name(inner) else {
            return;
        };
        let root = scope.split('.').next().unwrap_or_default();
        // The script's own `k8s` (other than `load("k8s", "k8s")`) is something else.
        let shadowed = own.find(root).is_some_and(|b| {
            !matches!(&b.kind, BindingKind::Load { module, .. }
                if crate::library::library().module(module.strip_prefix("@kite//").unwrap_or(module)).is_some())
        });
        let Some(members) = index.members(&scope) else {
            return;
        };
        if shadowed || scope.is_empty() || members.contains_key(attr.node.as_str()) {
            return;
        }
        let name = attr.node.as_str();
        let suggestion = members
            .keys()
            .map(|k| (strsim::levenshtein(name, k), k))
            .filter(|(d, k)| *d <= 2.max(k.len() / 3))
            .min()
            .map(|(_, k)| format!("; did you mean {k:?}?"))
            .unwrap_or_default();
        found.push((
            bytes(attr.span),
            format!("{scope}.{name}: {scope} has no member {name:?}{suggestion}"),
        ));
    });
    found
}

fn dotted_name(expr: &AstExpr) -> Option<String> {
    match &expr.node {
        ExprP::Identifier(id) => Some(id.node.ident.clone()),
        ExprP::Dot(inner, attr) => Some(format!("{}.{}", dotted_name(inner)?, attr.node)),
        _ => None,
    }
}

fn walk<'a>(node: Visit<'a, AstNoPayload>, f: &mut impl FnMut(&'a AstExpr)) {
    if let Visit::Expr(e) = &node {
        f(e);
    }
    node.visit_children(|child| walk(child, f));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(u32, String)> {
        diagnose(Index::get(), "t.star", text)
            .into_iter()
            .map(|d| (d.range.start.line, d.message))
            .collect()
    }

    #[test]
    fn typos_in_k8s_calls_and_builder_keywords() {
        let d = found(
            "p = k8s.gett(\"pods\", \"x\")\nd = k8s.obj.deployment(name = \"x\", replica = 2)\n",
        );
        assert!(
            d.iter()
                .any(|(l, m)| *l == 0 && m.contains("\"gett\"") && m.contains("\"get\"")),
            "{d:?}"
        );
        assert!(
            d.iter().any(|(l, m)| *l == 1 && m.contains("\"replica\"")),
            "{d:?}"
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            found("x = k8s.obj.deploymnt(name = \"x\")")
                .iter()
                .any(|(_, m)| m.contains("deployment"))
        );
    }

    #[test]
    fn parse_errors_and_undefined_names() {
        let d = diagnose(Index::get(), "t.star", "x = 1\ny = (\n");
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].severity, Some(DiagnosticSeverity::ERROR));
        let d = found("x = undefined_thing + 1\n");
        assert!(
            d.iter().any(|(_, m)| m.contains("undefined_thing")),
            "{d:?}"
        );
    }

    #[test]
    fn valid_and_shadowed_code_is_clean() {
        assert!(found("p = k8s.get(\"pods\", \"x\")\nt = time.now()\n").is_empty());
        assert!(found("k8s = struct(gett = len)\nk8s.gett([])\n").is_empty());
        assert!(found("load(\"k8s\", \"k8s\")\np = k8s.try_get(\"pods\", \"x\")\n").is_empty());
    }
}
