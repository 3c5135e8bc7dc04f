//! kite: Kubernetes controllers written as Starlark scripts.
//!
//! # Layout
//!
//! - [`cli`]: the command-line interface (clap types only; `main.rs` wires them).
//! - [`version`]: build and version information.
//!
//! Integration tests live in `tests/` and run against the local control plane that
//! `tests/cluster` builds from Go modules.

pub mod children;
pub mod cli;
pub mod control;
pub mod duration;
pub mod http;
pub mod k8s;
pub mod script;
pub mod version;
