//! One elector's dealings with its Lease: what to write, given what it reads.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use super::{Error, LeaderConfig, Result};

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
pub(super) enum Attempt {
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
pub(super) struct Elector {
    api: Api<Lease>,
    pub(super) config: LeaderConfig,
    /// The lease as last read or written: the base of the leader's optimistic renewals.
    known: Option<Lease>,
    /// When `known`'s spec last changed on the local clock; see [`decide`].
    observed_at: Instant,
}

impl Elector {
    pub(super) fn new(client: kube::Client, config: LeaderConfig) -> Self {
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

    pub(super) async fn try_acquire_or_renew(
        &mut self,
        leading: bool,
        deadline: Instant,
    ) -> Result<Attempt> {
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
            self.annotate(&mut lease);
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
                    annotations: (!self.config.annotations.is_empty())
                        .then(|| self.config.annotations.clone()),
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
                self.annotate(&mut lease);
                let written = self.replace(&lease, deadline).await?;
                self.observe(written, Instant::now());
                Ok(Attempt::Leading)
            }
        }
    }

    /// Puts the configured annotations on `lease` (the holder's, kept while it holds it).
    fn annotate(&self, lease: &mut Lease) {
        if !self.config.annotations.is_empty() {
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(self.config.annotations.clone());
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
    pub(super) async fn release(&mut self) -> Result<bool> {
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
                (15 * SEC).checked_sub(Duration::from_millis(1)).unwrap()
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
    fn times_have_microsecond_precision() {
        let MicroTime(ts) = now_micro();
        assert_eq!(ts.subsec_nanosecond() % 1_000, 0);
    }
}
