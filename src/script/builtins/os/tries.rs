//! The `try_` forms of `os.cwd()` and `os.home()`, written by hand because each names
//! itself (`os.try_cwd`, `os.try_home`) in its messages and permission check; the other
//! functions' `try_` forms are derived ([`crate::script::try_form`]).

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::{cwd, home, message};
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
}
