//! Questions about a script's syntax tree, answered without running it.

use std::collections::HashMap;

use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{AstExpr, AstStmt, ExprP, StmtP};
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

/// `file:line:col` of each function the script defines, by name (the first of a name
/// wins), so that errors about what a handler returned can point at it.
pub fn def_positions(ast: &AstModule) -> HashMap<String, String> {
    let mut out = HashMap::new();
    walk_stmts(Visit::Stmt(ast.statement()), &mut |stmt: &AstStmt| {
        if let StmtP::Def(def) = &stmt.node {
            out.entry(def.name.node.ident.clone())
                .or_insert_with(|| crate::script::host::position(&ast.file_span(def.name.span)));
        }
    });
    out
}

fn walk_stmts<'a>(
    node: Visit<'a, starlark_syntax::syntax::ast::AstNoPayload>,
    f: &mut impl FnMut(&'a AstStmt),
) {
    if let Visit::Stmt(s) = &node {
        f(s);
    }
    node.visit_children(|child| walk_stmts(child, f));
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

    #[test]
    fn finds_where_functions_are_defined() {
        let p = def_positions(&parse(
            "x = 1\ndef reconcile(o):\n    def inner():\n        pass\n",
        ));
        assert_eq!(p["reconcile"], "t.star:2:5");
        assert_eq!(p["inner"], "t.star:3:9");
    }
}
