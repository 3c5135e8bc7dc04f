//! A script and the files it loads, parsed, with the questions inference asks of them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::AstNoPayload;
use starlark_syntax::syntax::ast::{
    AssignTargetP, AstExpr, AstLiteral, AstStmt, DefP, ExprP, StmtP,
};
use starlark_syntax::syntax::uniplate::Visit;

use super::{Error, Result};

/// One parsed file.
pub struct Module {
    pub ast: AstModule,
    /// Relative to the main script's directory.
    pub rel: PathBuf,
}

/// The script first, then every file it loads (each once).
pub struct Source {
    pub modules: Vec<Module>,
    /// Loads that point outside the script's directory: they cannot be baked into an image
    /// next to the script as they are.
    pub outside: Vec<String>,
}

impl Source {
    /// Reads `path` and, transitively, every relative `load()`.
    ///
    /// # Errors
    /// A file that cannot be read or parsed.
    pub fn read(path: &Path) -> Result<Source> {
        let root = path.canonicalize().map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = root.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut out = Source {
            modules: Vec::new(),
            outside: Vec::new(),
        };
        let mut seen = HashSet::new();
        let mut pending = vec![root];
        while let Some(file) = pending.pop() {
            if !seen.insert(file.clone()) {
                continue;
            }
            let (ast, _) =
                crate::script::run::parse(&file).map_err(|e| Error::Parse(e.to_string()))?;
            let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
            for stmt in top_level(ast.statement()) {
                if let StmtP::Load(load) = &stmt.node
                    && load.module.node != "k8s"
                {
                    // A file, or every file of a module directory, as load() finds them.
                    let files = crate::script::loader::files_of(&dir, &load.module.node);
                    if files.is_empty() {
                        let joined = dir.join(&load.module.node);
                        return Err(Error::Read {
                            source: std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                "no such file or module directory",
                            ),
                            path: joined,
                        });
                    }
                    pending.extend(files);
                }
            }
            let rel = if let Ok(r) = file.strip_prefix(&base) {
                r.to_path_buf()
            } else {
                out.outside.push(file.display().to_string());
                PathBuf::from(file.file_name().unwrap_or_default())
            };
            out.modules.push(Module { ast, rel });
        }
        Ok(out)
    }
}

impl Source {
    /// Script text without a file (a StarlarkController's script), shown as `name`. It can
    /// load no files, so it is the only module.
    ///
    /// # Errors
    /// [`Error::Parse`] with the rendered syntax error.
    pub fn from_text(name: &str, text: &str) -> Result<Source> {
        let ast = AstModule::parse(name, text.to_owned(), &crate::script::loader::dialect())
            .map_err(|e| Error::Parse(e.to_string()))?;
        Ok(Source {
            modules: vec![Module {
                ast,
                rel: PathBuf::from(name),
            }],
            outside: Vec::new(),
        })
    }
}

/// The statements of a module body, flattened.
pub fn top_level(stmt: &AstStmt) -> Vec<&AstStmt> {
    match &stmt.node {
        StmtP::Statements(list) => list.iter().flat_map(top_level).collect(),
        _ => vec![stmt],
    }
}

/// Calls `f` on every expression under `stmt`, nested definitions included.
pub fn each_expr<'a>(stmt: &'a AstStmt, f: &mut impl FnMut(&'a AstExpr)) {
    walk(Visit::Stmt(stmt), f);
}

/// Calls `f` on `expr` and every expression inside it.
pub fn each_subexpr<'a>(expr: &'a AstExpr, f: &mut impl FnMut(&'a AstExpr)) {
    walk(Visit::Expr(expr), f);
}

fn walk<'a>(node: Visit<'a, AstNoPayload>, f: &mut impl FnMut(&'a AstExpr)) {
    if let Visit::Expr(e) = &node {
        f(e);
    }
    node.visit_children(|child| walk(child, f));
}

/// `a.b.c` for a chain of attribute reads on a name.
pub fn dotted(expr: &AstExpr) -> Option<String> {
    match &expr.node {
        ExprP::Identifier(id) => Some(id.node.ident.clone()),
        ExprP::Dot(inner, attr) => Some(format!("{}.{}", dotted(inner)?, attr.node)),
        _ => None,
    }
}

/// The string a literal expression holds.
pub fn literal_str(expr: &AstExpr) -> Option<&str> {
    match &expr.node {
        ExprP::Literal(AstLiteral::String(s)) => Some(&s.node),
        _ => None,
    }
}

/// Every top-level function, by name (with the names `load()` gives them), and the
/// assignments of each body, so inference can follow a name to what it holds.
pub struct Index<'a> {
    pub defs: HashMap<String, Vec<(usize, &'a DefP<AstNoPayload>)>>,
    /// Top-level `NAME = expr` assignments, across modules.
    pub globals: HashMap<String, Vec<&'a AstExpr>>,
    /// Names `load()` binds: a call `name.f()` may be a loaded module value's `f`.
    pub loaded: HashSet<String>,
}

impl<'a> Index<'a> {
    pub fn new(source: &'a Source) -> Self {
        let mut defs: HashMap<String, Vec<_>> = HashMap::new();
        let mut globals: HashMap<String, Vec<_>> = HashMap::new();
        let mut aliases = Vec::new();
        let mut loaded = HashSet::new();
        for (i, m) in source.modules.iter().enumerate() {
            for stmt in top_level(m.ast.statement()) {
                match &stmt.node {
                    StmtP::Def(def) => defs
                        .entry(def.name.node.ident.clone())
                        .or_default()
                        .push((i, def)),
                    StmtP::Assign(a) => {
                        if let AssignTargetP::Identifier(id) = &a.lhs.node {
                            globals
                                .entry(id.node.ident.clone())
                                .or_default()
                                .push(&a.rhs);
                        }
                    }
                    StmtP::Load(load) => {
                        let library = matches!(load.module.node.as_str(), "k8s" | "@kite//k8s");
                        for arg in &load.args {
                            if !library {
                                loaded.insert(arg.local.node.ident.clone());
                            }
                            if arg.local.node.ident != arg.their.node {
                                aliases
                                    .push((arg.local.node.ident.clone(), arg.their.node.clone()));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for (local, their) in aliases {
            if let Some(d) = defs.get(&their).cloned() {
                defs.entry(local).or_default().extend(d);
            }
        }
        Index {
            defs,
            globals,
            loaded,
        }
    }

    /// The functions reachable from `roots`: named there, or named by a reachable function.
    pub fn reachable(
        &self,
        roots: &[&'a AstExpr],
        names: &[&str],
    ) -> Vec<(usize, &'a DefP<AstNoPayload>)> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut work: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let note = |e: &AstExpr, work: &mut Vec<String>| match &e.node {
            ExprP::Identifier(id) => work.push(id.node.ident.clone()),
            // `greeter.greet`: a loaded module value's function, found by its name.
            ExprP::Dot(obj, attr) => {
                if let ExprP::Identifier(id) = &obj.node
                    && self.loaded.contains(&id.node.ident)
                {
                    work.push(attr.node.clone());
                }
            }
            _ => {}
        };
        for root in roots {
            each_subexpr(root, &mut |e| note(e, &mut work));
        }
        let mut out = Vec::new();
        while let Some(name) = work.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            for &(i, def) in self.defs.get(&name).into_iter().flatten() {
                out.push((i, def));
                each_expr(&def.body, &mut |e| note(e, &mut work));
                // Defaults of parameters run at definition time, but may name functions.
                for p in &def.params {
                    if let starlark_syntax::syntax::ast::ParameterP::Normal(_, _, Some(d)) = &p.node
                    {
                        each_subexpr(d, &mut |e| note(e, &mut work));
                    }
                }
            }
        }
        out
    }
}

/// The assignments `name = expr` anywhere in a function body.
pub fn local_assignments(body: &AstStmt) -> HashMap<String, Vec<&AstExpr>> {
    let mut out: HashMap<String, Vec<&AstExpr>> = HashMap::new();
    collect_assignments(body, &mut out);
    out
}

fn collect_assignments<'a>(stmt: &'a AstStmt, out: &mut HashMap<String, Vec<&'a AstExpr>>) {
    match &stmt.node {
        StmtP::Assign(a) => {
            if let AssignTargetP::Identifier(id) = &a.lhs.node {
                out.entry(id.node.ident.clone()).or_default().push(&a.rhs);
            }
        }
        // A nested function's assignments are its own.
        StmtP::Def(_) => return,
        _ => {}
    }
    stmt.visit_stmt(|child| collect_assignments(child, out));
}
