//! kite: Kubernetes controllers written as Starlark scripts.
//!
//! # Layout
//!
//! - `cli`: the command-line interface (clap types only; `main.rs` wires them).
//! - `script`: the generic Starlark host: parsing, the library of globals and the
//!   extensions the layers above keep in it, builtins, vars, permissions,
//!   loads, AttrDict, JSON conversion, diagnostics, time and memory budgets, printing,
//!   `kite run` and `kite check`.
//! - `k8s`: the `k8s` Starlark module: sessions, the HTTP/2 transport to the API
//!   server, handler threads' own connections (`k8s::local`), kind resolution (discovery), the cluster operations, events, waits,
//!   watches, and the `k8s.obj` builders.
//! - `library`: the one place that composes the host's globals with `k8s` and
//!   `k8s.control`, once per edition: `kite run`'s (everything) and, in
//!   `library::hosted`, the operator's allowlist of capabilities for untrusted scripts
//!   (`docs/design/allowlist.md`); `script` itself never names the layers above it.
//! - `control`: the `k8s.control()` runtime: spec parsing, informers, event routing,
//!   the work queue, workers and handlers, echo suppression, finalizers, secondary
//!   watches, leader election, metrics, the standalone `kite run` controller mode, and
//!   the children a reconcile returns (`control::children`: ownership, apply, ApplySet
//!   pruning, readiness and the Ready condition).
//!   `docs/design/architecture.md` draws the layers and the threads.
//! - `operator`: `kite operator`, the meta-operator: the `StarlarkController` and
//!   `ClusterStarlarkController` resources, validation, namespace confinement, the
//!   admission webhook that checks each author and signs approvals, generated
//!   identities within a ceiling, impersonation, hosted controllers.
//! - `dev`: `kite dev` (alias `kite watch`): a controller restarted in place when its
//!   script or a loaded file changes, with each reconcile and a diff of its writes shown.
//! - `lsp`: `kite lsp`, a language server over stdio: `kite check`'s diagnostics,
//!   completion and hover for the library, go-to-definition across `load()`.
//! - `fake_cluster`: an in-memory Kubernetes API server behind a real kube client, for
//!   `kite test` and `k8s.fake(...)`.
//! - `rbac`: least-privilege RBAC inferred from a script (`kite kube rbac`).
//! - `test_runner`: `kite test`: discovery of `*_test.star` files, the assertion builtins,
//!   fresh modules per test, parallel files, diffs, text/JSON/JUnit reports.
//! - `harness`: `k8s.testing.controller(...)`: a controller script driven by a test
//!   against a fake cluster, on the runtime's own reconcile path, with a virtual clock.
//! - `http`: the health and metrics server (hyper), and the connection loop the
//!   operator's webhook shares.
//! - `artifacts`: the manifests and Dockerfile that deploy a script
//!   (`kite kube gen-controller-artifacts`).
//! - `signal`: SIGTERM/SIGINT handling shared by `kite run` and `kite operator`.
//! - `tls`: rustls acceptors from PEM and self-made certificates (`k8s.webhook`, the
//!   webhook artifacts).
//! - `duration`: Go-style duration strings.
//! - `version`: build and version information.
//!
//! Integration tests live in `tests/` and run against the local control plane that
//! `tests/cluster` builds from Go modules.

//!
//! # The crate's API
//!
//! Every module is private to the crate, so the compiler reports what nothing uses.
//! The re-exports below are exactly what the `kite` binary, the integration tests and
//! the benchmarks call; anything else is free to change.

pub mod cli;

mod artifacts;
mod control;
mod dev;
mod duration;
mod fake_cluster;
mod harness;
mod http;
mod k8s;
mod library;
mod lsp;
mod operator;
mod rbac;
mod script;
mod signal;
mod test_runner;
mod tls;
mod version;

// The binary: `kite run` and `kite check`.
pub use control::handlers::Handlers;
pub use control::request::ControlRequest;
pub use control::standalone::{Options as StandaloneOptions, own_namespace, run as run_standalone};
pub use control::webhook::WebhookRequest;
pub use control::webhook::run::run as run_webhook;
pub use dev::{Options as DevOptions, run as run_dev};
pub use k8s::recorder::flush_all as flush_events;
pub use k8s::session::{KubeOptions, connect_config, kube_config};
/// The Kubernetes releases kite supports (for tests and tools that check a cluster).
pub use k8s::support;
pub use library::hosted::check as check_hosted;
pub use library::library;
pub use lsp::serve as serve_lsp;
pub use script::builtins::lifecycle::{Signals, run_deferred_frozen};
pub use script::builtins::os::ScriptExit;
pub use script::builtins::ssh::DryRun as SshDryRun;
pub use script::check::check;
pub use script::host::{Handoff, Host, Limits};
pub use script::memory::{Counting, Overrun, quiet_refusals, return_large_blocks};
pub use script::permissions::Permissions;
pub use script::run::{Finished, run as run_script};
pub use script::vars::Vars;
pub use signal::shutdown_signal;
pub use starlark::environment::FrozenModule;
pub use test_runner::{Options as TestOptions, check as check_file, run as run_tests};
pub use version::version_line;

// The binary: `kite kube`.
pub use artifacts::{
    DEFAULT_BASE_IMAGE, Options as ArtifactOptions, WebhookOptions, default_name as artifact_name,
    dockerfile, render as render_artifacts, render_webhook, to_json, to_yaml,
};
pub use rbac::{Catalog, Inference, discover, infer};

// The binary: `kite operator` and `kite crd`.
pub use control::leader::default_identity;
pub use operator::crd_yaml;
pub use operator::logs::reader::{Request as LogsRequest, reader as read_logs};
pub use operator::manager::{Options as OperatorOptions, run as run_operator};

// The integration tests.
pub use control::leader::{LeaderConfig, Validity, run as lead};
pub use k8s::discovery::{Discovery, Error as DiscoveryError};
pub use k8s::obj::obj_namespace;
pub use operator::approval::Author;
pub use operator::authority::{Permission, first_denied, impersonation};
pub use script::json::from_starlark;

#[cfg(test)]
mod layers;
#[cfg(test)]
mod lines;

/// The unit tests run with the binary's allocator, so memory limits are tested as run.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: script::memory::Counting = script::memory::Counting;
