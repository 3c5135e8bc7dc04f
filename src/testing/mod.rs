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

pub use controller::signatures;

/// The `k8s.testing` namespace value, built once.
pub fn namespace() -> FrozenValue {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
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
