//! The k8s.control() reconcile runtime: informers, a work queue, worker threads,
//! handlers, health, leader election. A controller is a value that can be started and
//! stopped in-process, several per process.

pub mod controller;
pub mod echo;
pub mod finalizer;
pub mod handlers;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod spec;
pub mod standalone;
pub mod watches;
mod worker;
