//! The module value `load()` also binds under a loaded file's (or directory's) own name,
//! as upstream Starkite does: `load("./lib/greeter.star", "greeter")` then
//! `greeter.greet("x")`. It holds the file's public names (not `_private` ones, not what
//! the file itself loaded).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::environment::Module;
use starlark::starlark_complex_value;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

/// A loaded module's public names and values, sorted by name.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, NoSerialize, Allocative)]
#[repr(C)]
pub struct LoadedModuleGen<V: ValueLifetimeless> {
    name: String,
    names: Vec<String>,
    values: Vec<V>,
}

starlark_complex_value!(pub LoadedModule);

impl<'v> LoadedModule<'v> {
    /// The public names `module` defined (not those in `loaded`), as a module value
    /// called `name`.
    pub fn of(module: &Module<'v>, name: &str, loaded: &[String]) -> Self {
        let mut members: Vec<(String, Value<'v>)> = module
            .names()
            .filter(|n| !n.as_str().starts_with('_') && !loaded.iter().any(|l| l == n.as_str()))
            .filter_map(|n| module.get(n.as_str()).map(|v| (n.as_str().to_owned(), v)))
            .collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let (names, values) = members.into_iter().unzip();
        LoadedModule {
            name: name.to_owned(),
            names,
            values,
        }
    }

    /// Binds the module value under `name` in `module`, unless the file defines that
    /// name itself (then `load("x.star", "x")` keeps meaning the file's own `x`).
    pub fn bind(module: &Module<'v>, heap: Heap<'v>, name: &str, loaded: &[String]) {
        if module.get(name).is_some() || name.is_empty() {
            return;
        }
        let value = heap.alloc_complex(LoadedModule::of(module, name, loaded));
        module.set(name, value);
    }
}

impl<'v, V: ValueLike<'v>> LoadedModuleGen<V> {
    fn member(&self, attribute: &str) -> Option<Value<'v>> {
        let at = self
            .names
            .binary_search_by(|n| n.as_str().cmp(attribute))
            .ok()?;
        self.values.get(at).map(|v| v.to_value())
    }
}

impl<V: ValueLifetimeless> fmt::Display for LoadedModuleGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<module {:?}>", self.name)
    }
}

#[starlark_value(type = "module")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for LoadedModuleGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn get_attr(&self, attribute: &str, _heap: Heap<'v>) -> Option<Value<'v>> {
        self.member(attribute)
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        self.member(attribute).is_some()
    }

    fn dir_attr(&self) -> Vec<String> {
        self.names.clone()
    }
}
