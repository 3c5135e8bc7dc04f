//! `fs`: the filesystem through upstream Starkite's `Path` object (`fs.path()`, the
//! `path()` global) and its global shorthands (`read_text`, `write_text`, `exists`,
//! `glob`, ...). Everything that touches the disk needs `--allow-fs`.
//!
//! # Caveats
//! `read_bytes` returns `bytes`; `write_bytes` takes `bytes`, a string or a list of
//! integers 0..255. Reads are capped at
//! [`READ_CAP`], listings at [`glob::MAX_ENTRIES`]. Streaming (`get_reader`, ...) is
//! not provided: kite has no reader or writer values.

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

/// `call: path: error`, the shape of every filesystem failure. An OS error reads as Go
/// (and so upstream) writes it: "no such file or directory", which scripts test for.
pub(crate) fn failed(
    call: &str,
    path: &std::path::Path,
    e: impl std::fmt::Display,
) -> anyhow::Error {
    anyhow::anyhow!("{call}: {}: {}", path.display(), go_error(&e.to_string()))
}

/// Rust's "No such file or directory (os error 2)" as Go's "no such file or directory".
pub(crate) fn go_error(message: &str) -> String {
    let message = match message.rfind(" (os error ") {
        Some(at) if message.ends_with(')') => &message[..at],
        _ => message,
    };
    let mut chars = message.chars();
    match chars.next() {
        // Only a capital followed by lowercase: an acronym stays as it is.
        Some(first) if chars.clone().next().is_some_and(char::is_lowercase) => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => message.to_owned(),
    }
}

/// A file's mode as Go writes it (`-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`, `Dcrw-rw-rw-`),
/// which is what upstream's `stat()["mode"]` is.
pub(crate) fn go_mode(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let t = meta.file_type();
    let bits = meta.permissions().mode();
    // Go's letters, in Go's order ("dalTLDpSugct?"), for the kinds Unix files have.
    let letters = [
        ('d', t.is_dir()),
        ('L', t.is_symlink()),
        ('D', t.is_block_device() || t.is_char_device()),
        ('p', t.is_fifo()),
        ('S', t.is_socket()),
        ('u', bits & 0o4000 != 0),
        ('g', bits & 0o2000 != 0),
        ('c', t.is_char_device()),
        ('t', bits & 0o1000 != 0),
    ];
    let mut out: String = letters
        .iter()
        .filter(|(_, on)| *on)
        .map(|(c, _)| *c)
        .collect();
    if out.is_empty() {
        out.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        out.push(if bits & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    out
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

/// Bytes as a Starlark `bytes` value.
pub(crate) fn alloc_bytes(heap: Heap<'_>, bytes: Vec<u8>) -> Value<'_> {
    heap.alloc(bytes)
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

starlark::globals_static!(FUNCTIONS = fs_functions);

/// The `fs` namespace: `fs.path` and its `try_` form ([`crate::script::try_form`]).
pub fn fs_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &["path"]);
}

#[starlark_module]
fn fs_functions(builder: &mut GlobalsBuilder) {
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

    /// The file at `p` as `bytes` (needs `--allow-fs`).
    fn read_bytes<'v>(
        #[starlark(require = pos)] p: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let full = resolve(eval, "read_bytes", &Path::arg("read_bytes", p)?)?;
        let bytes = read("read_bytes", &full)?;
        Ok(alloc_bytes(eval.heap(), bytes))
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

    /// Writes `data` (bytes, a string or a list of integers 0..255) to the file at `p`
    /// (needs `--allow-fs`).
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
