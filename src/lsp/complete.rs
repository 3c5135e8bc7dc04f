//! Completion: after `k8s.`, `k8s.obj.` or `<module>.` that scope's members; inside a
//! known call its keywords first; elsewhere the globals and the file's own names.

use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionItemLabelDetails, Documentation, MarkupContent,
    MarkupKind,
};

use super::docs::{Index, Kind, Symbol};
use super::outline::{BindingKind, outline};
use super::text::{context, dotted_before};

/// The completions at byte `offset` of `text`.
pub fn complete(index: &Index, text: &str, offset: usize) -> Vec<CompletionItem> {
    let ctx = context(text, offset);
    if ctx.quoted {
        return Vec::new();
    }
    let Some((parts, _partial)) = dotted_before(text, offset) else {
        return Vec::new();
    };
    let own = outline(text);
    if !parts.is_empty() {
        // A file that binds `k8s` (or `time`, ...) itself means something else by it.
        if own
            .find(&parts[0])
            .is_some_and(|b| !is_builtin_load(&b.kind))
        {
            return Vec::new();
        }
        let scope = parts.join(".");
        return index
            .members(&scope)
            .into_iter()
            .flatten()
            .map(|(name, s)| symbol_item(name, s, "1"))
            .collect();
    }
    let mut items = Vec::new();
    if let Some(keywords) = ctx.call.as_deref().and_then(|c| index.keywords(c)) {
        items.extend(keywords.iter().map(|k| CompletionItem {
            label: k.clone(),
            kind: Some(CompletionItemKind::FIELD),
            detail: Some(format!(
                "keyword of {}()",
                ctx.call.as_deref().unwrap_or_default()
            )),
            insert_text: Some(format!("{k} = ")),
            sort_text: Some(format!("0{k}")),
            ..CompletionItem::default()
        }));
    }
    let mut seen = std::collections::HashSet::new();
    for b in own.bindings.iter().rev() {
        if seen.insert(b.name.clone()) {
            let kind = match b.kind {
                BindingKind::Def => CompletionItemKind::FUNCTION,
                BindingKind::Assign => CompletionItemKind::VARIABLE,
                BindingKind::Load { .. } => CompletionItemKind::REFERENCE,
            };
            items.push(CompletionItem {
                label: b.name.clone(),
                kind: Some(kind),
                sort_text: Some(format!("1{}", b.name)),
                ..CompletionItem::default()
            });
        }
    }
    for (name, s) in index.members("").into_iter().flatten() {
        if !seen.contains(name) {
            items.push(symbol_item(name, s, "2"));
        }
    }
    items
}

/// `load("k8s", "k8s")` binds the library's own `k8s`.
fn is_builtin_load(kind: &BindingKind) -> bool {
    matches!(kind, BindingKind::Load { module, .. }
        if crate::library::library().module(module.strip_prefix("@kite//").unwrap_or(module)).is_some())
}

fn symbol_item(name: &str, s: &Symbol, rank: &str) -> CompletionItem {
    let kind = match s.kind {
        Kind::Function => CompletionItemKind::FUNCTION,
        Kind::Module => CompletionItemKind::MODULE,
        Kind::Value => CompletionItemKind::VARIABLE,
    };
    CompletionItem {
        label: name.to_owned(),
        kind: Some(kind),
        label_details: Some(CompletionItemLabelDetails {
            detail: None,
            description: s.doc.lines().next().map(str::to_owned),
        }),
        detail: Some(s.signature.clone()),
        documentation: (!s.doc.is_empty()).then(|| {
            Documentation::MarkupContent(MarkupContent {
                kind: MarkupKind::Markdown,
                value: s.doc.clone(),
            })
        }),
        sort_text: Some(format!("{rank}{name}")),
        ..CompletionItem::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(text: &str) -> Vec<String> {
        complete(Index::get(), text, text.len())
            .into_iter()
            .map(|i| i.label)
            .collect()
    }

    #[test]
    fn after_k8s_dot_the_client_functions() {
        let found = labels("p = k8s.");
        for name in ["get", "list", "apply", "control", "obj", "try_get"] {
            assert!(found.iter().any(|l| l == name), "{name} in {found:?}");
        }
        assert!(!found.iter().any(|l| l == "var_str"));
        // Partly typed: the client filters, the list is the scope's.
        assert!(labels("k8s.ge").iter().any(|l| l == "get"));
    }

    #[test]
    fn after_k8s_obj_dot_the_builders() {
        let found = labels("d = k8s.obj.");
        for name in ["deployment", "service", "config_map", "container"] {
            assert!(found.iter().any(|l| l == name), "{name} in {found:?}");
        }
    }

    #[test]
    fn inside_a_builder_call_its_keywords_first() {
        let items = complete(
            Index::get(),
            "d = k8s.obj.deployment(name = \"x\", ",
            "d = k8s.obj.deployment(name = \"x\", ".len(),
        );
        let replicas = items
            .iter()
            .find(|i| i.label == "replicas")
            .expect("replicas");
        assert_eq!(replicas.kind, Some(CompletionItemKind::FIELD));
        assert!(
            items.iter().any(|i| i.label == "len"),
            "globals still offered"
        );
        let text = "k8s.control(\"pods\", rec";
        assert!(labels(text).iter().any(|l| l == "reconcile"));
    }

    #[test]
    fn after_a_module_dot_its_members() {
        let found = labels("time.");
        assert!(found.iter().any(|l| l == "sleep"), "{found:?}");
        assert!(labels("strings.").iter().any(|l| l == "cut"));
    }

    #[test]
    fn plain_names_are_globals_and_own_bindings() {
        let found = labels("def helper():\n    pass\nLIMIT = 3\nx = va");
        for name in [
            "helper", "LIMIT", "var_str", "var_int", "k8s", "time", "len",
        ] {
            assert!(found.iter().any(|l| l == name), "{name} in {found:?}");
        }
        assert!(labels("x = \"k8s.").is_empty(), "nothing inside a string");
        assert!(labels("k8s = struct()\nk8s.").is_empty(), "a shadowed k8s");
    }
}
