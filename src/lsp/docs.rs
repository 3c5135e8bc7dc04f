//! The symbol index: every global, module member, `k8s` function and `k8s.obj` builder
//! a script can name, with its signature and doc, and the keywords each call accepts.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use starlark::docs::{DocItem, DocMember, DocParam, DocParams, DocString};
use starlark::environment::Module;
use starlark::typing::Ty;
use starlark::values::{FrozenValue, StarlarkValue};

use crate::k8s::module::K8sClient;
use crate::script::library::Library;
use crate::script::lint::{Signature, known_signatures};

/// What a name stands for, which decides its completion icon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Function,
    Module,
    Value,
}

/// One name a script can use.
#[derive(Debug, Clone)]
pub struct Symbol {
    pub kind: Kind,
    /// A one-line rendering: `k8s.get(kind, name, namespace = None, ...)`.
    pub signature: String,
    /// The documentation, markdown.
    pub doc: String,
}

impl Symbol {
    /// The hover text: the signature as code, then the doc.
    pub fn markdown(&self) -> String {
        let mut md = format!("```python\n{}\n```", self.signature);
        if !self.doc.is_empty() {
            md.push_str("\n\n");
            md.push_str(&self.doc);
        }
        md
    }
}

/// Names by scope, and the keywords of each known call.
#[derive(Debug, Default)]
pub struct Index {
    /// Members by the dotted name of what holds them; `""` holds the globals.
    scopes: BTreeMap<String, BTreeMap<String, Symbol>>,
    /// The keyword arguments each dotted callee accepts.
    keywords: BTreeMap<String, Vec<String>>,
}

impl Index {
    /// The index of the composed library, built on first use.
    pub fn get() -> &'static Index {
        static INDEX: OnceLock<Index> = OnceLock::new();
        INDEX.get_or_init(|| Index::build(crate::library::library()))
    }

    fn build(library: &Library) -> Index {
        let mut index = Index::default();
        for (name, item) in library.globals().documentation().members {
            index.add("", &name, item);
        }
        index.add_k8s();
        for (callee, sig) in known_signatures(library) {
            index.add_signature(&callee, &sig);
        }
        index
    }

    /// The members of a scope: `""` for the globals, `k8s`, `k8s.obj`, `time`, ...
    pub fn members(&self, scope: &str) -> Option<&BTreeMap<String, Symbol>> {
        self.scopes.get(scope)
    }

    /// The symbol a dotted name stands for.
    pub fn symbol(&self, dotted: &str) -> Option<&Symbol> {
        let (scope, name) = dotted.rsplit_once('.').unwrap_or(("", dotted));
        self.scopes.get(scope)?.get(name)
    }

    /// The keyword arguments a call to `callee` accepts.
    pub fn keywords(&self, callee: &str) -> Option<&[String]> {
        self.keywords.get(callee).map(Vec::as_slice)
    }

    fn insert(&mut self, scope: &str, name: &str, symbol: Symbol) {
        self.scopes
            .entry(scope.to_owned())
            .or_default()
            .insert(name.to_owned(), symbol);
    }

    fn add(&mut self, scope: &str, name: &str, item: DocItem) {
        let dotted = join(scope, name);
        let symbol = match item {
            DocItem::Module(m) => {
                for (member, item) in m.members {
                    self.add(&dotted, &member, item);
                }
                Symbol {
                    kind: Kind::Module,
                    signature: format!("module {dotted}"),
                    doc: render_doc(m.docs.as_ref()),
                }
            }
            DocItem::Type(t) => Symbol {
                kind: Kind::Value,
                signature: format!("type {dotted}"),
                doc: render_doc(t.docs.as_ref()),
            },
            DocItem::Member(DocMember::Function(f)) => Symbol {
                kind: Kind::Function,
                signature: format!("{dotted}({})", render_params(&f.params)),
                doc: render_doc(f.docs.as_ref()),
            },
            DocItem::Member(DocMember::Property(p)) => Symbol {
                kind: Kind::Value,
                signature: format!("{dotted}: {}", p.typ),
                doc: render_doc(p.docs.as_ref()),
            },
        };
        self.insert(scope, name, symbol);
    }

    /// `k8s` is a value, not a namespace: its functions are methods, documented on
    /// the method table, plus `try_*` forms and the `obj` builders.
    fn add_k8s(&mut self) {
        let Some(methods) =
            <K8sClient<crate::library::Kite> as StarlarkValue<'static>>::get_methods()
        else {
            return;
        };
        let mut try_forms = Vec::new();
        for (name, member) in methods.documentation(Ty::any()).members {
            if let DocMember::Function(f) = &member {
                try_forms.push((name.clone(), f.params.clone(), f.docs.clone()));
            }
            self.add("k8s", &name, DocItem::Member(member));
        }
        // Only the client's own functions have a `try_` form (k8s.control has none).
        let attrs = dir_of_k8s();
        for (name, params, docs) in try_forms {
            let try_name = format!("try_{name}");
            if !attrs.contains(&try_name) {
                continue;
            }
            let summary = docs.map(|d| d.summary).unwrap_or_default();
            self.insert(
                "k8s",
                &try_name,
                Symbol {
                    kind: Kind::Function,
                    signature: format!("k8s.{try_name}({})", render_params(&params)),
                    doc: format!(
                        "As `k8s.{name}`, but returns a result (`.ok`, `.value`, `.error`) \
                         instead of failing.\n\n{summary}"
                    ),
                },
            );
        }
        self.insert(
            "",
            "k8s",
            Symbol {
                kind: Kind::Module,
                signature: "module k8s".into(),
                doc: "The Kubernetes client with the default session: its functions, their \
                      `try_` forms, and the `obj` builders."
                    .into(),
            },
        );
        // The namespaces under `k8s` (`obj`, and what the layers above add).
        for name in &attrs {
            let known = self.scopes.get("k8s").is_some_and(|m| m.contains_key(name));
            if !known && let Some(item) = k8s_attr_docs(name) {
                self.add("k8s", name, item);
            }
        }
        if let Some(s) = self.scopes.get_mut("k8s").and_then(|m| m.get_mut("obj"))
            && s.doc.is_empty()
        {
            s.doc = "Builders of Kubernetes objects: each returns a manifest (a dict).".into();
        }
    }

    fn add_signature(&mut self, callee: &str, sig: &Signature) {
        let mut names: Vec<String> = sig
            .positional
            .iter()
            .chain(&sig.named_only)
            .map(|(n, _)| n.clone())
            .collect();
        for k in sig.kwarg_names.iter().flatten() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
        // Builders and k8s.control take **kwargs and check the names themselves: their
        // documented signature says nothing, the keyword list says everything.
        if sig.kwarg_names.is_some() {
            let (scope, name) = callee.rsplit_once('.').unwrap_or(("", callee));
            if let Some(s) = self.scopes.get_mut(scope).and_then(|m| m.get_mut(name)) {
                s.signature = format!("{callee}({})", names.join(", "));
            }
        }
        self.keywords.insert(callee.to_owned(), names);
    }
}

fn k8s_value() -> Option<FrozenValue> {
    crate::library::library()
        .globals()
        .iter()
        .find(|(n, _)| *n == "k8s")
        .map(|(_, v)| v)
}

/// The attributes the `k8s` value has, as a running script sees them.
fn dir_of_k8s() -> Vec<String> {
    k8s_value()
        .map(|v| v.to_value().dir_attr())
        .unwrap_or_default()
}

/// The documentation of the attribute `name` of `k8s`.
fn k8s_attr_docs(name: &str) -> Option<DocItem> {
    let k8s = k8s_value()?;
    Module::with_temp_heap(|module| {
        let value = k8s.to_value().get_attr(name, module.heap()).ok()??;
        Some(value.documentation())
    })
}

fn join(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    }
}

fn render_doc(doc: Option<&DocString>) -> String {
    let Some(doc) = doc else {
        return String::new();
    };
    let mut text = doc.summary.clone();
    for part in [&doc.details, &doc.examples].into_iter().flatten() {
        text.push_str("\n\n");
        text.push_str(part);
    }
    text
}

fn render_params(params: &DocParams) -> String {
    let one = |p: &DocParam| {
        let mut s = p.name.clone();
        if p.typ != Ty::any() {
            s.push_str(&format!(": {}", p.typ));
        }
        if let Some(d) = &p.default_value {
            s.push_str(&format!(" = {d}"));
        }
        s
    };
    let mut parts: Vec<String> = params.pos_only.iter().map(one).collect();
    if !parts.is_empty() {
        parts.push("/".into());
    }
    parts.extend(params.pos_or_named.iter().map(one));
    match &params.args {
        Some(a) => parts.push(format!("*{}", a.name)),
        None if !params.named_only.is_empty() => parts.push("*".into()),
        None => {}
    }
    parts.extend(params.named_only.iter().map(one));
    if let Some(k) = &params.kwargs {
        parts.push(format!("**{}", k.name));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k8s_functions_have_signatures_and_docs() {
        let index = Index::get();
        let get = index.symbol("k8s.get").expect("k8s.get");
        assert_eq!(get.kind, Kind::Function);
        assert!(get.signature.starts_with("k8s.get("), "{}", get.signature);
        assert!(!get.doc.is_empty());
        for name in ["list", "apply", "control", "try_get", "obj"] {
            assert!(index.members("k8s").unwrap().contains_key(name), "{name}");
        }
        // Every attribute a script can use is known, so none is reported as a typo.
        for name in dir_of_k8s() {
            assert!(index.symbol(&format!("k8s.{name}")).is_some(), "k8s.{name}");
        }
        let dep = index.symbol("k8s.obj.deployment").expect("deployment");
        assert!(dep.signature.contains("replicas"), "{}", dep.signature);
        assert!(dep.markdown().contains("Deployment"));
    }

    #[test]
    fn globals_modules_and_keywords_are_indexed() {
        let index = Index::get();
        assert!(index.members("").unwrap().contains_key("var_str"));
        assert_eq!(index.symbol("time").map(|s| s.kind), Some(Kind::Module));
        assert!(index.symbol("time.sleep").is_some());
        let kw = index.keywords("k8s.obj.deployment").unwrap();
        assert!(kw.iter().any(|k| k == "replicas"));
        assert_eq!(kw.iter().filter(|k| *k == "name").count(), 1);
        assert!(
            index
                .keywords("k8s.control")
                .unwrap()
                .iter()
                .any(|k| k == "reconcile")
        );
    }
}
