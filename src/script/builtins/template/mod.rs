//! `template`: Go `text/template` rendering, as upstream Starkite's module (`text`,
//! `file`, `bytes`, `render`, a template value with `render`/`try_render`/`source`).
//!
//! # Caveats
//! Implemented here, not by Go: actions, pipelines, variables, `if`/`else if`/`range`/
//! `with`/`define`/`template`/`block`/`break`/`continue`, trim markers, comments and Go's
//! predefined functions. `call` fails (data holds no functions); printf has no
//! `%[n]` argument indexes. Template calls and nesting stop at a depth of
//! [`exec::MAX_DEPTH`], output at [`exec::MAX_OUTPUT`] bytes.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

mod data;
mod exec;
mod format;
mod funcs;
mod lex;
mod parse;
#[cfg(test)]
mod tests;
mod tree;

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::bytes::StarlarkBytes;
use starlark::values::none::NoneOr;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;
use data::Data;
use exec::MissingKey;
use parse::Trees;

/// The name templates are parsed under, as upstream's (`template: tmpl:1: ...`).
const NAME: &str = "tmpl";

/// A parsed template.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Template {
    source: String,
    #[allocative(skip)]
    trees: Trees,
}

starlark::starlark_simple_value!(Template);

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.source.chars().take(40).collect();
        let more = if shown.len() < self.source.len() {
            "..."
        } else {
            ""
        };
        write!(f, "template({:?})", format!("{shown}{more}"))
    }
}

impl Template {
    /// Parses `source` with the delimiters (empty for Go's `{{` `}}`).
    fn parse(call: &str, source: String, delims: Value) -> Result<Template, String> {
        let (left, right) = delimiters(delims).map_err(|e| format!("{call}: {e}"))?;
        let trees = parse::parse(NAME, &source, left, right).map_err(|e| format!("{call}: {e}"))?;
        Ok(Template { source, trees })
    }

    fn render(&self, call: &str, data: Value, missing_key: &str) -> Result<String, String> {
        let missing = match missing_key {
            "default" | "" => MissingKey::Default,
            "zero" => MissingKey::Zero,
            "error" => MissingKey::Error,
            other => {
                return Err(format!(
                    "{call}: missing_key must be \"error\", \"zero\", or \"default\", got {other:?}"
                ));
            }
        };
        let data = Data::from_starlark(data).map_err(|e| format!("{call}: {e}"))?;
        exec::execute(&self.trees, NAME, &self.source, data, missing)
            .map_err(|e| format!("{call}: {e}"))
    }
}

/// `delims=("<%", "%>")`: two strings; empty ones (or no tuple) keep Go's.
fn delimiters(delims: Value<'_>) -> Result<(&str, &str), String> {
    const DEFAULT: (&str, &str) = ("{{", "}}");
    let bad = || "delims must be a tuple of (left, right), e.g. (\"<%\", \"%>\")".to_owned();
    if delims.is_none() {
        return Ok(DEFAULT);
    }
    let Some(t) = TupleRef::from_value(delims) else {
        return Err(bad());
    };
    match t.content() {
        [] => Ok(DEFAULT),
        [l, r] => match (l.unpack_str(), r.unpack_str()) {
            (Some(""), _) | (_, Some("")) => Ok(DEFAULT),
            (Some(l), Some(r)) => Ok((l, r)),
            _ => Err("delims must be a tuple of two strings".to_owned()),
        },
        _ => Err(bad()),
    }
}

fn template_of(v: Value<'_>) -> anyhow::Result<&Template> {
    v.downcast_ref::<Template>()
        .ok_or_else(|| anyhow::anyhow!("not a template"))
}

#[starlark_module]
fn template_methods(builder: &mut MethodsBuilder) {
    /// The template's source text.
    #[starlark(attribute)]
    fn source(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(template_of(this)?.source.clone())
    }

    /// The template rendered with `data`; `missing_key` is `"default"` (a missing key
    /// prints `<no value>`), `"zero"` or `"error"`.
    fn render(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] data: Value,
        #[starlark(require = named, default = "default")] missing_key: &str,
    ) -> anyhow::Result<String> {
        template_of(this)?
            .render("template.render", data, missing_key)
            .map_err(anyhow::Error::msg)
    }

    /// `render(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_render<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] data: Value<'v>,
        #[starlark(require = named, default = "default")] missing_key: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = template_of(this)?
            .render("template.render", data, missing_key)
            .map(|s| heap.alloc(s));
        Ok(result(heap, outcome))
    }
}

starlark::methods_static!(TEMPLATE_METHODS = template_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "template")]
impl<'v> StarlarkValue<'v> for Template {
    fn get_methods() -> Option<&'static Methods> {
        Some(TEMPLATE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.source.is_empty()
    }
}

fn read_file(eval: &Evaluator<'_, '_, '_>, call: &str, path: &str) -> Result<String, String> {
    Host::of(eval)
        .and_then(|h| h.allow(call, Access::Fs))
        .map_err(|e| e.to_string())?;
    let bytes = crate::script::builtins::input::read_file(call, path)?;
    String::from_utf8(bytes).map_err(|_| format!("{call}: {path}: the file is not UTF-8 text"))
}

fn text_of_bytes(call: &str, data: Value) -> Result<String, String> {
    if let Some(s) = data.unpack_str() {
        return Ok(s.to_owned());
    }
    data.downcast_ref::<StarlarkBytes>()
        .map(|b| String::from_utf8_lossy(b.as_bytes()).into_owned())
        .ok_or_else(|| {
            format!(
                "{call}: argument must be bytes or string, got {}",
                data.get_type()
            )
        })
}

fn render_once(text: &str, data: Value) -> Result<String, String> {
    let call = "template.render";
    let t = Template::parse(call, text.to_owned(), Value::new_none())?;
    t.render(call, data, "default")
}

fn or_fail<T>(r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(anyhow::Error::msg)
}

/// An absent `delims` argument.
fn no_delims(d: NoneOr<Value<'_>>) -> Value<'_> {
    d.into_option().unwrap_or_else(Value::new_none)
}

starlark::globals_static!(FUNCTIONS = template_functions);
starlark::globals_static!(FILE_FUNCTIONS = template_file_functions);

/// `template.text`, `bytes` and `render`, each with its `try_` form
/// ([`crate::script::try_form`]).
pub fn template_namespace(builder: &mut GlobalsBuilder) {
    let tries = ["text", "bytes", "render"];
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &tries);
}

/// `template.file` and its `try_` form.
pub fn template_files(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FILE_FUNCTIONS.globals(), &["file"]);
}

#[starlark_module]
fn template_functions(builder: &mut GlobalsBuilder) {
    /// A template from a string; `delims=("<%", "%>")` replaces `{{` and `}}`.
    fn text<'v>(
        #[starlark(require = pos)] template_str: &str,
        #[starlark(require = named, default = NoneOr::None)] delims: NoneOr<Value<'v>>,
    ) -> anyhow::Result<Template> {
        or_fail(Template::parse(
            "template.text",
            template_str.to_owned(),
            no_delims(delims),
        ))
    }

    /// A template from bytes (or a string).
    fn bytes<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] delims: NoneOr<Value<'v>>,
    ) -> anyhow::Result<Template> {
        let text = or_fail(text_of_bytes("template.bytes", data))?;
        or_fail(Template::parse("template.bytes", text, no_delims(delims)))
    }

    /// `template_str` rendered with `data`, in one call.
    fn render(
        #[starlark(require = pos)] template_str: &str,
        #[starlark(require = pos)] data: Value,
    ) -> anyhow::Result<String> {
        or_fail(render_once(template_str, data))
    }
}

/// `template.file` and `template.try_file`: they read files of this machine, so they
/// belong to the files capability, never to a hosted script's library.
#[starlark_module]
fn template_file_functions(builder: &mut GlobalsBuilder) {
    /// A template read from a file (needs `--allow-fs`).
    fn file<'v>(
        #[starlark(require = pos)] path: &str,
        #[starlark(require = named, default = NoneOr::None)] delims: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Template> {
        let text = or_fail(read_file(eval, "template.file", path))?;
        or_fail(Template::parse("template.file", text, no_delims(delims)))
    }
}
