//! `io`: upstream Starkite's terminal questions, `io.confirm(msg)` and `io.prompt(msg)`:
//! the question goes to stderr, the answer is a line of stdin.
//!
//! # Caveats
//! They need `--allow-env`: what the person (or pipe) at kite's stdin answers is part
//! of the environment kite runs in, as its variables are, and a script should not sit
//! waiting for input nobody was told to give. A wait ends with the call's time budget;
//! the line being read is then kept for the next question. Stdin is read by one thread
//! for the whole process, so questions from several scripts take turns.

#![expect(
    unsafe_code,
    reason = "turning the terminal's echo off and back on (termios, libc)"
)]

use std::io::{BufRead, Read, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;

/// How often a waiting question looks at its call's budget.
const POLL: Duration = Duration::from_millis(100);

/// The longest answer read at once: a longer line comes in parts.
const MAX_LINE: u64 = 1 << 20;

/// Lines of one input, read by a thread of their own on request, so that a wait for
/// one can end (with the call's budget) while the read goes on.
pub(crate) struct Lines {
    state: Mutex<State>,
}

struct State {
    ask: Sender<()>,
    answers: Receiver<std::io::Result<Option<String>>>,
    /// A line was asked for and not yet taken (its asker gave up waiting).
    pending: bool,
}

impl Lines {
    /// Lines of `input`, read on a new thread.
    pub(crate) fn new(input: impl BufRead + Send + 'static) -> std::io::Result<Self> {
        let (ask, asked) = channel::<()>();
        let (answer, answers) = channel();
        std::thread::Builder::new()
            .name("kite-stdin".into())
            .spawn(move || {
                let mut input = input;
                while asked.recv().is_ok() {
                    let mut line = Vec::new();
                    let read = std::io::Read::by_ref(&mut input)
                        .take(MAX_LINE)
                        .read_until(b'\n', &mut line)
                        .map(|n| (n > 0).then(|| String::from_utf8_lossy(&line).into_owned()));
                    if answer.send(read).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Lines {
            state: Mutex::new(State {
                ask,
                answers,
                pending: false,
            }),
        })
    }

    /// The next line (None at the end of input), waiting at most as long as the
    /// running call's budget allows.
    ///
    /// # Errors
    /// The read's error, or the budget running out, naming `call`.
    pub(crate) fn next(&self, call: &str) -> Result<Option<String>, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.pending {
            state
                .ask
                .send(())
                .map_err(|_| format!("{call}: the input reader has stopped"))?;
            state.pending = true;
        }
        loop {
            crate::script::budget::check().map_err(|e| format!("{call}: {e}"))?;
            match state.answers.recv_timeout(POLL) {
                Ok(read) => {
                    state.pending = false;
                    return read.map_err(|e| format!("{call}: reading stdin: {e}"));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("{call}: the input reader has stopped"));
                }
            }
        }
    }
}

/// The process's stdin, as [`Lines`].
fn stdin(call: &str) -> Result<&'static Lines, String> {
    static STDIN: OnceLock<Result<Lines, String>> = OnceLock::new();
    STDIN
        .get_or_init(|| {
            Lines::new(std::io::BufReader::new(std::io::stdin())).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| format!("{call}: cannot read stdin: {e}"))
}

/// Turns the terminal's echo off while a secret is typed, and back on when dropped.
struct NoEcho(Option<libc::termios>);

impl NoEcho {
    fn new() -> Self {
        // SAFETY: isatty, tcgetattr and tcsetattr only read or set the terminal
        // attributes of fd 0 through a termios value that lives on this stack.
        unsafe {
            if libc::isatty(0) != 1 {
                return NoEcho(None);
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &raw mut saved) != 0 {
                return NoEcho(None);
            }
            let mut quiet = saved;
            quiet.c_lflag &= !libc::ECHO;
            quiet.c_lflag |= libc::ECHONL;
            if libc::tcsetattr(0, libc::TCSANOW, &raw const quiet) != 0 {
                return NoEcho(None);
            }
            NoEcho(Some(saved))
        }
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take() {
            // SAFETY: as in `new`, restoring the attributes read there.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, &raw const saved);
            }
        }
    }
}

/// Asks `question` on stderr and reads the answer line (without its line ending).
fn ask(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    question: &str,
    secret: bool,
) -> Result<String, String> {
    Host::of(eval)
        .and_then(|h| h.allow(call, Access::Env))
        .map_err(|e| e.to_string())?;
    let lines = stdin(call)?;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{question}");
    let _ = err.flush();
    drop(err);
    let _quiet = secret.then(NoEcho::new);
    let line = lines
        .next(call)?
        .ok_or_else(|| format!("{call}: no answer: stdin is at its end"))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// What a confirmation answer means: yes, no, or (anything else) the default.
fn confirmed(answer: &str, default: bool) -> bool {
    match answer.trim().to_lowercase().as_str() {
        "y" | "yes" => true,
        "n" | "no" => false,
        _ => default,
    }
}

fn confirm(eval: &Evaluator<'_, '_, '_>, msg: &str, default: bool) -> Result<bool, String> {
    let hint = if default { " [Y/n]: " } else { " [y/N]: " };
    let answer = ask(eval, "io.confirm", &format!("{msg}{hint}"), false)?;
    Ok(confirmed(&answer, default))
}

fn prompt(
    eval: &Evaluator<'_, '_, '_>,
    msg: &str,
    default: &str,
    secret: bool,
) -> Result<String, String> {
    let answer = ask(eval, "io.prompt", msg, secret)?;
    Ok(if answer.is_empty() {
        default.to_owned()
    } else {
        answer
    })
}

#[starlark_module]
pub fn io_namespace(builder: &mut GlobalsBuilder) {
    /// Asks `msg [y/N]: ` on the terminal: True for y/yes, False for n/no, `default`
    /// for anything else or nothing (needs `--allow-env`).
    fn confirm(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = false)] default: bool,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<bool> {
        self::confirm(eval, msg, default).map_err(anyhow::Error::msg)
    }

    /// Asks `msg` on the terminal and returns the line typed, or `default` when it is
    /// empty; `secret=True` does not echo it (needs `--allow-env`).
    fn prompt(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = "")] default: &str,
        #[starlark(default = false)] secret: bool,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<String> {
        self::prompt(eval, msg, default, secret).map_err(anyhow::Error::msg)
    }

    /// `confirm(...)` as a result (`.ok`, `.value`, `.error`).
    fn try_confirm<'v>(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = false)] default: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = self::confirm(eval, msg, default).map(Value::new_bool);
        Ok(result(eval.heap(), outcome))
    }

    /// `prompt(...)` as a result.
    fn try_prompt<'v>(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = "")] default: &str,
        #[starlark(default = false)] secret: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = self::prompt(eval, msg, default, secret);
        let heap = eval.heap();
        Ok(result(heap, outcome.map(|s| heap.alloc(s))))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Lines, confirmed};
    use crate::script::budget::{Budget, scope};
    use crate::script::builtins::snippets::eval;

    #[test]
    fn answers_mean_yes_no_or_the_default() {
        assert!(confirmed("Y", false));
        assert!(confirmed(" yes \n", false));
        assert!(!confirmed("no", true));
        assert!(confirmed("", true));
        assert!(!confirmed("maybe", false));
    }

    #[test]
    fn lines_come_in_order_then_the_end() {
        let lines = Lines::new(std::io::Cursor::new("one\r\ntwo")).unwrap();
        assert_eq!(lines.next("t").unwrap().as_deref(), Some("one\r\n"));
        assert_eq!(lines.next("t").unwrap().as_deref(), Some("two"));
        assert_eq!(lines.next("t").unwrap(), None);
    }

    #[test]
    fn a_wait_ends_with_the_budget_and_the_line_is_kept() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let lines = Lines::new(std::io::BufReader::new(reader)).unwrap();
        let started = Instant::now();
        let budget = Budget {
            deadline: started + Duration::from_millis(50),
            stop: None,
        };
        let e = scope(budget, || lines.next("io.prompt")).unwrap_err();
        assert!(
            e.contains("io.prompt: the handler ran out of its time budget"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        std::io::Write::write_all(&mut writer, b"late\n").unwrap();
        assert_eq!(lines.next("t").unwrap().as_deref(), Some("late\n"));
    }

    #[test]
    fn questions_need_allow_env() {
        // The test host allows nothing, so nothing is read from the test's stdin.
        let e = eval("io.prompt('name? ')").unwrap_err();
        assert!(
            e.contains("permission denied: io.prompt needs --allow-env"),
            "{e}"
        );
        let out =
            eval("r = io.try_confirm('sure?')\n(r.ok, 'io.confirm needs --allow-env' in r.error)")
                .unwrap();
        assert_eq!(out, "(False, True)");
    }
}
