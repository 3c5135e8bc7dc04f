//! `k8s.testing`: drives a controller script against a fake cluster in a test
//! (`k8s.testing.controller(...)`), with the runtime's own reconcile path and a
//! virtual clock.
//!
//! # Layout
//! - `controller`: the `k8s.testing.controller(...)` builtin and the value it returns.
//! - `driver`: loading the script, settling the informers, stepping the queue.
//! - `report`: what a step did (requeue, error, writes, events) as a Starlark value.
//! - `rollout`: `k8s.testing.ready`, the status the cluster's controllers would write.

mod controller;
mod driver;
mod report;
mod rollout;

use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder};
use starlark::values::FrozenValue;

use crate::script::library::Library;

pub use controller::signatures;

/// The library a controller under test is loaded with, as the layer above (`library`)
/// hands it in through [`namespace`]: this layer must not name `library`.
static LIBRARY: OnceLock<fn() -> &'static Library> = OnceLock::new();

/// The library [`namespace`] was handed, for the scripts `k8s.testing.controller` loads.
fn library() -> &'static Library {
    let library = LIBRARY
        .get()
        .expect("k8s.testing is reached only through the namespace, which sets the library");
    library()
}

/// The `k8s.testing` namespace value, built once. `library` is what the controllers
/// under test are loaded with (`kite run`'s library, which has this namespace in it).
pub fn namespace(library: fn() -> &'static Library) -> FrozenValue {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    LIBRARY.get_or_init(|| library);
    let globals = GLOBALS.get_or_init(|| {
        GlobalsBuilder::new()
            .with_namespace("testing", |b| {
                controller::testing_functions(b);
                controller::testing_ready(b);
            })
            .build()
    });
    // Living in a static, the value's heap outlives every module that refers to it.
    globals
        .iter()
        .find(|(name, _)| *name == "testing")
        .map_or_else(FrozenValue::new_none, |(_, v)| v)
}
