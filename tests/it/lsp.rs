//! `kite lsp` driven over stdio as an editor drives it: diagnostics, completion, hover
//! and go-to-definition across `load()`. Needs no cluster.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::kite_bin;

const T: Duration = Duration::from_secs(30);

/// A running `kite lsp` and the messages it has sent, read on their own thread.
struct Session {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    next_id: i64,
    /// Notifications read while waiting for a response, kept for later.
    notes: Vec<Value>,
}

impl Session {
    fn start() -> Session {
        let mut child = Command::new(kite_bin())
            .args(["lsp", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kite lsp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            while let Some(m) = read_message(&mut out) {
                if tx.send(m).is_err() {
                    return;
                }
            }
        });
        Session {
            child,
            stdin,
            messages: rx,
            next_id: 0,
            notes: Vec::new(),
        }
    }

    fn send(&mut self, message: &Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write");
        self.stdin.flush().expect("flush");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its result, failing on an error or past the deadline.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let m = self.next(&format!("the response to {method}"));
            if m.get("id") == Some(&json!(id)) {
                assert!(m.get("error").is_none(), "{method} failed: {m}");
                return m["result"].clone();
            }
            self.notes.push(m);
        }
    }

    /// The next notification named `method` (including ones read before).
    fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self.notes.iter().position(|n| n["method"] == method) {
            return self.notes.remove(i);
        }
        loop {
            let m = self.next(method);
            if m["method"] == method {
                return m;
            }
            self.notes.push(m);
        }
    }

    fn next(&mut self, what: &str) -> Value {
        match self.messages.recv_timeout(T) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => panic!("no {what} within {T:?}"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("kite lsp closed its output before {what}")
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_message(input: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if input.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    input.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The position (line, UTF-16 column; ASCII here) of the `n`th byte of `text`.
fn position(text: &str, offset: usize) -> Value {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let col = offset - before.rfind('\n').map_or(0, |i| i + 1);
    json!({"line": line, "character": col})
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kite-lsp-it-{}-{}",
        std::process::id(),
        Instant::now().elapsed().subsec_nanos()
    ));
    std::fs::create_dir_all(dir.join("lib")).expect("temp dir");
    dir.canonicalize().expect("canonical temp dir")
}

#[test]
fn a_scripted_editor_session() {
    let dir = temp_dir();
    let helpers = "def helper(name):\n    return name.upper()\n";
    std::fs::write(dir.join("lib/helpers.star"), helpers).unwrap();
    let main = dir.join("main.star");
    let text = "load(\"lib/helpers.star\", \"helper\")\n\
                p = k8s.gett(\"pods\", \"x\")\n\
                d = k8s.obj.deployment(name = \"x\", replica = 2)\n\
                n = helper(\"x\")\n\
                q = k8s.get(\"pods\", \"y\")\n";
    std::fs::write(&main, text).unwrap();
    let uri = file_uri(&main);

    let mut s = Session::start();
    let init = s.request(
        "initialize",
        json!({"processId": null, "rootUri": file_uri(&dir), "capabilities": {}}),
    );
    assert_eq!(init["capabilities"]["hoverProvider"], true, "{init}");
    s.notify("initialized", json!({}));

    s.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "starlark", "version": 1, "text": text}}),
    );
    let diags = s.notification("textDocument/publishDiagnostics");
    assert_eq!(diags["params"]["uri"], uri.as_str());
    let list = diags["params"]["diagnostics"]
        .as_array()
        .expect("diagnostics");
    let on_line = |line: u64, needle: &str| {
        list.iter().any(|d| {
            d["range"]["start"]["line"] == line
                && d["message"].as_str().unwrap_or("").contains(needle)
        })
    };
    assert!(on_line(1, "gett"), "k8s.gett on line 2: {list:#?}");
    assert!(on_line(2, "replica"), "replica on line 3: {list:#?}");
    assert_eq!(list.len(), 2, "{list:#?}");

    // Completion after `k8s.` (typed over the file's line 2).
    let typing = "p = k8s.";
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": typing}]}),
    );
    s.notification("textDocument/publishDiagnostics");
    let items = s.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": position(typing, typing.len())}),
    );
    let labels: Vec<&str> = items
        .as_array()
        .expect("completion items")
        .iter()
        .filter_map(|i| i["label"].as_str())
        .collect();
    for name in ["get", "list", "apply", "control"] {
        assert!(labels.contains(&name), "{name} in {labels:?}");
    }

    // Completion inside a builder call: its keywords.
    let typing = "d = k8s.obj.deployment(name = \"x\", ";
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": typing}]}),
    );
    s.notification("textDocument/publishDiagnostics");
    let items = s.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": position(typing, typing.len())}),
    );
    assert!(
        items
            .as_array()
            .expect("items")
            .iter()
            .any(|i| i["label"] == "replicas"),
        "{items}"
    );

    // Back to the file's text: hover and definition.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 4}, "contentChanges": [{"text": text}]}),
    );
    s.notification("textDocument/publishDiagnostics");
    let at = text.find("k8s.get(").unwrap() + "k8s.g".len();
    let hover = s.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": position(text, at)}),
    );
    assert_eq!(hover["contents"]["kind"], "markdown", "{hover}");
    let md = hover["contents"]["value"].as_str().unwrap_or_default();
    assert!(md.contains("k8s.get("), "{md}");
    // The doc comment of `get` in src/k8s/calls.rs.
    assert!(md.contains("GET one object"), "{md}");

    let at = text.find("helper(\"x\")").unwrap() + 2;
    let def = s.request(
        "textDocument/definition",
        json!({"textDocument": {"uri": uri}, "position": position(text, at)}),
    );
    assert_eq!(def["uri"], file_uri(&dir.join("lib/helpers.star")), "{def}");
    assert_eq!(
        def["range"]["start"],
        json!({"line": 0, "character": 4}),
        "{def}"
    );

    let shut = s.request("shutdown", Value::Null);
    assert_eq!(shut, Value::Null);
    s.notify("exit", Value::Null);
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(status) = s.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "kite lsp did not exit within {T:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).ok();
}
