//! Lease-based leader election with client-go's semantics, one independent elector per controller.

use std::future::Future;
use std::hash::BuildHasher;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

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
                publish(&leading, true);
            }
            Ok(Attempt::HeldBy(holder)) => {
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
    // RandomState is seeded from the OS: good enough randomness without a dependency.
    let bits =
        std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    let fraction = (bits >> 11) as f64 / (1u64 << 53) as f64;
    period + period.mul_f64(JITTER_FACTOR * fraction)
}

/// The current time as the API server stores it.
fn now_micro() -> MicroTime {
    let now = Timestamp::now();
    // Finer than microseconds, our own write would read back as a changed lease.
    MicroTime(Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

/// Awaits one API call, failing once `deadline` passes.
async fn call<T>(
    deadline: Instant,
    operation: &'static str,
    wrap: fn(kube::Error) -> Error,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T> {
    let budget = deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        // tokio's timeout polls the request first; a fast answer past the deadline is too late.
        return Err(Error::Timeout {
            operation,
            after: budget,
        });
    }
    match tokio::time::timeout(budget, request).await {
        Ok(result) => result.map_err(wrap),
        Err(_) => Err(Error::Timeout {
            operation,
            after: budget,
        }),
    }
}

/// The outcome of one acquire-or-renew attempt that reached the API server.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    HeldBy(String),
}

/// What to do with the lease as last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Another replica holds it and renewed it recently.
    Wait,
    /// We hold it.
    Renew,
    /// Nobody holds it, its holder released it, or its holder stopped renewing it.
    Take,
}

/// Decides what to do with a lease whose record has not changed for `unchanged_for`
/// on the local clock.
///
/// Like client-go, expiry is judged by when this replica saw the record change rather
/// than by its renewTime, so clock skew between replicas cannot make a live lease look
/// expired: the holder's renewals change the record, which restarts the count.
fn decide(spec: &LeaseSpec, identity: &str, unchanged_for: Duration) -> Action {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == identity {
        return Action::Renew;
    }
    if holder.is_empty() {
        return Action::Take;
    }
    let seconds = spec.lease_duration_seconds.unwrap_or_default();
    let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or_default());
    if unchanged_for < duration {
        Action::Wait
    } else {
        Action::Take
    }
}

/// The spec that makes `identity` the holder as of `now`, starting from `old` (None when
/// the lease does not exist yet).
fn held_spec(
    old: Option<&LeaseSpec>,
    identity: &str,
    lease_duration_seconds: i32,
    now: &MicroTime,
) -> LeaseSpec {
    let Some(old) = old else {
        return LeaseSpec {
            holder_identity: Some(identity.to_string()),
            lease_duration_seconds: Some(lease_duration_seconds),
            acquire_time: Some(now.clone()),
            renew_time: Some(now.clone()),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        };
    };
    let renewing = old.holder_identity.as_deref() == Some(identity);
    let transitions = old.lease_transitions.unwrap_or_default();
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(lease_duration_seconds),
        acquire_time: if renewing {
            old.acquire_time.clone().or_else(|| Some(now.clone()))
        } else {
            Some(now.clone())
        },
        renew_time: Some(now.clone()),
        lease_transitions: Some(if renewing {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        // Fields another mechanism (coordinated election) owns are kept.
        ..old.clone()
    }
}

/// The spec a leader writes when it steps down, as client-go's ReleaseOnCancel does: no
/// holder and a one-second lease, so a standby takes it on its next try.
fn released_spec(old: &LeaseSpec, now: &MicroTime) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(now.clone()),
        renew_time: Some(now.clone()),
        ..old.clone()
    }
}

/// One replica's view of the lease.
struct Elector {
    api: Api<Lease>,
    config: LeaderConfig,
    /// The lease as last read or written: the base of the leader's optimistic renewals.
    known: Option<Lease>,
    /// When `known`'s spec last changed on the local clock; see [`decide`].
    observed_at: Instant,
}

impl Elector {
    fn new(client: kube::Client, config: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            known: None,
            observed_at: Instant::now(),
        }
    }

    fn observe(&mut self, lease: Lease, at: Instant) {
        let changed = self.known.as_ref().map(|k| &k.spec) != Some(&lease.spec);
        if changed {
            self.observed_at = at;
        }
        self.known = Some(lease);
    }

    async fn try_acquire_or_renew(&mut self, leading: bool, deadline: Instant) -> Result<Attempt> {
        let identity = self.config.identity.clone();
        let seconds = self.config.lease_duration_seconds();
        let now = now_micro();
        // Like client-go, the leader first writes over the lease it last wrote, without a
        // read: one request per renewal. A conflict means the lease changed; read it.
        if leading
            && let Some(known) = &self.known
            && known
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(&identity)
        {
            let mut lease = known.clone();
            lease.spec = Some(held_spec(lease.spec.as_ref(), &identity, seconds, &now));
            match self.replace(&lease, deadline).await {
                Ok(written) => {
                    self.observe(written, Instant::now());
                    return Ok(Attempt::Leading);
                }
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        let name = self.config.lease_name.clone();
        let current = call(
            deadline,
            "getting the lease",
            Error::GetLease,
            self.api.get_opt(&name),
        )
        .await?;
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                spec: Some(held_spec(None, &identity, seconds, &now)),
            };
            let created = call(
                deadline,
                "creating the lease",
                Error::CreateLease,
                self.api.create(&PostParams::default(), &lease),
            )
            .await?;
            self.observe(created, Instant::now());
            return Ok(Attempt::Leading);
        };
        self.observe(current.clone(), Instant::now());
        let spec = current.spec.clone().unwrap_or_default();
        match decide(&spec, &identity, self.observed_at.elapsed()) {
            Action::Wait => Ok(Attempt::HeldBy(spec.holder_identity.unwrap_or_default())),
            Action::Renew | Action::Take => {
                let mut lease = current;
                // The fetched resourceVersion stays: if anyone wrote since, this is a 409.
                lease.spec = Some(held_spec(Some(&spec), &identity, seconds, &now));
                let written = self.replace(&lease, deadline).await?;
                self.observe(written, Instant::now());
                Ok(Attempt::Leading)
            }
        }
    }

    async fn replace(&self, lease: &Lease, deadline: Instant) -> Result<Lease> {
        call(
            deadline,
            "updating the lease",
            Error::UpdateLease,
            self.api
                .replace(&self.config.lease_name, &PostParams::default(), lease),
        )
        .await
    }

    /// Hands the lease back if this replica holds it; true if it did.
    async fn release(&mut self) -> Result<bool> {
        let deadline = Instant::now() + self.config.call_timeout();
        loop {
            // A fresh read, not `known`: a renewal cut short by shutdown may have landed.
            let current = call(
                deadline,
                "getting the lease",
                Error::GetLease,
                self.api.get_opt(&self.config.lease_name),
            )
            .await?;
            let Some(mut lease) = current else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released_spec(&spec, &now_micro()));
            match self.replace(&lease, deadline).await {
                Ok(_) => return Ok(true),
                // Still ours, so someone else only touched it (labels, say): read again.
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micro(seconds: i64) -> MicroTime {
        MicroTime(Timestamp::from_second(seconds).unwrap())
    }

    fn lease(holder: Option<&str>, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(duration),
            acquire_time: Some(micro(1_000)),
            renew_time: Some(micro(1_010)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn our_own_lease_is_renewed_even_when_expired() {
        assert_eq!(decide(&lease(Some("me"), 15), "me", SEC), Action::Renew);
        assert_eq!(
            decide(&lease(Some("me"), 15), "me", 100 * SEC),
            Action::Renew
        );
    }

    #[test]
    fn a_live_lease_of_another_is_left_alone() {
        assert_eq!(
            decide(&lease(Some("other"), 15), "me", Duration::ZERO),
            Action::Wait
        );
        assert_eq!(
            decide(
                &lease(Some("other"), 15),
                "me",
                15 * SEC - Duration::from_millis(1)
            ),
            Action::Wait
        );
    }

    #[test]
    fn an_expired_lease_of_another_is_taken() {
        assert_eq!(
            decide(&lease(Some("other"), 15), "me", 15 * SEC),
            Action::Take
        );
        assert_eq!(
            decide(&lease(Some("other"), 1), "me", 2 * SEC),
            Action::Take
        );
    }

    #[test]
    fn a_lease_without_holder_is_taken_at_once() {
        assert_eq!(decide(&lease(None, 15), "me", Duration::ZERO), Action::Take);
        assert_eq!(
            decide(&lease(Some(""), 15), "me", Duration::ZERO),
            Action::Take
        );
    }

    #[test]
    fn a_lease_without_duration_counts_as_expired() {
        let mut spec = lease(Some("other"), 15);
        spec.lease_duration_seconds = None;
        assert_eq!(decide(&spec, "me", Duration::ZERO), Action::Take);
        spec.lease_duration_seconds = Some(-5);
        assert_eq!(decide(&spec, "me", Duration::ZERO), Action::Take);
    }

    #[test]
    fn a_new_lease_starts_with_no_transitions() {
        let spec = held_spec(None, "me", 15, &micro(2_000));
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(micro(2_000)));
        assert_eq!(spec.renew_time, Some(micro(2_000)));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let spec = held_spec(Some(&lease(Some("me"), 15)), "me", 15, &micro(2_000));
        assert_eq!(spec.acquire_time, Some(micro(1_000)));
        assert_eq!(spec.renew_time, Some(micro(2_000)));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn taking_over_counts_a_transition() {
        let mut old = lease(Some("other"), 15);
        old.preferred_holder = Some("someone".into());
        let spec = held_spec(Some(&old), "me", 10, &micro(2_000));
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(10));
        assert_eq!(spec.acquire_time, Some(micro(2_000)));
        assert_eq!(spec.renew_time, Some(micro(2_000)));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.preferred_holder.as_deref(), Some("someone"));

        let released = released_spec(&lease(Some("other"), 15), &micro(1_500));
        let spec = held_spec(Some(&released), "me", 15, &micro(2_000));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn releasing_clears_the_holder_and_shortens_the_lease() {
        let spec = released_spec(&lease(Some("me"), 15), &micro(2_000));
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.renew_time, Some(micro(2_000)));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(decide(&spec, "other", Duration::ZERO), Action::Take);
    }

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
    fn times_have_microsecond_precision() {
        let MicroTime(ts) = now_micro();
        assert_eq!(ts.subsec_nanosecond() % 1_000, 0);
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
