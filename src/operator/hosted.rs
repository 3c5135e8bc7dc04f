//! One StarlarkController's running controller: its script evaluated under its own
//! identity, with the resource's overrides, started in-process and stoppable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::control::controller::{Config, Controller};
use crate::control::handlers::Handlers;
use crate::control::request::ControlRequest;
use crate::control::spec::ControlSpec;
use crate::k8s::session::Session;
use crate::k8s::session::SessionCell;
use crate::library::hosted::library;
use crate::operator::resource::ControlOverrides;
use crate::script::host::{Host, Limits};
use crate::script::permissions::Permissions;
use crate::script::printer::{self, Printer};
use crate::script::run::{Finished, run_text};
use crate::script::vars::Vars;

/// How long a script's top level may run before its controller starts.
const TOP_LEVEL_BUDGET: Duration = Duration::from_secs(30);

/// How often a running top level is looked at for a park (see `memory::is_parked`).
const PARKED_POLL: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The script failed (the message is the rendered diagnostic with file:line:col).
    #[error("{0}")]
    Evaluate(String),
    #[error("the script never calls k8s.control(), so there is no controller to run")]
    FindControl,
    #[error("an override is invalid: {0}")]
    Override(String),
    #[error("starting the controller: {0}")]
    Start(#[from] crate::control::controller::Error),
    #[error("the script's evaluation thread failed: {0}")]
    Join(String),
    #[error(transparent)]
    Quota(#[from] super::quota::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to run.
pub struct Plan {
    /// `<namespace>/<name>`: the controller's name in logs and metrics.
    pub name: String,
    /// Shown in messages as the script's file name.
    pub file_name: String,
    pub script: String,
    pub vars: BTreeMap<String, String>,
    pub overrides: Option<ControlOverrides>,
    /// The namespace of the StarlarkController: the script's default namespace.
    pub namespace: String,
    pub handler_budget: Duration,
    /// The operator's floors and caps.
    pub limits: Limits,
    /// Confined to `namespace` (a StarlarkController): the watch is there, whatever
    /// the script says.
    pub confined: bool,
    /// The operator's lease, when it elects a leader: the hosted controller writes
    /// nothing once it has run out.
    pub lease: Option<std::sync::Arc<crate::control::leader::Validity>>,
    /// The operator's worker threads, shared by every hosted controller.
    pub pool: crate::control::pool::Pool,
    /// The operator's shared informers, entered as this controller's ServiceAccount.
    pub informers: crate::control::informers::Access,
    /// The operator's discovery cache: what the API server serves is the same for every
    /// identity (discovery is readable by all), so 1000 controllers ask once, not 1000
    /// times, and hold one copy.
    pub discovery: crate::k8s::discovery::Discovery,
    /// Whose turn it is to run a top level, per namespace.
    pub turns: Arc<super::turns::Turns>,
    /// What each namespace's controllers keep in memory.
    pub quota: Arc<super::quota::Quota>,
    /// Where its lines and reconciles are kept for `kite logs`.
    pub journal: Arc<crate::script::journal::Journal>,
    /// What its watches' caches held when it was last stopped for holding too much
    /// (see [`Hosted::recharge`]), charged from the start so that it is refused before
    /// its caches fill again.
    pub reserve: usize,
}

/// A running hosted controller.
pub struct Hosted {
    pub controller: Controller,
    /// The kind it watches, as the script names it.
    pub watching: String,
    /// Options the operator ignored, for status (health_port, leader_election).
    pub ignored: Vec<String>,
    /// The memory it keeps, charged to its namespace until it is dropped.
    charge: super::quota::Charge,
    /// What its top level left (the part of the charge that does not change).
    kept: usize,
    /// Its way into the shared informers, whose caches it is charged a share of.
    access: crate::control::informers::Access,
    /// Whether those caches count against its namespace: a StarlarkController's do. A
    /// ClusterStarlarkController's watch what every namespace holds, so charging them
    /// to the operator's namespace would let any tenant's objects get an
    /// administrator's controller stopped; its author, a cluster administrator, sizes
    /// the operator for them (`resources.limits.memory`).
    charges_caches: bool,
}

impl Hosted {
    /// Charges what the controller keeps now: what its top level left plus its share of
    /// the caches of what it watches (`shares`, from [`Informers::shares`]). A tenant's controllers
    /// watching with many distinct selectors make the operator keep a copy each; this
    /// counts them against `--namespace-memory` like everything else they keep.
    ///
    /// # Errors
    /// The namespace would keep more than its limit: the message names the caches'
    /// share; the caller stops the controller. Returns the share that did not fit.
    ///
    /// [`Informers::shares`]: crate::control::informers::Informers::shares
    pub fn recharge(&mut self, shares: &HashMap<u64, usize>) -> Result<(), (usize, String)> {
        let cached = if self.charges_caches {
            shares.get(&self.access.id()).copied().unwrap_or(0)
        } else {
            0
        };
        self.charge
            .resize(self.kept.saturating_add(cached))
            .map_err(|e| {
                (
                    cached,
                    format!(
                        "the caches of what it watches grew to {:.1} MiB: {e}",
                        mib(cached)
                    ),
                )
            })
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a message: one decimal is all it shows"
)]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Evaluates the script as `client`'s identity and starts its controller.
///
/// # Errors
/// A script error, a script without `k8s.control()`, a bad override, or a start failure
/// (an unknown kind).
pub async fn start(plan: Plan, client: kube::Client) -> Result<Hosted> {
    let runtime = tokio::runtime::Handle::current();
    let vars = Vars::from_map(plan.vars.clone());
    // A hosted script may talk to the cluster, as its ServiceAccount, and nothing else.
    let permissions = Permissions::k8s_only();
    let mut host = Host::new(library(), vars, permissions, runtime);
    host.printer = Printer::hosted(&plan.name, printer::HOSTED).with_journal(plan.journal.clone());
    host.limits = plan.limits.clone();
    let host = Arc::new(host);
    let mut session = Session::from_client(client, plan.namespace.clone(), false);
    session.discovery = plan.discovery.clone();
    session.instance = Some("kite-operator".to_owned());
    let session = Arc::new(session);
    host.ext::<SessionCell>().pin(session.clone());
    let finished = evaluate(&plan, host.clone()).await?;
    let Finished::HandedOff {
        handoff,
        module,
        positions,
        kept,
    } = finished
    else {
        return Err(Error::FindControl);
    };
    // What the top level left is kept as long as the controller runs: the module's
    // heap, and the Rust-side parts of its values (a dict's table), which the heap's
    // own count leaves out.
    let kept = kept.max(module.frozen_heap().allocated_bytes());
    let charge = plan
        .quota
        .charge(&plan.namespace, kept.saturating_add(plan.reserve))?;
    let access = plan.informers.clone();
    let request = ControlRequest::from_handoff(handoff).map_err(Error::Evaluate)?;
    let handlers = Handlers::of_script(module, positions).map_err(Error::Evaluate)?;
    let mut spec = request.spec;
    let ignored = ignore_hosting_options(&mut spec);
    if let Some(o) = &plan.overrides {
        apply_overrides(&mut spec, o, &plan.limits).map_err(Error::Override)?;
    }
    if plan.confined {
        match &spec.namespace {
            None => spec.namespace = Some(plan.namespace.clone()),
            Some(n) if *n == plan.namespace => {}
            Some(n) => {
                return Err(Error::Override(format!(
                    "k8s.control(namespace = {n:?}): a StarlarkController watches only its own namespace {:?}",
                    plan.namespace
                )));
            }
        }
    }
    let watching = spec.kind.clone();
    let config = Config {
        name: plan.name,
        spec,
        handlers,
        host,
        session,
        handler_budget: plan.handler_budget,
        leader: None,
        outer_lease: plan.lease,
        pool: Some(crate::control::pool::Share {
            pool: plan.pool,
            group: plan.namespace.clone(),
        }),
        informers: Some(plan.informers),
    };
    let controller = Controller::start(config).await?;
    Ok(Hosted {
        controller,
        watching,
        ignored,
        charge,
        kept,
        access,
        charges_caches: plan.confined,
    })
}

/// Runs the script's top level on a thread of its own, with `eval_host`, within its
/// budget.
async fn evaluate(plan: &Plan, eval_host: Arc<Host>) -> Result<Finished> {
    let (file_name, script) = (plan.file_name.clone(), plan.script.clone());
    let turn = plan.turns.turn(&plan.namespace).await;
    // A thread of its own with a deep stack: parsing and compiling recurse per level.
    let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let tag = crate::script::memory::new_tag();
    let evaluation = crate::script::deep::spawn_deep({
        let tid = tid.clone();
        move || {
            let _turn = turn;
            crate::script::memory::tag_thread(tag);
            if let Some(id) = crate::script::priority::thread_id() {
                tid.store(id, std::sync::atomic::Ordering::Relaxed);
            }
            run_text(&file_name, &script, &eval_host, TOP_LEVEL_BUDGET)
        }
    })
    .map_err(Error::Join)?;
    // The budget ends the script; a thread parked for good (memory::Overrun::Park)
    // never returns, and is told apart by its tag at once; one stuck in a builtin that
    // never looks at the deadline may not return for long. The controller waits for
    // neither, and the stuck one goes on at the lowest priority (holding its
    // namespace's turn, as the parked one does).
    let limit = plan.limits.memory;
    let parked = async move {
        while !crate::script::memory::is_parked(tag) {
            tokio::time::sleep(PARKED_POLL).await;
        }
        crate::script::memory::forget_parked(tag);
        Error::Evaluate(format!(
            "error: the script's top level asked for more memory than its limit allows ({} MiB, --script-memory); its thread is held until the operator restarts\n",
            limit >> 20
        ))
    };
    let timed = tokio::time::timeout(TOP_LEVEL_BUDGET + Duration::from_secs(10), evaluation);
    let finished = tokio::select! {
        finished = timed => finished,
        error = parked => return Err(error),
    };
    finished
        .map_err(|_| {
            let id = tid.load(std::sync::atomic::Ordering::Relaxed);
            crate::script::priority::lowest(Some(id).filter(|id| *id != 0));
            Error::Evaluate(format!(
                "error: the script's top level did not end within its {}s budget (it is stuck in a builtin)\n",
                TOP_LEVEL_BUDGET.as_secs()
            ))
        })?
        .map_err(|_| Error::Join("the script's thread ended without an answer".into()))?
        .map_err(|e| Error::Evaluate(e.to_string()))
}

/// Health and leader election belong to the operator in a hosted script.
fn ignore_hosting_options(spec: &mut ControlSpec) -> Vec<String> {
    let mut ignored = Vec::new();
    if let Some(port) = spec.health_port.take() {
        ignored.push(format!(
            "health_port={port} (the operator serves /healthz and /readyz)"
        ));
    }
    if spec.leader_election {
        spec.leader_election = false;
        ignored.push(
            "leader_election=True (the operator elects one leader for all controllers)".into(),
        );
    }
    ignored
}

/// Applies a StarlarkController's `spec.control` to what the script asked for.
///
/// # Errors
/// A malformed duration, an out-of-range count, or a value beyond `limits`, naming the
/// field.
pub fn apply_overrides(
    spec: &mut ControlSpec,
    o: &ControlOverrides,
    limits: &Limits,
) -> Result<(), String> {
    let duration = |field: &str, v: &str| {
        let d = crate::duration::parse(v).map_err(|e| format!("spec.control.{field}: {e}"))?;
        if !d.is_zero() {
            limits
                .check_period(field, d)
                .map_err(|e| format!("spec.control.{field}: {e}"))?;
        }
        Ok::<_, String>(d)
    };
    if let Some(ns) = &o.namespace {
        spec.namespace = Some(ns.clone());
    }
    if let Some(l) = &o.labels {
        spec.labels = Some(l.clone());
    }
    if let Some(f) = &o.field_selector {
        spec.field_selector = Some(f.clone());
    }
    if let Some(p) = &o.poll {
        spec.poll = Some(duration("poll", p)?).filter(|d| !d.is_zero());
    }
    if let Some(r) = &o.resync {
        spec.resync = Some(duration("resync", r)?).filter(|d| !d.is_zero());
    }
    if let Some(w) = o.workers {
        if w == 0 || w as usize > limits.max_workers {
            return Err(format!(
                "spec.control.workers: {w} is not between 1 and {} limit of {}",
                limits.source, limits.max_workers
            ));
        }
        spec.workers = w as usize;
    }
    if let Some(g) = o.generation_changed {
        spec.generation_changed = g;
    }
    if let Some(m) = o.max_retries {
        spec.max_retries = m;
    }
    if let Some(b) = &o.backoff {
        spec.backoff = duration("backoff", b)?;
        if spec.backoff.is_zero() {
            return Err("spec.control.backoff: must be greater than zero".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ControlSpec {
        ControlSpec {
            kind: "deployments".into(),
            namespace: None,
            labels: None,
            field_selector: None,
            poll: None,
            resync: None,
            health_port: Some(8081),
            generation_changed: false,
            watch_owned: vec![],
            watch_related: vec![],
            workers: 1,
            max_retries: 5,
            backoff: Duration::from_secs(5),
            leader_election: true,
            leader_election_id: None,
            leader_election_namespace: None,
            identity: None,
            finalizer: None,
            reconcile_arity: Some(1),
        }
    }

    #[test]
    fn overrides_replace_the_scripts_options() {
        let mut s = spec();
        let o = ControlOverrides {
            namespace: Some("team".into()),
            labels: Some("a=b".into()),
            poll: Some("1m30s".into()),
            workers: Some(4),
            max_retries: Some(0),
            ..Default::default()
        };
        apply_overrides(&mut s, &o, &Limits::default()).unwrap();
        assert_eq!(s.namespace.as_deref(), Some("team"));
        assert_eq!(s.labels.as_deref(), Some("a=b"));
        assert_eq!(s.poll, Some(Duration::from_secs(90)));
        assert_eq!((s.workers, s.max_retries), (4, 0));
        let bad = ControlOverrides {
            backoff: Some("soon".into()),
            ..Default::default()
        };
        assert!(
            apply_overrides(&mut s, &bad, &Limits::default())
                .unwrap_err()
                .starts_with("spec.control.backoff: ")
        );
    }

    #[test]
    fn overrides_cannot_pass_the_operators_floors_and_caps() {
        let hosted = Limits {
            min_period: Duration::from_secs(1),
            max_workers: 8,
            source: "the operator's",
            ..Limits::default()
        };
        for (o, says) in [
            (
                ControlOverrides {
                    poll: Some("100ms".into()),
                    ..Default::default()
                },
                "spec.control.poll: poll of 100ms is below the operator's floor of 1s",
            ),
            (
                ControlOverrides {
                    backoff: Some("0s".into()),
                    ..Default::default()
                },
                "spec.control.backoff: must be greater than zero",
            ),
            (
                ControlOverrides {
                    workers: Some(9),
                    ..Default::default()
                },
                "spec.control.workers: 9 is not between 1 and the operator's limit of 8",
            ),
        ] {
            let mut s = spec();
            assert_eq!(apply_overrides(&mut s, &o, &hosted).unwrap_err(), says);
        }
    }

    #[test]
    fn health_and_leader_election_are_ignored_and_said_so() {
        let mut s = spec();
        let ignored = ignore_hosting_options(&mut s);
        assert_eq!(s.health_port, None);
        assert!(!s.leader_election);
        assert_eq!(ignored.len(), 2);
        assert!(ignored[0].starts_with("health_port=8081"));
    }
}
