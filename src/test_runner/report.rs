//! What `kite test` reports: a line per test (and the details of each failure) for the
//! terminal, one JSON document (`--json`), and JUnit XML (`--junit FILE`) for CI.

use std::fmt::Write as _;
use std::time::Duration;

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Passed,
    Failed,
    Skipped,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// One test's result. A file that cannot be loaded is one failed case named
/// [`LOAD`], so that its error is counted and shown like any failure.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// The file as messages name it (relative to the working directory when inside it).
    pub file: String,
    pub status: Status,
    pub duration: Duration,
    /// Why it failed or was skipped; empty when it passed.
    pub message: String,
    /// What the test printed.
    pub output: String,
}

/// The name of the case that stands for a file that failed to parse or to evaluate.
pub const LOAD: &str = "<load>";

/// How many tests ended each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Totals {
    pub fn of(cases: &[Case]) -> Self {
        let count = |s| cases.iter().filter(|c| c.status == s).count();
        Totals {
            passed: count(Status::Passed),
            failed: count(Status::Failed),
            skipped: count(Status::Skipped),
        }
    }

    /// `N passed, N failed`, with `, N skipped` when any were.
    pub fn line(self) -> String {
        let mut line = format!("{} passed, {} failed", self.passed, self.failed);
        if self.skipped > 0 {
            let _ = write!(line, ", {} skipped", self.skipped);
        }
        line
    }
}

/// The terminal lines of one test: its status and name, then (indented) why it failed
/// or was skipped and, for failures (or with `verbose`), what it printed.
pub fn text(case: &Case, verbose: bool) -> String {
    let tag = match case.status {
        Status::Passed => "PASS",
        Status::Failed => "FAIL",
        Status::Skipped => "SKIP",
    };
    let mut out = format!("{tag} {}::{}", case.file, case.name);
    if verbose {
        let _ = write!(out, " ({} ms)", case.duration.as_millis());
    }
    out.push('\n');
    for line in case.message.lines() {
        let _ = writeln!(out, "    {line}");
    }
    if !case.output.is_empty() && (verbose || case.status == Status::Failed) {
        out.push_str("    --- output ---\n");
        for line in case.output.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// One JSON document: every test (name, file, status, duration_ms, message, output)
/// and the totals.
pub fn json(cases: &[Case]) -> String {
    let tests: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "file": c.file,
                "status": c.status.word(),
                "duration_ms": crate::duration::millis(c.duration),
                "message": (!c.message.is_empty()).then_some(&c.message),
                "output": c.output,
            })
        })
        .collect();
    let totals = Totals::of(cases);
    let doc = serde_json::json!({
        "tests": tests,
        "passed": totals.passed,
        "failed": totals.failed,
        "skipped": totals.skipped,
    });
    // A tree of plain values always serializes.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// JUnit XML: a `<testsuite>` per file (in the order run), a `<testcase>` per test.
pub fn junit(cases: &[Case]) -> String {
    let totals = Totals::of(cases);
    let seconds = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let total: Duration = cases.iter().map(|c| c.duration).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"kite test\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{}\">",
        cases.len(),
        totals.failed,
        totals.skipped,
        seconds(total)
    );
    let mut files: Vec<&str> = Vec::new();
    for c in cases {
        if !files.contains(&c.file.as_str()) {
            files.push(&c.file);
        }
    }
    for file in files {
        let own: Vec<Case> = cases.iter().filter(|c| c.file == file).cloned().collect();
        let t = Totals::of(&own);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{}\">",
            escape(file),
            own.len(),
            t.failed,
            t.skipped,
            seconds(own.iter().map(|c| c.duration).sum())
        );
        for c in &own {
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
                escape(&c.name),
                escape(file),
                seconds(c.duration)
            );
            let first = c.message.lines().next().unwrap_or_default();
            match c.status {
                Status::Passed => out.push_str("/>\n"),
                Status::Skipped => {
                    let _ = writeln!(
                        out,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        escape(first)
                    );
                }
                Status::Failed => {
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                        escape(first),
                        escape(&c.message)
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text made safe for XML attributes and content; characters XML 1.0 cannot hold at
/// all become U+FFFD.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, status: Status, message: &str) -> Case {
        Case {
            name: name.to_owned(),
            file: "a_test.star".to_owned(),
            status,
            duration: Duration::from_millis(12),
            message: message.to_owned(),
            output: String::new(),
        }
    }

    fn sample() -> Vec<Case> {
        vec![
            case("test_ok", Status::Passed, ""),
            case(
                "test_bad",
                Status::Failed,
                "a_test.star:3:5: assert: <x> & \"y\"\n  got: 0",
            ),
            case("test_later", Status::Skipped, "linux only"),
        ]
    }

    #[test]
    fn text_lines_and_totals() {
        let cases = sample();
        assert_eq!(text(&cases[0], false), "PASS a_test.star::test_ok\n");
        assert_eq!(text(&cases[0], true), "PASS a_test.star::test_ok (12 ms)\n");
        assert_eq!(
            text(&cases[1], false),
            "FAIL a_test.star::test_bad\n    a_test.star:3:5: assert: <x> & \"y\"\n      got: 0\n"
        );
        assert_eq!(
            text(&cases[2], false),
            "SKIP a_test.star::test_later\n    linux only\n"
        );
        assert_eq!(Totals::of(&cases).line(), "1 passed, 1 failed, 1 skipped");
        assert_eq!(Totals::of(&cases[..2]).line(), "1 passed, 1 failed");
    }

    #[test]
    fn json_has_one_entry_per_test() {
        let doc: serde_json::Value = serde_json::from_str(&json(&sample())).unwrap();
        assert_eq!(doc["failed"], 1);
        assert_eq!(doc["tests"][0]["status"], "passed");
        assert_eq!(doc["tests"][0]["message"], serde_json::Value::Null);
        assert_eq!(doc["tests"][1]["duration_ms"], 12);
        assert_eq!(doc["tests"][2]["message"], "linux only");
        assert_eq!(doc["tests"][2]["file"], "a_test.star");
    }

    #[test]
    fn junit_escapes_and_counts() {
        let xml = junit(&sample());
        assert!(
            xml.contains("<testsuites name=\"kite test\" tests=\"3\" failures=\"1\" skipped=\"1\""),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"a_test.star\" tests=\"3\""),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase name=\"test_ok\" classname=\"a_test.star\" time=\"0.012\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<failure message=\"a_test.star:3:5: assert: &lt;x&gt; &amp; &quot;y&quot;\">"
            ),
            "{xml}"
        );
        assert!(xml.contains("<skipped message=\"linux only\"/>"), "{xml}");
        assert_eq!(escape("a\u{1}b"), "a\u{FFFD}b");
    }
}
