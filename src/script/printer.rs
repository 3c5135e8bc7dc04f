//! Where a script's `print()` goes: stdout a line at a time, and for hosted scripts with
//! their StarlarkController's name in front and a rate limit, so that one chatty
//! script cannot flood the operator's log or drown the others.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use starlark::PrintHandler;

/// A token bucket of lines: `burst` at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: f64,
}

/// A hosted script's lines: 20 a second on average, 100 at once.
pub const HOSTED: RateLimit = RateLimit {
    per_second: 20.0,
    burst: 100.0,
};

/// Writes `print()` lines to stdout.
#[derive(Debug, Default)]
pub struct Printer {
    prefix: Option<String>,
    limit: Option<RateLimit>,
    state: Mutex<Bucket>,
    /// Lines kept for the caller instead of written (a controller under `k8s.testing`).
    captured: Option<Mutex<Vec<String>>>,
    /// Where a hosted controller's lines are kept for its author (`kite logs`), as well.
    journal: Option<std::sync::Arc<crate::script::journal::Journal>>,
    /// The texts printed, as given, kept to be printed again for another controller
    /// that shares this top level ([`Printer::recording`]); None once taken.
    tape: Mutex<Option<Vec<String>>>,
}

/// The most texts a [`Printer::recording`] keeps: a hosted printer writes no more than
/// its burst at once, so a replay of more would be dropped anyway.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a small whole positive constant"
)]
const TAPE_LIMIT: usize = HOSTED.burst as usize;

/// The most lines a capturing printer keeps before the oldest go.
const CAPTURE_LIMIT: usize = 10_000;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            tokens: f64::MAX,
            at: Instant::now(),
            dropped: 0,
        }
    }
}

impl Printer {
    /// Every line, unprefixed (`kite run`).
    pub fn plain() -> Self {
        Self::default()
    }

    /// Lines prefixed with `[name] ` and limited to `limit`.
    pub fn hosted(name: &str, limit: RateLimit) -> Self {
        Printer {
            prefix: Some(format!("[{name}] ")),
            limit: Some(limit),
            state: Mutex::new(Bucket {
                tokens: limit.burst,
                at: Instant::now(),
                dropped: 0,
            }),
            captured: None,
            journal: None,
            tape: Mutex::new(None),
        }
    }

    /// Keeps every admitted line in `journal` too (unprefixed).
    #[must_use]
    pub fn with_journal(
        mut self,
        journal: std::sync::Arc<crate::script::journal::Journal>,
    ) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The journal this printer keeps its lines in, if any.
    pub fn journal(&self) -> Option<&std::sync::Arc<crate::script::journal::Journal>> {
        self.journal.as_ref()
    }

    /// Keeps every line for [`take`](Self::take) instead of writing it.
    pub fn capturing() -> Self {
        Printer {
            captured: Some(Mutex::default()),
            ..Self::default()
        }
    }

    /// Also keeps the first [`TAPE_LIMIT`] texts printed, until [`Printer::tape`].
    #[must_use]
    pub fn recording(self) -> Self {
        *self
            .tape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Vec::new());
        self
    }

    /// The texts kept by [`Printer::recording`], each cut as a hosted printer would;
    /// stops keeping them (the handlers' lines are not a top level's).
    pub fn tape(&self) -> Vec<String> {
        self.tape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }

    /// The lines captured since the last call (none unless [`capturing`](Self::capturing)).
    pub fn take(&self) -> Vec<String> {
        self.captured.as_ref().map_or_else(Vec::new, |c| {
            std::mem::take(&mut *c.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
        })
    }

    /// The controller a hosted printer speaks for (`namespace/name`); None for `kite run`.
    pub fn name(&self) -> Option<&str> {
        self.prefix
            .as_deref()
            .map(|p| p.trim_start_matches('[').trim_end_matches("] "))
    }

    /// Whether one more record (a `log.*` line) may go now, under the same rate as the
    /// printed lines; always true without a limit.
    pub fn admit_record(&self, now: Instant) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        self.bucket(limit, now).0
    }

    /// Takes one token from the bucket at `now` (counting a refusal as dropped); the
    /// answer, and the bucket, still locked, for the caller's note on what was dropped.
    fn bucket(&self, limit: RateLimit, now: Instant) -> (bool, std::sync::MutexGuard<'_, Bucket>) {
        let mut b = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * limit.per_second).min(limit.burst);
        b.at = now;
        if b.tokens < 1.0 {
            b.dropped += 1;
            return (false, b);
        }
        b.tokens -= 1.0;
        (true, b)
    }

    /// `text` as a hosted printer would write it (one line, cut), or unchanged.
    pub fn contain(&self, text: &str) -> String {
        if self.limit.is_some() {
            contained(text)
        } else {
            text.to_owned()
        }
    }

    /// The lines to write for `text` now: none when over the rate, and a note on what
    /// was dropped once lines flow again.
    fn admit(&self, text: &str, now: Instant) -> Vec<String> {
        let prefix = self.prefix.as_deref().unwrap_or_default();
        let Some(limit) = self.limit else {
            return vec![format!("{prefix}{text}")];
        };
        let text = contained(text);
        let (admitted, mut b) = self.bucket(limit, now);
        if !admitted {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(2);
        if b.dropped > 0 {
            out.push(format!(
                "{prefix}... {} lines dropped (more than {} a second)",
                std::mem::take(&mut b.dropped),
                limit.per_second
            ));
        }
        out.push(format!("{prefix}{text}"));
        out
    }
}

impl PrintHandler for Printer {
    fn println(&self, text: &str) -> starlark::Result<()> {
        if let Some(tape) = self
            .tape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_mut()
            && tape.len() < TAPE_LIMIT
        {
            tape.push(contained(text));
        }
        let lines = self.admit(text, Instant::now());
        if lines.is_empty() {
            return Ok(());
        }
        if let Some(journal) = &self.journal {
            let prefix = self.prefix.as_deref().unwrap_or_default();
            for line in &lines {
                journal.push(line.strip_prefix(prefix).unwrap_or(line));
            }
        }
        if let Some(c) = &self.captured {
            let mut kept = c.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            kept.extend(lines);
            let over = kept.len().saturating_sub(CAPTURE_LIMIT);
            kept.drain(..over);
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        // A closed stdout must not kill the controller; the line is simply lost.
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
        Ok(())
    }
}

/// The longest line a hosted script prints; the rest is cut.
const MAX_HOSTED_LINE: usize = 4096;

/// A hosted script's text as one line of its own: newlines and other control
/// characters escaped (so it cannot write a line that starts like another
/// controller's `[namespace/name]`), and at most [`MAX_HOSTED_LINE`] bytes.
fn contained(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_HOSTED_LINE));
    for c in text.chars() {
        if out.len() >= MAX_HOSTED_LINE {
            out.push_str("...(cut)");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// How long a hosted script must stay quiet for its bucket to refill completely.
#[cfg(test)]
fn refill_time(limit: RateLimit) -> std::time::Duration {
    use std::time::Duration;
    Duration::from_secs_f64(limit.burst / limit.per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_keeps_the_top_levels_texts_until_taken() {
        let p = Printer::capturing().recording();
        p.println("one").unwrap();
        p.println(&"x".repeat(10_000)).unwrap();
        let tape = p.tape();
        assert_eq!(tape.len(), 2);
        assert_eq!(tape[0], "one");
        assert!(tape[1].len() <= MAX_HOSTED_LINE + 8, "cut as a hosted line");
        p.println("a handler's").unwrap();
        assert!(
            p.tape().is_empty(),
            "taken once: a handler's lines are not kept"
        );
        let q = Printer::capturing().recording();
        for i in 0..(TAPE_LIMIT * 2) {
            q.println(&i.to_string()).unwrap();
        }
        assert_eq!(q.tape().len(), TAPE_LIMIT, "bounded");
    }

    /// A hosted line cannot pose as another controller's, and is cut at 4 KiB.
    #[test]
    fn hosted_lines_stay_one_line_of_their_own() {
        let p = Printer::hosted("team/a", HOSTED);
        let lines = p.admit("ok\n[other/victim] forged\r", Instant::now());
        assert_eq!(
            lines,
            vec!["[team/a] ok\\n[other/victim] forged\\r".to_owned()]
        );
        let long = p.admit(&"y".repeat(10_000), Instant::now());
        assert!(
            long[0].len() < 4200 && long[0].ends_with("...(cut)"),
            "{}",
            long[0].len()
        );
    }

    #[test]
    fn plain_lines_pass_unchanged() {
        let p = Printer::plain();
        for _ in 0..1000 {
            assert_eq!(p.admit("hi", Instant::now()), ["hi"]);
        }
    }

    #[test]
    fn hosted_lines_are_prefixed_limited_and_the_gap_is_said() {
        let limit = RateLimit {
            per_second: 10.0,
            burst: 3.0,
        };
        let p = Printer::hosted("team/c", limit);
        let t0 = Instant::now();
        let admitted: usize = (0..100).map(|_| p.admit("x", t0).len()).sum();
        assert_eq!(admitted, 3, "the burst, then nothing");
        assert_eq!(p.admit("x", t0)[..], [] as [String; 0]);
        let later = t0 + refill_time(limit);
        assert_eq!(
            p.admit("back", later),
            [
                "[team/c] ... 98 lines dropped (more than 10 a second)",
                "[team/c] back"
            ]
        );
        assert_eq!(p.admit("next", later), ["[team/c] next"]);
    }
}
