//! `zip`: upstream Starkite's zip module: `zip.file(path)` is an archive whose methods
//! open it, do one thing (list, read entries, write files into it) and close it.
//!
//! # Caveats
//! Entries are read into values, never extracted to disk, so hostile entry names
//! (`../x`, `/etc/x`) are only names. Reading stops past `INFLATE_CAP` of entry data in
//! one call, and archives of more than [`MAX_ENTRIES`] entries are refused. Entries are
//! written stored (level 0) or deflated, dated 1980-01-01 (Go dates them now).
//! A `base_dir` that a file is not under leaves that file's name whole, where Go would
//! write a `../` name.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::AllocDict;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::none::NoneOr;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::{INFLATE_CAP, Output, copy_bounded, local, open, path_arg};
use crate::script::builtins::fs::{Path, glob};
use crate::script::outcome::result;

/// The most entries an archive may list for kite to open it.
pub const MAX_ENTRIES: usize = 100_000;

/// `zip.file(path)`: a zip archive on disk.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Archive(String);

starlark::starlark_simple_value!(Archive);

impl fmt::Display for Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "zip.file({:?})", self.0)
    }
}

/// Go's `filepath.Match` of `pattern` against an entry name: `*` and `?` stay within
/// one path segment. Upstream also tries the name's last segment alone.
fn matches(pattern: &str, name: &str) -> bool {
    let whole = || {
        let p: Vec<&str> = pattern.split('/').collect();
        let n: Vec<&str> = name.split('/').collect();
        p.len() == n.len() && p.iter().zip(&n).all(|(p, n)| glob::match_name(p, n))
    };
    let base = name
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(name);
    whole() || glob::match_name(pattern, base)
}

type Reader = ZipArchive<BufReader<File>>;

fn open_archive(eval: &Evaluator<'_, '_, '_>, call: &str, path: &str) -> Result<Reader, String> {
    let full = local(eval, call, path)?;
    let file = open(call, &full)?;
    let archive = ZipArchive::new(BufReader::new(file))
        .map_err(|e| format!("{call}: {}: {e}", full.display()))?;
    if archive.len() > MAX_ENTRIES {
        return Err(format!(
            "{call}: {}: more than kite's limit of {MAX_ENTRIES} entries",
            full.display()
        ));
    }
    Ok(archive)
}

/// The names of the entries, in the archive's order.
fn names(call: &str, archive: &Reader) -> Result<Vec<String>, String> {
    archive
        .file_names()
        .map(|n| {
            n.map(std::borrow::Cow::into_owned)
                .map_err(|e| format!("{call}: {e}"))
        })
        .collect()
}

/// Reads entry `index` whole, up to `left` bytes (what remains of the call's cap).
fn entry(
    call: &str,
    archive: &mut Reader,
    index: usize,
    left: &mut u64,
) -> Result<Vec<u8>, String> {
    let mut file = archive
        .by_index(index)
        .map_err(|e| format!("{call}: {e}"))?;
    let mut out = Vec::new();
    let n = copy_bounded(
        call,
        &mut std::io::Read::take(&mut file, *left + 1),
        &mut out,
        None,
    )?;
    if n > *left {
        return Err(format!(
            "{call}: the entries decompress to more than kite's {} MiB limit",
            INFLATE_CAP >> 20
        ));
    }
    *left -= n;
    Ok(out)
}

/// The list-of-strings argument `files`, or None when not given or empty.
fn string_list(call: &str, what: &str, v: NoneOr<Value<'_>>) -> Result<Vec<String>, String> {
    let Some(v) = v.into_option() else {
        return Ok(Vec::new());
    };
    let list = ListRef::from_value(v).ok_or_else(|| {
        format!(
            "{call}: {what} must be a list of strings, not {}",
            v.get_type()
        )
    })?;
    list.iter()
        .map(|item| {
            Path::arg(call, item).map(|p| p.0).map_err(|_| {
                format!(
                    "{call}: {what} must be a list of strings, not {}",
                    item.get_type()
                )
            })
        })
        .collect()
}

fn namelist<'v>(
    eval: &Evaluator<'v, '_, '_>,
    path: &str,
    pattern: &str,
) -> Result<Value<'v>, String> {
    const CALL: &str = "zip.namelist";
    let archive = open_archive(eval, CALL, path)?;
    let names = names(CALL, &archive)?;
    let heap = eval.heap();
    Ok(heap.alloc(AllocList(
        names
            .into_iter()
            .filter(|n| pattern.is_empty() || matches(pattern, n)),
    )))
}

fn read<'v>(eval: &Evaluator<'v, '_, '_>, path: &str, name: &str) -> Result<Value<'v>, String> {
    const CALL: &str = "zip.read";
    let mut archive = open_archive(eval, CALL, path)?;
    let index = names(CALL, &archive)?
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| format!("{CALL}: file {name:?} not found in archive"))?;
    let data = entry(CALL, &mut archive, index, &mut { INFLATE_CAP })?;
    Ok(eval.heap().alloc(data))
}

fn read_all<'v>(
    eval: &Evaluator<'v, '_, '_>,
    path: &str,
    pattern: &str,
    files: NoneOr<Value<'v>>,
) -> Result<Value<'v>, String> {
    const CALL: &str = "zip.read_all";
    let files = string_list(CALL, "files", files)?;
    if !pattern.is_empty() && !files.is_empty() {
        return Err(format!("{CALL}: match and files are mutually exclusive"));
    }
    let wanted: BTreeSet<String> = files.into_iter().collect();
    let mut archive = open_archive(eval, CALL, path)?;
    let mut left = INFLATE_CAP;
    let mut out = Vec::new();
    for (index, name) in names(CALL, &archive)?.into_iter().enumerate() {
        let skip = name.ends_with('/')
            || (!pattern.is_empty() && !matches(pattern, &name))
            || (!wanted.is_empty() && !wanted.contains(&name));
        if skip {
            continue;
        }
        let data = entry(CALL, &mut archive, index, &mut left)?;
        out.push((name, data));
    }
    let heap = eval.heap();
    Ok(heap.alloc(AllocDict(
        out.into_iter().map(|(name, data)| (name, heap.alloc(data))),
    )))
}

/// Go's deflate levels: -1 the default, 0 stored, 1..9; -2 (Huffman-only) as 1.
fn options(call: &str, level: i32) -> Result<SimpleFileOptions, String> {
    let base = SimpleFileOptions::default();
    match level {
        -1 => Ok(base.compression_method(CompressionMethod::Deflated)),
        0 => Ok(base.compression_method(CompressionMethod::Stored)),
        -2 | 1..=9 => Ok(base
            .compression_method(CompressionMethod::Deflated)
            .compression_level(Some(i64::from(level.max(1))))),
        _ => Err(format!(
            "{call}: invalid compression level {level} (must be -2 to 9)"
        )),
    }
}

/// Writes a new archive at `path` holding each `(entry name, source file)`.
fn write_entries(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    path: &str,
    entries: &[(String, String)],
    opts: SimpleFileOptions,
) -> Result<(), String> {
    let dst = local(eval, call, path)?;
    let sources = entries
        .iter()
        .map(|(_, source)| local(eval, call, source))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Output::create(call, &dst)?;
    let mut zip = ZipWriter::new(BufWriter::new(out.file()?));
    for ((name, _), source) in entries.iter().zip(&sources) {
        let file = open(call, source)?;
        let large = file
            .metadata()
            .is_ok_and(|m| m.len() >= u64::from(u32::MAX));
        zip.start_file(name.as_str(), opts.large_file(large))
            .map_err(|e| format!("{call}: {name}: {e}"))?;
        let named = format!("{call}: {}", source.display());
        copy_bounded(&named, &mut BufReader::new(file), &mut zip, None)?;
    }
    zip.finish()
        .map_err(|e| format!("{call}: {e}"))?
        .flush()
        .map_err(|e| format!("{call}: {}: {e}", dst.display()))?;
    out.done(call)
}

fn write(
    eval: &Evaluator<'_, '_, '_>,
    path: &str,
    source: Value<'_>,
    name: &str,
) -> Result<(), String> {
    const CALL: &str = "zip.write";
    let source = path_arg(CALL, source)?;
    let name = if name.is_empty() {
        std::path::Path::new(&source)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| format!("{CALL}: {source}: no file name to name the entry by"))?
    } else {
        name.to_owned()
    };
    write_entries(eval, CALL, path, &[(name, source)], options(CALL, -1)?)
}

/// The files a `write_all(match=...)` pattern names, as the `glob` global finds them.
fn glob_files(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    pattern: &str,
) -> Result<Vec<String>, String> {
    let (base, rest, prefix) = match pattern.strip_prefix('/') {
        Some(rest) => ("/", rest, "/"),
        None => (".", pattern, ""),
    };
    let full = local(eval, call, base)?;
    let found = glob::find(&full, rest).map_err(|e| format!("{call}: {pattern}: {e}"))?;
    Ok(found
        .into_iter()
        .filter(|p| full.join(p).is_file())
        .map(|p| format!("{prefix}{}", p.display()))
        .collect())
}

/// The entry name of `source` under `base_dir`: its path below it, or all of it.
fn entry_name(source: &str, base_dir: &str) -> String {
    if base_dir.is_empty() {
        return source.to_owned();
    }
    // Lexical, by whole components (`a/b` is not under `a/bc`), as Go's filepath.Rel.
    std::path::Path::new(source)
        .strip_prefix(base_dir)
        .ok()
        .map(|rel| rel.to_string_lossy().into_owned())
        .filter(|rel| !rel.is_empty())
        .unwrap_or_else(|| source.to_owned())
}

fn write_all<'v>(
    eval: &Evaluator<'v, '_, '_>,
    path: &str,
    pattern: &str,
    files: NoneOr<Value<'v>>,
    base_dir: &str,
    level: i32,
) -> Result<(), String> {
    const CALL: &str = "zip.write_all";
    let files = string_list(CALL, "files", files)?;
    if !pattern.is_empty() && !files.is_empty() {
        return Err(format!("{CALL}: match and files are mutually exclusive"));
    }
    if pattern.is_empty() && files.is_empty() {
        return Err(format!("{CALL}: must specify match or files"));
    }
    let opts = options(CALL, level)?;
    let sources = if pattern.is_empty() {
        files
    } else {
        glob_files(eval, CALL, pattern)?
    };
    let entries: Vec<(String, String)> = sources
        .into_iter()
        .map(|s| (entry_name(&s, base_dir), s))
        .collect();
    write_entries(eval, CALL, path, &entries, opts)
}

fn archive_of(v: Value<'_>) -> anyhow::Result<&str> {
    v.downcast_ref::<Archive>()
        .map(|a| a.0.as_str())
        .ok_or_else(|| anyhow::anyhow!("not a zip.archive"))
}

fn none<'v>(r: Result<(), String>) -> Result<Value<'v>, String> {
    r.map(|()| Value::new_none())
}

fn fail<T>(r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(anyhow::Error::msg)
}

#[starlark_module]
fn archive_methods(builder: &mut MethodsBuilder) {
    /// The archive's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(archive_of(this)?.to_owned())
    }

    /// The names of the entries (needs `--allow-fs`); `match` keeps those whose name,
    /// or last segment, matches the glob pattern.
    fn namelist<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        fail(namelist(eval, archive_of(this)?, r#match))
    }

    /// The data of the entry `name`, as bytes (needs `--allow-fs`).
    fn read<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        fail(read(eval, archive_of(this)?, name))
    }

    /// A dict of entry name to bytes for every file entry, or those `match` or `files`
    /// (not both) select (needs `--allow-fs`).
    fn read_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        #[starlark(require = named, default = NoneOr::None)] files: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        fail(read_all(eval, archive_of(this)?, r#match, files))
    }

    /// Writes a new archive holding the file `source`, as the entry `name` (default:
    /// the file's name). Needs `--allow-fs`.
    fn write<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(require = named, default = "")] name: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        fail(none(write(eval, archive_of(this)?, source, name)))
    }

    /// Writes a new archive of the files `match` (a glob, `**` for any directories) or
    /// `files` names, each entry named by its path (below `base_dir` when given);
    /// `level` -1 (default), 0 (stored) to 9. Needs `--allow-fs`.
    fn write_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        #[starlark(require = named, default = NoneOr::None)] files: NoneOr<Value<'v>>,
        #[starlark(require = named, default = "")] base_dir: &str,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        fail(none(write_all(
            eval,
            archive_of(this)?,
            r#match,
            files,
            base_dir,
            level,
        )))
    }

    /// `namelist(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_namelist<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = namelist(eval, archive_of(this)?, r#match);
        Ok(result(eval.heap(), outcome))
    }

    /// `read(name)` as a result.
    fn try_read<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = read(eval, archive_of(this)?, name);
        Ok(result(eval.heap(), outcome))
    }

    /// `read_all(...)` as a result.
    fn try_read_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        #[starlark(require = named, default = NoneOr::None)] files: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = read_all(eval, archive_of(this)?, r#match, files);
        Ok(result(eval.heap(), outcome))
    }

    /// `write(source, ...)` as a result.
    fn try_write<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(require = named, default = "")] name: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = none(write(eval, archive_of(this)?, source, name));
        Ok(result(eval.heap(), outcome))
    }

    /// `write_all(...)` as a result.
    fn try_write_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = "")] r#match: &str,
        #[starlark(require = named, default = NoneOr::None)] files: NoneOr<Value<'v>>,
        #[starlark(require = named, default = "")] base_dir: &str,
        #[starlark(require = named, default = -1)] level: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = none(write_all(
            eval,
            archive_of(this)?,
            r#match,
            files,
            base_dir,
            level,
        ));
        Ok(result(eval.heap(), outcome))
    }
}

starlark::methods_static!(ARCHIVE_METHODS = archive_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "zip.archive")]
impl<'v> StarlarkValue<'v> for Archive {
    fn get_methods() -> Option<&'static Methods> {
        Some(ARCHIVE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

#[starlark_module]
pub fn zip_namespace(builder: &mut GlobalsBuilder) {
    /// The zip archive at `path`: nothing is read until a method is called.
    fn file(#[starlark(require = pos)] path: Value) -> anyhow::Result<Archive> {
        fail(path_arg("zip.file", path).map(Archive))
    }

    /// `file(path)` as a result (`.ok`, `.value`, `.error`).
    fn try_file<'v>(
        #[starlark(require = pos)] path: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let made = path_arg("zip.file", path).map(|p| heap.alloc(Archive(p)));
        Ok(result(heap, made))
    }
}
