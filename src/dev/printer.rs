//! What `kite dev` shows on stdout: a header per version, reload messages, and one line
//! per reconcile with the writes it made below it.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use serde_json::Value as Json;

use super::diff;

/// The most object states kept to diff against; beyond it the oldest are forgotten
/// (their next write shows as "first write seen").
const REMEMBERED: usize = 10_000;

/// The most write lines kept for one thread's next reconcile line.
const PENDING_PER_THREAD: usize = 200;

/// One finished reconcile, as the worker logs it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconcile {
    pub key: String,
    pub trigger: String,
    pub duration_ms: u64,
    /// `success`, `requeue`, `error` or `dropped`.
    pub outcome: String,
    /// The error, retry delay or requeue delay, when there is one.
    pub detail: String,
}

/// The screen of one `kite dev` session, shared by the loop, the log layer and the
/// write observers of every version.
pub struct Printer {
    clear: bool,
    /// Stdout, except in tests; one writer at a time keeps lines whole.
    out: Mutex<Box<dyn Write + Send>>,
    /// Looked up once: the reconcile lines show local clock times.
    zone: jiff::tz::TimeZone,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Lines for writes not yet shown under a reconcile, by the thread that made them:
    /// a reconcile runs on one pool thread from its first write to its log line, so its
    /// writes are exactly those of its thread.
    pending: HashMap<std::thread::ThreadId, Vec<String>>,
    /// The last state a write returned, by uid.
    seen: HashMap<String, Json>,
    /// Uids in the order first seen, to forget the oldest.
    order: std::collections::VecDeque<String>,
}

impl Printer {
    /// `clear`: clear the screen before each version's header.
    pub fn new(clear: bool) -> Self {
        Self::to(Box::new(std::io::stdout()), clear)
    }

    /// A printer writing to `out`.
    pub fn to(out: Box<dyn Write + Send>, clear: bool) -> Self {
        Self {
            clear,
            out: Mutex::new(out),
            zone: jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn out(&self) -> std::sync::MutexGuard<'_, Box<dyn Write + Send>> {
        self.out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Prints lines as they are; a closed stdout is not the loop's problem.
    pub fn say(&self, text: &str) {
        let mut out = self.out();
        let _ = writeln!(out, "{}", text.trim_end());
        let _ = out.flush();
    }

    /// Clears the screen (unless told not to) and names what runs now.
    pub fn header(&self, file: &str, version: u32, watching: usize) {
        let mut out = self.out();
        if self.clear {
            let _ = write!(out, "\x1b[2J\x1b[H");
        }
        let files = if watching == 1 { "file" } else { "files" };
        let _ = writeln!(
            out,
            "kite dev: {file} (version {version}) — watching {watching} {files}; Ctrl-C to stop"
        );
        let _ = out.flush();
    }

    /// Notes an object a write returned; shown under the next reconcile line.
    pub fn wrote(&self, obj: &Json) {
        let now = jiff::Timestamp::now();
        let mut state = self.state();
        let uid = obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let line = diff::write_line(state.seen.get(&uid), obj, now);
        let mine = state
            .pending
            .entry(std::thread::current().id())
            .or_default();
        mine.push(line);
        // Writes no reconcile line follows (a top level's) must not pile up.
        let over = mine.len().saturating_sub(PENDING_PER_THREAD);
        mine.drain(..over);
        if uid.is_empty() {
            return;
        }
        let mut kept = obj.clone();
        if let Some(meta) = kept["metadata"].as_object_mut() {
            // Large, and never part of a diff.
            meta.remove("managedFields");
        }
        if state.seen.insert(uid.clone(), kept).is_none() {
            state.order.push_back(uid);
        }
        while state.order.len() > REMEMBERED {
            if let Some(old) = state.order.pop_front() {
                state.seen.remove(&old);
            }
        }
    }

    /// Prints a reconcile line and, indented below it, the writes made since the last.
    pub fn reconciled(&self, r: &Reconcile) {
        let writes = self
            .state()
            .pending
            .remove(&std::thread::current().id())
            .unwrap_or_default();
        let clock = jiff::Timestamp::now()
            .to_zoned(self.zone.clone())
            .strftime("%H:%M:%S")
            .to_string();
        let mut text = reconcile_line(&clock, r);
        for w in writes {
            text.push_str("\n    ");
            text.push_str(&w);
        }
        self.say(&text);
    }
}

/// `HH:MM:SS  <key>  <trigger>  <n>ms  <outcome>[  <detail>]`.
pub fn reconcile_line(clock: &str, r: &Reconcile) -> String {
    let mut line = format!(
        "{clock}  {}  {}  {}ms  {}",
        r.key, r.trigger, r.duration_ms, r.outcome
    );
    if !r.detail.is_empty() {
        line.push_str("  ");
        line.push_str(&r.detail);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reconcile_lines() {
        let r = Reconcile {
            key: "ns/web".into(),
            trigger: "update".into(),
            duration_ms: 12,
            outcome: "error".into(),
            detail: "retry in 5s: boom".into(),
        };
        assert_eq!(
            reconcile_line("10:00:00", &r),
            "10:00:00  ns/web  update  12ms  error  retry in 5s: boom"
        );
    }

    /// A writer tests read back.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn headers_clear_and_writes_are_shown_under_their_reconcile() {
        let buffer = Buffer::default();
        let p = Printer::to(Box::new(buffer.clone()), true);
        p.header("ctrl.star", 2, 3);
        p.wrote(&json!({"kind": "Secret", "metadata": {"name": "s", "namespace": "n"}}));
        p.reconciled(&Reconcile {
            key: "n/a".into(),
            trigger: "create".into(),
            duration_ms: 4,
            outcome: "success".into(),
            detail: String::new(),
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let (header, rest) = text.split_once('\n').unwrap();
        assert_eq!(
            header,
            "\x1b[2J\x1b[Hkite dev: ctrl.star (version 2) — watching 3 files; Ctrl-C to stop"
        );
        let lines: Vec<&str> = rest.lines().collect();
        assert!(lines[0].ends_with("  n/a  create  4ms  success"), "{rest}");
        assert_eq!(lines[1], "    ~ secret n/s (first write seen)");
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn writes_wait_for_the_next_reconcile_and_diff_against_the_last_seen() {
        let p = Printer::new(false);
        let cm = |v: &str| {
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n", "uid": "u1",
                   "labels": {"version": v}, "managedFields": [{"manager": "x"}, {"manager": "y"}]}})
        };
        p.wrote(&cm("1"));
        p.wrote(&cm("2"));
        let pending = p
            .state()
            .pending
            .remove(&std::thread::current().id())
            .unwrap_or_default();
        assert_eq!(
            pending,
            [
                "~ configmap n/a (first write seen)",
                "~ configmap n/a  metadata.labels.version: \"1\" → \"2\""
            ]
        );
        assert!(
            p.state().seen["u1"]["metadata"]
                .get("managedFields")
                .is_none()
        );
    }

    #[test]
    fn writes_show_under_the_reconcile_of_their_own_thread() {
        let buffer = Buffer::default();
        let p = std::sync::Arc::new(Printer::to(Box::new(buffer.clone()), false));
        let cm = |name: &str| json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": "n", "uid": name}});
        let other = p.clone();
        std::thread::spawn(move || other.wrote(&cm("theirs")))
            .join()
            .unwrap();
        p.wrote(&cm("mine"));
        p.reconciled(&Reconcile {
            key: "n/mine".into(),
            trigger: "update".into(),
            duration_ms: 1,
            outcome: "success".into(),
            detail: String::new(),
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("configmap n/mine"), "{text}");
        assert!(!text.contains("theirs"), "another thread's write: {text}");
    }
}
