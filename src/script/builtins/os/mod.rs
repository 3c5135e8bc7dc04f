//! `os`: environment variables, process facts and running programs, as upstream
//! Starkite's module, plus its `exec`/`try_exec`/`hostname`/`cwd`/`env`/`setenv`
//! globals.
//!
//! Several scripts share kite's process (the operator hosts many), so nothing here
//! changes the process itself: `os.setenv` and `os.chdir` write a per-run [`Overlay`]
//! that the script's own reads, file paths and child processes see.

#![expect(
    unsafe_code,
    reason = "the process's ids, user and group entries and host name (libc)"
)]

mod aliases;
mod exec;
#[cfg(test)]
mod tests;
mod tries;

pub use aliases::os_globals;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::UnpackDictEntries;
use starlark::values::list::UnpackList;
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::{Value, ValueLike};

use crate::script::host::Host;
use crate::script::permissions::Access;

pub(crate) use exec::bytes;

/// What a script changed of its process's view: variables set and the directory it
/// moved to. One per run (a [`Host`] extension), never the real process state.
#[derive(Debug, Default)]
pub struct Overlay {
    vars: Mutex<BTreeMap<String, String>>,
    cwd: Mutex<Option<PathBuf>>,
}

impl Overlay {
    /// A variable as the script sees it: its own setting, else the process's.
    pub fn var(&self, name: &str) -> Option<String> {
        let set = lock(&self.vars).get(name).cloned();
        set.or_else(|| std::env::var(name).ok())
    }

    /// The variables the script set, for its child processes.
    pub fn vars(&self) -> BTreeMap<String, String> {
        lock(&self.vars).clone()
    }

    fn set_var(&self, name: String, value: String) {
        lock(&self.vars).insert(name, value);
    }

    /// The script's working directory: where it moved to, else the process's.
    ///
    /// # Errors
    /// The process's working directory cannot be read (it was removed).
    pub fn cwd(&self) -> std::io::Result<PathBuf> {
        match lock(&self.cwd).clone() {
            Some(dir) => Ok(dir),
            None => std::env::current_dir(),
        }
    }

    /// `path` against the script's working directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        match lock(&self.cwd).as_ref() {
            Some(dir) => dir.join(path),
            None => path.to_path_buf(),
        }
    }

    fn set_cwd(&self, dir: PathBuf) {
        *lock(&self.cwd) = Some(dir);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What `os.exit(code)` hands over: the script ended on purpose with this exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptExit(pub u8);

/// The home directory, from `$HOME` as the script sees it, else the user database.
pub(crate) fn home_dir(overlay: &Overlay) -> Option<String> {
    overlay
        .var("HOME")
        .filter(|h| !h.is_empty())
        .or_else(|| user_entry(current_uid()).map(|u| u.home))
}

pub(crate) fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail and has no preconditions.
    unsafe { libc::getuid() }
}

fn current_gid() -> u32 {
    // SAFETY: getgid cannot fail and has no preconditions.
    unsafe { libc::getgid() }
}

/// A user's name and home directory, from the user database.
pub(crate) struct UserEntry {
    pub name: String,
    pub home: String,
}

pub(crate) fn user_entry(uid: u32) -> Option<UserEntry> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data; getpwuid_r fills it with pointers into buf, which
    // outlives every read below.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the lengths given.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &raw mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    let text = |p: *const libc::c_char| {
        // SAFETY: on success the fields point at NUL-terminated strings inside buf.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    Some(UserEntry {
        name: text(pwd.pw_name),
        home: text(pwd.pw_dir),
    })
}

/// A group's name, from the group database.
pub(crate) fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: as in user_entry.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the lengths given.
    let rc = unsafe {
        libc::getgrgid_r(
            gid,
            &raw mut grp,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success gr_name points at a NUL-terminated string inside buf.
    Some(
        unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn hostname() -> anyhow::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        anyhow::bail!("os.hostname: {}", std::io::Error::last_os_error());
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The script's working directory. Like `hostname()`, a fact about the process that
/// needs no flag (upstream's "core info" works in every permission mode); what reads
/// or moves files there (`chdir`, `Path`) needs `--allow-fs`.
fn cwd(eval: &Evaluator<'_, '_, '_>, call: &str) -> anyhow::Result<String> {
    let host = Host::of(eval)?;
    let dir = host
        .ext::<Overlay>()
        .cwd()
        .map_err(|e| anyhow::anyhow!("{call}: cannot read the working directory: {e}"))?;
    Ok(dir.display().to_string())
}

fn getenv(eval: &Evaluator<'_, '_, '_>, name: &str, default: &str) -> anyhow::Result<String> {
    let host = Host::of(eval)?;
    host.allow("os.env", Access::Env)?;
    Ok(host
        .ext::<Overlay>()
        .var(name)
        .unwrap_or_else(|| default.to_owned()))
}

fn setenv(eval: &Evaluator<'_, '_, '_>, name: &str, value: &str) -> anyhow::Result<()> {
    let host = Host::of(eval)?;
    host.allow("os.setenv", Access::Env)?;
    if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
        anyhow::bail!("os.setenv: invalid variable name {name:?} (empty, or with = or NUL)");
    }
    host.ext::<Overlay>()
        .set_var(name.to_owned(), value.to_owned());
    Ok(())
}

fn chdir(eval: &Evaluator<'_, '_, '_>, path: &str) -> anyhow::Result<()> {
    let host = Host::of(eval)?;
    host.allow("os.chdir", Access::Fs)?;
    let overlay = host.ext::<Overlay>();
    let target = overlay.resolve(Path::new(path));
    let dir = target
        .canonicalize()
        .map_err(|e| super::fs::failed("os.chdir", &target, e))?;
    if !dir.is_dir() {
        anyhow::bail!("os.chdir: {}: not a directory", dir.display());
    }
    overlay.set_cwd(dir);
    Ok(())
}

fn which(eval: &Evaluator<'_, '_, '_>, name: &str) -> anyhow::Result<Option<String>> {
    let host = Host::of(eval)?;
    host.allow("os.which", Access::Exec)?;
    let overlay = host.ext::<Overlay>();
    Ok(exec::find_program(&overlay, name).map(|p| p.display().to_string()))
}

fn username() -> String {
    let uid = current_uid();
    user_entry(uid).map_or_else(|| uid.to_string(), |u| u.name)
}

fn home(eval: &Evaluator<'_, '_, '_>, call: &str) -> anyhow::Result<String> {
    let host = Host::of(eval)?;
    host.allow(call, Access::Fs)?;
    home_dir(&host.ext::<Overlay>())
        .ok_or_else(|| anyhow::anyhow!("{call}: $HOME is unset and the user has no home"))
}

fn exit(eval: &Evaluator<'_, '_, '_>, call: &str, code: i32) -> anyhow::Result<NoneType> {
    let host = Host::of(eval)?;
    let code =
        u8::try_from(code).map_err(|_| anyhow::anyhow!("{call}: code {code} is not in 0..255"))?;
    if !host.hand_off(Box::new(ScriptExit(code))) {
        anyhow::bail!(
            "{call}: only a script's top level can exit, once (not a handler, nor after k8s.control)"
        );
    }
    // Unwinds the script; `kite run` sees the handover and exits with the code.
    Err(anyhow::anyhow!("{call}({code}): the script exited"))
}

/// The message a failed call carries, for `try_` results.
fn message(e: &anyhow::Error) -> String {
    format!("{e:#}")
}

/// The functions of `os` whose `try_` forms are derived ([`crate::script::try_form`]):
/// each returns, as a Result, what the function returns or the error it raises.
const DERIVED_TRIES: &[&str] = &[
    "env", "setenv", "chdir", "which", "hostname", "pid", "ppid", "username", "userid", "groupid",
];

// Built once: `os.env` and the global `env` are the same value.
starlark::globals_static!(OS_FUNCTIONS = os_functions);

/// The `os` module: its functions and their `try_` forms.
pub fn os_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, OS_FUNCTIONS.globals(), DERIVED_TRIES);
    tries::os_tries(builder);
}

#[starlark_module]
fn os_functions(builder: &mut GlobalsBuilder) {
    /// An environment variable (needs `--allow-env`), or `default` when unset.
    fn env(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = "")] default: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<String> {
        getenv(eval, name, default)
    }

    /// Sets an environment variable for the rest of the script and the programs it
    /// runs (needs `--allow-env`); kite's own environment is left alone.
    fn setenv(
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] value: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        setenv(eval, name, value)?;
        Ok(NoneType)
    }

    /// The script's working directory.
    fn cwd(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        cwd(eval, "os.cwd")
    }

    /// Moves the script's working directory (needs `--allow-fs`): relative paths and
    /// programs run afterwards start there. kite's own directory is left alone.
    fn chdir(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        chdir(eval, path)?;
        Ok(NoneType)
    }

    /// The machine's host name (a pod's name inside Kubernetes).
    fn hostname() -> anyhow::Result<String> {
        hostname()
    }

    /// kite's process id.
    fn pid() -> anyhow::Result<i64> {
        Ok(i64::from(std::process::id()))
    }

    /// The parent of kite's process.
    fn ppid() -> anyhow::Result<i64> {
        // SAFETY: getppid cannot fail and has no preconditions.
        Ok(i64::from(unsafe { libc::getppid() }))
    }

    /// The name of the user kite runs as (its id when the user database has none).
    fn username() -> anyhow::Result<String> {
        Ok(username())
    }

    /// The id of the user kite runs as, as a string (as upstream).
    fn userid() -> anyhow::Result<String> {
        Ok(current_uid().to_string())
    }

    /// The id of the group kite runs as, as a string (as upstream).
    fn groupid() -> anyhow::Result<String> {
        Ok(current_gid().to_string())
    }

    /// The home directory (needs `--allow-fs`).
    fn home(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        home(eval, "os.home")
    }

    /// Ends the script with exit code `code` (0..255). Only `kite run` ends with it; in
    /// a handler it fails the call.
    fn exit(
        #[starlark(default = 0)] code: i32,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        exit(eval, "os.exit", code)
    }

    /// The full path of program `name` on `$PATH` (needs `--allow-exec`), or None.
    fn which(
        #[starlark(require = pos)] name: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneOr<String>> {
        Ok(NoneOr::from_option(which(eval, name)?))
    }

    /// Runs a command line in `shell` (default `/bin/sh`), or program `cmd` with `args`
    /// directly (needs `--allow-exec`), and returns its stdout; fails when it exits
    /// non-zero.
    #[expect(clippy::too_many_arguments, reason = "upstream's signature")]
    fn exec<'v>(
        #[starlark(require = pos)] cmd: &str,
        #[starlark(default = UnpackList::default())] args: UnpackList<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] shell: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] env: NoneOr<
            UnpackDictEntries<&str, Value<'v>>,
        >,
        #[starlark(require = named, default = NoneOr::None)] cwd: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] userid: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] groupid: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] input: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] output: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<String> {
        let opts = exec::Options::unpack(
            "os.exec",
            cmd,
            &args.items,
            shell,
            env,
            cwd,
            timeout,
            userid,
            groupid,
            input,
            output,
        )?;
        exec::run_checked(eval, "os.exec", opts)
    }

    /// Runs a program like `exec()`, returning `.stdout`, `.stderr`, `.code`, `.ok`
    /// and `.error` instead of failing on a non-zero exit.
    #[expect(clippy::too_many_arguments, reason = "upstream's signature")]
    fn try_exec<'v>(
        #[starlark(require = pos)] cmd: &str,
        #[starlark(default = UnpackList::default())] args: UnpackList<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] shell: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] env: NoneOr<
            UnpackDictEntries<&str, Value<'v>>,
        >,
        #[starlark(require = named, default = NoneOr::None)] cwd: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] userid: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] groupid: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] input: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] output: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = exec::Options::unpack(
            "os.try_exec",
            cmd,
            &args.items,
            shell,
            env,
            cwd,
            timeout,
            userid,
            groupid,
            input,
            output,
        )?;
        exec::run_captured(eval, "os.try_exec", opts)
    }
}

/// A value as the text a child process gets (strings as-is, others as `str()`).
fn text_of(v: Value<'_>) -> String {
    if let Some(p) = v.downcast_ref::<super::fs::Path>() {
        // A Path's str() is `path("...")`; a program wants the path itself.
        return p.0.clone();
    }
    v.unpack_str()
        .map_or_else(|| v.to_value().to_str(), str::to_owned)
}
