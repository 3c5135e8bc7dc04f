//! The `try_` forms of the `os` functions that have no arguments (`os.try_cwd()`, ...):
//! upstream offers `try_X` for every function of a module.

#![expect(unsafe_code, reason = "getppid (libc)")]

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::{current_gid, current_uid, cwd, home, hostname, message, username};
use crate::script::outcome::result;

/// `outcome` as a Result value.
fn wrap<'v>(eval: &Evaluator<'v, '_, '_>, outcome: anyhow::Result<String>) -> Value<'v> {
    let heap = eval.heap();
    result(
        heap,
        outcome.map(|s| heap.alloc(s)).map_err(|e| message(&e)),
    )
}

#[starlark_module]
pub(super) fn os_tries(builder: &mut GlobalsBuilder) {
    /// `cwd()` as a result.
    fn try_cwd<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let outcome = cwd(eval, "os.try_cwd");
        Ok(wrap(eval, outcome))
    }

    /// `home()` as a result.
    fn try_home<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let outcome = home(eval, "os.try_home");
        Ok(wrap(eval, outcome))
    }

    /// `hostname()` as a result.
    fn try_hostname<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        Ok(wrap(eval, hostname()))
    }

    /// `username()` as a result.
    fn try_username<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        Ok(wrap(eval, Ok(username())))
    }

    /// `userid()` as a result.
    fn try_userid<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        Ok(wrap(eval, Ok(current_uid().to_string())))
    }

    /// `groupid()` as a result.
    fn try_groupid<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        Ok(wrap(eval, Ok(current_gid().to_string())))
    }

    /// `pid()` as a result.
    fn try_pid<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let heap = eval.heap();
        Ok(result(heap, Ok(heap.alloc(std::process::id()))))
    }

    /// `ppid()` as a result.
    fn try_ppid<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let heap = eval.heap();
        // SAFETY: getppid cannot fail and has no preconditions.
        let ppid = unsafe { libc::getppid() };
        Ok(result(heap, Ok(heap.alloc(ppid))))
    }
}
