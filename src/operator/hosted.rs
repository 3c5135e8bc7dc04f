//! One StarlarkController's running controller: its script evaluated under its own
//! identity, with the resource's overrides, started in-process and stoppable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::modules::TopLevel;
use crate::control::controller::{Config, Controller};
use crate::control::handlers::Handlers;
use crate::control::request::ControlRequest;
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
    /// The namespace's turn to run a top level, taken before anything stopped: given
    /// back as soon as the top level ends, or at once when an equal one is shared.
    pub turn: Option<super::turns::Turn>,
    /// What each namespace's controllers keep in memory.
    pub quota: Arc<super::quota::Quota>,
    /// Where its lines and reconciles are kept for `kite logs`.
    pub journal: Arc<crate::script::journal::Journal>,
    /// What its watches' caches held when it was last stopped for holding too much
    /// (see [`Hosted::recharge`]), charged from the start so that it is refused before
    /// its caches fill again.
    pub reserve: usize,
    /// The top levels other controllers evaluated, to share.
    pub modules: Arc<super::modules::Modules>,
    /// The username of the author whose approval runs it: only that author's
    /// controllers share a top level.
    pub author: String,
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
    /// Its top level, held so that others of the same script find it.
    _top: Arc<super::modules::TopLevel>,
}

impl Hosted {
    /// Charges what the controller keeps now: what its top level left plus its share of
    /// the caches of what it watches (`shares`, from [`Informers::shares`]). A tenant's controllers
    /// watching with many distinct selectors make the operator keep a copy each; this
    /// counts them against `--namespace-memory` like everything else they keep. So do
    /// the object versions its waiting events keep alive; when they do not fit, they
    /// are collapsed to one reconcile of each object's current state (see [`fit`]).
    ///
    /// # Errors
    /// The namespace would keep more than its limit: the message names the caches'
    /// share; the caller stops the controller. Returns the share that did not fit.
    ///
    /// [`Informers::shares`]: crate::control::informers::Informers::shares
    pub fn recharge(&mut self, shares: &HashMap<u64, usize>) -> Result<(), (usize, String)> {
        let (cached, waiting) = if self.charges_caches {
            (
                shares.get(&self.access.id()).copied().unwrap_or(0),
                self.controller.waiting(),
            )
        } else {
            (0, 0)
        };
        let controller = &self.controller;
        let collapsed = fit(&mut self.charge, self.kept, cached, waiting, || {
            controller.collapse_waiting()
        })?;
        if let Some(dropped) = collapsed {
            tracing::warn!(controller = %controller.name(), dropped, waiting_mib = %format!("{:.1}", mib(waiting)), "its waiting events do not fit its namespace's memory limit; collapsed them to one reconcile of each object's current state");
        }
        Ok(())
    }
}

/// Charges `kept + cached + waiting`. When that does not fit and events are waiting,
/// they are collapsed (`collapse`, which says how many went, returned in `Some`) and
/// the charge is made without them: a level-based reconcile loses nothing by it, and
/// stopping the controller for a burst of changes would punish it for what passes.
///
/// # Errors
/// Even without the waiting events the namespace would keep more than its limit:
/// `cached` and the message naming the caches' share.
fn fit(
    charge: &mut super::quota::Charge,
    kept: usize,
    cached: usize,
    waiting: usize,
    collapse: impl FnOnce() -> usize,
) -> Result<Option<usize>, (usize, String)> {
    let cost = kept.saturating_add(cached);
    if charge.resize(cost.saturating_add(waiting)).is_ok() {
        return Ok(None);
    }
    let collapsed = (waiting > 0).then(collapse);
    charge.resize(cost).map_err(|e| {
        (
            cached,
            format!(
                "the caches of what it watches grew to {:.1} MiB: {e}",
                mib(cached)
            ),
        )
    })?;
    Ok(collapsed)
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a message: one decimal is all it shows"
)]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Evaluates the script as `client`'s identity and starts its controller. A top level
/// that another controller of the namespace and author evaluated from the same source
/// and vars is used as it is ([`super::modules`]).
///
/// # Errors
/// A script error, a script without `k8s.control()`, a bad override, or a start failure
/// (an unknown kind).
pub async fn start(mut plan: Plan, client: kube::Client) -> Result<Hosted> {
    let turn = plan.turn.take();
    let runtime = tokio::runtime::Handle::current();
    let vars = Vars::from_map(plan.vars.clone());
    // A hosted script may talk to the cluster, as its ServiceAccount, and nothing else.
    let permissions = Permissions::k8s_only();
    let mut host = Host::new(library(), vars, permissions, runtime);
    host.printer = Printer::hosted(&plan.name, printer::HOSTED)
        .with_journal(plan.journal.clone())
        .recording();
    host.limits = plan.limits.clone();
    let key = super::modules::Key {
        namespace: plan.namespace.clone(),
        author: plan.author.clone(),
        script: Arc::from(plan.script.as_str()),
        vars: plan.vars.clone(),
    };
    let shared = plan.modules.get(&key);
    if let Some(top) = &shared
        && top.file_name != plan.file_name
    {
        host.file_alias = Some((top.file_name.clone(), plan.file_name.clone()));
    }
    let host = Arc::new(host);
    let mut session = Session::from_client(client, plan.namespace.clone(), false);
    session.discovery = plan.discovery.clone();
    session.instance = Some("kite-operator".to_owned());
    let session = Arc::new(session);
    host.ext::<SessionCell>().pin(session.clone());
    let top = if let Some(top) = shared {
        drop(turn);
        for text in &top.printed {
            let _ = starlark::PrintHandler::println(&host.printer, text);
        }
        top
    } else {
        let top = evaluate(&plan, &host, turn).await?;
        if host.reached() {
            Arc::new(top)
        } else {
            plan.modules.insert(key, top)
        }
    };
    let kept = top.kept;
    let charge = plan
        .quota
        .charge(&plan.namespace, kept.saturating_add(plan.reserve))?;
    let access = plan.informers.clone();
    let request = top.request.clone();
    let positions = top
        .positions
        .iter()
        .map(|(name, at)| (name.clone(), host.own_names(at).into_owned()))
        .collect();
    let handlers = Handlers::of_script(top.module.clone(), positions).map_err(Error::Evaluate)?;
    let mut spec = request.spec;
    let ignored = super::overrides::ignore_hosting_options(&mut spec);
    if let Some(o) = &plan.overrides {
        super::overrides::apply_overrides(&mut spec, o, &plan.limits).map_err(Error::Override)?;
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
        _top: top,
    })
}

/// Runs the script's top level on a thread of its own, within its budget, in its
/// namespace's `turn` (held by the thread until the top level really ends).
///
/// # Errors
/// A script error, one that never calls `k8s.control()`, or a top level over its
/// budget or memory.
async fn evaluate(
    plan: &Plan,
    host: &Arc<Host>,
    turn: Option<super::turns::Turn>,
) -> Result<TopLevel> {
    let (file_name, script, eval_host) =
        (plan.file_name.clone(), plan.script.clone(), host.clone());
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
    let finished = finished
        .map_err(|_| {
            let id = tid.load(std::sync::atomic::Ordering::Relaxed);
            crate::script::priority::lowest(Some(id).filter(|id| *id != 0));
            Error::Evaluate(format!(
                "error: the script's top level did not end within its {}s budget (it is stuck in a builtin)\n",
                TOP_LEVEL_BUDGET.as_secs()
            ))
        })?
        .map_err(|_| Error::Join("the script's thread ended without an answer".into()))?
        .map_err(|e| Error::Evaluate(e.to_string()))?;
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
    let request = ControlRequest::from_handoff(handoff).map_err(Error::Evaluate)?;
    Ok(TopLevel {
        file_name: plan.file_name.clone(),
        module,
        positions,
        request,
        kept,
        printed: host.printer.tape(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_events_that_do_not_fit_are_collapsed_and_caches_that_do_not_stop_it() {
        use super::super::quota::{OVERHEAD, Quota};
        const MIB: usize = 1 << 20;
        let quota = Quota::new(OVERHEAD + 10 * MIB);
        let mut charge = quota.charge("t", 0).unwrap();
        // Everything fits: charged with its waiting events, nothing collapsed.
        let fits = fit(&mut charge, MIB, 2 * MIB, 3 * MIB, || unreachable!());
        assert_eq!(fits, Ok(None));
        assert_eq!(quota.used("t"), OVERHEAD + 6 * MIB);
        // The waiting events pass the limit: collapsed, and charged without them.
        let collapsed = fit(&mut charge, MIB, 2 * MIB, 30 * MIB, || 7);
        assert_eq!(collapsed, Ok(Some(7)));
        assert_eq!(quota.used("t"), OVERHEAD + 3 * MIB);
        // The caches alone pass it: nothing to collapse helps, and it is stopped.
        let (cached, message) = fit(&mut charge, MIB, 12 * MIB, 30 * MIB, || 7).unwrap_err();
        assert_eq!(cached, 12 * MIB);
        assert!(
            message.starts_with("the caches of what it watches grew to 12.0 MiB")
                && message.contains("(--namespace-memory)"),
            "{message}"
        );
    }
}
