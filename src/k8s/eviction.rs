//! Evicting one pod through the `pods/eviction` subresource, so PodDisruptionBudgets are
//! honoured: a refused eviction (429) is retried with backoff until the drain's deadline.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, PostParams};
use tokio::time::Instant;

use super::ops::{Error, Result};
use super::session::Session;

/// The first wait after a refused eviction; kubectl waits 5s each time, kite starts
/// sooner and backs off to that.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What to do after one eviction request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The pod is being evicted (or was already gone).
    Done,
    /// A budget refuses it now; ask again after this long.
    Retry(Duration),
    /// A budget still refuses it and the deadline leaves no time to ask again.
    Blocked,
    /// Any other failure: give up on this pod.
    Fail,
}

/// The decision after an eviction answered with `code` (None: success), given the wait
/// before the previous retry and the time left.
pub fn next(code: Option<u16>, previous: Option<Duration>, left: Duration) -> Next {
    match code {
        // 404: the pod went away by itself, which is what eviction is for.
        None | Some(404) => Next::Done,
        Some(429) => {
            let wait = previous.map_or(FIRST_BACKOFF, |p| (p * 2).min(MAX_BACKOFF));
            if wait >= left {
                Next::Blocked
            } else {
                Next::Retry(wait)
            }
        }
        Some(_) => Next::Fail,
    }
}

/// Evicts `namespace/name`, retrying while a PodDisruptionBudget refuses, until
/// `deadline`. With `dry_run` the API server only checks the eviction.
///
/// # Errors
/// `Invalid` naming the pod when a budget blocked it until the deadline; the API's
/// error for any other refusal.
pub async fn evict(
    session: &Session,
    namespace: &str,
    name: &str,
    grace_period: Option<u32>,
    deadline: Instant,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(session.client_here(), namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            grace_period_seconds: grace_period,
            dry_run: session.dry_run,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: session.dry_run,
            ..Default::default()
        },
    };
    let mut previous = None;
    loop {
        // kube's client retries 429s itself (honouring Retry-After), so one request can
        // outlast the deadline: bound it by what is left.
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(outcome) = tokio::time::timeout(left, api.evict(name, &params)).await else {
            return Err(Error::Invalid(format!(
                "evicting pod {namespace}/{name}: still refused when the timeout ran out (a PodDisruptionBudget allows no disruption now)"
            )));
        };
        let outcome = outcome.map_err(Error::from);
        let code = match &outcome {
            Ok(_) => None,
            Err(e) => Some(e.code().unwrap_or(0)),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match next(code, previous, left) {
            Next::Done => return Ok(()),
            Next::Retry(wait) => {
                previous = Some(wait);
                tokio::time::sleep(wait).await;
            }
            Next::Blocked => {
                return Err(Error::Invalid(format!(
                    "evicting pod {namespace}/{name}: a PodDisruptionBudget refused it until the timeout ({})",
                    outcome.err().map(|e| e.to_string()).unwrap_or_default()
                )));
            }
            Next::Fail => {
                let e = outcome.err().map(|e| e.to_string()).unwrap_or_default();
                return Err(Error::Invalid(format!(
                    "evicting pod {namespace}/{name}: {e}"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn success_and_gone_pods_are_done() {
        assert_eq!(next(None, None, S), Next::Done);
        assert_eq!(next(Some(404), Some(S), Duration::ZERO), Next::Done);
    }

    #[test]
    fn budget_refusals_back_off_until_the_deadline() {
        let left = Duration::from_mins(1);
        assert_eq!(next(Some(429), None, left), Next::Retry(FIRST_BACKOFF));
        assert_eq!(
            next(Some(429), Some(FIRST_BACKOFF), left),
            Next::Retry(FIRST_BACKOFF * 2)
        );
        assert_eq!(
            next(Some(429), Some(MAX_BACKOFF), left),
            Next::Retry(MAX_BACKOFF)
        );
        assert_eq!(next(Some(429), Some(MAX_BACKOFF), 4 * S), Next::Blocked);
        assert_eq!(next(Some(429), None, Duration::ZERO), Next::Blocked);
    }

    #[test]
    fn other_errors_fail_at_once() {
        assert_eq!(next(Some(500), None, S * 60), Next::Fail);
        assert_eq!(next(Some(403), None, S * 60), Next::Fail);
        assert_eq!(next(Some(0), None, S * 60), Next::Fail);
    }
}
