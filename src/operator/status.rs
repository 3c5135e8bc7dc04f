//! The status of a StarlarkController: what the operator decided about it, plus the
//! running controller's counts, written at most once per flush period (the counts
//! alone less often when thousands of controllers are busy, [`counts_only`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::resource::{Phase, StarlarkControllerStatus};

/// One condition as the reconciler decides it; the transition time is kept from the
/// previous status while the condition's status does not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub ok: bool,
    pub reason: String,
    pub message: String,
}

impl Verdict {
    pub fn yes(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Verdict {
            type_,
            ok: true,
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub fn no(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Verdict {
            type_,
            ok: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What the last reconcile of one StarlarkController decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub generation: i64,
    pub phase: Phase,
    /// ScriptValid, RBACReady and Ready, in that order.
    pub conditions: Vec<Verdict>,
    /// An error from validating or starting the controller.
    pub error: Option<String>,
    pub watching: Option<String>,
    pub service_account: Option<String>,
    pub started_at: Option<Time>,
    /// The command that shows its log, when the operator serves the logs API.
    pub logs: Option<String>,
}

/// What the running controller reports.
#[derive(Debug, Clone, Default)]
pub struct Live {
    pub reconciles: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    pub last_reconcile: Option<std::time::SystemTime>,
    pub recent: Vec<crate::control::metrics::Recent>,
}

fn time_of(t: std::time::SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

/// The status to write, given the previous one (for transition times).
pub fn render(
    outcome: &Outcome,
    live: &Live,
    previous: Option<&StarlarkControllerStatus>,
) -> StarlarkControllerStatus {
    let now = Time(Timestamp::now());
    let conditions = outcome
        .conditions
        .iter()
        .map(|v| {
            let status = if v.ok { "True" } else { "False" };
            let since = previous
                .and_then(|p| {
                    p.conditions
                        .iter()
                        .find(|c| c.type_ == v.type_ && c.status == status)
                })
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: v.type_.to_owned(),
                status: status.to_owned(),
                reason: v.reason.clone(),
                message: v.message.clone(),
                last_transition_time: since,
                observed_generation: Some(outcome.generation),
            }
        })
        .collect();
    StarlarkControllerStatus {
        conditions,
        phase: Some(outcome.phase),
        observed_generation: Some(outcome.generation),
        watching: outcome.watching.clone(),
        reconciles: live.reconciles,
        errors: live.errors,
        last_error: outcome.error.clone().or_else(|| live.last_error.clone()),
        last_reconcile_time: live.last_reconcile.and_then(time_of),
        service_account: outcome.service_account.clone(),
        started_at: outcome.started_at.clone(),
        logs: outcome.logs.clone(),
        // Written only by the claim (operator::shard), never by a status flush.
        replica: None,
        recent_reconciles: live
            .recent
            .iter()
            .filter_map(|r| {
                Some(super::resource::RecentReconcile {
                    time: time_of(r.at)?,
                    object: r.key.clone(),
                    trigger: r.trigger.clone(),
                    duration_ms: crate::duration::millis(r.duration),
                    result: r.outcome.label().to_owned(),
                    error: r.error.clone(),
                })
            })
            .collect(),
    }
}

/// Whether `next` differs from `written` only in the running controller's counts (its
/// reconciles and errors, their times and its last error's text): news that can wait,
/// unlike a decision (phase, conditions) or a first error. Every field is named, so
/// that a new one has to be placed on one side or the other.
pub fn counts_only(next: &StarlarkControllerStatus, written: &StarlarkControllerStatus) -> bool {
    fn decided(s: &StarlarkControllerStatus) -> impl PartialEq + '_ {
        let StarlarkControllerStatus {
            conditions,
            phase,
            observed_generation,
            watching,
            service_account,
            started_at,
            replica,
            logs,
            reconciles: _,
            errors: _,
            last_error: _,
            last_reconcile_time: _,
            recent_reconciles: _,
        } = s;
        (
            conditions,
            phase,
            observed_generation,
            watching,
            service_account,
            (started_at, replica, logs),
        )
    }
    decided(next) == decided(written) && next.last_error.is_some() == written.last_error.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool) -> Outcome {
        Outcome {
            generation: 3,
            phase: if ok { Phase::Running } else { Phase::Failed },
            conditions: vec![Verdict {
                type_: "Ready",
                ok,
                reason: "R".into(),
                message: "m".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let first = render(&outcome(true), &Live::default(), None);
        let mut earlier = first.clone();
        earlier.conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        let again = render(&outcome(true), &Live::default(), Some(&earlier));
        assert_eq!(
            again.conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        let flipped = render(&outcome(false), &Live::default(), Some(&earlier));
        assert_ne!(
            flipped.conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        assert_eq!(flipped.observed_generation, Some(3));
        assert_eq!(flipped.conditions[0].observed_generation, Some(3));
    }

    #[test]
    fn an_outcome_error_wins_over_the_controllers() {
        let mut o = outcome(false);
        o.error = Some("c.star:1:1: bad".into());
        let live = Live {
            errors: 2,
            last_error: Some("later".into()),
            ..Default::default()
        };
        assert_eq!(
            render(&o, &live, None).last_error.as_deref(),
            Some("c.star:1:1: bad")
        );
        let live_only = render(&outcome(true), &live, None);
        assert_eq!(live_only.last_error.as_deref(), Some("later"));
        assert_eq!(live_only.errors, 2);
    }

    #[test]
    fn counts_can_wait_and_decisions_cannot() {
        let written = render(&outcome(true), &Live::default(), None);
        let busier = Live {
            reconciles: 7,
            errors: 1,
            last_error: Some("x".into()),
            last_reconcile: Some(std::time::SystemTime::now()),
            recent: Vec::new(),
        };
        let counted = render(&outcome(true), &busier, Some(&written));
        assert_ne!(counted, written);
        assert!(!counts_only(&counted, &written), "a first error");
        let busiest = Live {
            reconciles: 9,
            last_error: Some("y".into()),
            ..busier.clone()
        };
        let recounted = render(&outcome(true), &busiest, Some(&counted));
        assert!(
            counts_only(&recounted, &counted),
            "another error, more reconciles"
        );
        let decided = render(&outcome(false), &busier, Some(&written));
        assert!(!counts_only(&decided, &written), "Ready went False");
        let mut moved = outcome(true);
        moved.watching = Some("apps/v1 Deployment".into());
        assert!(!counts_only(
            &render(&moved, &Live::default(), Some(&written)),
            &written
        ));
    }
}
