//! Whether a `.webhook(...)` call follows the `k8s.control(...)` in progress: then
//! control records its request and lets the top level run on, so that a webhook
//! registered after the controller is served too.

use starlark::eval::Evaluator;
use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{AstExpr, AstNoPayload, ExprP};
use starlark_syntax::syntax::uniplate::Visit;

/// True when the file of the call in progress has a call `<x>.webhook(...)` that
/// starts after it. Read from the syntax tree, so comments and strings never count.
/// A webhook in a loaded file is not seen (control then stops the top level as usual).
pub fn called_after(eval: &Evaluator) -> bool {
    let Some(at) = eval.call_stack_top_location() else {
        return false;
    };
    let from = at.span.end().get();
    let text = at.file.source().to_owned();
    webhook_after(at.file.filename(), text, from)
}

fn webhook_after(filename: &str, text: String, from: u32) -> bool {
    let Ok(ast) = AstModule::parse(filename, text, &crate::script::loader::dialect()) else {
        return false;
    };
    let mut found = false;
    walk(Visit::Stmt(ast.statement()), &mut |e| {
        if let ExprP::Call(f, _) = &e.node
            && let ExprP::Dot(_, attr) = &f.node
            && attr.node == "webhook"
            && e.span.begin().get() >= from
        {
            found = true;
        }
    });
    found
}

fn walk<'a>(node: Visit<'a, AstNoPayload>, f: &mut impl FnMut(&'a AstExpr)) {
    if let Visit::Expr(e) = &node {
        f(e);
    }
    node.visit_children(|child| walk(child, f));
}

#[cfg(test)]
mod tests {
    use super::webhook_after;

    fn after_control(code: &str) -> bool {
        let from = code
            .find("k8s.control(")
            .map_or(0, |i| i + "k8s.control()".len());
        webhook_after("t.star", code.to_owned(), u32::try_from(from).unwrap())
    }

    #[test]
    fn a_later_call_counts_and_comments_or_strings_do_not() {
        assert!(after_control(
            "k8s.control()\nk8s.webhook('/v', validate = f)\n"
        ));
        assert!(after_control(
            "k8s.control()\nc = k8s.config()\nc.webhook('/v')\n"
        ));
        assert!(!after_control("k8s.control()\n# then k8s.webhook('/v')\n"));
        assert!(!after_control("k8s.control()\nprint('.webhook(')\n"));
        assert!(!after_control("k8s.webhook('/v')\nk8s.control()\n"));
        assert!(!after_control("k8s.control(\n"));
    }
}
