//! YAML text to and from JSON values: any number of `---`-separated documents, plain
//! numbers. Shared by the scripts' `yaml` module, manifests and generated artifacts.

use serde_json::Value as Json;

/// Parses YAML text with any number of `---`-separated documents.
///
/// # Errors
/// The YAML error, with its line and column.
pub fn parse_yaml(text: &str) -> anyhow::Result<Vec<Json>> {
    // Node by node within the call's budgets (script::parse).
    let docs: Vec<crate::script::parse::Budgeted> =
        serde_saphyr::from_multiple(text).map_err(|e| anyhow::anyhow!("invalid YAML: {e}"))?;
    Ok(docs.into_iter().map(|d| d.0).collect())
}

/// A JSON value serialized with plain numbers. starlark turns on serde_json's
/// `arbitrary_precision`, under which a `Number` serializes as a private one-key map that
/// only serde_json understands; YAML would show `replicas: {"$serde_json::private::Number": "1"}`.
pub struct Plain<'a>(pub &'a Json);

impl serde::Serialize for Plain<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => {
                if let Some(u) = n.as_u64() {
                    s.serialize_u64(u)
                } else if let Some(i) = n.as_i64() {
                    s.serialize_i64(i)
                } else {
                    s.serialize_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Json::String(text) => s.serialize_str(text),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Plain(item))?;
                }
                seq.end()
            }
            Json::Object(map) => {
                let mut m = s.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, &Plain(v))?;
                }
                m.end()
            }
        }
    }
}

/// Renders manifests as a YAML stream.
///
/// # Errors
/// Only when a value cannot be represented (not expected for JSON input).
pub fn to_yaml(docs: &[Json]) -> anyhow::Result<String> {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_saphyr::to_string(&Plain(doc))?);
    }
    Ok(out)
}
