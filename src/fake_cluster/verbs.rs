//! The API verbs on the store: get, list, create, update, patch, apply, delete, and
//! seeding. Each works on copies and commits at the end, so a refused request changes
//! nothing.

use std::sync::Arc;

use serde_json::{Value as Json, json};
use tokio::sync::broadcast::Sender;

use super::apply::{Owners, Part};
use super::kinds::has_status;
use super::patch::{PatchType, patched};
use super::selector::Selector;
use super::store::{Change, Entry, Event, Key, Store, set_type};
use super::{Error, Result, gc};
use crate::k8s::discovery::Resource;

/// What a request addresses: a resource, a namespace (None: cluster scope or all
/// namespaces), an object name, and whether it is the `status` subresource.
#[derive(Clone, Debug)]
pub struct Target {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub status: bool,
}

/// A write's query options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub dry_run: bool,
    pub manager: Option<String>,
    pub force: bool,
}

impl Target {
    fn group(&self) -> &str {
        &self.resource.api_resource.group
    }

    fn plural(&self) -> &str {
        &self.resource.api_resource.plural
    }

    fn key(&self, name: &str) -> Key {
        (
            self.group().to_owned(),
            self.plural().to_owned(),
            self.namespace.clone().unwrap_or_default(),
            name.to_owned(),
        )
    }

    fn name(&self) -> Result<&str> {
        self.name
            .as_deref()
            .ok_or_else(|| Error::MethodNotAllowed("this verb needs an object name".into()))
    }

    fn part(&self) -> Part {
        if self.status {
            Part::Status
        } else if has_status(&self.resource) {
            Part::Main
        } else {
            Part::Whole
        }
    }

    fn not_found(&self, name: &str) -> Error {
        Error::not_found(self.group(), self.plural(), name)
    }
}

pub fn get(store: &Store, t: &Target) -> Result<Json> {
    let name = t.name()?;
    store
        .get(&t.key(name))
        .map(|e| e.object.clone())
        .ok_or_else(|| t.not_found(name))
}

/// A list response, `limit` items at most from after `continue`.
pub fn list(
    store: &Store,
    t: &Target,
    selector: &Selector,
    limit: Option<usize>,
    after: Option<&str>,
) -> Json {
    let mut items: Vec<(String, Json)> = store
        .of_resource(&t.resource, t.namespace.as_deref())
        .filter(|(_, e)| selector.matches(&e.object))
        .map(|(k, e)| (format!("{}/{}", k.2, k.3), e.object.clone()))
        .filter(|(at, _)| after.is_none_or(|a| at.as_str() > a))
        .collect();
    let mut meta = json!({"resourceVersion": store.rv.to_string()});
    if let Some(limit) = limit.filter(|l| *l > 0 && *l < items.len()) {
        let rest = items.len() - limit;
        items.truncate(limit);
        if let Some((last, _)) = items.last() {
            meta["continue"] = json!(last);
            meta["remainingItemCount"] = json!(rest);
        }
    }
    json!({
        "apiVersion": t.resource.api_resource.api_version,
        "kind": format!("{}List", t.resource.api_resource.kind),
        "metadata": meta,
        "items": items.into_iter().map(|(_, o)| o).collect::<Vec<_>>(),
    })
}

pub fn create(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    body: Json,
    opts: &Options,
) -> Result<Json> {
    if t.status {
        return Err(Error::MethodNotAllowed(
            "create is not allowed on status".into(),
        ));
    }
    let mut obj = body;
    if !obj.is_object() {
        return Err(Error::BadRequest("the body must be a JSON object".into()));
    }
    place(t, &mut obj)?;
    let name = match obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None => match obj["metadata"]["generateName"].as_str() {
            Some(prefix) => {
                let uid = store.next_uid();
                format!("{prefix}{}", &uid[uid.len() - 5..])
            }
            None => {
                return Err(Error::Invalid(format!(
                    "{} is invalid: metadata.name: Required value: name or generateName is required",
                    t.resource.api_resource.kind
                )));
            }
        },
    };
    obj["metadata"]["name"] = json!(name);
    let key = t.key(&name);
    if store.get(&key).is_some() {
        return Err(Error::already_exists(t.group(), t.plural(), &name));
    }
    if let (Some(map), true) = (obj.as_object_mut(), has_status(&t.resource)) {
        map.remove("status");
    }
    strip_server_fields(&mut obj);
    store.stamp_new(&t.resource, &mut obj);
    let mut owners = Owners::default();
    let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
    owners.update(&Json::Null, &obj, &manager, t.part());
    commit_new(store, events, t, key, obj, owners, "create", opts)
}

/// PUT: replaces the object (or, on `/status`, its status).
pub fn update(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    body: Json,
    opts: &Options,
) -> Result<Json> {
    let name = t.name()?.to_owned();
    let Some(entry) = store.get(&t.key(&name)).cloned() else {
        return Err(t.not_found(&name));
    };
    if !body.is_object() {
        return Err(Error::BadRequest("the body must be a JSON object".into()));
    }
    if let Some(rv) = body["metadata"]["resourceVersion"].as_str()
        && !rv.is_empty()
        && Some(rv) != entry.object["metadata"]["resourceVersion"].as_str()
    {
        return Err(Error::conflict(
            t.group(),
            t.plural(),
            &name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let verb = if t.status { "status" } else { "update" };
    finish(store, events, t, &entry, body, verb, opts)
}

/// PATCH with a merge, strategic or JSON patch.
pub fn patch(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    body: &Json,
    kind: PatchType,
    opts: &Options,
) -> Result<Json> {
    let name = t.name()?.to_owned();
    let Some(entry) = store.get(&t.key(&name)).cloned() else {
        return Err(t.not_found(&name));
    };
    let new = patched(&entry.object, body, kind)?;
    let verb = if t.status { "status" } else { "patch" };
    finish(store, events, t, &entry, new, verb, opts)
}

/// Server-side apply; creates the object when absent.
pub fn apply(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    body: Json,
    opts: &Options,
) -> Result<Json> {
    let name = t.name()?.to_owned();
    let Some(manager) = opts.manager.clone().filter(|m| !m.is_empty()) else {
        return Err(Error::BadRequest(
            "PATCH, application/apply-patch+yaml: fieldManager is required".into(),
        ));
    };
    let mut applied = body;
    if !applied.is_object() {
        return Err(Error::BadRequest(
            "the applied configuration must be an object".into(),
        ));
    }
    place(t, &mut applied)?;
    if applied["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n != name)
    {
        return Err(Error::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            applied["metadata"]["name"]
        )));
    }
    applied["metadata"]["name"] = json!(name);
    strip_server_fields(&mut applied);
    let part = t.part();
    if let Some(map) = applied.as_object_mut() {
        match part {
            Part::Main => drop(map.remove("status")),
            Part::Status => map.retain(|k, _| matches!(k.as_str(), "status" | "metadata")),
            Part::Whole => {}
        }
    }
    let key = t.key(&name);
    let existing = store.get(&key).cloned();
    let (mut live, mut owners, fresh) = match existing.clone() {
        Some(e) => (e.object, e.owners, false),
        None if t.status => return Err(t.not_found(&name)),
        None => {
            let mut obj = json!({"metadata": {"name": name}});
            if let Some(ns) = &t.namespace {
                obj["metadata"]["namespace"] = json!(ns);
            }
            store.stamp_new(&t.resource, &mut obj);
            (obj, Owners::default(), true)
        }
    };
    if part == Part::Status
        && let Some(meta) = applied.get_mut("metadata").and_then(Json::as_object_mut)
    {
        meta.retain(|k, _| k == "name" || k == "namespace");
    }
    owners
        .apply(&mut live, &applied, &manager, part, opts.force)
        .map_err(|why| Error::Conflict {
            message: format!("Apply failed with conflicts: {why}"),
            details: json!({"name": name, "group": t.group(), "kind": t.plural()}),
        })?;
    if fresh {
        return commit_new(store, events, t, key, live, owners, "apply", opts);
    }
    let entry = existing.unwrap_or(Entry {
        object: Json::Null,
        owners: Owners::default(),
    });
    let entry = Entry {
        object: entry.object,
        owners,
    };
    finish_owned(store, events, t, &entry, live, "apply", opts)
}

pub fn delete(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    opts: &Options,
) -> Result<Json> {
    let name = t.name()?.to_owned();
    let key = t.key(&name);
    let Some(entry) = store.get(&key) else {
        return Err(t.not_found(&name));
    };
    if opts.dry_run {
        return Ok(entry.object.clone());
    }
    gc::delete(store, events, &key)
}

/// Stores an object as given, status included (`k8s.fake(objects=...)`).
///
/// # Errors
/// [`Error::Seed`] naming the object and what is wrong with it.
pub fn seed(store: &mut Store, events: &Sender<Arc<Event>>, mut obj: Json) -> Result<Json> {
    let text = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let (api_version, kind) = (text(&obj["apiVersion"]), text(&obj["kind"]));
    let name = text(&obj["metadata"]["name"]);
    let what = format!("{kind} {name:?}");
    let fail = |message: String| Error::Seed {
        what: what.clone(),
        message,
    };
    if api_version.is_empty() || kind.is_empty() {
        return Err(fail("apiVersion and kind are required".into()));
    }
    if name.is_empty() {
        return Err(fail("metadata.name is required".into()));
    }
    let resource = store
        .kinds
        .by_kind(&api_version, &kind)
        .cloned()
        .ok_or_else(|| fail(format!("the fake serves no kind {kind} in {api_version}")))?;
    let namespace = resource.namespaced.then(|| {
        obj["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_owned()
    });
    let t = Target {
        resource,
        namespace,
        name: Some(name.clone()),
        status: false,
    };
    place(&t, &mut obj).map_err(|e| fail(e.to_string()))?;
    let key = t.key(&name);
    if store.get(&key).is_some() {
        return Err(fail("it exists already".into()));
    }
    strip_server_fields(&mut obj);
    store.stamp_new(&t.resource, &mut obj);
    commit_new(
        store,
        events,
        &t,
        key,
        obj,
        Owners::default(),
        "create",
        &Options::default(),
    )
    .map_err(|e| fail(e.to_string()))
}

/// Sets the namespace from the path; a different one in the body is an error.
fn place(t: &Target, obj: &mut Json) -> Result<()> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match &t.namespace {
        Some(ns) if t.resource.namespaced => {
            if let Some(given) = obj["metadata"]["namespace"].as_str()
                && !given.is_empty()
                && given != ns
            {
                return Err(Error::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
        }
        _ => {
            if let Some(meta) = obj["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
        }
    }
    Ok(())
}

/// Drops what only the server sets.
fn strip_server_fields(obj: &mut Json) {
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "managedFields",
            "deletionTimestamp",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one argument per part of the write the caller has already split"
)]
fn commit_new(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    key: Key,
    mut obj: Json,
    owners: Owners,
    verb: &'static str,
    opts: &Options,
) -> Result<Json> {
    if t.resource.api_resource.plural == "customresourcedefinitions" {
        store
            .kinds
            .add_crd(&obj)
            .map_err(|why| Error::Invalid(format!("CustomResourceDefinition is invalid: {why}")))?;
    }
    if opts.dry_run {
        set_type(&t.resource, &mut obj);
        owners.render(&mut obj);
        return Ok(obj);
    }
    Ok(store.commit(
        events,
        Change {
            resource: &t.resource,
            key,
            verb,
            #[cfg(test)]
            manager: opts.manager.clone(),
            before: None,
            after: Some(obj),
            owners,
        },
    ))
}

/// Completes an update or patch: keeps what the request may not change, records who
/// changed what, and commits.
fn finish(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    entry: &Entry,
    new: Json,
    verb: &'static str,
    opts: &Options,
) -> Result<Json> {
    let mut owners = entry.owners.clone();
    let merged = confine(t, &entry.object, new);
    let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
    owners.update(&entry.object, &merged, &manager, t.part());
    let entry = Entry {
        object: entry.object.clone(),
        owners,
    };
    finish_owned(store, events, t, &entry, merged, verb, opts)
}

/// The new object restricted to what the request may change: only `.status` on the
/// status subresource, never `.status` on the main resource of a kind that has one,
/// and never the server's own metadata.
fn confine(t: &Target, old: &Json, new: Json) -> Json {
    let mut out = if t.status {
        let mut o = old.clone();
        match new.get("status") {
            Some(s) => o["status"] = s.clone(),
            None => drop(o.as_object_mut().and_then(|m| m.remove("status"))),
        }
        o
    } else {
        let mut n = new;
        if has_status(&t.resource) {
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => drop(n.as_object_mut().and_then(|m| m.remove("status"))),
            }
        }
        n
    };
    if !out["metadata"].is_object() {
        out["metadata"] = json!({});
    }
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old["metadata"].get(field) {
            Some(v) => out["metadata"][field] = v.clone(),
            None => drop(
                out["metadata"]
                    .as_object_mut()
                    .and_then(|m| m.remove(field)),
            ),
        }
    }
    if let Some(meta) = out["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    set_type(&t.resource, &mut out);
    out
}

fn finish_owned(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    entry: &Entry,
    mut new: Json,
    verb: &'static str,
    opts: &Options,
) -> Result<Json> {
    set_type(&t.resource, &mut new);
    // A write that changes nothing (fields or owners) is not a write: no new
    // resourceVersion, no event.
    let name = new["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let key = t.key(&name);
    let same_owners = store.get(&key).is_some_and(|e| e.owners == entry.owners);
    if same_owners && without_managed(&new) == without_managed(&entry.object) {
        return Ok(entry.object.clone());
    }
    if opts.dry_run {
        entry.owners.render(&mut new);
        return Ok(new);
    }
    if t.resource.api_resource.plural == "customresourcedefinitions" {
        store
            .kinds
            .add_crd(&new)
            .map_err(|why| Error::Invalid(format!("CustomResourceDefinition is invalid: {why}")))?;
    }
    let out = store.commit(
        events,
        Change {
            resource: &t.resource,
            key: key.clone(),
            verb,
            #[cfg(test)]
            manager: if verb == "apply" {
                opts.manager.clone()
            } else {
                Some(opts.manager.clone().unwrap_or_else(|| "unknown".into()))
            },
            before: Some(entry.object.clone()),
            after: Some(new),
            owners: entry.owners.clone(),
        },
    );
    gc::release_if_done(store, events, &key);
    Ok(out)
}

fn without_managed(obj: &Json) -> Json {
    let mut copy = obj.clone();
    if let Some(meta) = copy["metadata"].as_object_mut() {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    copy
}
