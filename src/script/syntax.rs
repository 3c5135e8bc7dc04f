//! Questions about a script's syntax tree, answered without running it.

use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{AstExpr, ExprP};
use starlark_syntax::syntax::uniplate::Visit;

/// True if the script calls `name(...)` anywhere, by that plain identifier.
pub fn calls(ast: &AstModule, name: &str) -> bool {
    let mut found = false;
    walk(Visit::Stmt(ast.statement()), &mut |expr: &AstExpr| {
        if let ExprP::Call(callee, _) = &expr.node
            && let ExprP::Identifier(id) = &callee.node
        {
            found |= id.node.ident == name;
        }
    });
    found
}

fn walk<'a>(
    node: Visit<'a, starlark_syntax::syntax::ast::AstNoPayload>,
    f: &mut impl FnMut(&'a AstExpr),
) {
    if let Visit::Expr(e) = &node {
        f(e);
    }
    node.visit_children(|child| walk(child, f));
}

#[cfg(test)]
mod tests {
    use super::*;
    use starlark::syntax::Dialect;

    fn parse(code: &str) -> AstModule {
        AstModule::parse("t.star", code.to_owned(), &Dialect::Extended).unwrap()
    }

    #[test]
    fn finds_calls_at_any_depth() {
        assert!(calls(&parse("def main():\n  pass\nmain()"), "main"));
        assert!(calls(
            &parse("def main():\n  pass\nif True:\n  x = [main()]"),
            "main"
        ));
        assert!(!calls(&parse("def main():\n  pass\nx = main"), "main"));
        assert!(!calls(&parse("def main():\n  pass\nobj.main()"), "main"));
    }
}
