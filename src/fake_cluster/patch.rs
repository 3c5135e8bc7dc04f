//! The PATCH bodies the fake understands: JSON merge patch (RFC 7386), a strategic merge
//! patch that knows `name`-keyed lists, and JSON patch (RFC 6902).

use serde_json::Value as Json;

use super::{Error, Result};

/// The patch types, by request content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let base = content_type.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a merge, strategic or JSON patch body to a copy of `live`.
///
/// # Errors
/// [`Error::BadRequest`] for a body that is not the patch type's shape, or a JSON patch
/// that does not apply (a failed `test`, a missing path).
pub fn patched(live: &Json, body: &Json, kind: PatchType) -> Result<Json> {
    let mut out = live.clone();
    match kind {
        PatchType::Merge => {
            if !body.is_object() {
                return Err(Error::BadRequest(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            json_patch::merge(&mut out, body);
        }
        PatchType::Strategic => {
            if !body.is_object() {
                return Err(Error::BadRequest(
                    "a strategic merge patch must be a JSON object".into(),
                ));
            }
            strategic(&mut out, body);
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(body.clone())
                .map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut out, &ops)
                .map_err(|e| Error::Invalid(format!("the JSON patch does not apply: {e}")))?;
        }
        PatchType::Apply => {
            return Err(Error::BadRequest(
                "apply patches go through server-side apply".into(),
            ));
        }
    }
    Ok(out)
}

/// A strategic merge: as a merge patch, except that lists of objects keyed by `name`
/// merge element by element, and an element `{"name": x, "$patch": "delete"}` removes
/// `x`. Directives in maps (`$patch: replace`/`delete`) are honoured too.
fn strategic(live: &mut Json, patch: &Json) {
    let Json::Object(p) = patch else {
        *live = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Json::as_str) {
        Some("replace") => {
            let mut copy = p.clone();
            copy.remove("$patch");
            *live = Json::Object(copy);
            return;
        }
        Some("delete") => {
            *live = Json::Object(serde_json::Map::new());
            return;
        }
        _ => {}
    }
    if !live.is_object() {
        *live = Json::Object(serde_json::Map::new());
    }
    let Some(l) = live.as_object_mut() else {
        return;
    };
    for (key, value) in p {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Json::Null => {
                l.remove(key);
            }
            Json::Array(items) if keyed(items) => {
                let existing = l.entry(key.clone()).or_insert(Json::Array(Vec::new()));
                if !existing.is_array() {
                    *existing = Json::Array(Vec::new());
                }
                if let Json::Array(list) = existing {
                    merge_named(list, items);
                }
            }
            Json::Object(_) => {
                let existing = l.entry(key.clone()).or_insert(Json::Null);
                strategic(existing, value);
            }
            other => {
                l.insert(key.clone(), other.clone());
            }
        }
    }
}

/// Whether a patch list holds objects keyed by `name` (the lists strategic merge
/// merges by key).
fn keyed(items: &[Json]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|e| e.get("name").is_some_and(Json::is_string))
}

fn merge_named(list: &mut Vec<Json>, items: &[Json]) {
    for item in items {
        let name = item["name"].as_str().unwrap_or_default();
        let at = list.iter().position(|e| e["name"].as_str() == Some(name));
        if item.get("$patch").and_then(Json::as_str) == Some("delete") {
            if let Some(i) = at {
                list.remove(i);
            }
            continue;
        }
        if let Some(i) = at {
            strategic(&mut list[i], item);
        } else {
            let mut fresh = Json::Null;
            strategic(&mut fresh, item);
            list.push(fresh);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strategic_merges_named_lists_and_deletes() {
        let live = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
            "finalizers": ["x", "y"]}});
        let patch = json!({"spec": {"containers": [
            {"name": "a", "image": "a:2"}, {"name": "b", "$patch": "delete"},
            {"name": "c", "image": "c:1"}], "finalizers": ["z"]}});
        let out = patched(&live, &patch, PatchType::Strategic).unwrap();
        assert_eq!(
            out,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2"}, {"name": "c", "image": "c:1"}],
                "finalizers": ["z"]}})
        );
    }

    #[test]
    fn merge_and_json_patches() {
        let live = json!({"a": {"b": 1, "c": 2}});
        let out = patched(&live, &json!({"a": {"b": null, "d": 3}}), PatchType::Merge).unwrap();
        assert_eq!(out, json!({"a": {"c": 2, "d": 3}}));
        let ops = json!([{"op": "replace", "path": "/a/b", "value": 5}]);
        assert_eq!(
            patched(&live, &ops, PatchType::Json).unwrap(),
            json!({"a": {"b": 5, "c": 2}})
        );
        let bad = json!([{"op": "test", "path": "/a/b", "value": 9}]);
        assert_eq!(
            patched(&live, &bad, PatchType::Json).unwrap_err().code(),
            422
        );
    }
}
