//! kite: Kubernetes controllers written as Starlark scripts.
//!
//! # Layout
//!
//! - [`cli`]: the command-line interface (clap types only; `main.rs` wires them).
//! - [`script`]: the Starlark host: parsing, globals and builtins, vars, permissions,
//!   loads, AttrDict, JSON conversion, diagnostics, time and memory budgets, printing,
//!   `kite run` and `kite check`.
//! - [`k8s`]: the `k8s` Starlark module: sessions, kind resolution (discovery), the
//!   cluster operations, events, waits, watches, and the `k8s.obj` builders.
//! - [`control`]: the `k8s.control()` runtime: spec parsing, informers, event routing,
//!   the work queue, workers and handlers, echo suppression, finalizers, secondary
//!   watches, leader election, metrics, and the standalone `kite run` controller mode.
//!   `docs/design/architecture.md` draws the layers and the threads.
//! - [`children`]: children returned by reconcile: ownership, apply, ApplySet pruning,
//!   readiness and the Ready condition.
//! - [`operator`]: `kite operator`, the meta-operator: the `StarlarkController` and
//!   `ClusterStarlarkController` resources, validation, namespace confinement, the
//!   admission webhook that checks each author and signs approvals, generated
//!   identities within a ceiling, impersonation, hosted controllers.
//! - [`rbac`]: least-privilege RBAC inferred from a script (`kite kube rbac`).
//! - [`http`]: the health and metrics server (hyper), and the connection loop the
//!   operator's webhook shares.
//! - [`artifacts`]: the manifests and Dockerfile that deploy a script
//!   (`kite kube gen-controller-artifacts`).
//! - [`signal`]: SIGTERM/SIGINT handling shared by `kite run` and `kite operator`.
//! - [`duration`]: Go-style duration strings.
//! - [`version`]: build and version information.
//!
//! Integration tests live in `tests/` and run against the local control plane that
//! `tests/cluster` builds from Go modules.

pub mod artifacts;
pub mod children;
pub mod cli;
pub mod control;
pub mod duration;
pub mod http;
pub mod k8s;
pub mod operator;
pub mod rbac;
pub mod script;
pub mod signal;
pub mod version;

/// The unit tests run with the binary's allocator, so memory limits are tested as run.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: script::memory::Counting = script::memory::Counting;
