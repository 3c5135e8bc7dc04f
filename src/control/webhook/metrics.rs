//! The webhook's review counts and latency, in the Prometheus text format that its
//! `/metrics` serves.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::review::Ending;

/// Upper bounds (seconds) of the review duration buckets: the API server waits 30 s at
/// most.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

type Labels = Vec<(String, String)>;

/// One webhook's counts.
pub struct Metrics {
    registry: Registry,
    reviews: Family<Labels, Counter>,
    errors: Counter,
    /// All reviews, for /healthz (the histogram keeps its count to itself).
    total: Counter,
    duration: Histogram,
    path: String,
}

impl Metrics {
    pub fn new(path: &str) -> Self {
        let mut registry = Registry::with_prefix("kite_webhook");
        let reviews = Family::<Labels, Counter>::default();
        let errors = Counter::default();
        let duration = Histogram::new(BUCKETS);
        registry.register(
            "reviews",
            "Admission reviews answered, by path and result (allowed, patched, refused, failed)",
            reviews.clone(),
        );
        registry.register(
            "handler_errors",
            "Reviews whose handler raised, returned a bad value or ran over its budget",
            errors.clone(),
        );
        registry.register(
            "review_duration_seconds",
            "Time taken to answer an admission review",
            duration.clone(),
        );
        Self {
            registry,
            reviews,
            errors,
            total: Counter::default(),
            duration,
            path: path.to_owned(),
        }
    }

    /// Counts one answered review.
    pub fn record(&self, ending: &Ending, took: Duration) {
        let result = match ending {
            Ending::Allowed => "allowed",
            Ending::Patched => "patched",
            Ending::Refused(_) => "refused",
            Ending::Failed(_) => {
                self.errors.inc();
                "failed"
            }
        };
        self.reviews
            .get_or_create(&vec![
                ("path".to_owned(), self.path.clone()),
                ("result".to_owned(), result.to_owned()),
            ])
            .inc();
        self.total.inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// Reviews answered so far.
    pub fn reviews(&self) -> u64 {
        self.total.get()
    }

    /// Handler failures so far.
    pub fn errors(&self) -> u64 {
        self.errors.get()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_counted_by_result() {
        let m = Metrics::new("/v");
        m.record(&Ending::Allowed, Duration::from_millis(3));
        m.record(&Ending::Failed("x".into()), Duration::from_millis(3));
        let text = m.render();
        assert!(
            text.contains("kite_webhook_reviews_total{path=\"/v\",result=\"allowed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kite_webhook_handler_errors_total 1"),
            "{text}"
        );
        assert!(
            text.contains("kite_webhook_review_duration_seconds_count 2"),
            "{text}"
        );
        assert_eq!(m.errors(), 1);
    }
}
