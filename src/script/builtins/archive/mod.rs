//! `gzip` and `zip`: upstream Starkite's compression modules, and what they share: the
//! cap on decompressed data, bounded copies, and how they name files and take bytes.
//!
//! # Caveats
//! Everything that reads or writes a file needs `--allow-fs`; decompression (gzip data
//! or a zip entry, into a value or a file) stops past [`INFLATE_CAP`], so that a small
//! archive cannot expand into all of memory or disk.

pub mod gzip;
#[cfg(test)]
mod tests;
pub mod zip;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path as StdPath, PathBuf};

use starlark::eval::Evaluator;
use starlark::values::bytes::StarlarkBytes;
use starlark::values::{Value, ValueLike};

use super::fs::Path;

/// The most bytes one call decompresses: past it the call fails naming this limit,
/// instead of a small archive growing into all of the machine's memory or disk.
pub const INFLATE_CAP: u64 = 256 << 20;

/// How much a copy moves between two looks at the call's budgets.
const CHUNK: usize = 64 * 1024;

/// Copies `from` into `to`, failing past `cap` bytes (decompressed data) or when the
/// call's memory or time budget runs out; returns how many bytes it copied.
///
/// # Errors
/// The read or write error, the cap, or the budget, naming `call`.
pub(crate) fn copy_bounded(
    call: &str,
    from: &mut impl Read,
    to: &mut impl Write,
    cap: Option<u64>,
) -> Result<u64, String> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{call}: {e}")),
        };
        total += n as u64;
        if let Some(cap) = cap.filter(|cap| total > *cap) {
            return Err(format!(
                "{call}: the data decompresses to more than kite's {} MiB limit",
                cap >> 20
            ));
        }
        if let Some(why) = crate::script::budget::walk_step(n) {
            return Err(format!("{call}: stopped: {why}"));
        }
        to.write_all(&buf[..n])
            .map_err(|e| format!("{call}: {e}"))?;
    }
}

/// The bytes of a script's value: bytes, a string (its UTF-8), or a list of integers
/// 0..255 (what `fs.read_bytes` returns).
///
/// # Errors
/// Anything else, naming `call`.
pub(crate) fn data_arg(call: &str, v: Value<'_>) -> Result<Vec<u8>, String> {
    if let Some(b) = v.downcast_ref::<StarlarkBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    super::os::bytes(v).map_err(|_| {
        format!(
            "{call}: argument must be bytes or string, got {}",
            v.get_type()
        )
    })
}

/// A path a script named (a string or a Path), for storing in a value: nothing is
/// checked until a method touches it.
///
/// # Errors
/// Anything else, naming `call`.
pub(crate) fn path_arg(call: &str, v: Value<'_>) -> Result<String, String> {
    Path::arg(call, v).map(|p| p.0).map_err(|e| e.to_string())
}

/// `path` as the file `call` touches: checked against `--allow-fs` and resolved as the
/// `fs` module resolves paths (against the script's `os.chdir`).
///
/// # Errors
/// The denial.
pub(crate) fn local(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    path: &str,
) -> Result<PathBuf, String> {
    super::fs::resolve(eval, call, &Path(path.to_owned())).map_err(|e| e.to_string())
}

/// Opens a file to read, naming `call` and the path on failure.
///
/// # Errors
/// The OS error.
pub(crate) fn open(call: &str, path: &StdPath) -> Result<File, String> {
    File::open(path).map_err(|e| format!("{call}: {}: {e}", path.display()))
}

/// A file being written: into a temporary file beside it, renamed over `path` by
/// [`Output::done`], so that a failed call leaves whatever was at `path` as it was and
/// no half-written file (and a call may write over its own source).
pub(crate) struct Output {
    path: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

impl Output {
    /// Starts writing `path` (mode 0644).
    ///
    /// # Errors
    /// The OS error.
    pub(crate) fn create(call: &str, path: &StdPath) -> Result<Self, String> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // A link is written through, as a plain write would: its target is replaced.
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let resolved = if is_link {
            std::fs::canonicalize(path).map_err(|e| format!("{call}: {}: {e}", path.display()))?
        } else {
            path.to_owned()
        };
        let path = resolved.as_path();
        let name = path
            .file_name()
            .ok_or_else(|| format!("{call}: {}: not a file name", path.display()))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(
            ".kite-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let temp = path.with_file_name(temp_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
            .map_err(|e| format!("{call}: {}: {e}", path.display()))?;
        Ok(Output {
            path: path.to_owned(),
            temp,
            file: Some(file),
        })
    }

    /// The open file.
    ///
    /// # Errors
    /// After [`Output::done`] (a bug, reported).
    pub(crate) fn file(&mut self) -> Result<&mut File, String> {
        self.file
            .as_mut()
            .ok_or_else(|| format!("{}: already closed", self.path.display()))
    }

    /// Puts the file in place.
    ///
    /// # Errors
    /// The OS error, naming `call` and the path.
    pub(crate) fn done(mut self, call: &str) -> Result<(), String> {
        self.file = None;
        std::fs::rename(&self.temp, &self.path)
            .map_err(|e| format!("{call}: {}: {e}", self.path.display()))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Done or not, the temporary file is gone afterwards (renamed, or removed).
        let _ = std::fs::remove_file(&self.temp);
    }
}
