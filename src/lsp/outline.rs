//! The names a file binds at its top level (`def`, assignments, `load()` symbols), read
//! from the text so that a file being typed (which rarely parses) still has them.

use std::sync::OnceLock;

use regex::Regex;

/// One top-level name and where it is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    /// The byte offset of the name where it is bound.
    pub offset: usize,
    pub kind: BindingKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingKind {
    Def,
    Assign,
    /// `load(module, name)` or `load(module, name = "their")`.
    Load {
        module: String,
        their: String,
    },
}

/// A `load()` statement's module string and its byte range (quotes included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadModule {
    pub module: String,
    pub begin: usize,
    pub end: usize,
}

/// What one file binds at its top level, in order.
#[derive(Debug, Default)]
pub struct Outline {
    pub bindings: Vec<Binding>,
    pub loads: Vec<LoadModule>,
}

impl Outline {
    /// The first binding of `name`: where it is defined.
    pub fn find(&self, name: &str) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.name == name)
    }
}

struct Patterns {
    def: Regex,
    assign: Regex,
    name: Regex,
    load_arg: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |s: &str| Regex::new(s).unwrap_or_else(|e| unreachable!("pattern {s}: {e}"));
        Patterns {
            def: re(r"(?m)^def[ \t]+([A-Za-z_]\w*)"),
            assign: re(
                r"(?m)^([A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*(?::[^=\n]*)?=([^=]|$)",
            ),
            name: re(r"[A-Za-z_]\w*"),
            load_arg: re(r#"(?:([A-Za-z_]\w*)\s*=\s*)?(?:"([^"\\\n]*)"|'([^'\\\n]*)')"#),
        }
    })
}

/// Reads the top-level bindings of `text`.
pub fn outline(text: &str) -> Outline {
    let p = patterns();
    let mut out = Outline::default();
    for c in p.def.captures_iter(text) {
        if let Some(m) = c.get(1) {
            out.bindings
                .push(binding(m.as_str(), m.start(), BindingKind::Def));
        }
    }
    for c in p.assign.captures_iter(text) {
        if let Some(targets) = c.get(1) {
            for m in p.name.find_iter(targets.as_str()) {
                let at = targets.start() + m.start();
                out.bindings
                    .push(binding(m.as_str(), at, BindingKind::Assign));
            }
        }
    }
    for (at, _) in text.match_indices("load(") {
        if at > 0 && !text[..at].ends_with('\n') {
            continue;
        }
        let inner_start = at + "load(".len();
        let inner_end = text[inner_start..]
            .find(')')
            .map_or(text.len(), |n| inner_start + n);
        load_args(&text[inner_start..inner_end], inner_start, &mut out);
    }
    out.bindings.sort_by_key(|b| b.offset);
    out
}

fn load_args(inner: &str, base: usize, out: &mut Outline) {
    let mut module = None;
    for c in patterns().load_arg.captures_iter(inner) {
        let Some(lit) = c.get(2).or_else(|| c.get(3)) else {
            continue;
        };
        let Some(m) = &module else {
            let whole = c.get(0).map_or(0..0, |w| w.range());
            out.loads.push(LoadModule {
                module: lit.as_str().to_owned(),
                begin: base + whole.start,
                end: base + whole.end,
            });
            module = Some(lit.as_str().to_owned());
            continue;
        };
        let (local, at) = match c.get(1) {
            Some(l) => (l.as_str(), l.start()),
            None => (lit.as_str(), lit.start()),
        };
        out.bindings.push(binding(
            local,
            base + at,
            BindingKind::Load {
                module: m.clone(),
                their: lit.as_str().to_owned(),
            },
        ));
    }
}

fn binding(name: &str, offset: usize, kind: BindingKind) -> Binding {
    Binding {
        name: name.to_owned(),
        offset,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_defs_assignments_and_loads() {
        let text = "load(\"lib/h.star\", \"f\", g = \"helper\")\nX = 1\na, b = 1, 2\nif X == 1:\n    y = 2\ndef main(x):\n    pass\n";
        let o = outline(text);
        let names: Vec<&str> = o.bindings.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["f", "g", "X", "a", "b", "main"]);
        assert_eq!(
            o.find("g").map(|b| &b.kind),
            Some(&BindingKind::Load {
                module: "lib/h.star".into(),
                their: "helper".into()
            })
        );
        assert_eq!(o.find("main").map(|b| b.offset), text.find("main"));
        assert_eq!(o.loads[0].module, "lib/h.star");
        assert_eq!(&text[o.loads[0].begin..o.loads[0].end], "\"lib/h.star\"");
    }
}
