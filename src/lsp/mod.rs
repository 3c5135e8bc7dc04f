//! `kite lsp`: a language server on stdin/stdout with `kite check`'s diagnostics,
//! completion and hover for the library, and go-to-definition across `load()`.
//!
//! One thread serves one editor: each request is answered from the open documents
//! (full-text sync) and the library's symbol index, with no cluster and no script run.

mod complete;
mod definition;
mod diagnostics;
mod docs;
mod hover;
mod outline;
mod text;
mod transport;
mod uri;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use lsp_types::{
    CompletionOptions, CompletionParams, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, GotoDefinitionParams, Hover, HoverContents, HoverParams,
    HoverProviderCapability, InitializeResult, Location, MarkupContent, MarkupKind, OneOf,
    PublishDiagnosticsParams, ServerCapabilities, ServerInfo, TextDocumentSyncCapability,
    TextDocumentSyncKind, Uri,
};
use serde::de::DeserializeOwned;
use serde_json::{Value as Json, json};

use docs::Index;
use text::Lines;

/// Why the server stopped other than by the client's `shutdown` then `exit`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kite lsp: {0}")]
    Transport(#[from] transport::Error),
    #[error("kite lsp: the client exited without a shutdown request")]
    ExitWithoutShutdown,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// JSON-RPC's error codes for a bad request.
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INVALID_REQUEST: i64 = -32600;

/// Serves one client on stdin/stdout until it exits or closes its end.
///
/// # Errors
/// [`Error::Transport`] when a message cannot be read or written;
/// [`Error::ExitWithoutShutdown`] for an `exit` before `shutdown` (exit code 1, as the
/// protocol asks).
pub fn serve() -> Result<()> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    Server::default().run(&mut stdin.lock(), &mut stdout.lock())
}

#[derive(Default)]
struct Server {
    /// The open documents' text by URI.
    open: HashMap<Uri, String>,
    shutdown: bool,
}

/// A request's failure: the JSON-RPC error code and message.
type Refusal = (i64, String);

impl Server {
    fn run(&mut self, input: &mut impl BufRead, output: &mut impl Write) -> Result<()> {
        loop {
            let message = match transport::read(input) {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                // The frame was read whole, so the stream is still in step.
                Err(transport::Error::Decode(e)) => {
                    eprintln!("kite lsp: ignoring a message that is not JSON: {e}");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let method = message
                .get("method")
                .and_then(Json::as_str)
                .unwrap_or_default();
            let params = message.get("params").cloned().unwrap_or(Json::Null);
            match message.get("id") {
                _ if method == "exit" => {
                    return if self.shutdown {
                        Ok(())
                    } else {
                        Err(Error::ExitWithoutShutdown)
                    };
                }
                // A response to a request of ours: the server sends none.
                _ if method.is_empty() => {}
                Some(id) => {
                    let reply = match self.request(method, params) {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        Err((code, msg)) => json!({
                            "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": msg}
                        }),
                    };
                    transport::write(output, &reply)?;
                }
                None => {
                    for note in self.notify(method, params) {
                        transport::write(output, &note)?;
                    }
                }
            }
        }
    }

    fn request(&mut self, method: &str, params: Json) -> Result<Json, Refusal> {
        if self.shutdown {
            return Err((
                INVALID_REQUEST,
                format!("{method}: the server is shutting down"),
            ));
        }
        match method {
            "initialize" => Ok(to_json(&capabilities())),
            "shutdown" => {
                self.shutdown = true;
                Ok(Json::Null)
            }
            "textDocument/completion" => {
                let p: CompletionParams = parse(method, params)?;
                let doc = p.text_document_position;
                let text = self.text(&doc.text_document.uri);
                let offset = Lines::new(&text).offset(doc.position);
                Ok(to_json(&complete::complete(Index::get(), &text, offset)))
            }
            "textDocument/hover" => {
                let p: HoverParams = parse(method, params)?;
                let doc = p.text_document_position_params;
                let uri = doc.text_document.uri;
                let text = self.text(&uri);
                let lines = Lines::new(&text);
                let path = path_of(&uri);
                let found = hover::hover(
                    Index::get(),
                    &path,
                    &text,
                    lines.offset(doc.position),
                    &|p| self.read(p),
                );
                Ok(found.map_or(Json::Null, |(value, begin, end)| {
                    to_json(&Hover {
                        contents: HoverContents::Markup(MarkupContent {
                            kind: MarkupKind::Markdown,
                            value,
                        }),
                        range: Some(lines.range(begin, end)),
                    })
                }))
            }
            "textDocument/definition" => {
                let p: GotoDefinitionParams = parse(method, params)?;
                let doc = p.text_document_position_params;
                let uri = doc.text_document.uri;
                let text = self.text(&uri);
                let offset = Lines::new(&text).offset(doc.position);
                let path = path_of(&uri);
                let Some(target) = definition::definition(&path, &text, offset, &|p| self.read(p))
                else {
                    return Ok(Json::Null);
                };
                let target_uri = if target.path == path {
                    Some(uri)
                } else {
                    uri::from_path(&target.path)
                };
                let lines = Lines::new(&target.text);
                let name_len = target.text[target.offset..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(target.text.len() - target.offset);
                Ok(target_uri.map_or(Json::Null, |uri| {
                    to_json(&Location::new(
                        uri,
                        lines.range(target.offset, target.offset + name_len),
                    ))
                }))
            }
            _ => Err((
                METHOD_NOT_FOUND,
                format!("{method}: not supported by kite lsp"),
            )),
        }
    }

    /// Handles a notification; returns the notifications to send back.
    fn notify(&mut self, method: &str, params: Json) -> Vec<Json> {
        let uri = match method {
            "textDocument/didOpen" => {
                let Ok(p) = parse::<DidOpenTextDocumentParams>(method, params) else {
                    return Vec::new();
                };
                self.open
                    .insert(p.text_document.uri.clone(), p.text_document.text);
                p.text_document.uri
            }
            "textDocument/didChange" => {
                let Ok(p) = parse::<DidChangeTextDocumentParams>(method, params) else {
                    return Vec::new();
                };
                // Full sync: the last change is the whole text.
                if let Some(change) = p.content_changes.into_iter().last() {
                    self.open.insert(p.text_document.uri.clone(), change.text);
                }
                p.text_document.uri
            }
            "textDocument/didClose" => {
                let Ok(p) = parse::<DidCloseTextDocumentParams>(method, params) else {
                    return Vec::new();
                };
                self.open.remove(&p.text_document.uri);
                return vec![publish(p.text_document.uri, Vec::new())];
            }
            _ => return Vec::new(),
        };
        let text = self.text(&uri);
        let name = path_of(&uri).display().to_string();
        let found = diagnostics::diagnose(Index::get(), &name, &text);
        vec![publish(uri, found)]
    }

    /// A document's text: the editor's copy, else the file's (empty if unreadable).
    fn text(&self, uri: &Uri) -> String {
        self.open.get(uri).cloned().unwrap_or_else(|| {
            uri::to_path(uri)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default()
        })
    }

    /// A file's text, preferring an open document's.
    fn read(&self, path: &Path) -> Option<String> {
        let open = uri::from_path(path).and_then(|u| self.open.get(&u).cloned());
        open.or_else(|| std::fs::read_to_string(path).ok())
    }
}

/// The document's path; a made-up one for an unsaved document, so loads still
/// resolve against the working directory.
fn path_of(uri: &Uri) -> PathBuf {
    uri::to_path(uri).unwrap_or_else(|| PathBuf::from("untitled.star"))
}

fn capabilities() -> InitializeResult {
    InitializeResult {
        capabilities: ServerCapabilities {
            text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
            completion_provider: Some(CompletionOptions {
                trigger_characters: Some(vec![".".into(), "(".into(), ",".into()]),
                ..CompletionOptions::default()
            }),
            hover_provider: Some(HoverProviderCapability::Simple(true)),
            definition_provider: Some(OneOf::Left(true)),
            ..ServerCapabilities::default()
        },
        server_info: Some(ServerInfo {
            name: "kite".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
    }
}

fn publish(uri: Uri, diagnostics: Vec<lsp_types::Diagnostic>) -> Json {
    json!({
        "jsonrpc": "2.0",
        "method": "textDocument/publishDiagnostics",
        "params": to_json(&PublishDiagnosticsParams { uri, diagnostics, version: None }),
    })
}

fn parse<T: DeserializeOwned>(method: &str, params: Json) -> Result<T, Refusal> {
    serde_json::from_value(params).map_err(|e| (INVALID_PARAMS, format!("{method}: {e}")))
}

fn to_json(value: &impl serde::Serialize) -> Json {
    serde_json::to_value(value).unwrap_or(Json::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole session through the server loop, in memory.
    #[test]
    fn a_session_answers_in_order_and_ends_on_exit() {
        let mut input = Vec::new();
        let uri = "file:///nowhere/t.star";
        for m in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
            json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
            json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": uri, "languageId": "starlark", "version": 1, "text": "k8s.gett('pods')\n"}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "textDocument/completion", "params": {
                "textDocument": {"uri": uri}, "position": {"line": 0, "character": 4}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "bogus/thing"}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "shutdown"}),
            json!({"jsonrpc": "2.0", "method": "exit"}),
        ] {
            transport::write(&mut input, &m).unwrap();
        }
        let mut output = Vec::new();
        Server::default()
            .run(&mut std::io::Cursor::new(input), &mut output)
            .unwrap();
        let mut out = std::io::Cursor::new(output);
        let mut replies = Vec::new();
        while let Some(m) = transport::read(&mut out).unwrap() {
            replies.push(m);
        }
        assert_eq!(replies.len(), 5, "{replies:#?}");
        assert_eq!(replies[0]["result"]["serverInfo"]["name"], "kite");
        assert_eq!(replies[1]["method"], "textDocument/publishDiagnostics");
        assert!(
            replies[1]["params"]["diagnostics"][0]["message"]
                .as_str()
                .unwrap()
                .contains("gett")
        );
        let labels: Vec<&str> = replies[2]["result"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["label"].as_str())
            .collect();
        assert!(labels.contains(&"get"), "{labels:?}");
        assert_eq!(replies[3]["error"]["code"], METHOD_NOT_FOUND);
        assert_eq!(replies[4]["result"], Json::Null);
    }
}
