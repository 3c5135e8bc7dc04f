//! `gzip`: upstream Starkite's gzip module: `gzip.text(s)` / `gzip.bytes(b)` sources to
//! compress or decompress in memory (or into a file), and `gzip.file(path)` for
//! file-to-file work.
//!
//! # Caveats
//! Level -2 (Go's Huffman-only) compresses as level 1: flate2 has no Huffman-only mode;
//! the output is valid gzip either way.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::io::{BufReader, BufWriter, Write};

use allocative::Allocative;
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::{INFLATE_CAP, Output, copy_bounded, data_arg, local, open, path_arg};
use crate::script::outcome::result;

/// `gzip.text(s)` or `gzip.bytes(b)`: data to compress or decompress.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Source(Vec<u8>);

starlark::starlark_simple_value!(Source);

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gzip.source({} bytes)", self.0.len())
    }
}

/// `gzip.file(path)`: a `.gz` file, compressed from or decompressed to another file.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct GzFile(String);

starlark::starlark_simple_value!(GzFile);

impl fmt::Display for GzFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gzip.file({:?})", self.0)
    }
}

/// Go's levels: -1 the default, 0 none, 1..9 fastest to smallest, -2 Huffman-only.
fn level(call: &str, n: i32) -> Result<Compression, String> {
    match n {
        -1 => Ok(Compression::default()),
        -2 => Ok(Compression::fast()),
        0..=9 => Ok(Compression::new(n.unsigned_abs())),
        _ => Err(format!(
            "{call}: invalid compression level {n} (must be -2 to 9)"
        )),
    }
}

/// `data` gzip-compressed.
fn compress(call: &str, data: &[u8], lvl: Compression) -> Result<Vec<u8>, String> {
    let mut enc = GzEncoder::new(Vec::new(), lvl);
    copy_bounded(call, &mut &data[..], &mut enc, None)?;
    enc.finish().map_err(|e| format!("{call}: {e}"))
}

/// Decompresses all of `from` (gzip, one member or several) into `to`, up to
/// [`INFLATE_CAP`].
pub(super) fn decompress_into(
    call: &str,
    from: impl std::io::Read,
    to: &mut impl Write,
) -> Result<(), String> {
    let mut from = std::io::BufReader::new(from);
    // Go's reader fails on no data at all (flate2 would read it as nothing), and says
    // "invalid header" for anything that does not start as gzip does.
    let start = std::io::BufRead::fill_buf(&mut from).map_err(|e| format!("{call}: {e}"))?;
    match start {
        [] => return Err(format!("{call}: no gzip data (empty input)")),
        [a, ..] if *a != 0x1f => return Err(format!("{call}: invalid gzip header")),
        [_, b, ..] if *b != 0x8b => return Err(format!("{call}: invalid gzip header")),
        _ => {}
    }
    copy_bounded(call, &mut MultiGzDecoder::new(from), to, Some(INFLATE_CAP)).map(|_| ())
}

/// `dest` as given, None for None or "" (upstream's "not given").
fn dest_of(call: &str, dest: NoneOr<Value<'_>>) -> Result<Option<String>, String> {
    match dest.into_option() {
        None => Ok(None),
        Some(v) => Ok(Some(path_arg(call, v)?).filter(|s| !s.is_empty())),
    }
}

/// Writes `data` to `path` (needs `--allow-fs`).
fn write_to(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    path: &str,
    data: &[u8],
) -> Result<(), String> {
    let full = local(eval, call, path)?;
    let mut out = Output::create(call, &full)?;
    copy_bounded(call, &mut &data[..], out.file()?, None)?;
    out.done(call)
}

fn source_compress<'v>(
    eval: &Evaluator<'v, '_, '_>,
    data: &[u8],
    dest: NoneOr<Value<'v>>,
    lvl: i32,
) -> Result<Value<'v>, String> {
    const CALL: &str = "gzip.compress";
    let lvl = level(CALL, lvl)?;
    let dest = dest_of(CALL, dest)?;
    let packed = compress(CALL, data, lvl)?;
    match dest {
        Some(path) => write_to(eval, CALL, &path, &packed).map(|()| Value::new_none()),
        None => Ok(eval.heap().alloc(packed)),
    }
}

fn source_decompress<'v>(
    eval: &Evaluator<'v, '_, '_>,
    data: &[u8],
    dest: NoneOr<Value<'v>>,
) -> Result<Value<'v>, String> {
    const CALL: &str = "gzip.decompress";
    let Some(path) = dest_of(CALL, dest)? else {
        let mut out = Vec::new();
        decompress_into(CALL, data, &mut out)?;
        return Ok(eval.heap().alloc(out));
    };
    let full = local(eval, CALL, &path)?;
    let mut out = Output::create(CALL, &full)?;
    let mut w = BufWriter::new(out.file()?);
    decompress_into(CALL, data, &mut w)?;
    w.flush().map_err(|e| format!("{CALL}: {e}"))?;
    drop(w);
    out.done(CALL)?;
    Ok(Value::new_none())
}

/// Compresses the file `source` into the `.gz` file `path`.
fn file_compress(
    eval: &Evaluator<'_, '_, '_>,
    path: &str,
    source: Value<'_>,
    lvl: i32,
) -> Result<(), String> {
    const CALL: &str = "gzip.file.compress";
    let lvl = level(CALL, lvl)?;
    let source = path_arg(CALL, source)?;
    let src_path = local(eval, CALL, &source)?;
    let dst_path = local(eval, CALL, path)?;
    let src = open(CALL, &src_path)?;
    let mut out = Output::create(CALL, &dst_path)?;
    let mut enc = GzEncoder::new(BufWriter::new(out.file()?), lvl);
    let named = format!("{CALL}: {}", src_path.display());
    copy_bounded(&named, &mut BufReader::new(src), &mut enc, None)?;
    enc.finish()
        .and_then(|mut w| w.flush())
        .map_err(|e| format!("{CALL}: {}: {e}", dst_path.display()))?;
    out.done(CALL)
}

/// Decompresses the `.gz` file `path` into `dest` (by default, `path` without `.gz`).
fn file_decompress<'v>(
    eval: &Evaluator<'v, '_, '_>,
    path: &str,
    dest: NoneOr<Value<'v>>,
) -> Result<(), String> {
    const CALL: &str = "gzip.file.decompress";
    let dest = match dest_of(CALL, dest)? {
        Some(d) => d,
        None => path
            .strip_suffix(".gz")
            .filter(|stem| !stem.is_empty() && !stem.ends_with('/'))
            .map(str::to_owned)
            .ok_or_else(|| {
                format!(
                    "{CALL}: cannot derive output path (no .gz suffix); specify destination explicitly"
                )
            })?,
    };
    let src_path = local(eval, CALL, path)?;
    let dst_path = local(eval, CALL, &dest)?;
    let src = open(CALL, &src_path)?;
    let mut out = Output::create(CALL, &dst_path)?;
    let mut w = BufWriter::new(out.file()?);
    decompress_into(&format!("{CALL}: {}", src_path.display()), src, &mut w)?;
    w.flush()
        .map_err(|e| format!("{CALL}: {}: {e}", dst_path.display()))?;
    drop(w);
    out.done(CALL)
}

fn source_of(v: Value<'_>) -> anyhow::Result<&Source> {
    v.downcast_ref::<Source>()
        .ok_or_else(|| anyhow::anyhow!("not a gzip.source"))
}

fn file_of(v: Value<'_>) -> anyhow::Result<&GzFile> {
    v.downcast_ref::<GzFile>()
        .ok_or_else(|| anyhow::anyhow!("not a gzip.file"))
}

fn none<'v>(r: Result<(), String>) -> Result<Value<'v>, String> {
    r.map(|()| Value::new_none())
}

#[starlark_module]
fn source_methods(builder: &mut MethodsBuilder) {
    /// The data, as bytes.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(source_of(this)?.0.as_slice()))
    }

    /// The data gzip-compressed, as bytes; or written to `dest` (needs `--allow-fs`),
    /// returning None. `level`: -1 (default), 0 (none) to 9 (smallest), -2.
    fn compress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        source_compress(eval, &source_of(this)?.0, dest, level).map_err(anyhow::Error::msg)
    }

    /// The data decompressed, as bytes; or written to `dest` (needs `--allow-fs`),
    /// returning None. Fails past 256 MiB of output.
    fn decompress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        source_decompress(eval, &source_of(this)?.0, dest).map_err(anyhow::Error::msg)
    }

    /// `compress(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_compress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = source_compress(eval, &source_of(this)?.0, dest, level);
        Ok(result(eval.heap(), outcome))
    }

    /// `decompress(...)` as a result.
    fn try_decompress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = source_decompress(eval, &source_of(this)?.0, dest);
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(SOURCE_METHODS = source_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "gzip.source")]
impl<'v> StarlarkValue<'v> for Source {
    fn get_methods() -> Option<&'static Methods> {
        Some(SOURCE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

#[starlark_module]
fn file_methods(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(file_of(this)?.0.clone())
    }

    /// Compresses the file `source` into this file (both need `--allow-fs`). `level`
    /// as `gzip.text(...).compress`.
    fn compress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        none(file_compress(eval, &file_of(this)?.0, source, level)).map_err(anyhow::Error::msg)
    }

    /// Decompresses this file into `dest` (default: this path without `.gz`; needs
    /// `--allow-fs`). Fails past 256 MiB of output, leaving no file behind.
    fn decompress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        none(file_decompress(eval, &file_of(this)?.0, dest)).map_err(anyhow::Error::msg)
    }

    /// `compress(source, ...)` as a result (`.ok`, `.value`, `.error`).
    fn try_compress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = none(file_compress(eval, &file_of(this)?.0, source, level));
        Ok(result(eval.heap(), outcome))
    }

    /// `decompress(...)` as a result.
    fn try_decompress<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] dest: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = none(file_decompress(eval, &file_of(this)?.0, dest));
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(FILE_METHODS = file_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "gzip.file")]
impl<'v> StarlarkValue<'v> for GzFile {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

fn ok<'v, T: starlark::values::AllocValue<'v>>(
    heap: Heap<'v>,
    made: Result<T, String>,
) -> Value<'v> {
    result(heap, made.map(|v| heap.alloc(v)))
}

#[starlark_module]
pub fn gzip_namespace(builder: &mut GlobalsBuilder) {
    /// A `.gz` file at `path`, to `compress(source)` into or `decompress()` from.
    fn file(#[starlark(require = pos)] path: Value) -> anyhow::Result<GzFile> {
        path_arg("gzip.file", path)
            .map(GzFile)
            .map_err(anyhow::Error::msg)
    }

    /// A source of the UTF-8 bytes of `s`.
    fn text(#[starlark(require = pos)] s: &str) -> anyhow::Result<Source> {
        Ok(Source(s.as_bytes().to_vec()))
    }

    /// A source of bytes (or a string's bytes, or a list of integers 0..255).
    fn bytes(#[starlark(require = pos)] data: Value) -> anyhow::Result<Source> {
        data_arg("gzip.bytes", data)
            .map(Source)
            .map_err(anyhow::Error::msg)
    }

    /// `file(path)` as a result (`.ok`, `.value`, `.error`).
    fn try_file<'v>(
        #[starlark(require = pos)] path: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, path_arg("gzip.file", path).map(GzFile)))
    }

    /// `text(s)` as a result.
    fn try_text<'v>(
        #[starlark(require = pos)] s: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, Ok(Source(s.as_bytes().to_vec()))))
    }

    /// `bytes(data)` as a result.
    fn try_bytes<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, data_arg("gzip.bytes", data).map(Source)))
    }
}
