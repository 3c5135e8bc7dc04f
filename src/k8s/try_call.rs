//! `k8s.try_<fn>(...)`: calls `<fn>` and returns a result (`.ok`, `.value`, `.error`)
//! instead of failing.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt::{self, Display};

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_complex_value;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

/// A bound method wrapped so that its failure becomes a value.
#[derive(Clone, Debug, Trace, Coerce, Freeze, ProvidesStaticType, Allocative, NoSerialize)]
#[repr(C)]
pub struct TryCallGen<V: ValueLifetimeless> {
    method: V,
    #[freeze(identity)]
    name: String,
}

starlark_complex_value!(pub TryCall);

impl<'v> TryCall<'v> {
    pub fn alloc(heap: Heap<'v>, name: &str, method: Value<'v>) -> Value<'v> {
        heap.alloc_complex(TryCall {
            method,
            name: name.to_owned(),
        })
    }
}

impl<V: ValueLifetimeless> Display for TryCallGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<function k8s.try_{}>", self.name)
    }
}

#[starlark_value(type = "function")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for TryCallGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        let positional: Vec<Value<'v>> = args.positions(heap)?.collect();
        let named_map = args.names_map()?;
        let named: Vec<(&str, Value<'v>)> =
            named_map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let outcome = eval
            .eval_function(self.method.to_value(), &positional, &named)
            .map_err(|e| e.without_diagnostic().to_string());
        Ok(crate::script::outcome::result(heap, outcome))
    }
}
