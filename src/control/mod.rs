//! The k8s.control() reconcile runtime: informers, a work queue, worker threads,
//! handlers, health, leader election. A controller is a value that can be started and
//! stopped in-process, several per process.
//!
//! A [`controller::Controller`] owns the state its parts share (`shared`): informer
//! changes are turned into work by `routing`, and the threads of a `pool` (the
//! controller's own, or one shared by the operator's hosted controllers) do it through
//! `worker` (the work itself, per key, is in `reconcile`). `manual` is the same
//! controller driven by a test instead of threads (`k8s.testing`).

pub mod children;
pub mod controller;
pub mod finalizer;
pub mod handlers;
pub mod informer;
pub mod informers;
pub mod leader;
pub mod manual;
pub mod metrics;
pub mod option;
pub mod pool;
pub mod queue;
mod reconcile;
pub mod request;
mod routing;
mod shared;
pub mod spec;
pub mod standalone;
pub mod watches;
pub mod webhook;
mod worker;
