//! A container's log through the `pods/log` subresource: read whole (`k8s.logs`) or
//! followed line by line (`k8s.logs_follow`, in [`follow`]).

pub mod follow;

use std::time::Duration;

use kube::api::LogParams;

use super::exec::describe;
use super::pods::{self, PodRef};

/// The most of a log one `k8s.logs` call reads (the API server's `limitBytes`), so a
/// huge log cannot exhaust memory.
pub const MAX_LOG_BYTES: i64 = 32 << 20;

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pod(#[from] pods::Error),
    #[error("reading the log of {target}: {}", describe(source))]
    Fetch {
        target: String,
        #[source]
        source: kube::Error,
    },
    #[error("following the log of {target}: {message}")]
    Follow { target: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What part of the log to read.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// The last this many lines; 0 for all.
    pub tail: i64,
    /// Only lines newer than this.
    pub since: Option<Duration>,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
}

impl LogOptions {
    fn params(&self, container: &str) -> LogParams {
        LogParams {
            container: Some(container.to_owned()),
            tail_lines: (self.tail > 0).then_some(self.tail),
            // Rounded up, so that "500ms" still limits the log instead of meaning "all".
            since_seconds: self.since.map(|d| {
                i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(i64::MAX)
            }),
            previous: self.previous,
            ..LogParams::default()
        }
    }
}

/// The log of the pod's container as one string.
///
/// # Errors
/// The API server refusing the request or the kubelet not answering (as the message the
/// API server relays), naming the pod and container.
pub async fn fetch(pod: &PodRef, opts: &LogOptions) -> Result<String> {
    let mut params = opts.params(&pod.container);
    params.limit_bytes = Some(MAX_LOG_BYTES);
    pod.api
        .logs(&pod.name, &params)
        .await
        .map_err(|source| Error::Fetch {
            target: pod.display(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_map_onto_log_params() {
        let p = LogOptions::default().params("app");
        assert_eq!(p.container.as_deref(), Some("app"));
        assert_eq!(
            (p.tail_lines, p.since_seconds, p.previous),
            (None, None, false)
        );
        let p = LogOptions {
            tail: 10,
            since: Some(Duration::from_millis(1500)),
            previous: true,
        }
        .params("app");
        assert_eq!(
            (p.tail_lines, p.since_seconds, p.previous),
            (Some(10), Some(2), true)
        );
    }
}
