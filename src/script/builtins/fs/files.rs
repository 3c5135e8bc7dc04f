//! The `Path` methods that touch the disk: queries, reads and writes, file operations
//! and directories. Each checks `--allow-fs` and names itself and the path on failure.

#![expect(unsafe_code, reason = "getuid and statvfs (libc)")]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::SystemTime;

use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::dict::AllocDict;
use starlark::values::list::AllocList;
use starlark::values::none::NoneType;
use starlark::values::tuple::AllocTuple;

use super::path::{Path, path_of};
use super::{alloc_bytes, bytes_arg, failed, glob, go_error, read, read_text, resolve, write};
use crate::script::builtins::os::{Overlay, group_name, user_entry};
use crate::script::host::Host;

/// The method's call name and its path resolved (after the permission check).
fn target(
    eval: &Evaluator<'_, '_, '_>,
    this: Value<'_>,
    method: &str,
) -> anyhow::Result<(String, PathBuf)> {
    let call = format!("Path.{method}");
    let full = resolve(eval, &call, path_of(this)?)?;
    Ok((call, full))
}

/// A second path argument, resolved as the first.
fn other(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    v: Value<'_>,
) -> anyhow::Result<(Path, PathBuf)> {
    let p = Path::arg(call, v)?;
    let full = resolve(eval, call, &p)?;
    Ok((p, full))
}

#[starlark_module]
pub(super) fn file_methods(builder: &mut MethodsBuilder) {
    /// True when something exists here.
    fn exists(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<bool> {
        Ok(target(eval, this, "exists")?.1.symlink_metadata().is_ok())
    }

    /// True for a regular file (following links).
    fn is_file(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<bool> {
        Ok(target(eval, this, "is_file")?.1.is_file())
    }

    /// True for a directory (following links).
    fn is_dir(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<bool> {
        Ok(target(eval, this, "is_dir")?.1.is_dir())
    }

    /// True for a symbolic link.
    fn is_symlink(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<bool> {
        Ok(target(eval, this, "is_symlink")?.1.is_symlink())
    }

    /// `name`, `size`, `mode` (as Go writes it: `-rw-r--r--`), `perm` (the permission
    /// bits), `is_dir`, `is_file`, `is_symlink`, `mod_time` (RFC 3339, UTC), `uid`, `gid`.
    fn stat<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "stat")?;
        let link = full
            .symlink_metadata()
            .map_err(|e| failed(&call, &full, e))?;
        let meta = if link.is_symlink() {
            full.metadata().unwrap_or(link.clone())
        } else {
            link.clone()
        };
        let mod_time = meta
            .modified()
            .ok()
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        let heap = eval.heap();
        Ok(heap.alloc(AllocDict([
            (
                "name",
                heap.alloc(
                    path_of(this)?
                        .std()
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
            ),
            ("size", heap.alloc(meta.len())),
            ("mode", heap.alloc(super::go_mode(&meta))),
            ("perm", heap.alloc(meta.permissions().mode() & 0o7777)),
            ("is_dir", Value::new_bool(meta.is_dir())),
            ("is_file", Value::new_bool(meta.is_file())),
            ("is_symlink", Value::new_bool(link.is_symlink())),
            ("mod_time", heap.alloc(mod_time)),
            ("uid", heap.alloc(meta.uid())),
            ("gid", heap.alloc(meta.gid())),
        ])))
    }

    /// The name of the file's owner (its id when the user database has none).
    fn owner(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<String> {
        let (call, full) = target(eval, this, "owner")?;
        let uid = full.metadata().map_err(|e| failed(&call, &full, e))?.uid();
        Ok(user_entry(uid).map_or_else(|| uid.to_string(), |u| u.name))
    }

    /// The name of the file's group (its id when the group database has none).
    fn group(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<String> {
        let (call, full) = target(eval, this, "group")?;
        let gid = full.metadata().map_err(|e| failed(&call, &full, e))?.gid();
        Ok(group_name(gid).unwrap_or_else(|| gid.to_string()))
    }

    /// The file as text.
    fn read_text(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<String> {
        let (call, full) = target(eval, this, "read_text")?;
        read_text(&call, &full)
    }

    /// The file as `bytes`.
    fn read_bytes<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "read_bytes")?;
        let bytes = read(&call, &full)?;
        Ok(alloc_bytes(eval.heap(), bytes))
    }

    /// Writes `content`, replacing the file.
    fn write_text(
        #[starlark(this)] this: Value,
        content: &str,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "write_text")?;
        write(&call, &full, content.as_bytes(), false)?;
        Ok(NoneType)
    }

    /// Writes `data` (bytes, a string or a list of integers 0..255), replacing the file.
    fn write_bytes<'v>(
        #[starlark(this)] this: Value<'v>,
        data: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "write_bytes")?;
        write(&call, &full, &bytes_arg(&call, data)?, false)?;
        Ok(NoneType)
    }

    /// Appends `content`, creating the file if needed.
    fn append_text(
        #[starlark(this)] this: Value,
        content: &str,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "append_text")?;
        write(&call, &full, content.as_bytes(), true)?;
        Ok(NoneType)
    }

    /// Appends `data` (bytes, a string or a list of integers 0..255).
    fn append_bytes<'v>(
        #[starlark(this)] this: Value<'v>,
        data: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "append_bytes")?;
        write(&call, &full, &bytes_arg(&call, data)?, true)?;
        Ok(NoneType)
    }

    /// Creates an empty file, or updates the modification time of an existing one.
    fn touch(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "touch")?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&full)
            .map_err(|e| failed(&call, &full, e))?;
        file.set_modified(SystemTime::now())
            .map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Removes a file, or an empty directory (any directory with `recursive=True`).
    fn remove(
        #[starlark(this)] this: Value,
        #[starlark(require = named, default = false)] recursive: bool,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "remove")?;
        let meta = full
            .symlink_metadata()
            .map_err(|e| failed(&call, &full, e))?;
        let removed = match (meta.is_dir(), recursive) {
            (false, _) => std::fs::remove_file(&full),
            (true, false) => std::fs::remove_dir(&full),
            (true, true) => std::fs::remove_dir_all(&full),
        };
        removed.map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Renames (moves) to `target`, returning the new Path.
    fn rename<'v>(
        #[starlark(this)] this: Value<'v>,
        to: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Path> {
        move_to(eval, this, to, "rename")
    }

    /// Moves to `target`, returning the new Path.
    fn move_to<'v>(
        #[starlark(this)] this: Value<'v>,
        to: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Path> {
        move_to(eval, this, to, "move_to")
    }

    /// Copies the file to `target`, returning the new Path.
    fn copy_to<'v>(
        #[starlark(this)] this: Value<'v>,
        to: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Path> {
        let (call, full) = target(eval, this, "copy_to")?;
        let (to, to_full) = other(eval, &call, to)?;
        std::fs::copy(&full, &to_full).map_err(|e| {
            failed(
                &call,
                &full,
                format!("to {}: {}", to_full.display(), go_error(&e.to_string())),
            )
        })?;
        Ok(to)
    }

    /// Cuts or extends the file to `size` bytes.
    fn truncate(
        #[starlark(this)] this: Value,
        size: u32,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "truncate")?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&full)
            .map_err(|e| failed(&call, &full, e))?;
        file.set_len(u64::from(size))
            .map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Sets the permission bits (e.g. `0o644`).
    fn chmod(
        #[starlark(this)] this: Value,
        mode: u32,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "chmod")?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Sets the owner and/or group by id (-1 leaves one as it is).
    fn chown(
        #[starlark(this)] this: Value,
        #[starlark(default = -1)] uid: i64,
        #[starlark(default = -1)] gid: i64,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "chown")?;
        std::os::unix::fs::chown(&full, u32::try_from(uid).ok(), u32::try_from(gid).ok())
            .map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Makes this path a symbolic link to `target`.
    fn symlink_to<'v>(
        #[starlark(this)] this: Value<'v>,
        to: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "symlink_to")?;
        // The link holds the target as written: a relative target is relative to the link.
        let to = Path::arg(&call, to)?;
        std::os::unix::fs::symlink(to.std(), &full).map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// Where this symbolic link points.
    fn readlink(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<Path> {
        let (call, full) = target(eval, this, "readlink")?;
        let to = std::fs::read_link(&full).map_err(|e| failed(&call, &full, e))?;
        Ok(Path(to.to_string_lossy().into_owned()))
    }

    /// Makes this path a hard link to the file `target`.
    fn hardlink_to<'v>(
        #[starlark(this)] this: Value<'v>,
        to: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let (call, full) = target(eval, this, "hardlink_to")?;
        let (_, to_full) = other(eval, &call, to)?;
        std::fs::hard_link(&to_full, &full).map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// The absolute path with links resolved (the path as written when it does not
    /// exist yet, made absolute).
    fn resolve(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<Path> {
        let (call, full) = target(eval, this, "resolve")?;
        if let Ok(real) = full.canonicalize() {
            return Ok(Path(real.to_string_lossy().into_owned()));
        }
        let cwd = Host::of(eval)?
            .ext::<Overlay>()
            .cwd()
            .map_err(|e| failed(&call, &full, e))?;
        Ok(Path(super::path::clean(&cwd.join(&full).to_string_lossy())))
    }

    /// The path with a leading `~` replaced by the home directory.
    fn expanduser(#[starlark(this)] this: Value, eval: &mut Evaluator) -> anyhow::Result<Path> {
        let p = path_of(this)?;
        let Some(rest) = p.0.strip_prefix('~') else {
            return Ok(p.clone());
        };
        if !(rest.is_empty() || rest.starts_with('/')) {
            anyhow::bail!(
                "Path.expanduser: {}: only ~ (the current user) is supported",
                p.0
            );
        }
        let host = Host::of(eval)?;
        host.allow("Path.expanduser", crate::script::permissions::Access::Fs)?;
        let home = host
            .ext::<Overlay>()
            .var("HOME")
            .or_else(|| user_entry(unsafe_uid()).map(|u| u.home))
            .ok_or_else(|| anyhow::anyhow!("Path.expanduser: {}: no home directory", p.0))?;
        Ok(Path(format!("{home}{rest}")))
    }
}

fn unsafe_uid() -> u32 {
    // SAFETY: getuid cannot fail and has no preconditions.
    unsafe { libc::getuid() }
}

fn move_to(
    eval: &Evaluator<'_, '_, '_>,
    this: Value<'_>,
    to: Value<'_>,
    method: &str,
) -> anyhow::Result<Path> {
    let (call, full) = target(eval, this, method)?;
    let (to, to_full) = other(eval, &call, to)?;
    std::fs::rename(&full, &to_full).map_err(|e| {
        failed(
            &call,
            &full,
            format!("to {}: {}", to_full.display(), go_error(&e.to_string())),
        )
    })?;
    Ok(to)
}

#[starlark_module]
pub(super) fn dir_methods(builder: &mut MethodsBuilder) {
    /// Creates the directory and any missing parents (`parents=False`: the parent must
    /// exist); an existing directory is fine.
    fn mkdir(
        #[starlark(this)] this: Value,
        #[starlark(require = named, default = true)] parents: bool,
        #[starlark(require = named, default = 0o755)] mode: u32,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        use std::os::unix::fs::DirBuilderExt;
        let (call, full) = target(eval, this, "mkdir")?;
        if full.is_dir() {
            return Ok(NoneType);
        }
        std::fs::DirBuilder::new()
            .recursive(parents)
            .mode(mode & 0o7777)
            .create(&full)
            .map_err(|e| failed(&call, &full, e))?;
        Ok(NoneType)
    }

    /// The directory's entries as Paths, sorted by name.
    fn listdir<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "listdir")?;
        let p = path_of(this)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&full).map_err(|e| failed(&call, &full, e))? {
            let entry = entry.map_err(|e| failed(&call, &full, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
            if names.len() > glob::MAX_ENTRIES {
                return Err(failed(
                    &call,
                    &full,
                    format!("more than {} entries", glob::MAX_ENTRIES),
                ));
            }
        }
        names.sort();
        let heap = eval.heap();
        Ok(heap.alloc(AllocList(
            names
                .iter()
                .map(|n| Path(p.std().join(n).to_string_lossy().into_owned())),
        )))
    }

    /// The Paths under this directory matching `pattern` (`*`, `?`, `[...]`, `**`).
    fn glob<'v>(
        #[starlark(this)] this: Value<'v>,
        pattern: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "glob")?;
        let p = path_of(this)?;
        let found = glob::find(&full, pattern).map_err(|e| failed(&call, &full, e))?;
        let heap = eval.heap();
        Ok(heap.alloc(AllocList(
            found
                .iter()
                .map(|f| Path(p.std().join(f).to_string_lossy().into_owned())),
        )))
    }

    /// Every directory under this one, top-down: `(dir Path, [subdirectory names],
    /// [file names])` each, as Python's `os.walk`.
    fn walk<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "walk")?;
        let p = path_of(this)?;
        let mut rows = Vec::new();
        let mut pending = vec![(p.std().to_path_buf(), full)];
        let mut seen = 0usize;
        while let Some((shown, dir)) = pending.pop() {
            let mut dirs = Vec::new();
            let mut files = Vec::new();
            for entry in std::fs::read_dir(&dir)
                .map_err(|e| failed(&call, &dir, e))?
                .flatten()
            {
                seen += 1;
                if seen > glob::MAX_ENTRIES {
                    return Err(failed(
                        &call,
                        &dir,
                        format!("more than {} entries", glob::MAX_ENTRIES),
                    ));
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                // Links to directories are listed, not followed, so a loop cannot recurse.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(name);
                } else {
                    files.push(name);
                }
            }
            dirs.sort();
            files.sort();
            for d in dirs.iter().rev() {
                pending.push((shown.join(d), dir.join(d)));
            }
            rows.push((Path(shown.to_string_lossy().into_owned()), dirs, files));
        }
        let heap = eval.heap();
        let rows: Vec<Value<'v>> = rows
            .into_iter()
            .map(|(d, dirs, files)| {
                heap.alloc(AllocTuple([
                    heap.alloc(d),
                    heap.alloc(dirs),
                    heap.alloc(files),
                ]))
            })
            .collect();
        Ok(heap.alloc(AllocList(rows)))
    }

    /// The filesystem's `total`, `used` and `free` bytes.
    fn disk_usage<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let (call, full) = target(eval, this, "disk_usage")?;
        let c = std::ffi::CString::new(full.as_os_str().as_encoded_bytes())
            .map_err(|_| failed(&call, &full, "the path holds a NUL byte"))?;
        // SAFETY: statvfs is plain data, filled by the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is NUL-terminated and st is valid for writes.
        if unsafe { libc::statvfs(c.as_ptr(), &raw mut st) } != 0 {
            return Err(failed(&call, &full, std::io::Error::last_os_error()));
        }
        #[allow(
            clippy::useless_conversion,
            reason = "the field types are narrower than u64 on some targets"
        )]
        let frsize = u64::from(st.f_frsize).max(1);
        #[allow(clippy::useless_conversion, reason = "as above, per target")]
        let total = u64::from(st.f_blocks).saturating_mul(frsize);
        #[allow(clippy::useless_conversion, reason = "as above, per target")]
        let free = u64::from(st.f_bavail).saturating_mul(frsize);
        #[allow(clippy::useless_conversion, reason = "as above, per target")]
        let used = total.saturating_sub(u64::from(st.f_bfree).saturating_mul(frsize));
        let heap = eval.heap();
        Ok(heap.alloc(AllocDict([
            ("total", heap.alloc(total)),
            ("used", heap.alloc(used)),
            ("free", heap.alloc(free)),
        ])))
    }
}
