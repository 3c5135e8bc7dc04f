//! The value a `try_` function returns instead of failing: `.ok`, `.value`, `.error`,
//! as upstream Starkite's `Result`.

use starlark::values::structs::AllocStruct;
use starlark::values::{Heap, Value};

/// `ok=True, value=v, error=None` on success; `ok=False, value=None, error=message`.
pub fn result<'v>(heap: Heap<'v>, outcome: Result<Value<'v>, String>) -> Value<'v> {
    let (ok, value, error) = match outcome {
        Ok(v) => (true, v, Value::new_none()),
        Err(e) => (false, Value::new_none(), heap.alloc(e)),
    };
    heap.alloc(AllocStruct([
        ("ok", Value::new_bool(ok)),
        ("value", value),
        ("error", error),
    ]))
}
