//! The upstream Starkite modules kite does not provide (`ai`, `mcp`, `inventory`): each
//! is a global whose every use fails saying so, never as an undefined name.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::GlobalsBuilder;
use starlark::eval::{Arguments, Evaluator};
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, starlark_value};

/// Upstream modules that kite leaves out: LLM clients and inventories have no place in a
/// controller.
pub const UNPROVIDED: &[&str] = &["ai", "mcp", "inventory"];

/// What a script hears when it uses one of them.
pub fn message(module: &str, attr: Option<&str>) -> String {
    let what = attr.map_or_else(|| module.to_owned(), |a| format!("{module}.{a}"));
    format!(
        "{what}: kite does not provide upstream Starkite's `{module}` module (see the README's compatibility table)"
    )
}

/// One of the modules above, as a global value.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Unprovided {
    module: &'static str,
    attr: Option<String>,
}

starlark::starlark_simple_value!(Unprovided);

impl fmt::Display for Unprovided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.attr {
            None => write!(f, "<module {} (not provided by kite)>", self.module),
            Some(a) => write!(f, "<function {}.{a} (not provided by kite)>", self.module),
        }
    }
}

#[starlark_value(type = "unprovided")]
impl<'v> StarlarkValue<'v> for Unprovided {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        // Any attribute exists, so that the failure comes from the call with its
        // message, not as "no attribute".
        Some(heap.alloc(Unprovided {
            module: self.module,
            attr: Some(attribute.to_owned()),
        }))
    }

    fn invoke(
        &self,
        _me: Value<'v>,
        _args: &Arguments<'v, '_>,
        _eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        Err(starlark::Error::new_other(anyhow::anyhow!(message(
            self.module,
            self.attr.as_deref()
        ))))
    }
}

/// Adds every unprovided module as a global.
pub fn unprovided_modules(builder: &mut GlobalsBuilder) {
    for module in UNPROVIDED {
        builder.set(module, Unprovided { module, attr: None });
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn every_use_names_the_module() {
        for m in super::UNPROVIDED {
            let e = eval(&format!("{m}.anything(1, x = 2)")).unwrap_err();
            assert!(
                e.contains(&format!(
                    "{m}.anything: kite does not provide upstream Starkite's `{m}` module"
                )),
                "{e}"
            );
        }
        let e = eval("ai(1)").unwrap_err();
        assert!(
            e.contains("kite does not provide upstream Starkite's `ai`"),
            "{e}"
        );
    }

    #[test]
    fn a_script_may_still_bind_the_name() {
        assert_eq!(eval("inventory = 1\ninventory + 1").unwrap(), "2");
    }
}
