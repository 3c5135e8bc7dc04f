//! `csv`: upstream Starkite's CSV module: `csv.file(path).read(...)` parses a file into
//! rows (lists, or dicts by the header row), `csv.source(rows).write_file(path, ...)`
//! writes one. Both touch files, so both need `--allow-fs`.
//!
//! # Caveats
//! Files are read whole, up to the `fs` module's read cap. `headers=` also heads a file
//! written from lists (upstream's code ignores it there, its documentation does not).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_complex_value;
use starlark::starlark_module;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::tuple::TupleRef;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

use super::archive::{Output, local, path_arg};
use crate::script::outcome::result;

/// Counts `bytes` of work against the call's budgets (`budget::walk_step`).
fn step(call: &str, bytes: usize) -> Result<(), String> {
    match crate::script::budget::walk_step(bytes) {
        Some(why) => Err(format!("{call}: stopped: {why}")),
        None => Ok(()),
    }
}

/// The one-byte separator or comment character a script gave.
fn one_byte(call: &str, what: &str, s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [b] if b.is_ascii() && *b != b'"' && *b != b'\n' && *b != b'\r' => Ok(*b),
        _ => Err(format!(
            "{call}: {what} must be one ASCII character (not a quote or newline), got {s:?}"
        )),
    }
}

/// `csv.file(path)`: a CSV file to read.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct CsvFile(String);

starlark::starlark_simple_value!(CsvFile);

impl fmt::Display for CsvFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "csv.file({:?})", self.0)
    }
}

/// How `read` parses.
struct ReadOptions<'a> {
    sep: &'a str,
    comment: &'a str,
    skip: i32,
    header: bool,
}

fn read<'v>(
    eval: &Evaluator<'v, '_, '_>,
    path: &str,
    o: &ReadOptions<'_>,
) -> Result<Value<'v>, String> {
    const CALL: &str = "csv.file.read";
    let sep = one_byte(CALL, "sep", o.sep)?;
    let comment = (!o.comment.is_empty())
        .then(|| one_byte(CALL, "comment", o.comment))
        .transpose()?;
    let skip = usize::try_from(o.skip)
        .map_err(|_| format!("{CALL}: skip must not be negative, got {}", o.skip))?;
    let full = local(eval, CALL, path)?;
    let data = super::fs::read(CALL, &full).map_err(|e| e.to_string())?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(sep)
        .comment(comment)
        .from_reader(data.as_slice());
    let mut rows: Vec<Vec<String>> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| format!("{CALL}: {}: {e}", full.display()))?;
        step(CALL, record.as_slice().len() + 64 * record.len())?;
        rows.push(record.iter().map(str::to_owned).collect());
    }
    let rows = rows.get(skip..).unwrap_or_default();
    let heap = eval.heap();
    if !o.header {
        return Ok(heap.alloc(AllocList(
            rows.iter()
                .map(|r| heap.alloc(AllocList(r.iter().map(String::as_str)))),
        )));
    }
    let Some((headers, records)) = rows.split_first() else {
        return Ok(heap.alloc(AllocList::EMPTY));
    };
    Ok(heap.alloc(AllocList(records.iter().map(|r| {
        heap.alloc(AllocDict(
            headers
                .iter()
                .enumerate()
                .map(|(i, h)| (h.as_str(), r.get(i).map_or("", String::as_str))),
        ))
    }))))
}

fn file_of(v: Value<'_>) -> anyhow::Result<&str> {
    v.downcast_ref::<CsvFile>()
        .map(|f| f.0.as_str())
        .ok_or_else(|| anyhow::anyhow!("not a csv.file"))
}

#[starlark_module]
fn file_methods(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(file_of(this)?.to_owned())
    }

    /// The rows, each a list of strings; with `header=True`, dicts keyed by the first
    /// row. `sep` separates fields, lines starting with `comment` are skipped, and so
    /// are the first `skip` rows. Needs `--allow-fs`.
    fn read<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = ",")] sep: &str,
        #[starlark(require = named, default = "")] comment: &str,
        #[starlark(require = named, default = 0)] skip: i32,
        #[starlark(require = named, default = false)] header: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let o = ReadOptions {
            sep,
            comment,
            skip,
            header,
        };
        read(eval, file_of(this)?, &o).map_err(anyhow::Error::msg)
    }

    /// `read(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_read<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = ",")] sep: &str,
        #[starlark(require = named, default = "")] comment: &str,
        #[starlark(require = named, default = 0)] skip: i32,
        #[starlark(require = named, default = false)] header: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let o = ReadOptions {
            sep,
            comment,
            skip,
            header,
        };
        let outcome = read(eval, file_of(this)?, &o);
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(FILE_METHODS = file_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "csv.file")]
impl<'v> StarlarkValue<'v> for CsvFile {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

/// `csv.source(rows)`: a list of rows (lists, or dicts) to write. It holds the list
/// itself, so what is written is the list as it is when written.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, NoSerialize, Allocative)]
#[repr(C)]
pub struct WriterGen<V: ValueLifetimeless> {
    data: V,
}

starlark_complex_value!(pub Writer);

impl<'v, V: ValueLike<'v>> fmt::Display for WriterGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = ListRef::from_value(self.data.to_value()).map_or(0, |l| l.len());
        write!(f, "csv.writer({rows} rows)")
    }
}

/// A cell's text: a string as it is, anything else as `str()`.
fn cell(v: Value<'_>) -> String {
    v.unpack_str().map_or_else(|| v.to_str(), str::to_owned)
}

/// The items of a list or tuple row.
fn sequence(v: Value<'_>) -> Option<Vec<Value<'_>>> {
    ListRef::from_value(v)
        .map(|l| l.content().to_vec())
        .or_else(|| TupleRef::from_value(v).map(|t| t.content().to_vec()))
}

/// The records to write: a header row (given, or the first dict's keys) when the rows
/// are dicts, then every row.
fn records(
    call: &str,
    data: Value<'_>,
    headers: NoneOr<Value<'_>>,
) -> Result<Vec<Vec<String>>, String> {
    let rows = ListRef::from_value(data)
        .ok_or_else(|| format!("{call}: data must be a list, got {}", data.get_type()))?;
    let mut headers: Option<Vec<String>> = match headers.into_option() {
        None => None,
        Some(h) => Some(
            sequence(h)
                .ok_or_else(|| format!("{call}: headers must be a list, got {}", h.get_type()))?
                .into_iter()
                .map(cell)
                .collect(),
        ),
    };
    let Some(first) = rows.iter().next() else {
        return Ok(Vec::new());
    };
    let dicts = DictRef::from_value(first).is_some();
    if dicts && headers.as_ref().is_none_or(Vec::is_empty) {
        let d = DictRef::from_value(first).ok_or("unreachable")?;
        headers = Some(d.keys().map(cell).collect());
    }
    let mut out: Vec<Vec<String>> = headers.iter().filter(|h| !h.is_empty()).cloned().collect();
    for row in rows.iter() {
        let record: Vec<String> = if dicts {
            let d = DictRef::from_value(row)
                .ok_or_else(|| format!("{call}: expected dict, got {}", row.get_type()))?;
            let headers = headers.as_deref().unwrap_or_default();
            headers
                .iter()
                .map(|h| d.get_str(h).map_or_else(String::new, cell))
                .collect()
        } else {
            sequence(row)
                .ok_or_else(|| format!("{call}: expected list of lists, got {}", row.get_type()))?
                .into_iter()
                .map(cell)
                .collect()
        };
        step(
            call,
            record.iter().map(String::len).sum::<usize>() + 64 * record.len(),
        )?;
        out.push(record);
    }
    Ok(out)
}

fn write_file(
    eval: &Evaluator<'_, '_, '_>,
    data: Value<'_>,
    path: Value<'_>,
    sep: &str,
    headers: NoneOr<Value<'_>>,
) -> Result<(), String> {
    const CALL: &str = "csv.writer.write_file";
    let sep = one_byte(CALL, "sep", sep)?;
    let path = path_arg(CALL, path)?;
    let full = local(eval, CALL, &path)?;
    let records = records(CALL, data, headers)?;
    let mut out = Output::create(CALL, &full)?;
    let mut writer = csv::WriterBuilder::new()
        .delimiter(sep)
        .flexible(true)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(std::io::BufWriter::new(out.file()?));
    for r in &records {
        writer
            .write_record(r)
            .map_err(|e| format!("{CALL}: {}: {e}", full.display()))?;
    }
    writer
        .flush()
        .map_err(|e| format!("{CALL}: {}: {e}", full.display()))?;
    drop(writer);
    out.done(CALL)
}

fn writer_data(v: Value<'_>) -> anyhow::Result<Value<'_>> {
    Writer::from_value(v)
        .map(|w| w.data)
        .ok_or_else(|| anyhow::anyhow!("not a csv.writer"))
}

#[starlark_module]
fn writer_methods(builder: &mut MethodsBuilder) {
    /// The rows, the list `csv.source` was given.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>) -> anyhow::Result<Value<'v>> {
        writer_data(this)
    }

    /// Writes the rows to `path` (needs `--allow-fs`), fields separated by `sep`.
    /// Rows of dicts get a header row: `headers`, or the first dict's keys, which also
    /// pick and order the columns. Rows of lists are written as they are, after
    /// `headers` when given.
    fn write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: Value<'v>,
        #[starlark(require = named, default = ",")] sep: &str,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        write_file(eval, writer_data(this)?, path, sep, headers).map_err(anyhow::Error::msg)?;
        Ok(NoneType)
    }

    /// `write_file(path, ...)` as a result (`.ok`, `.value`, `.error`).
    fn try_write_file<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: Value<'v>,
        #[starlark(require = named, default = ",")] sep: &str,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome =
            write_file(eval, writer_data(this)?, path, sep, headers).map(|()| Value::new_none());
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(WRITER_METHODS = writer_methods);

#[starlark_value(type = "csv.writer")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for WriterGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn get_methods() -> Option<&'static Methods> {
        Some(WRITER_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        ListRef::from_value(self.data.to_value()).is_some_and(|l| !l.is_empty())
    }
}

/// `csv.source(data)`: the list, or why it is not one.
fn source<'v>(heap: Heap<'v>, data: Value<'v>) -> Result<Value<'v>, String> {
    if ListRef::from_value(data).is_none() {
        return Err(format!(
            "csv.source: data must be a list, got {}",
            data.get_type()
        ));
    }
    Ok(heap.alloc_complex(Writer { data }))
}

starlark::globals_static!(FUNCTIONS = csv_functions);

/// `csv.file` and `csv.source`, each with its `try_` form ([`crate::script::try_form`]).
pub fn csv_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &["file", "source"]);
}

#[starlark_module]
fn csv_functions(builder: &mut GlobalsBuilder) {
    /// The CSV file at `path`, to `read()` (nothing is read until then).
    fn file(#[starlark(require = pos)] path: Value) -> anyhow::Result<CsvFile> {
        path_arg("csv.file", path)
            .map(CsvFile)
            .map_err(anyhow::Error::msg)
    }

    /// Rows to `write_file(path)`: a list of lists, or of dicts.
    fn source<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        source(heap, data).map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
#[path = "csv_tests.rs"]
mod tests;
