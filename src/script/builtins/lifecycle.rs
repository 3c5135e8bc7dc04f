//! `defer(fn)` and `on_signal(signal, handler)`: upstream's cleanup hooks of a script's
//! run.
//!
//! `defer` registers a function that runs when the run ends, last registered first:
//! after the top level (and `main()`) of `kite run`, even when it failed or called
//! `os.exit`; after a controller it started stops; after each test's `teardown` in
//! `kite test`. `on_signal("SIGINT" | "SIGTERM" | "SIGHUP", fn)` makes that signal stop
//! the `kite run` script at its next instruction (or blocking call), then calls
//! `fn(signal)`, then the deferred functions, and exits with 128 + the signal's number;
//! a second signal exits at once. Handlers and deferred functions run on the script's
//! own thread, never beside it.
//!
//! # Caveats
//! Only a script's own run can register them: not a loaded file's top level, nor a
//! controller's handlers (which run after the top level ended). A handler cannot
//! resume the script (upstream lets SIGHUP's). Errors in deferred functions are
//! reported and do not stop the others.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use starlark::environment::{FrozenModule, GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::none::NoneType;
use starlark::values::{Heap, Value};

use crate::script::host::Host;

/// Where the module's extra dict keeps the deferred functions.
const DEFERRED: &str = "deferred";
/// Where it keeps the signal handlers (signal name to function).
const HANDLERS: &str = "signals";

/// The signals a script may handle: name, number.
const SIGNALS: &[(&str, i32)] = &[
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGTERM", libc::SIGTERM),
];

/// The signal `name` names (`"SIGINT"`, `"INT"`, or Go's `"interrupt"`).
fn signal(name: &str) -> Option<(&'static str, i32)> {
    let upper = name.trim().to_ascii_uppercase();
    let short = upper.strip_prefix("SIG").unwrap_or(&upper);
    let full = match short {
        "INTERRUPT" => "INT",
        "TERMINATED" => "TERM",
        "HANGUP" => "HUP",
        other => other,
    };
    SIGNALS.iter().copied().find(|(n, _)| n[3..] == *full)
}

/// The name of signal `signo`, for messages.
pub fn signal_name(signo: i32) -> &'static str {
    SIGNALS
        .iter()
        .find(|(_, n)| *n == signo)
        .map_or("signal", |(name, _)| *name)
}

/// The signals a run listens to once its script registered a handler (a [`Host`]
/// extension): the first caught ends the script, a second exits the process.
#[derive(Default)]
pub struct Signals {
    /// The first signal caught (0: none yet).
    caught: Arc<AtomicI32>,
    /// Whether this run delivers signals at all (`kite run`, not `kite test`).
    deliver: std::sync::atomic::AtomicBool,
    listening: Mutex<Vec<i32>>,
}

impl Signals {
    /// Delivers signals to this run's handlers (called by `kite run`).
    pub fn deliver(&self) {
        self.deliver.store(true, Ordering::Relaxed);
    }

    /// The signal caught, if one was.
    pub fn caught(&self) -> Option<i32> {
        Some(self.caught.load(Ordering::Relaxed)).filter(|n| *n != 0)
    }

    /// A cheap handle on [`Signals::caught`] for cancel checks on other threads.
    pub fn flag(&self) -> Arc<AtomicI32> {
        self.caught.clone()
    }

    fn listen(&self, signo: i32, runtime: &tokio::runtime::Handle) -> anyhow::Result<()> {
        if !self.deliver.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if listening.contains(&signo) {
            return Ok(());
        }
        let mut stream = {
            let _entered = runtime.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(signo))?
        };
        let caught = self.caught.clone();
        runtime.spawn(async move {
            while stream.recv().await.is_some() {
                if caught
                    .compare_exchange(0, signo, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
                {
                    eprintln!("{}: second signal, exiting at once", signal_name(signo));
                    std::process::exit(128 + signo);
                }
            }
        });
        listening.push(signo);
        Ok(())
    }
}

/// The module's extra dict entry `key`, if the run opened it.
fn entry<'v>(module: &Module<'v>, key: &str) -> Option<Value<'v>> {
    DictRef::from_value(module.extra_value()?)?.get_str(key)
}

/// Sets `key` in the module's extra dict, keeping what other builtins keep there.
fn stash<'v>(module: &Module<'v>, heap: Heap<'v>, key: &str, value: Value<'v>) {
    let mut all: Vec<(Value<'v>, Value<'v>)> = module
        .extra_value()
        .and_then(DictRef::from_value)
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    all.retain(|(k, _)| k.unpack_str() != Some(key));
    all.push((heap.alloc(key), value));
    module.set_extra_value(heap.alloc(AllocDict(all)));
}

/// Makes `module`'s run one whose `defer` and `on_signal` calls are kept (and later run
/// by [`run_deferred`] and [`call_handler`]).
pub fn open(module: &Module<'_>) {
    let heap = module.heap();
    stash(module, heap, DEFERRED, heap.alloc(AllocList::EMPTY));
    stash(module, heap, HANDLERS, heap.alloc(AllocDict::EMPTY));
}

fn not_open(call: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{call}: only a script's own run (kite run, kite test) can register it, not a loaded file's top level or a controller's handler"
    )
}

/// Calls the deferred functions of `eval`'s module, last registered first, once;
/// returns the errors they raised.
pub fn run_deferred(eval: &mut Evaluator<'_, '_, '_>) -> Vec<String> {
    let module = eval.module();
    let Some(list) = entry(module, DEFERRED) else {
        return Vec::new();
    };
    let heap = module.heap();
    let functions: Vec<Value> = ListRef::from_value(list)
        .map(|l| l.iter().collect())
        .unwrap_or_default();
    // Once: a deferred function that defers again does not run its own addition.
    stash(module, heap, DEFERRED, heap.alloc(AllocList::EMPTY));
    let mut errors = Vec::new();
    for f in functions.into_iter().rev() {
        if let Err(e) = eval.eval_function(f, &[], &[]) {
            errors.push(e.to_string());
        }
    }
    errors
}

/// Calls the handler `eval`'s module registered for `signo` with the signal's name;
/// Ok(false) when it registered none.
///
/// # Errors
/// What the handler raised.
pub fn call_handler(eval: &mut Evaluator<'_, '_, '_>, signo: i32) -> starlark::Result<bool> {
    let module = eval.module();
    let name = signal_name(signo);
    let Some(handler) = entry(module, HANDLERS)
        .and_then(DictRef::from_value)
        .and_then(|d| d.get_str(name))
    else {
        return Ok(false);
    };
    let arg = module.heap().alloc(name);
    eval.eval_function(handler, &[arg], &[])?;
    Ok(true)
}

/// Runs the deferred functions a frozen script module kept (a controller's script, once
/// the controller stopped), on a fresh evaluator; returns their errors.
pub fn run_deferred_frozen(module: &FrozenModule, host: &Host) -> Vec<String> {
    let Some(extra) = module.owned_extra_value() else {
        return Vec::new();
    };
    // The frozen list, then each of its items, each keeping the module's heap alive.
    let item = |owned: &starlark::values::OwnedFrozenValue,
                pick: &dyn Fn(Value) -> Option<Value>| {
        owned
            .try_map(|v| pick(v.to_value()).and_then(Value::unpack_frozen).ok_or(()))
            .ok()
    };
    let Some(list) = item(&extra, &|v| DictRef::from_value(v)?.get_str(DEFERRED)) else {
        return Vec::new();
    };
    let n = ListRef::from_value(list.value()).map_or(0, |l| l.len());
    let functions: Vec<starlark::values::OwnedFrozenValue> = (0..n)
        .filter_map(|i| {
            item(&list, &|v| {
                ListRef::from_value(v)?.content().get(i).copied()
            })
        })
        .collect();
    let mut errors = Vec::new();
    for f in functions.into_iter().rev() {
        Module::with_temp_heap(|temp| {
            let mut eval = Evaluator::new(&temp);
            eval.extra = Some(host);
            eval.set_print_handler(&host.printer);
            let f = temp.heap().access_owned_frozen_value(&f);
            if let Err(e) = eval.eval_function(f, &[], &[]) {
                errors.push(e.to_string());
            }
        });
    }
    errors
}

#[starlark_module]
pub fn lifecycle_globals(builder: &mut GlobalsBuilder) {
    /// Runs `func()` when the script's run ends (last registered first), even when it
    /// failed: after `kite run`'s top level, after a controller it started stops, or
    /// after each test in `kite test`.
    fn defer<'v>(
        #[starlark(require = pos)] func: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if func.get_type() != "function" {
            anyhow::bail!("defer: expected a function, not {}", func.get_type());
        }
        let module = eval.module();
        let list = entry(module, DEFERRED).ok_or_else(|| not_open("defer"))?;
        let mut functions: Vec<Value> = ListRef::from_value(list)
            .map(|l| l.iter().collect())
            .unwrap_or_default();
        functions.push(func);
        let heap = eval.heap();
        stash(module, heap, DEFERRED, heap.alloc(AllocList(functions)));
        Ok(NoneType)
    }

    /// Stops the `kite run` script when `signal` (`"SIGINT"`, `"SIGTERM"` or
    /// `"SIGHUP"`) arrives, then calls `handler(signal)` and the deferred functions,
    /// and exits with 128 + the signal's number.
    fn on_signal<'v>(
        #[starlark(require = pos)] signal: &str,
        #[starlark(require = pos)] handler: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let (name, signo) = self::signal(signal).ok_or_else(|| {
            anyhow::anyhow!("on_signal: unknown signal {signal:?} (SIGINT, SIGTERM or SIGHUP)")
        })?;
        if handler.get_type() != "function" {
            anyhow::bail!("on_signal: expected a function, not {}", handler.get_type());
        }
        let module = eval.module();
        let handlers = entry(module, HANDLERS).ok_or_else(|| not_open("on_signal"))?;
        let mut all: Vec<(Value, Value)> = DictRef::from_value(handlers)
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        all.retain(|(k, _)| k.unpack_str() != Some(name));
        let heap = eval.heap();
        all.push((heap.alloc(name), handler));
        stash(module, heap, HANDLERS, heap.alloc(AllocDict(all)));
        let host = Host::of(eval)?;
        host.ext::<Signals>()
            .listen(signo, &host.runtime)
            .map_err(|e| anyhow::anyhow!("on_signal: cannot listen to {name}: {e}"))?;
        Ok(NoneType)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::builtins::snippets::eval;
    use crate::script::library::Library;
    use crate::script::permissions::Permissions;
    use crate::script::printer::Printer;
    use crate::script::vars::Vars;

    /// Runs `code` as `kite run` runs a file; returns what it printed and its error.
    fn run(code: &str) -> (Vec<String>, Option<String>) {
        let dir = std::env::temp_dir().join(format!("kite-lifecycle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("s{}.star", code.len()));
        std::fs::write(&file, code).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let mut host = Host::new(
            Library::standard(),
            Vars::default(),
            Permissions::default(),
            rt.handle().clone(),
        );
        host.printer = Printer::capturing();
        let outcome = crate::script::run::run(&file, &host);
        let _ = std::fs::remove_file(&file);
        (host.printer.take(), outcome.err().map(|e| e.to_string()))
    }

    #[test]
    fn deferred_functions_run_last_first_even_after_a_failure() {
        let (printed, error) = run(
            "defer(lambda: print('a'))\ndef b():\n    print('b')\n    defer(lambda: print('never'))\ndefer(b)\nprint('top')\nfail('boom')\n",
        );
        assert_eq!(printed, vec!["top", "b", "a"]);
        assert!(error.is_some_and(|e| e.contains("boom")));
        let (printed, error) = run("defer(lambda: print('after exit'))\nos.exit(0)\n");
        assert_eq!(printed, vec!["after exit"]);
        assert_eq!(error, None);
    }

    #[test]
    fn only_a_scripts_own_run_registers() {
        let e = eval("defer(lambda: 1)").unwrap_err();
        assert!(e.contains("defer: only a script's own run"), "{e}");
        let (_, error) = run("defer(1)\n");
        assert!(error.is_some_and(|e| e.contains("defer: expected a function, not int")));
        let (_, error) = run("on_signal('SIGUSR1', lambda s: 1)\n");
        assert!(error.is_some_and(|e| e.contains("on_signal: unknown signal \"SIGUSR1\"")));
    }

    #[test]
    fn signal_names_as_upstream_and_go_write_them() {
        assert_eq!(signal("SIGINT"), Some(("SIGINT", libc::SIGINT)));
        assert_eq!(signal("term"), Some(("SIGTERM", libc::SIGTERM)));
        assert_eq!(signal("hangup"), Some(("SIGHUP", libc::SIGHUP)));
        assert_eq!(signal("SIGKILL"), None);
        assert_eq!(signal(""), None);
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
    }

    #[test]
    fn a_handled_signal_stops_the_script_then_cleans_up() {
        // The run does not deliver signals here (only `kite run` does), so this stands in
        // for one arriving: the flag set while the script sleeps.
        let (printed, error) = {
            let dir = std::env::temp_dir().join(format!("kite-signal-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("s.star");
            std::fs::write(
                &file,
                "on_signal('SIGTERM', lambda s: print('handled', s))\ndefer(lambda: print('deferred'))\ntime.sleep('20s')\nprint('not reached')\n",
            )
            .unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let mut host = Host::new(
                Library::standard(),
                Vars::default(),
                Permissions::default(),
                rt.handle().clone(),
            );
            host.printer = Printer::capturing();
            let flag = host.ext::<Signals>().flag();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                flag.store(libc::SIGTERM, Ordering::Relaxed);
            });
            let started = std::time::Instant::now();
            let outcome = crate::script::run::run(&file, &host);
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            let _ = std::fs::remove_dir_all(&dir);
            (host.printer.take(), outcome.err())
        };
        assert_eq!(printed, vec!["handled SIGTERM", "deferred"]);
        let e = error.unwrap();
        assert_eq!(e.exit_code(), 143);
        assert_eq!(e.to_string(), "SIGTERM: the script was stopped");
    }
}
