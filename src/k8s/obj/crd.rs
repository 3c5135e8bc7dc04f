//! The crd builder: a CustomResourceDefinition from compact field maps.
//!
//! `spec` and `status` map field names to schemas: a type name (`"string"`) or a dict of
//! OpenAPI keywords passed through as written (`type`, `default`, `description`,
//! `enum`, `minimum`, `format`, ...). Nested `properties` are field maps in turn and
//! `items`/`additionalProperties` are schemas. `required: True` on a field adds it to
//! its parent's `required` list. To stay structural (which the API server demands), an
//! `object` without properties keeps unknown fields, and a missing `type` is inferred
//! from `properties`/`items`.

use anyhow::{Result, anyhow, bail};
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, manifest, short, type_name};

pub(super) const CRD: Builder = Builder {
    name: "crd",
    keywords: &[
        "group",
        "version",
        "kind",
        "plural",
        "scope",
        "singular",
        "short_names",
        "categories",
        "list_kind",
        "spec",
        "status",
        "printer_columns",
        "labels",
        "annotations",
    ],
    positional: None,
    build: crd,
};

/// Deeper schemas than this are refused rather than walked.
const MAX_DEPTH: usize = 64;

fn crd(a: &Args) -> Result<Json> {
    let group = a.req_str("group")?;
    let version = a.req_str("version")?;
    let kind = a.req_str("kind")?;
    let plural = a.req_str("plural")?;
    let scope = a.str("scope")?.unwrap_or_else(|| "Namespaced".into());
    if scope != "Namespaced" && scope != "Cluster" {
        return Err(a.err("scope", "must be \"Namespaced\" or \"Cluster\""));
    }
    let mut names = Obj::new();
    names.insert("kind".into(), kind.as_str().into());
    names.insert("plural".into(), plural.as_str().into());
    names.insert(
        "singular".into(),
        a.str("singular")?
            .unwrap_or_else(|| kind.to_lowercase())
            .into(),
    );
    names.put("shortNames", a.strs("short_names")?);
    names.put("categories", a.strs("categories")?);
    names.put("listKind", a.str("list_kind")?);

    let mut root = Obj::new();
    let mut required = Vec::new();
    for key in ["spec", "status"] {
        let fields = a.object(key)?.unwrap_or_default();
        let (schema, any_required) =
            object_of(&fields, key, 0).map_err(|e| a.err(key, &e.to_string()))?;
        // Required fields only bind when their parent exists, so require the parent too.
        if any_required {
            required.push(Json::from(key));
        }
        root.insert(key.into(), schema);
    }
    let mut schema = json!({ "type": "object", "properties": root });
    if !required.is_empty() {
        schema["required"] = required.into();
    }

    let mut v = Obj::new();
    v.insert("name".into(), version.into());
    v.insert("served".into(), true.into());
    v.insert("storage".into(), true.into());
    v.insert("schema".into(), json!({ "openAPIV3Schema": schema }));
    v.insert("subresources".into(), json!({ "status": {} }));
    v.put("additionalPrinterColumns", a.objects("printer_columns")?);

    let mut meta = Obj::new();
    meta.insert("name".into(), format!("{plural}.{group}").into());
    meta.put("labels", a.str_map("labels")?);
    meta.put("annotations", a.str_map("annotations")?);
    let mut m = manifest("apiextensions.k8s.io/v1", "CustomResourceDefinition", meta);
    let spec = json!({ "group": group, "names": names, "scope": scope, "versions": [v] });
    m.insert("spec".into(), spec);
    Ok(m.into())
}

/// An object schema from a field map, and whether it lists required fields.
fn object_of(fields: &Obj, path: &str, depth: usize) -> Result<(Json, bool)> {
    if fields.is_empty() {
        return Ok((
            json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
            false,
        ));
    }
    let mut schema = Obj::new();
    schema.insert("type".into(), "object".into());
    let (props, required) = properties(fields, path, depth)?;
    schema.insert("properties".into(), props.into());
    let any = !required.is_empty();
    schema.put("required", Some(required).filter(|r| !r.is_empty()));
    Ok((schema.into(), any))
}

/// The schemas of a field map and the names of its required fields.
fn properties(fields: &Obj, path: &str, depth: usize) -> Result<(Obj, Vec<Json>)> {
    let mut props = Obj::new();
    let mut required = Vec::new();
    for (name, v) in fields {
        let (schema, is_required) = field(v, &format!("{path}.{name}"), depth + 1)?;
        if is_required {
            required.push(Json::from(name.as_str()));
        }
        props.insert(name.clone(), schema);
    }
    Ok((props, required))
}

/// One field's schema and whether it is required in its parent.
fn field(v: &Json, path: &str, depth: usize) -> Result<(Json, bool)> {
    if depth > MAX_DEPTH {
        bail!("{path}: nested deeper than {MAX_DEPTH} levels");
    }
    // Each level copies its subtree (kept while it recurses): a deep schema with a
    // large leaf is copied once per level, counted against the script's memory.
    if crate::script::memory::exhausted() {
        bail!("{path}: the schema passed the script's memory limit");
    }
    let mut s = match v {
        Json::String(t) => Obj::from_iter([("type".to_owned(), Json::from(t.as_str()))]),
        Json::Object(m) => m.clone(),
        _ => bail!(
            "{path}: must be a type name or a dict, got {} {}",
            type_name(v),
            short(v)
        ),
    };
    let mut own_required: Vec<Json> = Vec::new();
    let is_required = match s.remove("required") {
        None => false,
        Some(Json::Bool(b)) => b,
        // A list is OpenAPI's own form: names of required properties.
        Some(Json::Array(names)) if names.iter().all(Json::is_string) => {
            own_required = names;
            false
        }
        Some(other) => bail!(
            "{path}.required: must be a bool (or a list of property names), got {}",
            type_name(&other)
        ),
    };
    if let Some(p) = s.remove("properties") {
        let Json::Object(p) = p else {
            bail!(
                "{path}.properties: must be a dict of fields, got {}",
                type_name(&p)
            );
        };
        let (props, required) = properties(&p, path, depth)?;
        for r in required {
            if !own_required.contains(&r) {
                own_required.push(r);
            }
        }
        s.insert("properties".into(), props.into());
    }
    if let Some(items) = s.remove("items") {
        let (schema, req) = field(&items, &format!("{path}[]"), depth + 1)?;
        if req {
            bail!("{path}.items: an item cannot be required; mark the field itself");
        }
        s.insert("items".into(), schema);
    }
    if let Some(extra) = s.remove("additionalProperties") {
        let extra = match extra {
            Json::Bool(_) => extra,
            other => field(&other, &format!("{path}{{}}"), depth + 1)?.0,
        };
        s.insert("additionalProperties".into(), extra);
    }
    s.put("required", Some(own_required).filter(|r| !r.is_empty()));
    infer_type(&mut s, path)?;
    Ok((s.into(), is_required))
}

/// Fills in or checks `type` so the schema stays structural.
fn infer_type(s: &mut Obj, path: &str) -> Result<()> {
    let flag = |s: &Obj, k: &str| s.get(k).and_then(Json::as_bool).unwrap_or(false);
    let kind = match s.get("type") {
        Some(Json::String(t)) => Some(t.clone()),
        Some(other) => bail!("{path}.type: must be a string, got {}", type_name(other)),
        None if s.contains_key("properties") || s.contains_key("additionalProperties") => {
            Some("object".into())
        }
        None if s.contains_key("items") => Some("array".into()),
        None if flag(s, "x-kubernetes-int-or-string")
            || flag(s, "x-kubernetes-preserve-unknown-fields") =>
        {
            None
        }
        None => bail!("{path}: needs a type (e.g. \"string\", \"integer\", \"object\")"),
    };
    let Some(kind) = kind else { return Ok(()) };
    match kind.as_str() {
        "object" => {
            let open = !s.contains_key("properties") && !s.contains_key("additionalProperties");
            if open && !s.contains_key("x-kubernetes-preserve-unknown-fields") {
                s.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
            }
        }
        "array" if !s.contains_key("items") => {
            return Err(anyhow!(
                "{path}: an array needs items, e.g. {{\"type\": \"string\"}}"
            ));
        }
        "array" | "string" | "integer" | "number" | "boolean" => {}
        other => bail!(
            "{path}: unknown type {other:?} (use string, integer, number, boolean, array or object)"
        ),
    }
    s.insert("type".into(), kind.into());
    Ok(())
}
