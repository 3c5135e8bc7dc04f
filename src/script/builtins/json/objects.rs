//! `json.file(path)` (`.decode()`) and `json.source(data)` (`.encode()`,
//! `.write_file(path)`), as upstream Starkite's. Both touch this machine's files, so
//! they are in the files capability (behind `--allow-fs`), never a hosted script's.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use serde::Serialize;
use serde_json::Value as Json;
use serde_json::ser::{PrettyFormatter, Serializer};
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneType;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::builtins::input::{io_message, read_file};
use crate::script::host::Host;
use crate::script::json::{from_starlark, to_starlark};
use crate::script::outcome::result;
use crate::script::permissions::Access;

/// `json.file(path)`: a JSON file to decode, read when decoded.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct File(String);

starlark::starlark_simple_value!(File);

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "json.file({:?})", self.0)
    }
}

fn file_of(v: Value<'_>) -> anyhow::Result<&str> {
    v.downcast_ref::<File>()
        .map(|f| f.0.as_str())
        .ok_or_else(|| anyhow::anyhow!("not a json.file"))
}

fn decode_file<'v>(heap: Heap<'v>, path: &str) -> Result<Value<'v>, String> {
    let call = "json.file.decode";
    let bytes = read_file(call, path)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| format!("{call}: {path}: the file is not UTF-8 text: {e}"))?;
    Ok(to_starlark(heap, &super::parse(call, text)?))
}

#[starlark_module]
fn file_methods(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(file_of(this)?.to_owned())
    }

    /// The file's JSON value; objects become AttrDicts.
    fn decode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        decode_file(heap, file_of(this)?).map_err(anyhow::Error::msg)
    }

    /// `decode()` as a result (`.ok`, `.value`, `.error`).
    fn try_decode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(result(heap, decode_file(heap, file_of(this)?)))
    }
}

starlark::methods_static!(FILE_METHODS = file_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "json.file")]
impl<'v> StarlarkValue<'v> for File {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

/// `json.source(data)`: data to encode or write as JSON. It holds the data as JSON, so
/// what is written is the value given, whatever the script changes afterwards.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Writer(#[allocative(skip)] Json);

starlark::starlark_simple_value!(Writer);

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "json.writer")
    }
}

fn writer_of(v: Value<'_>) -> anyhow::Result<&Json> {
    v.downcast_ref::<Writer>()
        .map(|w| &w.0)
        .ok_or_else(|| anyhow::anyhow!("not a json.writer"))
}

/// `data` as JSON text: compact, or (with an `indent`) one element a line, each line
/// after the first starting with `prefix`, as Go's `MarshalIndent`.
fn render(call: &str, data: &Json, indent: &str, prefix: &str) -> Result<String, String> {
    if indent.is_empty() {
        return serde_json::to_string(data).map_err(|e| format!("{call}: {e}"));
    }
    let mut out = Vec::new();
    let mut ser =
        Serializer::with_formatter(&mut out, PrettyFormatter::with_indent(indent.as_bytes()));
    data.serialize(&mut ser)
        .map_err(|e| format!("{call}: {e}"))?;
    let text = String::from_utf8(out).map_err(|e| format!("{call}: {e}"))?;
    // JSON text has no raw line breaks inside strings, so each one starts an element.
    Ok(if prefix.is_empty() {
        text
    } else {
        text.replace('\n', &format!("\n{prefix}"))
    })
}

fn write_file(
    eval: &Evaluator<'_, '_, '_>,
    data: &Json,
    path: &str,
    indent: &str,
    prefix: &str,
) -> Result<(), String> {
    let call = "json.writer.write_file";
    Host::of(eval)
        .and_then(|h| h.allow(call, Access::Fs))
        .map_err(|e| e.to_string())?;
    let mut text = render(call, data, indent, prefix)?;
    // Pretty output ends with a line break, as upstream's does.
    if !indent.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("{call}: open {path}: {}", io_message(&e)))
}

#[starlark_module]
fn writer_methods(builder: &mut MethodsBuilder) {
    /// The data, as a value.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(to_starlark(heap, writer_of(this)?))
    }

    /// The data as JSON text; `indent` (e.g. `"  "`) pretty-prints, `prefix` starts
    /// each line after the first.
    fn encode(
        #[starlark(this)] this: Value,
        #[starlark(require = named, default = "")] indent: &str,
        #[starlark(require = named, default = "")] prefix: &str,
    ) -> anyhow::Result<String> {
        render("json.writer.encode", writer_of(this)?, indent, prefix).map_err(anyhow::Error::msg)
    }

    /// Writes the data to `path` as JSON (needs `--allow-fs`); `indent` and `prefix` as
    /// for `encode`.
    fn write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: &str,
        #[starlark(require = named, default = "")] indent: &str,
        #[starlark(require = named, default = "")] prefix: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        write_file(eval, writer_of(this)?, path, indent, prefix).map_err(anyhow::Error::msg)?;
        Ok(NoneType)
    }

    /// `encode(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_encode<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] indent: &str,
        #[starlark(require = named, default = "")] prefix: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome =
            render("json.writer.encode", writer_of(this)?, indent, prefix).map(|s| heap.alloc(s));
        Ok(result(heap, outcome))
    }

    /// `write_file(...)` as a result.
    fn try_write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: &str,
        #[starlark(require = named, default = "")] indent: &str,
        #[starlark(require = named, default = "")] prefix: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome =
            write_file(eval, writer_of(this)?, path, indent, prefix).map(|()| Value::new_none());
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(WRITER_METHODS = writer_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "json.writer")]
impl<'v> StarlarkValue<'v> for Writer {
    fn get_methods() -> Option<&'static Methods> {
        Some(WRITER_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_null()
    }
}

fn file_at(eval: &Evaluator<'_, '_, '_>, path: &str) -> Result<File, String> {
    Host::of(eval)
        .and_then(|h| h.allow("json.file", Access::Fs))
        .map_err(|e| e.to_string())?;
    Ok(File(path.to_owned()))
}

fn source_of(data: Value) -> Result<Writer, String> {
    from_starlark(data)
        .map(Writer)
        .map_err(|e| format!("json.source: {e}"))
}

/// `json.file`, `json.source` and their `try_` forms: the files capability
/// (`crate::script::library::Capability::Files`), never a hosted script's library.
#[starlark_module]
pub fn json_files(builder: &mut GlobalsBuilder) {
    /// A JSON file to decode with `.decode()` (needs `--allow-fs`; read when decoded).
    fn file(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<File> {
        file_at(eval, path).map_err(anyhow::Error::msg)
    }

    /// Data to encode with `.encode()` or write with `.write_file(path)`.
    fn source(#[starlark(require = pos)] data: Value) -> anyhow::Result<Writer> {
        source_of(data).map_err(anyhow::Error::msg)
    }

    /// `file(path)` as a result (`.ok`, `.value`, `.error`).
    fn try_file<'v>(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = file_at(eval, path).map(|f| eval.heap().alloc(f));
        Ok(result(eval.heap(), outcome))
    }

    /// `source(data)` as a result.
    fn try_source<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(result(heap, source_of(data).map(|w| heap.alloc(w))))
    }
}
