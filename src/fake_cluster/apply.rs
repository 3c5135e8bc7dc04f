//! Server-side apply, simplified: each field manager owns a set of leaf paths; applying
//! detects conflicts with other owners, drops the fields this manager stopped applying,
//! and merges the rest in. Updates by other means take ownership of what they change.
//!
//! A path is a list of segments in `managedFields` notation: `f:spec`, `f:replicas`,
//! and `k:{"name":"web"}` for an element of a list of objects keyed by `name`
//! (containers, ports, env, ...). Other lists are atomic leaves.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json, json};

pub type Path = Vec<String>;

/// "Apply" or "Update".
pub type Operation = &'static str;

/// Who owns which fields of one object: (manager, operation, status subresource).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owners {
    sets: BTreeMap<(String, Operation, bool), BTreeSet<Path>>,
}

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Everything (kinds without a status subresource).
    Whole,
    /// Everything but `.status`.
    Main,
    /// Only `.status`.
    Status,
}

impl Part {
    fn keeps(self, top: &str) -> bool {
        match self {
            Part::Whole => true,
            Part::Main => top != "status",
            Part::Status => top == "status",
        }
    }
}

/// The leaf paths of `obj` within `part`, with their values. Identity fields
/// (apiVersion, kind, name, namespace, uid, ...) are nobody's.
pub fn leaves(obj: &Json, part: Part) -> BTreeMap<Path, Json> {
    let mut out = BTreeMap::new();
    let Some(map) = obj.as_object() else {
        return out;
    };
    for (key, value) in map {
        if key == "apiVersion" || key == "kind" || !part.keeps(key) {
            continue;
        }
        if key == "metadata" {
            if part == Part::Status {
                continue;
            }
            for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                if let Some(v) = value.get(field) {
                    walk(v, vec![f("metadata"), f(field)], &mut out);
                }
            }
            continue;
        }
        walk(value, vec![f(key)], &mut out);
    }
    out
}

fn f(name: &str) -> String {
    format!("f:{name}")
}

fn k(name: &str) -> String {
    format!("k:{}", json!({ "name": name }))
}

/// The names of a list of objects keyed by `name`, or None for an atomic list.
fn named(list: &[Json]) -> Option<Vec<&str>> {
    if list.is_empty() {
        return None;
    }
    list.iter().map(|e| e.get("name")?.as_str()).collect()
}

fn walk(value: &Json, path: Path, out: &mut BTreeMap<Path, Json>) {
    match value {
        Json::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                let mut p = path.clone();
                p.push(f(key));
                walk(v, p, out);
            }
        }
        Json::Array(list) if named(list).is_some() && path.len() > 1 => {
            for item in list {
                let name = item["name"].as_str().unwrap_or_default();
                let mut p = path.clone();
                p.push(k(name));
                walk(item, p, out);
            }
        }
        _ => {
            out.insert(path, value.clone());
        }
    }
}

/// The value at `path`, if present.
pub fn value_at<'a>(obj: &'a Json, path: &[String]) -> Option<&'a Json> {
    let mut at = obj;
    for seg in path {
        at = step(at, seg)?;
    }
    Some(at)
}

fn step<'a>(at: &'a Json, seg: &str) -> Option<&'a Json> {
    if let Some(field) = seg.strip_prefix("f:") {
        return at.get(field);
    }
    let name = key_name(seg)?;
    at.as_array()?
        .iter()
        .find(|e| e["name"].as_str() == Some(name.as_str()))
}

fn key_name(seg: &str) -> Option<String> {
    let key: Json = serde_json::from_str(seg.strip_prefix("k:")?).ok()?;
    key["name"].as_str().map(str::to_owned)
}

/// Removes the field at `path`; removing a keyed element's `name` removes the element.
pub fn remove_at(obj: &mut Json, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if last == "f:name"
        && let Some((elem, list_path)) = parent.split_last()
        && let Some(name) = key_name(elem)
    {
        if let Some(Json::Array(list)) = value_at_mut(obj, list_path) {
            list.retain(|e| e["name"].as_str() != Some(name.as_str()));
        }
        return;
    }
    if let Some(field) = last.strip_prefix("f:")
        && let Some(Json::Object(map)) = value_at_mut(obj, parent)
    {
        map.remove(field);
    }
}

fn value_at_mut<'a>(obj: &'a mut Json, path: &[String]) -> Option<&'a mut Json> {
    let mut at = obj;
    for seg in path {
        at = if let Some(field) = seg.strip_prefix("f:") {
            at.get_mut(field)?
        } else {
            let name = key_name(seg)?;
            at.as_array_mut()?
                .iter_mut()
                .find(|e| e["name"].as_str() == Some(name.as_str()))?
        };
    }
    Some(at)
}

/// Merges an applied configuration into the live object: maps recursively, lists of
/// named objects by name, everything else replaced.
pub fn merge(live: &mut Json, applied: &Json) {
    match (live, applied) {
        (Json::Object(l), Json::Object(a)) => {
            for (key, value) in a {
                match l.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        l.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Json::Array(l), Json::Array(a)) if named(a).is_some() && named(l).is_some() => {
            for item in a {
                let name = item["name"].as_str().unwrap_or_default();
                match l.iter_mut().find(|e| e["name"].as_str() == Some(name)) {
                    Some(existing) => merge(existing, item),
                    None => l.push(item.clone()),
                }
            }
        }
        (live, applied) => *live = applied.clone(),
    }
}

impl Owners {
    /// Applies `applied` (already stripped to `part`) to `live` as `manager`.
    ///
    /// # Errors
    /// The conflicting fields and their managers, when `force` is false.
    pub fn apply(
        &mut self,
        live: &mut Json,
        applied: &Json,
        manager: &str,
        part: Part,
        force: bool,
    ) -> Result<(), String> {
        let wanted = leaves(applied, part);
        let me = (manager.to_owned(), "Apply", part == Part::Status);
        let mut conflicts = Vec::new();
        for (owner, paths) in &self.sets {
            if owner.0 == manager && owner.2 == me.2 {
                continue;
            }
            for (path, value) in &wanted {
                if paths.contains(path) && value_at(live, path) != Some(value) {
                    conflicts.push(format!("conflict with {:?}: {}", owner.0, dotted(path)));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(conflicts.join(", "));
        }
        for (owner, paths) in &mut self.sets {
            if owner.0 == manager && owner.2 == me.2 {
                continue;
            }
            for (path, value) in &wanted {
                if value_at(live, path) != Some(value) {
                    paths.remove(path);
                }
            }
        }
        let before = self.sets.remove(&me).unwrap_or_default();
        for path in before.iter().filter(|p| !wanted.contains_key(*p)) {
            let shared = self.sets.values().any(|s| s.contains(path));
            if !shared {
                remove_at(live, path);
            }
        }
        merge(live, applied);
        self.sets.insert(me, wanted.into_keys().collect());
        self.sets.retain(|_, s| !s.is_empty());
        Ok(())
    }

    /// Records an update (PUT or PATCH) by `manager`: it owns what it changed, and
    /// nobody owns what it removed.
    pub fn update(&mut self, before: &Json, after: &Json, manager: &str, part: Part) {
        let old = leaves(before, part);
        let new = leaves(after, part);
        let changed: BTreeSet<Path> = new
            .iter()
            .filter(|(p, v)| old.get(*p) != Some(*v))
            .map(|(p, _)| p.clone())
            .collect();
        let status = part == Part::Status;
        for (_, paths) in self.sets.iter_mut().filter(|(k, _)| k.2 == status) {
            paths.retain(|p| new.contains_key(p) && !changed.contains(p));
        }
        if !changed.is_empty() {
            self.sets
                .entry((manager.to_owned(), "Update", status))
                .or_default()
                .extend(changed);
        }
        self.sets.retain(|_, s| !s.is_empty());
    }

    /// Writes `metadata.managedFields` from the ownership sets (or removes it).
    pub fn render(&self, obj: &mut Json) {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_owned();
        let entries: Vec<Json> = self
            .sets
            .iter()
            .map(|((manager, operation, status), paths)| {
                let mut entry = json!({
                    "manager": manager, "operation": operation, "apiVersion": api_version,
                    "time": super::store::now(), "fieldsType": "FieldsV1",
                    "fieldsV1": fields_v1(paths),
                });
                if *status {
                    entry["subresource"] = json!("status");
                }
                entry
            })
            .collect();
        if let Some(meta) = obj.get_mut("metadata").and_then(Json::as_object_mut) {
            if entries.is_empty() {
                meta.remove("managedFields");
            } else {
                meta.insert("managedFields".into(), Json::Array(entries));
            }
        }
    }
}

fn fields_v1(paths: &BTreeSet<Path>) -> Json {
    let mut root = Map::new();
    for path in paths {
        let mut at = &mut root;
        for seg in path {
            let next = at.entry(seg.clone()).or_insert_with(|| json!({}));
            let Some(map) = next.as_object_mut() else {
                break;
            };
            at = map;
        }
    }
    Json::Object(root)
}

/// `.spec.replicas` for messages.
fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|s| match s.strip_prefix("f:") {
            Some(field) => format!(".{field}"),
            None => format!(
                "[{}]",
                key_name(s).map_or_else(String::new, |n| format!("name={n}"))
            ),
        })
        .collect()
}
