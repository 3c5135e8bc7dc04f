//! The integration tests, one binary against the local control plane (`tests/cluster`).
//! Each file is a group that runs alone with a filter: `cargo test --test it operator::`.
//! Tests share the cluster, so each makes its own namespace; the few that run
//! cluster-wide controllers (the seed's examples) hold `support::exclusive()`, and the
//! tests that stop the API server live in their own binary (`tests/apiserver`).

#![allow(
    clippy::pedantic,
    reason = "the integration tests are scripts of kubectl calls and assertions; pedantic does not make them easier to read (docs/design/lints.md)"
)]

mod support;

mod artifacts;
mod authority;
mod chaos;
mod chaos_etcd;
mod cluster;
mod control;
mod control_leader;
mod day_two;
mod dev;
mod discovery;
mod escalation;
mod golden;
mod k8s_ops;
mod k8s_pods;
mod leader;
mod logs;
mod lsp;
mod obj_crd;
mod operator;
mod operator_scale;
mod parity;
mod release;
mod run;
mod security;
mod security_limits;
mod security_webhook;
mod shards;
mod sharing;
mod standard;
mod starlark_controller;
mod starlark_controller_crd;
mod staticsite;
mod tenancy;
mod tenant_bombs;
mod tester;
mod webhook;
