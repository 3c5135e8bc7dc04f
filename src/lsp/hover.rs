//! Hover: the signature and doc of a builtin (`k8s.get`, `k8s.obj.deployment`,
//! `time.sleep`, ...), a keyword of a known call, or the definition line of the
//! script's own names.

use std::path::Path;

use super::definition::definition;
use super::docs::Index;
use super::outline::{BindingKind, outline};
use super::text::{context, dotted_at};

/// The hover text (markdown) at byte `offset` of `text` and the byte range it is about.
pub fn hover(
    index: &Index,
    path: &Path,
    text: &str,
    offset: usize,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<(String, usize, usize)> {
    let (name, begin, end) = dotted_at(text, offset)?;
    let root = name.split('.').next().unwrap_or_default();
    let own = outline(text).find(root).cloned();
    let builtin = own.as_ref().is_none_or(|b| {
        matches!(&b.kind, BindingKind::Load { module, .. }
            if crate::library::library().module(module.strip_prefix("@kite//").unwrap_or(module)).is_some())
    });
    if builtin && let Some(symbol) = index.symbol(&name) {
        return Some((symbol.markdown(), begin, end));
    }
    if !name.contains('.')
        && text[end..].trim_start().starts_with('=')
        && !text[end..].trim_start().starts_with("==")
        && let Some(call) = context(text, begin).call
        && index.keywords(&call).is_some_and(|k| k.contains(&name))
    {
        return Some((
            format!("`{name}`: keyword argument of `{call}()`"),
            begin,
            end,
        ));
    }
    let target = definition(path, text, offset, read)?;
    let line_start = target.text[..target.offset]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = target.text[line_start..].lines().next().unwrap_or_default();
    let mut md = format!("```python\n{}\n```", line.trim_end());
    if target.path != path {
        md.push_str(&format!("\n\nfrom `{}`", target.path.display()));
    }
    Some((md, begin, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, needle: &str) -> Option<String> {
        let offset = text.find(needle)? + 1;
        let none = |_: &Path| None;
        hover(Index::get(), Path::new("/x/t.star"), text, offset, &none).map(|h| h.0)
    }

    #[test]
    fn builtins_show_signature_and_doc() {
        let md = at("p = k8s.get(\"pods\", \"x\")", "get").unwrap();
        assert!(md.starts_with("```python\nk8s.get("), "{md}");
        let doc = &Index::get().symbol("k8s.get").unwrap().doc;
        assert!(md.contains(doc.as_str()));
        let md = at("d = k8s.obj.deployment(name = \"x\")", "deployment").unwrap();
        assert!(md.contains("replicas"), "{md}");
        assert!(
            at("time.sleep(\"1s\")", "sleep")
                .unwrap()
                .contains("time.sleep(")
        );
    }

    #[test]
    fn keywords_and_own_names() {
        let md = at(
            "d = k8s.obj.deployment(name = \"x\", replicas = 2)",
            "replicas",
        )
        .unwrap();
        assert!(md.contains("k8s.obj.deployment"), "{md}");
        let md = at("def helper(a):\n    pass\nhelper(1)\n", "helper(1)").unwrap();
        assert!(md.contains("def helper(a):"), "{md}");
        // A script's own `time` is not the module.
        let md = at("time = 3\nx = time\n", "time\n").unwrap();
        assert!(md.contains("time = 3"), "{md}");
    }
}
