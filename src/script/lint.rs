//! Static checks of calls to known builtins: wrong arity, unknown or missing keyword
//! arguments, found without running the script (`kite check`).

use std::collections::{BTreeMap, HashSet};

use starlark::codemap::FileSpan;
use starlark::docs::{DocItem, DocMember, DocParams};
use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{
    ArgumentP, AssignTargetP, AstExpr, AstNoPayload, AstStmt, ExprP, StmtP,
};
use starlark_syntax::syntax::uniplate::Visit;

use super::library::Library;

/// What a builtin accepts.
#[derive(Debug, Clone, Default)]
pub struct Signature {
    /// Positional parameters in order, with whether each is required.
    pub positional: Vec<(String, bool)>,
    /// Keyword-only parameters, with whether each is required.
    pub named_only: Vec<(String, bool)>,
    pub varargs: bool,
    /// `**kwargs` accepts anything unless `kwarg_names` lists what it accepts.
    pub kwargs: bool,
    pub kwarg_names: Option<Vec<String>>,
}

impl Signature {
    /// The signature a builtin's documentation describes.
    pub fn from_docs(params: &DocParams) -> Self {
        let req = |p: &starlark::docs::DocParam| (p.name.clone(), p.default_value.is_none());
        Signature {
            positional: params
                .pos_only
                .iter()
                .chain(&params.pos_or_named)
                .map(req)
                .collect(),
            named_only: params.named_only.iter().map(req).collect(),
            varargs: params.args.is_some(),
            kwargs: params.kwargs.is_some(),
            kwarg_names: None,
        }
    }

    fn accepted(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .positional
            .iter()
            .chain(&self.named_only)
            .map(|(n, _)| n.clone())
            .collect();
        // A builder's positional argument is also one of its keywords: list it once.
        for k in self.kwarg_names.iter().flatten() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
        names
    }

    /// The problems of one call with `positional` positional arguments and `named`
    /// keyword arguments (no `*args`/`**kwargs` at the call site).
    pub fn check(&self, func: &str, positional: usize, named: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        if positional > self.positional.len() && !self.varargs {
            problems.push(format!(
                "{func}() takes at most {} positional argument(s), {positional} given",
                self.positional.len()
            ));
        }
        let by_position: Vec<&str> = self
            .positional
            .iter()
            .take(positional)
            .map(|(n, _)| n.as_str())
            .collect();
        for name in named {
            let known = self
                .positional
                .iter()
                .chain(&self.named_only)
                .any(|(n, _)| n == name);
            let via_kwargs = self.kwargs
                && self
                    .kwarg_names
                    .as_ref()
                    .is_none_or(|k| k.iter().any(|n| n == name));
            if by_position.contains(name) {
                problems.push(format!("{func}(): argument {name:?} given twice"));
            } else if !known && !via_kwargs {
                problems.push(format!(
                    "{func}(): unknown keyword argument {name:?} (accepted: {})",
                    self.accepted().join(", ")
                ));
            }
        }
        let missing = self
            .positional
            .iter()
            .skip(positional)
            .chain(&self.named_only)
            .filter(|(n, required)| *required && !named.contains(&n.as_str()));
        for (name, _) in missing {
            problems.push(format!("{func}(): missing required argument {name:?}"));
        }
        problems
    }
}

/// Signatures of every builtin a script can call by a plain or dotted name:
/// `len`, `var_int`, `json.encode`, and what the library's layers add (`k8s.get`,
/// `k8s.obj.deployment`, ...).
pub fn known_signatures(library: &Library) -> BTreeMap<String, Signature> {
    let mut known = BTreeMap::new();
    let g = library.globals();
    for (name, value) in g.iter() {
        match value.to_value().documentation() {
            DocItem::Member(DocMember::Function(f)) => {
                known.insert(name.to_owned(), Signature::from_docs(&f.params));
            }
            DocItem::Module(m) => {
                for (member, item) in m.members {
                    if let DocItem::Member(DocMember::Function(f)) = item {
                        known.insert(format!("{name}.{member}"), Signature::from_docs(&f.params));
                    }
                }
            }
            _ => {}
        }
    }
    library.add_signatures(&mut known);
    known
}

/// Checks every call to a known builtin in `ast`; returns (location, problem) pairs.
pub fn check_calls(library: &Library, ast: &AstModule) -> Vec<(FileSpan, String)> {
    let known = known_signatures(library);
    let shadowed = bound_names(ast.statement());
    let mut problems = Vec::new();
    walk(Visit::Stmt(ast.statement()), &mut |expr: &AstExpr| {
        let ExprP::Call(callee, args) = &expr.node else {
            return;
        };
        let Some(name) = dotted_name(callee) else {
            return;
        };
        let root = name.split('.').next().unwrap_or_default();
        if shadowed.contains(root) {
            return;
        }
        if super::builtins::unprovided::UNPROVIDED.contains(&root) {
            let attr = name.split_once('.').map(|(_, a)| a);
            let problem = super::builtins::unprovided::message(root, attr);
            problems.push((ast.file_span(expr.span), problem));
            return;
        }
        let Some(sig) = known.get(&name) else {
            // Named by `check_withheld` instead.
            if library.withheld().is_some() && {
                let parts: Vec<&str> = name.split('.').collect();
                (1..=parts.len()).any(|i| library.withheld_message(&parts[..i].join(".")).is_some())
            } {
                return;
            }
            if let Some(problem) = unknown_member(&known, &name) {
                problems.push((ast.file_span(callee.span), problem));
            }
            return;
        };
        let mut positional = 0;
        let mut named = Vec::new();
        for arg in &args.args {
            match &arg.node {
                ArgumentP::Positional(_) => positional += 1,
                ArgumentP::Named(n, _) => named.push(n.node.as_str()),
                // *args / **kwargs at the call site: arity is unknown statically.
                ArgumentP::Args(_) | ArgumentP::KwArgs(_) => return,
            }
        }
        for problem in sig.check(&name, positional, &named) {
            problems.push((ast.file_span(expr.span), problem));
        }
    });
    problems
}

/// Names the script uses that exist in the fuller library but not in this narrower
/// edition (`os`, `k8s.fake` in a hosted script); each use once, at its start.
pub fn check_withheld(library: &Library, ast: &AstModule) -> Vec<(FileSpan, String)> {
    if library.withheld().is_none() {
        return Vec::new();
    }
    let shadowed = bound_names(ast.statement());
    let mut problems = Vec::new();
    walk(Visit::Stmt(ast.statement()), &mut |expr: &AstExpr| {
        if !matches!(expr.node, ExprP::Identifier(_) | ExprP::Dot(..)) {
            return;
        }
        let Some(name) = dotted_name(expr) else {
            return;
        };
        let parts: Vec<&str> = name.split('.').collect();
        if shadowed.contains(parts[0]) {
            return;
        }
        // The shortest withheld prefix: `k8s.testing`, not `k8s.testing.controller`.
        for i in 1..=parts.len() {
            if let Some(problem) = library.withheld_message(&parts[..i].join(".")) {
                problems.push((ast.file_span(expr.span), problem));
                return;
            }
        }
    });
    problems
}

/// The namespaces whose every function has a signature, so a call of anything else in
/// them is a typo (`k8s.gett(...)`), not something `kite check` merely does not know.
const CLOSED: &[&str] = &["k8s", "k8s.obj", "k8s.testing"];

/// The problem with calling `name` when it is a missing member of a closed namespace,
/// with the closest existing name.
fn unknown_member(known: &BTreeMap<String, Signature>, name: &str) -> Option<String> {
    let (scope, member) = name.rsplit_once('.')?;
    if !CLOSED.contains(&scope) {
        return None;
    }
    // Every k8s function also has its `try_` form.
    if scope == "k8s"
        && member
            .strip_prefix("try_")
            .is_some_and(|m| known.contains_key(&format!("k8s.{m}")))
    {
        return None;
    }
    let prefix = format!("{scope}.");
    let siblings: Vec<&str> = known
        .keys()
        .filter_map(|k| k.strip_prefix(prefix.as_str()))
        .filter(|m| !m.contains('.'))
        .collect();
    if siblings.is_empty() {
        return None;
    }
    let suggestion = siblings
        .iter()
        .map(|k| (strsim::levenshtein(member, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| format!("; did you mean {k:?}?"))
        .unwrap_or_default();
    Some(format!(
        "{name}(): {scope} has no function {member:?}{suggestion}"
    ))
}

fn dotted_name(expr: &AstExpr) -> Option<String> {
    match &expr.node {
        ExprP::Identifier(id) => Some(id.node.ident.clone()),
        ExprP::Dot(inner, attr) => Some(format!("{}.{}", dotted_name(inner)?, attr.node)),
        _ => None,
    }
}

/// Names the script binds anywhere (def, assignment, load, for): a call through such a
/// name may not be the builtin, so it is not checked.
fn bound_names(stmt: &AstStmt) -> HashSet<String> {
    let mut names = HashSet::new();
    collect_bound(stmt, &mut names);
    names
}

fn collect_bound(stmt: &AstStmt, names: &mut HashSet<String>) {
    match &stmt.node {
        StmtP::Def(def) => {
            names.insert(def.name.node.ident.clone());
        }
        StmtP::Assign(a) => target_names(&a.lhs.node, names),
        StmtP::AssignModify(t, ..) => target_names(&t.node, names),
        StmtP::For(f) => target_names(&f.var.node, names),
        StmtP::Load(load) => {
            for arg in &load.args {
                names.insert(arg.local.node.ident.clone());
            }
        }
        _ => {}
    }
    stmt.visit_stmt(|child| collect_bound(child, names));
}

fn target_names(target: &AssignTargetP<AstNoPayload>, names: &mut HashSet<String>) {
    match target {
        AssignTargetP::Identifier(id) => {
            names.insert(id.node.ident.clone());
        }
        AssignTargetP::Tuple(items) => items.iter().for_each(|t| target_names(&t.node, names)),
        AssignTargetP::Index(_) | AssignTargetP::Dot(..) => {}
    }
}

fn walk<'a>(node: Visit<'a, AstNoPayload>, f: &mut impl FnMut(&'a AstExpr)) {
    if let Visit::Expr(e) = &node {
        f(e);
    }
    node.visit_children(|child| walk(child, f));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use starlark::syntax::Dialect;

    /// The problems `check_calls` finds in `code`, as `line:col: problem`.
    pub(crate) fn problems(library: &Library, code: &str) -> Vec<String> {
        let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Extended).unwrap();
        check_calls(library, &ast)
            .into_iter()
            .map(|(span, p)| {
                let pos = span.resolve_span();
                format!("{}:{}: {p}", pos.begin.line + 1, pos.begin.column + 1)
            })
            .collect()
    }

    #[test]
    fn unprovided_modules_are_named_where_used() {
        let found = problems(
            Library::standard(),
            "def f():\n    return ai.generate('h', 'ls')\n\ncsv = 1\n",
        );
        assert_eq!(
            found,
            [
                "2:12: ai.generate: kite does not provide upstream Starkite's `ai` module (see the README's compatibility table)"
            ],
        );
        // A script that binds the name itself is not using the module.
        assert!(problems(Library::standard(), "zip = struct(f = len)\nzip.f([])\n").is_empty());
        // `strings` is provided; its calls are checked like any builtin's.
        let found = problems(Library::standard(), "strings.cut('a')\n");
        assert!(
            found.iter().any(|p| p.starts_with("1:1: strings.cut()")),
            "{found:?}"
        );
    }

    #[test]
    fn reports_arity_and_keyword_problems_with_positions() {
        let found = problems(
            Library::standard(),
            "n = var_int()\nprint(len(1, 2))\njson.encode({}, indnt=2)\n",
        );
        assert!(
            found.contains(&"1:5: var_int(): missing required argument \"name\"".to_owned()),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("2:7: len() takes at most 1")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("3:1: json.encode(): unknown keyword argument \"indnt\"")),
            "{found:?}"
        );
    }

    #[test]
    fn valid_and_shadowed_calls_pass() {
        let std = Library::standard();
        assert!(problems(std, "var_int('a', 3)\njson.encode({})").is_empty());
        assert!(problems(std, "def len(a, b):\n  return a\nlen(1, 2)").is_empty());
        assert!(problems(std, "f = {}\nvar_int(*[1])").is_empty());
    }
}
