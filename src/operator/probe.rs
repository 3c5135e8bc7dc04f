//! The operator's own /healthz, /readyz and /metrics: alive, leading and listed, and
//! the hosted controllers' series.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use super::assembly::{Parts, stopped};
use super::manager::Result;
use super::registry::Registry;
use super::shard::Shards;
use crate::control::metrics::Scrape;

/// Serves /healthz, /readyz and /metrics on `addr` until the run stops; `/metrics`
/// behind TokenReview and SubjectAccessReview unless on loopback (and not asked to be).
///
/// # Errors
/// The address is in use or not allowed.
pub(super) async fn serve(parts: &Parts, addr: SocketAddr) -> Result<()> {
    let probe = Arc::new(Probe {
        registry: parts.registry.clone(),
        leading: parts.leading.clone(),
        synced: parts.synced.clone(),
        informers: parts.informers.clone(),
        modules: parts.ctx.modules.clone(),
        shards: parts.shards.clone(),
    });
    let gate: Option<Arc<dyn crate::http::MetricsGate>> =
        (parts.opts.secure_metrics || !addr.ip().is_loopback()).then(|| {
            Arc::new(super::metrics_access::MetricsAccess::new(
                parts.client.clone(),
            )) as _
        });
    let secured = gate.is_some();
    let (bound, serve) = crate::http::bind_gated(addr, probe, gate, stopped(&parts.stop)).await?;
    tracing::info!(%bound, secured, "serving /healthz, /readyz and /metrics");
    tokio::spawn(serve);
    Ok(())
}

struct Probe {
    registry: Arc<Registry>,
    leading: watch::Receiver<bool>,
    synced: Arc<AtomicBool>,
    informers: Arc<crate::control::informers::Informers>,
    modules: Arc<super::modules::Modules>,
    shards: Option<Arc<Shards>>,
}

impl crate::http::Probe for Probe {
    fn healthz(&self) -> Result<(), String> {
        Ok(())
    }

    fn readyz(&self) -> Result<(), String> {
        if !*self.leading.borrow() {
            return Err("not the leader".into());
        }
        if !self.synced.load(Ordering::Relaxed) {
            return Err("StarlarkControllers not listed yet".into());
        }
        Ok(())
    }

    fn metrics(&self) -> String {
        let mut scrape = Scrape::new();
        scrape.events();
        let running = i64::try_from(self.registry.running()).unwrap_or(i64::MAX);
        scrape.gauge(
            "kite_operator_controllers",
            "Hosted controllers running",
            running,
        );
        let leading = i64::from(*self.leading.borrow());
        scrape.gauge(
            "kite_operator_leader",
            "Whether this operator holds the lease",
            leading,
        );
        scrape.gauge(
            "kite_operator_informers",
            "Watches the hosted controllers share (one per resource, namespace and selectors)",
            i64::try_from(self.informers.running()).unwrap_or(i64::MAX),
        );
        scrape.gauge(
            "kite_operator_modules",
            "Distinct top levels the hosted controllers run (one per namespace, script and vars that reached nothing outside)",
            i64::try_from(self.modules.len()).unwrap_or(i64::MAX),
        );
        if let Some(shards) = &self.shards {
            scrape.gauge(
                "kite_operator_shard_controllers",
                "StarlarkControllers this replica runs (its share)",
                running,
            );
            scrape.gauge(
                "kite_operator_shard_replicas",
                "Live replicas sharing the StarlarkControllers, as this one sees them",
                i64::try_from(shards.members().len()).unwrap_or(i64::MAX),
            );
        }
        scrape.gauge(
            "kite_script_threads_parked",
            "Threads parked for good because a hosted script asked for more than its whole memory budget at once",
            i64::try_from(crate::script::memory::parked()).unwrap_or(i64::MAX),
        );
        let ready = self
            .registry
            .readiness()
            .into_iter()
            .map(|(cr, reason, ok)| {
                let labels = vec![
                    ("starlarkcontroller".to_owned(), cr),
                    ("reason".to_owned(), reason),
                ];
                (labels, i64::from(ok))
            })
            .collect();
        scrape.labelled_gauge(
            "kite_operator_ready",
            "Whether each StarlarkController's Ready condition is True, with its reason",
            ready,
        );
        let reviews = super::webhook::reviews()
            .into_iter()
            .map(|(result, n)| (vec![("result".to_owned(), result.to_owned())], n))
            .collect();
        scrape.labelled_counter(
            "kite_operator_admission_reviews",
            "Admission reviews answered, by result (approved, refused, timed_out, malformed, busy)",
            reviews,
        );
        scrape.counter(
            "kite_operator_events_dropped",
            "The operator's own Events (Started, Stopped...) dropped because their queue was full",
            super::events::dropped(),
        );
        self.registry.add_metrics(&mut scrape);
        scrape.render()
    }
}
