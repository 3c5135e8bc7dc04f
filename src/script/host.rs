//! The host context a script runs in, handed to builtins through `Evaluator.extra`.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use starlark::any::ProvidesStaticType;
use starlark::eval::Evaluator;

use super::library::Library;
use super::permissions::{Access, Permissions};
use super::vars::Vars;

/// Everything a builtin may need from the process: variables, permissions, the async
/// runtime to wait on, the library of globals, and what the layers above keep per run
/// ([`Extensions`]: the cluster sessions, the write log).
#[derive(ProvidesStaticType)]
pub struct Host {
    pub vars: Vars,
    pub permissions: Permissions,
    pub runtime: tokio::runtime::Handle,
    /// The globals and loadable modules scripts see, composed by the layers above.
    pub library: &'static Library,
    /// Where `print()` goes.
    pub printer: super::printer::Printer,
    /// What the script may ask for and use.
    pub limits: Limits,
    /// State of the layers above, one value per type.
    extensions: Extensions,
    /// What builtins handed over for after the top level (`k8s.control(...)`,
    /// `k8s.webhook(...)`); None once taken, so later calls (from handlers) are refused.
    handoff: Mutex<Option<Handoff>>,
    /// Set once the script used an access to the outside (the cluster), wrote a log
    /// record, or read the clock or randomness: what it computed, or did, belongs to
    /// whoever ran it, so its top level cannot stand for another controller's (see
    /// [`Host::reached`]).
    reached: std::sync::atomic::AtomicBool,
    /// `(shared, own)`: the script runs a top level evaluated under another file name
    /// (another controller's, with the same source); messages name its own file
    /// instead ([`Host::own_names`]).
    pub file_alias: Option<(String, String)>,
}

/// What builtins hand over to whoever runs the script, at most one value per type
/// (a controller request, a webhook request), in the order they were recorded.
#[derive(Default)]
pub struct Handoff(Vec<Box<dyn Any + Send>>);

impl Handoff {
    /// Takes out the value of type `T`, if one was handed over.
    pub fn take<T: Any>(&mut self) -> Option<T> {
        let i = self
            .0
            .iter()
            .position(|v| (**v).type_id() == TypeId::of::<T>())?;
        self.0.remove(i).downcast::<T>().ok().map(|b| *b)
    }

    /// True when a value of type `T` is held.
    pub fn holds<T: Any>(&self) -> bool {
        self.0.iter().any(|v| (**v).type_id() == TypeId::of::<T>())
    }

    /// True when nothing (more) is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One value per type, created on first use: how the layers above keep their own
/// per-run state in the host without the host knowing their types.
#[derive(Default)]
pub struct Extensions(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    /// The value of type `T`, created with `T::default()` if there is none yet.
    pub fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let value = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        // The entry under T's TypeId always holds a T.
        value
            .downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
    }

    /// Sets the value of type `T`, replacing any earlier one.
    pub fn set<T: Any + Send + Sync>(&self, value: T) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert(TypeId::of::<T>(), Arc::new(value));
    }
}

/// Bounds on what a script may ask for and use. `kite run` trusts its user and keeps
/// them generous; the operator sets floors for the scripts it hosts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The shortest poll, resync, backoff or requeue a controller may use.
    pub min_period: Duration,
    /// The most workers one controller may run.
    pub max_workers: usize,
    /// The memory one evaluation (the top level, or one handler call) may use, in bytes.
    pub memory: usize,
    /// The most children one reconcile may return.
    pub max_children: usize,
    /// Where the limits come from, for messages (e.g. "the operator's").
    pub source: &'static str,
    /// What happens to a thread that asks for more than its whole memory budget in one
    /// allocation (the operator parks it rather than let the process abort).
    pub overrun: super::memory::Overrun,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_period: Duration::ZERO,
            max_workers: 64,
            memory: 2 << 30,
            max_children: 10_000,
            source: "kite's",
            overrun: super::memory::Overrun::Abort,
        }
    }
}

/// The length of `value` as JSON, counted without building the text (this runs for
/// every child of every reconcile).
fn encoded_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The largest child object kite applies: the API server's own request limit (etcd
/// refuses larger values anyway), checked before anything is sent.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;

impl Limits {
    /// Checks the children a reconcile returned.
    ///
    /// # Errors
    /// Too many children, or one larger than [`MAX_OBJECT_BYTES`], naming it.
    pub fn check_children(&self, children: &[serde_json::Value]) -> Result<(), String> {
        if children.len() > self.max_children {
            return Err(format!(
                "returned {} children, more than {} limit of {}",
                children.len(),
                self.source,
                self.max_children
            ));
        }
        for (i, child) in children.iter().enumerate() {
            let size = encoded_len(child);
            if size > MAX_OBJECT_BYTES {
                let name = child["metadata"]["name"].as_str().unwrap_or("?");
                return Err(format!(
                    "child {i} ({} {name}) is {} KiB, more than the {} KiB an object may be",
                    child["kind"].as_str().unwrap_or("object"),
                    size / 1024,
                    MAX_OBJECT_BYTES / 1024
                ));
            }
        }
        Ok(())
    }

    /// Checks a period a script asked for (`what` names it: "poll", "a requeue", ...).
    ///
    /// # Errors
    /// A period below the floor, naming both.
    pub fn check_period(&self, what: &str, period: Duration) -> anyhow::Result<()> {
        if period < self.min_period {
            anyhow::bail!(
                "{what} of {} is below {} floor of {}",
                crate::duration::format(period),
                self.source,
                crate::duration::format(self.min_period)
            );
        }
        Ok(())
    }
}

impl Host {
    /// A host for one run.
    pub fn new(
        library: &'static Library,
        vars: Vars,
        permissions: Permissions,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            vars,
            permissions,
            runtime,
            library,
            printer: super::printer::Printer::plain(),
            limits: Limits::default(),
            extensions: Extensions::default(),
            handoff: Mutex::new(Some(Handoff::default())),
            reached: false.into(),
            file_alias: None,
        }
    }

    /// The layers' state of type `T` (see [`Extensions::get`]).
    pub fn ext<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.extensions.get()
    }

    /// Sets the layers' state of type `T` before the run.
    #[must_use]
    pub fn with<T: Any + Send + Sync>(self, value: T) -> Self {
        self.extensions.set(value);
        self
    }

    /// Records what a builtin hands over (as it stops the script, or to be picked up
    /// when the top level ends); [`super::run::run`] returns it with the frozen module.
    /// False, and nothing recorded, when a value of the same type was handed over
    /// already or the hand-off was taken (the call comes from a handler).
    pub fn hand_off(&self, value: Box<dyn Any + Send>) -> bool {
        let mut slot = self
            .handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(held) = slot.as_mut() else {
            return false;
        };
        let kind = (*value).type_id();
        if held.0.iter().any(|v| (**v).type_id() == kind) {
            return false;
        }
        held.0.push(value);
        true
    }

    /// True once a builtin has handed something over.
    pub fn handed_off(&self) -> bool {
        self.handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|h| !h.is_empty())
    }

    /// True once a builtin has handed over something that is not a `T` (what starts
    /// once the top level ends: a controller, a webhook).
    pub fn handed_off_besides<T: Any>(&self) -> bool {
        self.handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|h| h.0.iter().any(|v| (**v).type_id() != TypeId::of::<T>()))
    }

    /// True while builtins may still hand over (the top level has not ended).
    pub fn accepts_handoff(&self) -> bool {
        self.handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// What builtins handed over, if anything; later hand-offs are refused.
    pub fn take_handoff(&self) -> Option<Handoff> {
        self.handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .filter(|h| !h.is_empty())
    }

    /// The host of the evaluator running a builtin.
    ///
    /// # Errors
    /// When the evaluator was set up without a host (a bug, reported not panicked).
    pub fn of<'a>(eval: &Evaluator<'_, 'a, '_>) -> anyhow::Result<&'a Host> {
        eval.extra
            .and_then(|extra| extra.downcast_ref::<Host>())
            .ok_or_else(|| anyhow::anyhow!("internal error: evaluator has no kite host"))
    }

    /// Checks a permission for the named call.
    ///
    /// # Errors
    /// The denial, naming the call and the flag.
    pub fn allow(&self, call: &str, access: Access) -> anyhow::Result<()> {
        self.permissions.check(call, access)?;
        self.mark_reached();
        Ok(())
    }

    /// Checks a permission for a call that only hands something over for after the top
    /// level (`k8s.control`): it reaches nothing itself.
    ///
    /// # Errors
    /// The denial, naming the call and the flag.
    pub fn allow_handoff(&self, call: &str, access: Access) -> anyhow::Result<()> {
        Ok(self.permissions.check(call, access)?)
    }

    /// `text` with the places it names in the file the top level was evaluated under
    /// named in this script's own file (see [`Host::file_alias`]). Borrowed when there
    /// is nothing to rename: most scripts have no alias, and this runs on every error.
    pub fn own_names<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some((shared, own)) = &self.file_alias else {
            return Cow::Borrowed(text);
        };
        let needle = format!("{shared}:");
        if !text.contains(&needle) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find(&needle) {
            // Only a whole file name: `data.star:` is not `a.star:`.
            let whole = rest[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '/')));
            out.push_str(&rest[..i]);
            out.push_str(if whole { own } else { shared });
            out.push(':');
            rest = &rest[i + needle.len()..];
        }
        out.push_str(rest);
        Cow::Owned(out)
    }

    /// Records that the script reached outside itself (see [`Host::reached`]).
    pub fn mark_reached(&self) {
        self.reached
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks the script run by `eval` as having drawn on something that differs from
    /// one run to the next (the clock, randomness): see [`Host::reached`].
    pub fn mark_reached_by(eval: &Evaluator) {
        if let Ok(host) = Host::of(eval) {
            host.mark_reached();
        }
    }

    /// Whether the script has, so far, used an allowed access, written a log record or
    /// drawn on the clock or on randomness.
    /// A top level that has not computed only from its source and its vars: another
    /// controller with the same source, vars and namespace may use its frozen module.
    pub fn reached(&self) -> bool {
        self.reached.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `file:line:col` (1-based) of the innermost call in progress, for error messages.
pub fn call_site(eval: &Evaluator) -> String {
    let site = eval
        .call_stack_top_location()
        .map_or_else(|| "<unknown>".to_owned(), |span| position(&span));
    match Host::of(eval) {
        Ok(host) => host.own_names(&site).into_owned(),
        Err(_) => site,
    }
}

/// `file:line:col` (1-based) of a span, as every kite message names places.
pub fn position(span: &starlark::codemap::FileSpan) -> String {
    let pos = span.resolve_span();
    format!(
        "{}:{}:{}",
        span.filename(),
        pos.begin.line + 1,
        pos.begin.column + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_top_level_names_the_running_scripts_own_file() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let library = crate::script::library::Library::builder_of(&[]).build();
        let library: &'static _ = Box::leak(Box::new(library));
        let mut host = Host::new(
            library,
            Vars::default(),
            Permissions::default(),
            runtime.handle().clone(),
        );
        let text = "error: a.star:3:5: told to fail\n  at a.star:7, in reconcile (data.star:1)";
        assert_eq!(host.own_names(text), text, "its own top level: unchanged");
        host.file_alias = Some(("a.star".into(), "b.star".into()));
        assert_eq!(
            host.own_names(text),
            "error: b.star:3:5: told to fail\n  at b.star:7, in reconcile (data.star:1)"
        );
        assert!(!host.reached());
        host.allow_handoff("k8s.control", Access::K8s).ok();
        assert!(!host.reached(), "handing over reaches nothing");
    }
}

#[cfg(test)]
mod reached_tests {
    use crate::script::builtins::snippets::reaches;

    /// Issue 28/26: a top level that read the clock or drew randomness is not shared
    /// (what it computed differs from one run to the next); pure computation is.
    #[test]
    fn the_clock_and_randomness_make_a_top_level_its_own() {
        for code in [
            "x = time.now()",
            "x = uuid.v4()",
            "x = time.since(time.parse(\"2006-01-02\", \"2020-01-01\"))",
            "x = time.try_until(time.parse(\"2006-01-02\", \"2020-01-01\"))",
            "x = retry.do(lambda: True, max_attempts = 1).elapsed",
            "log.set_level(\"debug\")",
        ] {
            assert!(reaches(code), "{code}");
        }
        for code in [
            "x = [1, 2] + [3]",
            "x = json.encode({\"a\": 1})",
            "x = time.parse(\"2006-01-02\", \"2020-01-01\")",
        ] {
            assert!(!reaches(code), "{code}");
        }
    }
}
