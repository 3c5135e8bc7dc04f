//! `yaml`: encode and decode YAML (one or many documents), and read or write YAML files
//! under `--allow-fs`, as upstream Starkite's module. Mappings decode to AttrDicts.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::path::{Path, PathBuf};

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::{
    Heap, NoSerialize, StarlarkValue, Value, ValueLike, list::AllocList, starlark_value,
};

use crate::script::builtins::input::{io_message, read_file, text_of};
use crate::script::host::Host;
use crate::script::json::{from_starlark, to_starlark};
use crate::script::outcome::result;
use crate::script::permissions::Access;
use crate::script::yaml::{parse_yaml, to_yaml};

fn decode_one<'v>(heap: Heap<'v>, call: &str, text: &str) -> Result<Value<'v>, String> {
    let docs = parse_yaml(text).map_err(|e| format!("{call}: {e}"))?;
    Ok(docs
        .first()
        .map_or(Value::new_none(), |d| to_starlark(heap, d)))
}

fn decode_many<'v>(heap: Heap<'v>, call: &str, text: &str) -> Result<Value<'v>, String> {
    let docs = parse_yaml(text).map_err(|e| format!("{call}: {e}"))?;
    Ok(heap.alloc(AllocList(docs.iter().map(|d| to_starlark(heap, d)))))
}

fn encode_one(call: &str, value: Value) -> Result<String, String> {
    let json = from_starlark(value).map_err(|e| format!("{call}: {e}"))?;
    to_yaml(&[json]).map_err(|e| format!("{call}: {e}"))
}

fn encode_many(call: &str, values: Value) -> Result<String, String> {
    let list = ListRef::from_value(values).ok_or_else(|| {
        format!(
            "{call}: expects a list of documents, not {}",
            values.get_type()
        )
    })?;
    let docs = list
        .iter()
        .map(from_starlark)
        .collect::<Result<Vec<Json>, _>>()
        .map_err(|e| format!("{call}: {e}"))?;
    to_yaml(&docs).map_err(|e| format!("{call}: {e}"))
}

fn read(call: &str, path: &Path) -> Result<String, String> {
    let path = path.display().to_string();
    String::from_utf8(read_file(call, &path)?)
        .map_err(|_| format!("{call}: {path}: the file is not UTF-8 text"))
}

/// `yaml.file(path)`: a YAML file to decode.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct File(#[allocative(skip)] PathBuf);

starlark::starlark_simple_value!(File);

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<yaml.file {}>", self.0.display())
    }
}

fn file_of(v: Value<'_>) -> anyhow::Result<&File> {
    v.downcast_ref::<File>()
        .ok_or_else(|| anyhow::anyhow!("not a yaml.file"))
}

#[starlark_module]
fn file_methods(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(file_of(this)?.0.display().to_string())
    }

    /// The first (or only) document.
    fn decode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        let text = read("yaml.file.decode", &file_of(this)?.0).map_err(anyhow::Error::msg)?;
        decode_one(heap, "yaml.file.decode", &text).map_err(anyhow::Error::msg)
    }

    /// Every document, as a list.
    fn decode_all<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let text = read("yaml.file.decode_all", &file_of(this)?.0).map_err(anyhow::Error::msg)?;
        decode_many(heap, "yaml.file.decode_all", &text).map_err(anyhow::Error::msg)
    }

    /// `decode()` as a result (`.ok`, `.value`, `.error`).
    fn try_decode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let path = &file_of(this)?.0;
        let outcome =
            read("yaml.file.decode", path).and_then(|t| decode_one(heap, "yaml.file.decode", &t));
        Ok(result(heap, outcome))
    }

    /// `decode_all()` as a result.
    fn try_decode_all<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let path = &file_of(this)?.0;
        let outcome = read("yaml.file.decode_all", path)
            .and_then(|t| decode_many(heap, "yaml.file.decode_all", &t));
        Ok(result(heap, outcome))
    }
}

starlark::methods_static!(FILE_METHODS = file_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "yaml.file")]
impl<'v> StarlarkValue<'v> for File {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }
}

/// `yaml.source(data)`: data to write as YAML. It holds the data as JSON, so the
/// value written is the value given, whatever the script changes afterwards.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Writer(#[allocative(skip)] Json);

starlark::starlark_simple_value!(Writer);

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<yaml.writer>")
    }
}

fn writer_of(v: Value<'_>) -> anyhow::Result<&Writer> {
    v.downcast_ref::<Writer>()
        .ok_or_else(|| anyhow::anyhow!("not a yaml.writer"))
}

fn write_file(eval: &Evaluator<'_, '_, '_>, data: &Json, path: &str) -> Result<(), String> {
    Host::of(eval)
        .and_then(|h| h.allow("yaml.source.write_file", Access::Fs))
        .map_err(|e| e.to_string())?;
    // A list is written as one document per item, as upstream does.
    let docs = match data {
        Json::Array(items) => items.as_slice(),
        other => std::slice::from_ref(other),
    };
    let text = to_yaml(docs).map_err(|e| format!("yaml.source.write_file: {e}"))?;
    std::fs::write(path, text)
        .map_err(|e| format!("yaml.source.write_file: open {path}: {}", io_message(&e)))
}

#[starlark_module]
fn writer_methods(builder: &mut MethodsBuilder) {
    /// The data, as a value.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(to_starlark(heap, &writer_of(this)?.0))
    }

    /// Writes the data to `path` as YAML (needs `--allow-fs`).
    fn write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        write_file(eval, &writer_of(this)?.0, path).map_err(anyhow::Error::msg)?;
        Ok(NoneType)
    }

    /// `write_file(path)` as a result.
    fn try_write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = write_file(eval, &writer_of(this)?.0, path).map(|()| Value::new_none());
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(WRITER_METHODS = writer_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "yaml.writer")]
impl<'v> StarlarkValue<'v> for Writer {
    fn get_methods() -> Option<&'static Methods> {
        Some(WRITER_METHODS.methods())
    }
}

starlark::globals_static!(FUNCTIONS = yaml_functions);
starlark::globals_static!(FILE_FUNCTIONS = yaml_file_functions);

/// `yaml`'s functions, each with its `try_` form ([`crate::script::try_form`]).
pub fn yaml_namespace(builder: &mut GlobalsBuilder) {
    let tries = ["encode", "encode_all", "decode", "decode_all"];
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &tries);
}

/// `yaml.file` and `yaml.source` (the files capability), each with its `try_` form.
pub fn yaml_files(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FILE_FUNCTIONS.globals(), &["file", "source"]);
}

#[starlark_module]
fn yaml_functions(builder: &mut GlobalsBuilder) {
    /// A value as YAML text.
    fn encode(#[starlark(require = pos)] value: Value) -> anyhow::Result<String> {
        encode_one("yaml.encode", value).map_err(anyhow::Error::msg)
    }

    /// A list of values as `---`-separated YAML documents.
    fn encode_all(#[starlark(require = pos)] values: Value) -> anyhow::Result<String> {
        encode_many("yaml.encode_all", values).map_err(anyhow::Error::msg)
    }

    /// The first (or only) document of YAML text (None when there is none).
    fn decode<'v>(
        #[starlark(require = pos)] text: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        text_of("yaml.decode", text)
            .and_then(|t| decode_one(heap, "yaml.decode", t))
            .map_err(anyhow::Error::msg)
    }

    /// Every document of YAML text, as a list.
    fn decode_all<'v>(
        #[starlark(require = pos)] text: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        text_of("yaml.decode_all", text)
            .and_then(|t| decode_many(heap, "yaml.decode_all", t))
            .map_err(anyhow::Error::msg)
    }
}

/// `yaml.file` (reads) and `yaml.source` (whose `write_file` writes): files of this
/// machine, so the files capability, never a hosted script's library.
#[starlark_module]
fn yaml_file_functions(builder: &mut GlobalsBuilder) {
    /// A YAML file to decode (needs `--allow-fs`; read when decoded).
    fn file(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<File> {
        Host::of(eval)?.allow("yaml.file", Access::Fs)?;
        Ok(File(PathBuf::from(path)))
    }

    /// Data to write as YAML with `.write_file(path)`; a list is written as one
    /// document per item.
    fn source(#[starlark(require = pos)] data: Value) -> anyhow::Result<Writer> {
        writer(data).map_err(anyhow::Error::msg)
    }
}

fn writer(data: Value) -> Result<Writer, String> {
    from_starlark(data)
        .map(Writer)
        .map_err(|e| format!("yaml.source: {e}"))
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::{eval, eval_allowing};

    /// Issue 26: many conversions in one call, each small in nodes but large in the
    /// strings they copy, are counted together against the memory budget.
    #[test]
    fn many_documents_repeating_a_large_string_stop_at_the_budget() {
        let code =
            "s = 'x' * 65000\nd = {('k%d' % i): s for i in range(1000)}\nyaml.encode_all([d] * 8)";
        let e = crate::script::memory::guard(64 << 20, || eval(code))
            .unwrap()
            .unwrap_err();
        assert!(e.contains("passed the script's memory limit"), "{e}");
    }

    #[test]
    fn encode_and_decode() {
        assert_eq!(
            eval("yaml.encode({'name': 'myapp', 'replicas': 3})").unwrap(),
            "\"name: myapp\\nreplicas: 3\\n\""
        );
        assert_eq!(
            eval("d = yaml.decode('name: myapp\\nreplicas: 3')\n(d.name, d['replicas'])").unwrap(),
            "(\"myapp\", 3)"
        );
        let text = "yaml.encode_all([{'kind': 'Namespace'}, {'kind': 'ConfigMap'}])";
        assert_eq!(
            eval(&format!("[d.kind for d in yaml.decode_all({text})]")).unwrap(),
            "[\"Namespace\", \"ConfigMap\"]"
        );
        assert_eq!(eval("yaml.decode('')").unwrap(), "None");
    }

    #[test]
    fn errors_name_the_call_and_try_returns_them() {
        let e = eval("yaml.decode('a: [1')").unwrap_err();
        assert!(e.contains("yaml.decode: invalid YAML"), "{e}");
        let e = eval("yaml.encode_all({'a': 1})").unwrap_err();
        assert!(
            e.contains("yaml.encode_all: expects a list of documents, not dict"),
            "{e}"
        );
        assert_eq!(
            eval("r = yaml.try_decode('a: [1')\n(r.ok, r.value, 'invalid YAML' in r.error)")
                .unwrap(),
            "(False, None, True)"
        );
        assert_eq!(
            eval("r = yaml.try_encode([1])\n(r.ok, r.value)").unwrap(),
            "(True, \"- 1\\n\")"
        );
    }

    #[test]
    fn bytes_are_text_too() {
        assert_eq!(eval("yaml.decode(b'a: 1').a").unwrap(), "1");
        assert_eq!(
            eval("len(yaml.decode_all(b'a: 1\\n---\\nb: 2'))").unwrap(),
            "2"
        );
        let e = eval("yaml.decode(42)").unwrap_err();
        assert!(
            e.contains("yaml.decode: argument must be string or bytes, got int"),
            "{e}"
        );
        assert_eq!(
            eval("r = yaml.try_decode_all([1])\n(r.ok, 'string or bytes' in r.error)").unwrap(),
            "(False, True)"
        );
    }

    #[test]
    fn a_list_is_written_as_documents_and_try_forms() {
        let e = eval("yaml.try_file('x.yaml').error").unwrap();
        assert!(e.contains("yaml.file needs --allow-fs"), "{e}");
        let dir = std::env::temp_dir().join(format!("kite-yaml-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("v.yaml");
        let p = p.display();
        let out = eval_allowing(&format!(
            "yaml.try_source([{{'a': 1}}, {{'b': 2}}]).value.write_file('{p}')\nr = yaml.try_file('{p}')\n(r.ok, len(r.value.decode_all()))"
        ))
        .unwrap();
        assert_eq!(out, "(True, 2)");
        assert_eq!(
            std::fs::read_to_string(dir.join("v.yaml")).unwrap(),
            "a: 1\n---\nb: 2\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_need_the_flag_and_round_trip() {
        let e = eval("yaml.file('x.yaml')").unwrap_err();
        assert!(e.contains("yaml.file needs --allow-fs"), "{e}");
        let e = eval("yaml.source({'a': 1}).write_file('x.yaml')").unwrap_err();
        assert!(e.contains("yaml.source.write_file needs --allow-fs"), "{e}");
        let dir = std::env::temp_dir().join(format!("kite-yaml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("v.yaml");
        let p = p.display();
        let out = eval_allowing(&format!(
            "w = yaml.source({{'image': {{'tag': 'v1'}}}})\nw.write_file('{p}')\nf = yaml.file('{p}')\nc = f.decode()\n(c.image.tag, f.path == '{p}', w.data.image.tag)"
        ))
        .unwrap();
        assert_eq!(out, "(\"v1\", True, \"v1\")");
        let out = eval_allowing(&format!(
            "r = yaml.file('{p}.missing').try_decode_all()\n(r.ok, 'yaml.file.decode_all' in r.error)"
        ))
        .unwrap();
        assert_eq!(out, "(False, True)");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
