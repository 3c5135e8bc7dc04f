//! The `k8s` Starlark module: client calls, `k8s.obj` builders and kind resolution.

mod calls;
pub mod discovery;
pub mod event;
pub mod manifest;
pub mod module;
pub mod obj;
pub mod ops;
pub mod selector;
pub mod session;
pub mod try_call;
pub mod wait;
pub mod watch;
pub mod write_log;
