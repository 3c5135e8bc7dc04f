//! What one hosted controller said: a bounded, in-memory log of its `print()` and `log`
//! lines and of each reconcile's outcome, which `kite logs` reads through the operator's
//! aggregated API (the tenant cannot read the operator's own output).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

/// Entries one journal keeps at most; the oldest go first.
pub const MAX_ENTRIES: usize = 250;

/// Bytes one journal keeps at most, its entries' own size included (so long
/// tracebacks cannot add up); charged to its namespace's `--namespace-memory` with the
/// controller. Every running controller's journal fills up in time (each reconcile
/// adds a line): at 256 KiB each, 5000 controllers would have come to keep 1.3 GB of
/// them.
pub const MAX_BYTES: usize = 32 * 1024;

/// What an entry costs beyond its text.
const ENTRY_SIZE: usize = std::mem::size_of::<Entry>();

/// One line (or one reconcile's outcome, which may span lines: a traceback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its number in this journal, from 1: a follower asks for what came after.
    pub seq: u64,
    pub at: SystemTime,
    pub text: String,
}

/// A bounded log, written by script threads and read by the logs server.
#[derive(Debug)]
pub struct Journal {
    kept: Mutex<Kept>,
    /// The last entry's number, for followers to wait on.
    last: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Kept {
    entries: VecDeque<Entry>,
    bytes: usize,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            kept: Mutex::default(),
            last: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `text` (cut to a quarter of [`MAX_BYTES`]), dropping the oldest entries
    /// beyond the bounds, and wakes the followers.
    pub fn push(&self, text: &str) {
        let text = cut(&clean(text), MAX_BYTES / 4);
        let seq = {
            let mut kept = self.lock();
            let seq = kept.entries.back().map_or(*self.last.borrow(), |e| e.seq) + 1;
            kept.bytes += text.len() + ENTRY_SIZE;
            kept.entries.push_back(Entry {
                seq,
                at: SystemTime::now(),
                text,
            });
            while kept.entries.len() > MAX_ENTRIES || kept.bytes > MAX_BYTES {
                let Some(old) = kept.entries.pop_front() else {
                    break;
                };
                kept.bytes -= old.text.len() + ENTRY_SIZE;
            }
            seq
        };
        self.last.send_replace(seq);
    }

    /// The entries after number `after`, at or after `since`, at most the last `tail`.
    pub fn read(&self, after: u64, since: Option<SystemTime>, tail: Option<usize>) -> Vec<Entry> {
        let kept = self.lock();
        let wanted = kept
            .entries
            .iter()
            .filter(|e| e.seq > after && since.is_none_or(|s| e.at >= s));
        let all: Vec<Entry> = wanted.cloned().collect();
        let skip = tail.map_or(0, |t| all.len().saturating_sub(t));
        all.into_iter().skip(skip).collect()
    }

    /// A receiver that changes whenever an entry is added.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.last.subscribe()
    }
}

/// `text` as a reader's terminal should show it: control characters, and the ones
/// that reorder or hide text (bidirectional controls, zero-width characters, line and
/// paragraph separators), escaped; each line after the first indented, so that a
/// traceback's text can never pass for an entry of its own.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\n    "),
            '\t' => out.push(c),
            c if c.is_control() || hides(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how the text around them shows.
fn hides(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` cut to at most `max` bytes on a character boundary, saying so.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...(cut)", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_within_its_bounds() {
        let j = Journal::default();
        for i in 0..MAX_ENTRIES + 10 {
            j.push(&format!("line {i}"));
        }
        let all = j.read(0, None, None);
        assert_eq!(all.len(), MAX_ENTRIES);
        assert_eq!(all[0].text, "line 10");
        assert_eq!(all.last().unwrap().seq, (MAX_ENTRIES + 10) as u64);
        // Long texts are cut, and bytes are bounded too.
        let big = "x".repeat(MAX_BYTES);
        for _ in 0..8 {
            j.push(&big);
        }
        let all = j.read(0, None, None);
        let bytes: usize = all.iter().map(|e| e.text.len() + ENTRY_SIZE).sum();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert_eq!(j.lock().bytes, bytes, "what is counted is what is kept");
        assert!(all.last().unwrap().text.ends_with("...(cut)"));
        // No escape sequence reaches a reader's terminal.
        j.push("a\x1b[2Jb\nreconciled x\u{202E}y");
        assert_eq!(
            j.read(0, None, Some(1))[0].text,
            "a\\u{1b}[2Jb\n    reconciled x\\u{202e}y"
        );
    }

    #[test]
    fn reads_after_a_number_since_a_time_and_the_tail() {
        let j = Journal::default();
        for t in ["a", "b", "c", "d"] {
            j.push(t);
        }
        let texts = |v: Vec<Entry>| v.into_iter().map(|e| e.text).collect::<Vec<_>>();
        assert_eq!(texts(j.read(2, None, None)), ["c", "d"]);
        assert_eq!(texts(j.read(0, None, Some(1))), ["d"]);
        let later = SystemTime::now() + std::time::Duration::from_mins(1);
        assert!(j.read(0, Some(later), None).is_empty());
    }

    #[tokio::test]
    async fn followers_are_woken_by_new_entries() {
        let j = std::sync::Arc::new(Journal::default());
        let mut rx = j.subscribe();
        let writer = j.clone();
        std::thread::spawn(move || writer.push("hello"));
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("woken")
            .expect("open");
        assert_eq!(*rx.borrow(), 1);
        assert_eq!(j.read(0, None, None)[0].text, "hello");
    }
}
