//! The `os` functions upstream predeclares as globals (`exec`, `try_exec`, `env`,
//! `setenv`, `cwd`, `chdir`, `hostname`, `pid`, `ppid`, `which`, `username`, `userid`,
//! `groupid`, `home`, `exit`) and its `user` struct. Each checks what `os.X` checks;
//! most are the very function `os.X` is ([`crate::script::try_form::aliases`]).

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::dict::UnpackDictEntries;
use starlark::values::list::UnpackList;
use starlark::values::none::{NoneOr, NoneType};

use super::{current_gid, current_uid, cwd, exec, exit, home, username};

/// The `os` functions that are the same function as a global: each checks and says
/// what `os.X` does.
const SAME: &[&str] = &[
    "env", "setenv", "chdir", "which", "hostname", "pid", "ppid", "username", "userid", "groupid",
];

/// The `os` functions upstream also predeclares as globals, and its `user` struct.
pub fn os_globals(builder: &mut GlobalsBuilder) {
    crate::script::try_form::aliases(builder, super::OS_FUNCTIONS.globals(), SAME);
    alias_functions(builder);
    builder.namespace("user", user_functions);
}

/// The globals written by hand: each names itself (`exec`, not `os.exec`) in its
/// messages and permission check.
#[starlark_module]
fn alias_functions(builder: &mut GlobalsBuilder) {
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

    /// `os.cwd`: the script's working directory.
    fn cwd(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<String> {
        cwd(eval, "cwd")
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
