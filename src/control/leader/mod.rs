//! Lease-based leader election with client-go's semantics, one independent elector per controller.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

mod isolation;
mod lease;

pub use isolation::{Done, isolated};

use lease::{Attempt, Elector};

/// The longest one API call may take, so a hung connection cannot stall the election.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// client-go's JitterFactor: acquire attempts are spread over 1x to 2.2x the retry period,
/// so standbys that start together do not hit the API server in lockstep.
const JITTER_FACTOR: f64 = 1.2;

/// Why one step of the election failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("getting the lease: {0}")]
    GetLease(#[source] kube::Error),
    #[error("creating the lease: {0}")]
    CreateLease(#[source] kube::Error),
    #[error("updating the lease: {0}")]
    UpdateLease(#[source] kube::Error),
    #[error("{operation}: timed out after {after:?}")]
    Timeout {
        operation: &'static str,
        after: Duration,
    },
    #[error("invalid leader election config: {0}")]
    InvalidConfig(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether another writer got to the lease first (409): a lost race, not a fault.
    fn is_conflict(&self) -> bool {
        matches!(
            self,
            Error::CreateLease(kube::Error::Api(status))
                | Error::UpdateLease(kube::Error::Api(status))
                if status.code == 409
        )
    }
}

/// Which lease to contend for, as whom, and how often.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub namespace: String,
    /// Must be unique among the replicas contending for the lease.
    pub identity: String,
    /// How long standbys wait after the lease last changed before taking it over.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
    /// Annotations the holder keeps on the lease while it holds it (a shard replica's
    /// logs address, say).
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl LeaderConfig {
    /// A config with client-go's default timings: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(
        lease_name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            annotations: std::collections::BTreeMap::new(),
        }
    }

    /// Checks client-go's invariants, which keep two replicas from leading at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if a name or the identity is empty, the lease is shorter
    /// than a second (the Lease stores whole seconds), the renew deadline does not fit
    /// inside the lease, or a jittered retry does not fit inside the renew deadline.
    pub fn validate(&self) -> Result<()> {
        let invalid = |why: &str| Err(Error::InvalidConfig(why.to_string()));
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return invalid("the lease name and namespace must not be empty");
        }
        if self.identity.is_empty() {
            return invalid("the identity must not be empty");
        }
        if self.retry_period.is_zero() {
            return invalid("retry_period must be positive");
        }
        if self.lease_duration < Duration::from_secs(1) {
            return invalid("lease_duration must be at least 1s");
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("lease_duration must be greater than renew_deadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return invalid("renew_deadline must be greater than 1.2 x retry_period");
        }
        Ok(())
    }

    /// The lease duration as the Lease stores it: whole seconds, truncated like client-go.
    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// The budget of one API call: never longer than the leader may go without renewing.
    fn call_timeout(&self) -> Duration {
        self.renew_deadline.min(MAX_CALL_TIMEOUT)
    }
}

/// Until when this replica may act as the leader: the renew deadline of its latest
/// renewal, after which it stops whether or not it has heard that it lost the lease.
/// Writes check it first, so a process that was paused (SIGSTOP, a stalled node) and
/// resumes after a standby took over does not write on a lease it no longer holds; the
/// lease duration minus the renew deadline is the margin for requests already sent.
#[derive(Debug)]
pub struct Validity {
    base: std::time::Instant,
    /// Nanoseconds after `base`; 0: not valid.
    until: std::sync::atomic::AtomicU64,
}

impl Validity {
    /// Not valid until a renewal says so.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Validity {
            base: std::time::Instant::now(),
            until: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn valid(&self) -> bool {
        let now = self.base.elapsed().as_nanos();
        now < u128::from(self.until.load(std::sync::atomic::Ordering::Acquire))
    }

    fn extend_to(&self, until: Instant) {
        let nanos = until
            .into_std()
            .saturating_duration_since(self.base)
            .as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        self.until
            .store(nanos, std::sync::atomic::Ordering::Release);
    }

    pub fn end(&self) {
        self.until.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// The pod's name when the downward API gives it (`POD_NAME`, as the generated
/// Deployment does), so `kubectl get lease` names the leading pod; otherwise an identity
/// unique per process, `<hostname>_<pid>`.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.trim().is_empty()
    {
        return pod.trim().to_owned();
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "kite".to_string());
    format!("{hostname}_{}", std::process::id())
}

/// Runs the election until `shutdown` resolves, publishing on `leading` whether this
/// replica holds the lease.
///
/// Tries to acquire the lease every `retry_period` (with jitter); while leading, renews
/// it every `retry_period` and publishes `false` at once if it could not renew within
/// `renew_deadline`, then goes back to contending. On shutdown, a leader releases the
/// lease (client-go's ReleaseOnCancel) so a standby takes over within a retry period
/// instead of a lease duration, then publishes `false`.
///
/// Errors are logged and retried; this never returns before `shutdown` resolves. A config
/// that fails [`LeaderConfig::validate`] is logged and never leads, since its timings
/// could let two replicas lead at once.
pub async fn run(
    client: kube::Client,
    config: LeaderConfig,
    leading: watch::Sender<bool>,
    validity: std::sync::Arc<Validity>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    if let Err(e) = config.validate() {
        tracing::error!(lease = %config.lease_name, error = %e, "leader election: not contending");
        publish(&leading, false);
        shutdown.await;
        return;
    }
    let retry_period = config.retry_period;
    let renew_deadline = config.renew_deadline;
    let call_timeout = config.call_timeout();
    let mut elector = Elector::new(client, config);
    // Set while leading: when leadership ends unless the lease is renewed before.
    let mut renew_by: Option<Instant> = None;
    // A write cut short by shutdown may have taken the lease without our knowing.
    let mut interrupted = false;
    loop {
        if let Some(by) = renew_by
            && Instant::now() >= by
        {
            renew_by = None;
            validity.end();
            tracing::warn!(
                lease = %elector.config.lease_name,
                "leader election: could not renew within the renew deadline; stopped leading"
            );
            publish(&leading, false);
        }
        let started = Instant::now();
        let deadline = renew_by.map_or(started + call_timeout, |by| by.min(started + call_timeout));
        let attempt = tokio::select! {
            biased;
            () = &mut shutdown => {
                interrupted = true;
                break;
            }
            attempt = elector.try_acquire_or_renew(renew_by.is_some(), deadline) => attempt,
        };
        match attempt {
            Ok(Attempt::Leading) => {
                if renew_by.is_none() {
                    tracing::info!(
                        lease = %elector.config.lease_name,
                        identity = %elector.config.identity,
                        "leader election: became leader"
                    );
                }
                // From the start of the attempt: the renewTime we wrote is no older.
                renew_by = Some(started + renew_deadline);
                validity.extend_to(started + renew_deadline);
                publish(&leading, true);
            }
            Ok(Attempt::HeldBy(holder)) => {
                validity.end();
                if renew_by.take().is_some() {
                    tracing::warn!(
                        lease = %elector.config.lease_name,
                        %holder,
                        "leader election: another replica holds the lease; stopped leading"
                    );
                    publish(&leading, false);
                }
            }
            Err(e) if e.is_conflict() => {
                tracing::debug!(lease = %elector.config.lease_name, error = %e, "leader election: lost a race");
            }
            Err(e) => {
                tracing::warn!(lease = %elector.config.lease_name, error = %e, "leader election");
            }
        }
        let now = Instant::now();
        let wake = match renew_by {
            // Never sleep past the deadline, so losing leadership is published at once.
            Some(by) => by.min(now + retry_period),
            None => now + jittered(retry_period),
        };
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = tokio::time::sleep_until(wake) => {}
        }
    }
    // Nothing acts on the lease once it is being given up.
    validity.end();
    if renew_by.is_some() || interrupted {
        match elector.release().await {
            Ok(true) => tracing::info!(
                lease = %elector.config.lease_name,
                "leader election: released the lease"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                lease = %elector.config.lease_name,
                error = %e,
                "leader election: could not release the lease; a standby takes over once it expires"
            ),
        }
    }
    publish(&leading, false);
}

/// Sets the published value, waking receivers only when it changes.
fn publish(leading: &watch::Sender<bool>, value: bool) {
    leading.send_if_modified(|current| std::mem::replace(current, value) != value);
}

/// `period` plus up to [`JITTER_FACTOR`] times it, like client-go's `wait.Jitter`.
fn jittered(period: Duration) -> Duration {
    crate::duration::jittered(period, JITTER_FACTOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn defaults_match_client_go_and_are_valid() {
        let config = LeaderConfig::new("lease", "ns", "me");
        assert_eq!(config.lease_duration, 15 * SEC);
        assert_eq!(config.renew_deadline, 10 * SEC);
        assert_eq!(config.retry_period, 2 * SEC);
        config.validate().unwrap();
        assert_eq!(config.lease_duration_seconds(), 15);
        assert_eq!(config.call_timeout(), 10 * SEC);
    }

    #[test]
    fn unsafe_timings_are_rejected() {
        let base = LeaderConfig {
            lease_duration: 3 * SEC,
            renew_deadline: 2 * SEC,
            retry_period: Duration::from_millis(500),
            ..LeaderConfig::new("lease", "ns", "me")
        };
        base.validate().unwrap();
        assert_eq!(base.call_timeout(), 2 * SEC);
        let cases = [
            LeaderConfig {
                renew_deadline: 3 * SEC,
                ..base.clone()
            },
            LeaderConfig {
                retry_period: 2 * SEC,
                ..base.clone()
            },
            LeaderConfig {
                retry_period: Duration::ZERO,
                ..base.clone()
            },
            LeaderConfig {
                lease_duration: Duration::from_millis(900),
                renew_deadline: Duration::from_millis(800),
                retry_period: Duration::from_millis(100),
                ..base.clone()
            },
            LeaderConfig {
                identity: String::new(),
                ..base.clone()
            },
            LeaderConfig {
                lease_name: String::new(),
                ..base.clone()
            },
        ];
        for config in cases {
            assert!(
                matches!(config.validate(), Err(Error::InvalidConfig(_))),
                "{config:?}"
            );
        }
    }

    #[test]
    fn jitter_stays_within_client_go_bounds() {
        let period = Duration::from_millis(500);
        let delays: Vec<Duration> = (0..200).map(|_| jittered(period)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= period && *d <= period.mul_f64(2.2))
        );
        assert!(delays.iter().any(|d| *d != delays[0]), "jitter varies");
    }

    #[test]
    fn default_identity_names_host_and_process() {
        let identity = default_identity();
        let (host, pid) = identity.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
    }

    #[test]
    fn only_409s_are_conflicts() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            }))
        };
        assert!(Error::UpdateLease(api(409)).is_conflict());
        assert!(Error::CreateLease(api(409)).is_conflict());
        assert!(!Error::UpdateLease(api(500)).is_conflict());
        assert!(!Error::GetLease(api(409)).is_conflict());
    }
}
