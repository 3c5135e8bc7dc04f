//! The k8s.control() reconcile runtime: informers, a work queue, worker threads,
//! handlers, health, leader election. A controller is a value that can be started and
//! stopped in-process, several per process.
//!
//! A [`controller::Controller`] owns the state its parts share (`shared`): informer
//! changes are turned into work by `routing`, and `worker` threads do it (the work
//! itself, per key, is in `reconcile`).

pub mod children;
pub mod controller;
pub mod finalizer;
pub mod handlers;
pub mod informer;
pub mod leader;
pub mod manual;
pub mod metrics;
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
