//! `fs`: the filesystem through upstream Starkite's `Path` object (`fs.path()`, the
//! `path()` global) and its global shorthands (`read_text`, `write_text`, `exists`,
//! `glob`, ...). Everything that touches the disk needs `--allow-fs`.
//!
//! # Caveats
//! Starlark here has no bytes type: `read_bytes` returns a list of integers 0..255 and
//! `write_bytes` takes one (or a string), as `hash.bytes` does. Reads are capped at
//! [`READ_CAP`], listings at [`glob::MAX_ENTRIES`]. Streaming (`get_reader`, ...) is
//! not provided: kite has no `io` module.

mod files;
pub(crate) mod glob;
mod path;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneType;
use starlark::values::{Heap, Value};

pub use path::Path;

use super::os::Overlay;
use crate::script::host::Host;
use crate::script::permissions::Access;

/// The largest file a script may read whole.
pub const READ_CAP: u64 = 64 << 20;

/// Checks `--allow-fs` for `call` and resolves `p` against the script's directory.
///
/// # Errors
/// The denial.
pub(crate) fn resolve(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    p: &Path,
) -> anyhow::Result<PathBuf> {
    let host = Host::of(eval)?;
    host.allow(call, Access::Fs)?;
    Ok(host.ext::<Overlay>().resolve(p.std()))
}

/// `call: path: error`, the shape of every filesystem failure.
pub(crate) fn failed(
    call: &str,
    path: &std::path::Path,
    e: impl std::fmt::Display,
) -> anyhow::Error {
    anyhow::anyhow!("{call}: {}: {e}", path.display())
}

/// A file's bytes, refusing files over [`READ_CAP`].
///
/// # Errors
/// The OS error or the size, naming `call` and the path.
pub(crate) fn read(call: &str, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| failed(call, path, e))?;
    let mut buf = Vec::new();
    file.take(READ_CAP + 1)
        .read_to_end(&mut buf)
        .map_err(|e| failed(call, path, e))?;
    if buf.len() as u64 > READ_CAP {
        return Err(failed(
            call,
            path,
            format!("larger than kite's {} MiB read limit", READ_CAP >> 20),
        ));
    }
    Ok(buf)
}

/// A file as text.
///
/// # Errors
/// As [`read`], or text that is not UTF-8.
pub(crate) fn read_text(call: &str, path: &std::path::Path) -> anyhow::Result<String> {
    String::from_utf8(read(call, path)?)
        .map_err(|_| failed(call, path, "not UTF-8 text (read_bytes reads any file)"))
}

/// Bytes as a list of integers 0..255.
pub(crate) fn byte_list<'v>(heap: Heap<'v>, bytes: &[u8]) -> Value<'v> {
    heap.alloc(starlark::values::list::AllocList(
        bytes.iter().map(|b| i32::from(*b)),
    ))
}

/// Writes (or appends) `data`, creating the file with mode 0644.
///
/// # Errors
/// The OS error, naming `call` and the path.
pub(crate) fn write(
    call: &str,
    path: &std::path::Path,
    data: &[u8],
    append: bool,
) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(0o644)
        .open(path)
        .map_err(|e| failed(call, path, e))?;
    file.write_all(data).map_err(|e| failed(call, path, e))
}

fn bytes_arg(call: &str, v: Value<'_>) -> anyhow::Result<Vec<u8>> {
    super::os::bytes(v).map_err(|e| anyhow::anyhow!("{call}: data: {e}"))
}

#[starlark_module]
pub fn fs_namespace(builder: &mut GlobalsBuilder) {
    /// A Path for `p` (a string or a Path).
    fn path<'v>(#[starlark(require = pos)] p: Value<'v>) -> anyhow::Result<Path> {
        Path::arg("fs.path", p)
    }
}

/// The global shorthands upstream predeclares: `path`, `read_text`, `read_bytes`,
/// `write_text`, `write_bytes`, `exists`, `glob`.
#[starlark_module]
pub fn fs_globals(builder: &mut GlobalsBuilder) {
    /// A Path for `p` (a string or a Path).
    fn path<'v>(#[starlark(require = pos)] p: Value<'v>) -> anyhow::Result<Path> {
        Path::arg("path", p)
    }

    /// The file at `p` as text (needs `--allow-fs`).
    fn read_text<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<String> {
        let full = resolve(eval, "read_text", &Path::arg("read_text", p)?)?;
        read_text("read_text", &full)
    }

    /// The file at `p` as a list of bytes (needs `--allow-fs`).
    fn read_bytes<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let full = resolve(eval, "read_bytes", &Path::arg("read_bytes", p)?)?;
        let bytes = read("read_bytes", &full)?;
        Ok(byte_list(eval.heap(), &bytes))
    }

    /// Writes `content` to the file at `p`, replacing it (needs `--allow-fs`).
    fn write_text<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        #[starlark(require = pos)] content: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let full = resolve(eval, "write_text", &Path::arg("write_text", p)?)?;
        write("write_text", &full, content.as_bytes(), false)?;
        Ok(NoneType)
    }

    /// Writes `data` (a list of bytes or a string) to the file at `p` (needs `--allow-fs`).
    fn write_bytes<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        #[starlark(require = pos)] data: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let full = resolve(eval, "write_bytes", &Path::arg("write_bytes", p)?)?;
        write(
            "write_bytes",
            &full,
            &bytes_arg("write_bytes", data)?,
            false,
        )?;
        Ok(NoneType)
    }

    /// True when something exists at `p` (needs `--allow-fs`).
    fn exists<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<bool> {
        let full = resolve(eval, "exists", &Path::arg("exists", p)?)?;
        Ok(full.symlink_metadata().is_ok())
    }

    /// The paths matching `pattern` (`*`, `?`, `[...]`, `**`), sorted, as strings
    /// (needs `--allow-fs`).
    fn glob<'v>(
        #[starlark(require = pos)] pattern: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Vec<String>> {
        let (base, rest, prefix) = if let Some(rest) = pattern.strip_prefix('/') {
            (Path("/".to_owned()), rest, "/")
        } else {
            (Path(".".to_owned()), pattern, "")
        };
        let full = resolve(eval, "glob", &base)?;
        let found = glob::find(&full, rest).map_err(|e| anyhow::anyhow!("glob: {pattern}: {e}"))?;
        Ok(found
            .into_iter()
            .map(|p| format!("{prefix}{}", p.display()))
            .collect())
    }
}
