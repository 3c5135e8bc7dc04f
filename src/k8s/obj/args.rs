//! Keyword-argument parsing and type checks shared by the `k8s.obj` builders.

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value as Json};
use starlark::collections::SmallMap;
use starlark::values::Value;

use crate::script::json::from_starlark;

/// A JSON object, the shape of every manifest and nested field.
pub(super) type Obj = Map<String, Json>;

/// One builder: its Starlark name, accepted keywords (in the order error messages list
/// them), the keyword a single positional argument stands for, and the Rust body.
pub(super) struct Builder {
    pub name: &'static str,
    pub keywords: &'static [&'static str],
    pub positional: Option<&'static str>,
    pub build: fn(&Args) -> Result<Json>,
}

/// The arguments of one builder call, already converted to JSON. `None` arguments are
/// dropped so that scripts can pass `x = None` to mean "not given".
pub(super) struct Args {
    builder: &'static str,
    given: Vec<(&'static str, Json)>,
}

impl Args {
    /// Checks the call against `b` and converts every argument to JSON.
    pub fn parse<'v>(
        b: &Builder,
        positional: &[Value<'v>],
        kwargs: SmallMap<String, Value<'v>>,
    ) -> Result<Self> {
        let mut args = Args {
            builder: b.name,
            given: Vec::new(),
        };
        match (positional, b.positional) {
            ([], _) => {}
            ([v], Some(key)) => args.push(key, *v)?,
            (_, Some(key)) => bail!(
                "k8s.obj.{}: takes at most 1 positional argument ({key}), got {}",
                b.name,
                positional.len()
            ),
            (_, None) => bail!(
                "k8s.obj.{}: takes keyword arguments only, got {} positional",
                b.name,
                positional.len()
            ),
        }
        for (key, v) in kwargs {
            let Some(known) = b.keywords.iter().find(|k| **k == key) else {
                bail!(
                    "k8s.obj.{}: unknown keyword argument {key:?}{} (accepted: {})",
                    b.name,
                    suggestion(&key, b.keywords),
                    b.keywords.join(", ")
                );
            };
            if b.positional == Some(*known) && !positional.is_empty() {
                bail!(
                    "k8s.obj.{}: argument {key:?} given both by position and by keyword",
                    b.name
                );
            }
            args.push(known, v)?;
        }
        Ok(args)
    }

    fn push(&mut self, key: &'static str, v: Value) -> Result<()> {
        if v.is_none() {
            return Ok(());
        }
        let json = from_starlark(v).map_err(|e| self.err(key, &e.to_string()))?;
        self.given.push((key, json));
        Ok(())
    }

    /// An error about argument `key`, prefixed with the builder's full name.
    pub fn err(&self, key: &str, msg: &str) -> anyhow::Error {
        anyhow!("k8s.obj.{}: argument {key:?}: {msg}", self.builder)
    }

    /// An error about the call as a whole.
    pub fn fail(&self, msg: &str) -> anyhow::Error {
        anyhow!("k8s.obj.{}: {msg}", self.builder)
    }

    fn wrong(&self, key: &str, want: &str, got: &Json) -> anyhow::Error {
        self.err(
            key,
            &format!("must be {want}, got {} {}", type_name(got), short(got)),
        )
    }

    pub fn has(&self, key: &str) -> bool {
        self.given.iter().any(|(k, _)| *k == key)
    }

    /// The argument as any JSON value.
    pub fn json(&self, key: &str) -> Option<&Json> {
        self.given.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn req<T>(&self, key: &str, v: Result<Option<T>>) -> Result<T> {
        v?.ok_or_else(|| self.fail(&format!("missing required argument {key:?}")))
    }

    pub fn str(&self, key: &str) -> Result<Option<String>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    pub fn req_str(&self, key: &str) -> Result<String> {
        self.req(key, self.str(key))
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::Number(n)) if n.is_i64() => Ok(n.as_i64()),
            Some(v) => Err(self.wrong(key, "an int", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "a bool", v)),
        }
    }

    /// A port-like value: an int or a named port.
    pub fn int_or_str(&self, key: &str) -> Result<Option<Json>> {
        match self.json(key) {
            None => Ok(None),
            Some(v @ Json::String(_)) => Ok(Some(v.clone())),
            Some(v @ Json::Number(n)) if n.is_i64() => Ok(Some(v.clone())),
            Some(v) => Err(self.wrong(key, "an int or a string", v)),
        }
    }

    /// Any dict.
    pub fn object(&self, key: &str) -> Result<Option<Obj>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::Object(m)) => Ok(Some(m.clone())),
            Some(v) => Err(self.wrong(key, "a dict", v)),
        }
    }

    /// A dict of string to string, such as labels.
    pub fn str_map(&self, key: &str) -> Result<Option<Obj>> {
        let Some(m) = self.object(key)? else {
            return Ok(None);
        };
        for (k, v) in &m {
            if !v.is_string() {
                return Err(self.wrong(&format!("{key}[{k:?}]"), "a string", v));
            }
        }
        Ok(Some(m))
    }

    /// Any list (or tuple).
    pub fn list(&self, key: &str) -> Result<Option<Vec<Json>>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::Array(items)) => Ok(Some(items.clone())),
            Some(v) => Err(self.wrong(key, "a list", v)),
        }
    }

    /// A list of dicts, such as containers or rules.
    pub fn objects(&self, key: &str) -> Result<Option<Vec<Json>>> {
        self.list_of(key, "a dict", |v| v.is_object().then(|| v.clone()))
    }

    /// A list of strings.
    pub fn strs(&self, key: &str) -> Result<Option<Vec<Json>>> {
        self.list_of(key, "a string", |v| v.is_string().then(|| v.clone()))
    }

    /// A list whose items `f` maps; an item it refuses is reported as not `want`.
    pub fn list_of(
        &self,
        key: &str,
        want: &str,
        f: impl Fn(&Json) -> Option<Json>,
    ) -> Result<Option<Vec<Json>>> {
        let Some(items) = self.list(key)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            out.push(f(v).ok_or_else(|| self.wrong(&format!("{key}[{i}]"), want, v))?);
        }
        Ok(Some(out))
    }

    /// A list of names or `{"name": ...}` dicts, as `imagePullSecrets` takes.
    pub fn name_refs(&self, key: &str) -> Result<Option<Vec<Json>>> {
        self.list_of(key, "a string or a dict", |v| match v {
            Json::String(s) => Some(serde_json::json!({ "name": s })),
            Json::Object(_) => Some(v.clone()),
            _ => None,
        })
    }

    /// A dict or list of API fields written in snake_case or camelCase, with its keys
    /// turned to camelCase (see [`camelize`]).
    pub fn api(&self, key: &str) -> Result<Option<Json>> {
        match self.json(key) {
            None => Ok(None),
            Some(v @ (Json::Object(_) | Json::Array(_))) => Ok(Some(camelize(v))),
            Some(v) => Err(self.wrong(key, "a dict or a list", v)),
        }
    }

    /// A dict of API fields, keys turned to camelCase.
    pub fn api_obj(&self, key: &str) -> Result<Option<Json>> {
        Ok(self.object(key)?.map(|m| camelize(&Json::Object(m))))
    }

    /// A list of dicts of API fields, keys turned to camelCase.
    pub fn api_objs(&self, key: &str) -> Result<Option<Vec<Json>>> {
        self.list_of(key, "a dict", |v| v.is_object().then(|| camelize(v)))
    }

    /// The name an argument refers to: a string, or another builder's result (any dict
    /// with `metadata.name`).
    pub fn name_ref(&self, key: &str) -> Result<Option<String>> {
        match self.json(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(v) => object_name(v)
                .map(|n| Some(n.to_owned()))
                .ok_or_else(|| self.wrong(key, "a name or an object with metadata.name", v)),
        }
    }

    /// A label selector: a dict of labels becomes `matchLabels`; a dict that already has
    /// `match_labels`/`match_expressions` is taken as the full selector.
    pub fn selector(&self, key: &str) -> Result<Option<Json>> {
        let Some(m) = self.object(key)? else {
            return Ok(None);
        };
        let full = [
            "match_labels",
            "matchLabels",
            "match_expressions",
            "matchExpressions",
        ];
        if m.keys().any(|k| full.contains(&k.as_str())) {
            return Ok(Some(camelize(&Json::Object(m))));
        }
        let labels = self.str_map(key)?.unwrap_or_default();
        Ok(Some(serde_json::json!({ "matchLabels": labels })))
    }

    /// `labels`, or `{"app": name}` when not given, as the workload builders default.
    pub fn labels_or_app(&self, name: &str) -> Result<Obj> {
        Ok(self.str_map("labels")?.unwrap_or_else(|| {
            let mut m = Obj::new();
            m.insert("app".into(), name.into());
            m
        }))
    }

    /// Standard metadata from `name`, `namespace` (when the builder accepts it), `labels`
    /// and `annotations`; `labels` overrides the given labels.
    pub fn metadata(&self, labels: Option<Obj>) -> Result<Obj> {
        let mut m = Obj::new();
        m.insert("name".into(), self.req_str("name")?.into());
        m.put("namespace", self.str("namespace")?);
        m.put("labels", labels.or(self.str_map("labels")?));
        m.put("annotations", self.str_map("annotations")?);
        Ok(m)
    }
}

/// Inserting only present values keeps manifests free of nulls the API server rejects.
pub(super) trait Put {
    fn put<T: Into<Json>>(&mut self, key: &str, v: Option<T>);
}

impl Put for Obj {
    fn put<T: Into<Json>>(&mut self, key: &str, v: Option<T>) {
        if let Some(v) = v {
            self.insert(key.to_owned(), v.into());
        }
    }
}

/// A manifest with `apiVersion`, `kind` and `metadata` set.
pub(super) fn manifest(api_version: &str, kind: &str, metadata: Obj) -> Obj {
    let mut m = Obj::new();
    m.insert("apiVersion".into(), api_version.into());
    m.insert("kind".into(), kind.into());
    m.insert("metadata".into(), metadata.into());
    m
}

/// The Starlark name of a JSON value's type.
pub(super) fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "None",
        Json::Bool(_) => "bool",
        Json::Number(n) if n.is_f64() => "float",
        Json::Number(_) => "int",
        Json::String(_) => "string",
        Json::Array(_) => "list",
        Json::Object(_) => "dict",
    }
}

/// A value for an error message, cut short so a large dict does not flood it.
pub(super) fn short(v: &Json) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// ` (did you mean "x"?)` when a keyword is a likely typo of an accepted one.
fn suggestion(key: &str, keywords: &[&str]) -> String {
    keywords
        .iter()
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|(d, k)| *d <= 2 && *d < k.len())
        .min()
        .map(|(_, k)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

/// `metadata.name` of a manifest, such as another builder's result.
pub(super) fn object_name(v: &Json) -> Option<&str> {
    v.get("metadata")?.get("name")?.as_str()
}

/// Fields whose keys are user data (label keys, parameter names, resource names), not
/// API field names, so [`camelize`] leaves their keys alone.
const DATA_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "matchLabels",
    "nodeSelector",
    "parameters",
    "volumeAttributes",
    "data",
    "stringData",
    "capacity",
    "requests",
    "limits",
    "attributes",
];

/// `snake_case` to `camelCase`; names without `_` are returned as they are.
pub(super) fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Turns every snake_case key of a nested value to camelCase, as upstream's builders
/// accept API sub-objects written either way. Keys under [`DATA_FIELDS`] are kept.
pub(super) fn camelize(v: &Json) -> Json {
    match v {
        Json::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| {
                    let k = camel(k);
                    let v = if DATA_FIELDS.contains(&k.as_str()) {
                        v.clone()
                    } else {
                        camelize(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(camelize).collect()),
        _ => v.clone(),
    }
}
