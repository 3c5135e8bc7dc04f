//! `k8s.fake(objects=, yaml=, namespace=, default=)`: a client bound to a fresh
//! in-memory cluster, seeded with objects; `default=True` makes it what `k8s.*` uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::list::ListRef;
use starlark::values::none::NoneOr;

use super::FakeCluster;
use crate::k8s::manifest::manifests;
use crate::k8s::module::{client_like, session_key};
use crate::k8s::session::{Session, SessionCell, SessionKey};
use crate::script::host::Host;
use crate::script::lint::Signature;

/// The fakes of one run, by the session key their clients carry.
#[derive(Default)]
pub struct Fakes {
    clusters: Mutex<HashMap<SessionKey, FakeCluster>>,
    next: AtomicU64,
}

/// Adds `fake` to the k8s client values.
#[starlark_module]
pub fn fake_method(builder: &mut MethodsBuilder) {
    /// A client bound to a new in-memory cluster holding `objects` (dicts or builder
    /// results), the documents of `yaml` and those of the YAML `files` (relative to the
    /// test file, below its directory); every k8s function works on it.
    /// `default = True` also makes it the cluster `k8s.*` uses in this run.
    fn fake<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] objects: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] yaml: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] files: NoneOr<Value<'v>>,
        #[starlark(require = named, default = "default")] namespace: &str,
        #[starlark(require = named, default = false)] default: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let host = Host::of(eval)?;
        let mut docs = Vec::new();
        if let Some(objects) = objects.into_option() {
            let items = ListRef::from_value(objects).ok_or_else(|| {
                anyhow::anyhow!(
                    "k8s.fake: objects must be a list, not {}",
                    objects.get_type()
                )
            })?;
            for (i, item) in items.iter().enumerate() {
                let found =
                    manifests(item).map_err(|e| anyhow::anyhow!("k8s.fake: objects[{i}]: {e}"))?;
                docs.extend(found.into_iter().map(|d| (format!("objects[{i}]"), d)));
            }
        }
        if let Some(text) = yaml.into_option() {
            docs.extend(yaml_documents(text)?);
        }
        if let Some(files) = files.into_option() {
            let caller = eval
                .call_stack_top_location()
                .map(|l| l.file.filename().to_owned());
            let items = ListRef::from_value(files).ok_or_else(|| {
                anyhow::anyhow!(
                    "k8s.fake: files must be a list of paths, not {}",
                    files.get_type()
                )
            })?;
            for item in items.iter() {
                let path = item.unpack_str().ok_or_else(|| {
                    anyhow::anyhow!("k8s.fake: files: expected a path string, got {item}")
                })?;
                let text = fixture(path, caller.as_deref())?;
                docs.extend(
                    yaml_documents(&text)?
                        .into_iter()
                        .map(|(at, d)| (format!("{path}: {at}"), d)),
                );
            }
        }
        // Kinds before their objects, whatever order they were given in.
        docs.sort_by_key(|(_, d)| {
            !matches!(
                d["kind"].as_str(),
                Some("CustomResourceDefinition" | "Namespace")
            )
        });
        let cluster = FakeCluster::new();
        for (at, doc) in docs {
            cluster
                .seed(doc)
                .map_err(|e| anyhow::anyhow!("k8s.fake: {at}: {e}"))?;
        }
        let fakes = host.ext::<Fakes>();
        let n = fakes.next.fetch_add(1, Ordering::Relaxed) + 1;
        let key = SessionKey {
            kubeconfig: Some(format!("<fake {n}>")),
            context: None,
            namespace: None,
        };
        let session = {
            let _entered = host.runtime.enter();
            Arc::new(
                Session::from_client(cluster.client(namespace), namespace.to_owned(), false)
                    .with_immediate_events(),
            )
        };
        let sessions = host.ext::<SessionCell>();
        sessions.insert(key.clone(), session.clone());
        if default {
            sessions.pin(session);
        }
        let mut clusters = fakes
            .clusters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if default {
            clusters.insert(SessionKey::default(), cluster.clone());
        }
        clusters.insert(key.clone(), cluster);
        drop(clusters);
        client_like(this, key, eval.heap())
    }
}

/// The text of a fixture file, beside the calling file or below its directory (like
/// `load()`): reading the test's own fixtures needs no `--allow-fs`, so a path that
/// climbs out (`..`) or is absolute is refused.
fn fixture(path: &str, caller: Option<&str>) -> anyhow::Result<String> {
    let given = std::path::Path::new(path);
    let escapes = given.is_absolute()
        || given.components().any(|c| {
            !matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
    if escapes {
        anyhow::bail!(
            "k8s.fake: files: {path:?} must be relative to the test file and stay below its directory"
        );
    }
    let dir = caller
        .map(std::path::Path::new)
        .and_then(std::path::Path::parent)
        .unwrap_or_else(|| std::path::Path::new("."));
    let full = dir.join(given);
    std::fs::read_to_string(&full)
        .map_err(|e| anyhow::anyhow!("k8s.fake: files: reading {}: {e}", full.display()))
}

/// The documents of a YAML text, each named by its index for messages (a `List`
/// document's items share its index).
fn yaml_documents(text: &str) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let mut out = Vec::new();
    for (i, chunk) in split_documents(text).iter().enumerate() {
        let parsed = crate::script::yaml::parse_yaml(chunk)
            .map_err(|e| anyhow::anyhow!("k8s.fake: yaml document {i}: {e}"))?;
        for doc in parsed.into_iter().filter(|d| !d.is_null()) {
            let items = match doc.get("kind").and_then(serde_json::Value::as_str) {
                Some("List") => doc["items"].as_array().cloned().unwrap_or_default(),
                _ => vec![doc],
            };
            out.extend(items.into_iter().map(|d| (format!("yaml document {i}"), d)));
        }
    }
    Ok(out)
}

/// Splits YAML text at `---` lines, so an error can name its document.
fn split_documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(String::new());
            continue;
        }
        if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.retain(|d| !d.trim().is_empty());
    docs
}

/// The fake a client value of `k8s.fake(...)` (or its `config(namespace=...)`) is bound
/// to, if any.
pub fn cluster_of(host: &Host, client: Value) -> Option<FakeCluster> {
    let key = session_key(client);
    let base = SessionKey {
        namespace: None,
        ..key
    };
    host.ext::<Fakes>()
        .clusters
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&base)
        .cloned()
}

/// Adds the signature of `k8s.fake`, for `kite check`.
pub fn signatures(known: &mut BTreeMap<String, Signature>) {
    known.insert(
        "k8s.fake".to_owned(),
        Signature {
            named_only: ["objects", "yaml", "files", "namespace", "default"]
                .iter()
                .map(|n| ((*n).to_owned(), false))
                .collect(),
            ..Default::default()
        },
    );
}
