//! The `os` functions upstream predeclares as globals (`exec`, `try_exec`, `env`,
//! `setenv`, `cwd`, `chdir`, `hostname`, `pid`, `ppid`, `which`, `username`, `userid`,
//! `groupid`, `home`, `exit`) and its `user` struct. Each checks what `os.X` checks.

#![expect(unsafe_code, reason = "getppid (libc)")]

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::dict::UnpackDictEntries;
use starlark::values::list::UnpackList;
use starlark::values::none::{NoneOr, NoneType};

use super::{
    chdir, current_gid, current_uid, cwd, exec, exit, getenv, home, hostname, setenv, username,
    which,
};

/// The `os` functions upstream also predeclares as globals, and its `user` struct.
pub fn os_globals(builder: &mut GlobalsBuilder) {
    alias_functions(builder);
    builder.namespace("user", user_functions);
}

#[starlark_module]
fn alias_functions(builder: &mut GlobalsBuilder) {
    /// `os.env`: an environment variable (needs `--allow-env`), or `default`.
    fn env(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = "")] default: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<String> {
        getenv(eval, name, default)
    }

    /// `os.setenv`: sets a variable for the rest of the script (needs `--allow-env`).
    fn setenv(
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] value: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        setenv(eval, name, value)?;
        Ok(NoneType)
    }

    /// `os.exec`: runs a program (needs `--allow-exec`) and returns its stdout.
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
            "exec",
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
        exec::run_checked(eval, "exec", opts)
    }

    /// `os.try_exec`: runs a program, returning its result instead of failing.
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
            "try_exec",
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
        exec::run_captured(eval, "try_exec", opts)
    }

    /// `os.hostname`: the machine's host name.
    fn hostname() -> anyhow::Result<String> {
        hostname()
    }

    /// `os.cwd`: the script's working directory.
    fn cwd(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        cwd(eval, "cwd")
    }
    /// `os.chdir`: moves the script's working directory (needs `--allow-fs`).
    fn chdir(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        chdir(eval, path)?;
        Ok(NoneType)
    }

    /// `os.which`: the full path of program `name` on `$PATH` (needs `--allow-exec`),
    /// or None.
    fn which(
        #[starlark(require = pos)] name: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneOr<String>> {
        Ok(NoneOr::from_option(which(eval, name)?))
    }

    /// `os.pid`: kite's process id.
    fn pid() -> anyhow::Result<i64> {
        Ok(i64::from(std::process::id()))
    }

    /// `os.ppid`: the parent of kite's process.
    fn ppid() -> anyhow::Result<i64> {
        // SAFETY: getppid cannot fail and has no preconditions.
        Ok(i64::from(unsafe { libc::getppid() }))
    }

    /// `os.username`: the name of the user kite runs as.
    fn username() -> anyhow::Result<String> {
        Ok(username())
    }

    /// `os.userid`: the id of the user kite runs as, as a string.
    fn userid() -> anyhow::Result<String> {
        Ok(current_uid().to_string())
    }

    /// `os.groupid`: the id of the group kite runs as, as a string.
    fn groupid() -> anyhow::Result<String> {
        Ok(current_gid().to_string())
    }

    /// `os.home`: the home directory (needs `--allow-fs`).
    fn home(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        home(eval, "home")
    }

    /// `os.exit`: ends the script with exit code `code` (0..255).
    fn exit(
        #[starlark(default = 0)] code: i32,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        exit(eval, "exit", code)
    }
}

/// `user.name()`, `user.id()`, `user.gid()`, `user.home()`: upstream's `user` struct.
#[starlark_module]
fn user_functions(builder: &mut GlobalsBuilder) {
    /// The name of the user kite runs as (`username()`).
    fn name() -> anyhow::Result<String> {
        Ok(username())
    }

    /// The id of the user kite runs as, as a string (`userid()`).
    fn id() -> anyhow::Result<String> {
        Ok(current_uid().to_string())
    }

    /// The id of the group kite runs as, as a string (`groupid()`).
    fn gid() -> anyhow::Result<String> {
        Ok(current_gid().to_string())
    }

    /// The home directory (`home()`, needs `--allow-fs`).
    fn home(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        home(eval, "user.home")
    }
}
