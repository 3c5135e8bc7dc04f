//! Children returned by `reconcile(obj)`: ownership, server-side apply, pruning by the
//! ApplySet convention, readiness, and the parent's `Ready` condition.

pub mod applyset;
pub mod condition;
pub mod readiness;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::control::watches::{Role, Watched, Watches};
use crate::k8s::discovery::Resource;
use crate::k8s::ops::{self, Target};
use crate::k8s::session::Session;
use crate::k8s::write_log::WriteLog;

/// How long looking up an existing child may take.
const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Tries of a Ready write that conflicts with someone else's.
const CONDITION_ATTEMPTS: u32 = 3;

/// The field manager of every child apply.
pub const FIELD_MANAGER: &str = "starkite";

/// Why the children could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("child {index} ({what}) cannot be owned by {parent}: {why}")]
    Ownership {
        index: usize,
        what: String,
        parent: String,
        why: String,
    },
    #[error("child {index} ({what}): {source}")]
    Apply {
        index: usize,
        what: String,
        source: ops::Error,
    },
    #[error("pruning {what}: {source}")]
    Prune { what: String, source: ops::Error },
    #[error("updating the parent: {0}")]
    Parent(ops::Error),
    #[error("watching {what}: {source}")]
    Watch {
        what: String,
        source: crate::control::informers::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What one pass over the children did.
#[derive(Debug, Default)]
pub struct Report {
    /// Children created or changed.
    pub changed: Vec<String>,
    /// Children deleted because they are no longer desired.
    pub pruned: Vec<String>,
    /// Children not ready yet, with why.
    pub waiting: Vec<String>,
}

/// What the children code needs from its controller.
pub struct Context<'a> {
    pub session: &'a Session,
    pub writes: &'a WriteLog,
    pub watches: &'a Watches,
    /// The primary kind.
    pub primary: &'a Resource,
    /// The namespace the controller watches (None: all); children live there too, and
    /// are watched only there: that is where the generated RBAC lets them be watched.
    pub namespace: Option<&'a str>,
}

/// A child with this annotation set to "true" may take over an existing object of the
/// same name that kite did not create.
pub const ADOPT_ANNOTATION: &str = "starkite.io/adopt";

/// The children informer of `resource`, subscribed to on first need.
async fn watch(ctx: &Context<'_>, resource: &Resource) -> Result<Arc<Watched>> {
    ctx.watches
        .ensure(ctx.session, resource, Role::Children, ctx.namespace)
        .await
        .map_err(|source| Error::Watch {
            what: resource.api_resource.kind.clone(),
            source,
        })
}

/// The object a child would replace, from the children cache or, when it is not there
/// (not created by kite, or the cache is still filling), from the API server.
async fn existing(
    ctx: &Context<'_>,
    watched: &Watched,
    resource: &Resource,
    child: &Json,
) -> ops::Result<Option<std::sync::Arc<Json>>> {
    let key = super::informer::Key::of(child);
    if let Some(cached) = key.as_ref().and_then(|k| watched.store.get(k)) {
        return Ok(Some(cached));
    }
    let target = Target {
        resource: resource.clone(),
        namespace: child["metadata"]["namespace"].as_str().map(str::to_owned),
    };
    let name = child["metadata"]["name"].as_str().unwrap_or_default();
    // A LIST by name, not a GET: `list` is what the generated RBAC grants for children.
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let found = ops::with_timeout(LOOKUP_TIMEOUT, async {
        Ok(target.api(ctx.session).list(&params).await?)
    })
    .await?;
    Ok(found
        .items
        .into_iter()
        .next()
        .and_then(|o| serde_json::to_value(o).ok())
        .map(std::sync::Arc::new))
}

fn adopting(child: &Json) -> bool {
    child["metadata"]["annotations"][ADOPT_ANNOTATION] == "true"
}

/// Whether kite made `obj` for this parent: it is in the parent's ApplySet, or owned by it.
fn ours(obj: &Json, set_id: &str, parent_uid: &Json) -> bool {
    obj["metadata"]["labels"][applyset::PART_OF_LABEL] == set_id
        || obj["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == *parent_uid))
}

fn display(obj: &Json) -> String {
    let kind = obj["kind"].as_str().unwrap_or("?").to_lowercase();
    match (
        obj["metadata"]["namespace"].as_str(),
        obj["metadata"]["name"].as_str(),
    ) {
        (Some(ns), Some(n)) => format!("{kind} {ns}/{n}"),
        (None, Some(n)) => format!("{kind} {n}"),
        _ => kind,
    }
}

/// The parent, as its children name it.
struct Parent<'a> {
    json: &'a Json,
    name: &'a str,
    /// None for a cluster-scoped parent.
    namespace: Option<&'a str>,
    /// The id of its ApplySet.
    set_id: String,
    /// How messages name it.
    label: String,
    /// The ownerReference every child carries.
    owner: Json,
}

impl<'a> Parent<'a> {
    fn of(ctx: &Context<'_>, parent: &'a Json) -> Self {
        let meta = &parent["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let namespace = meta["namespace"]
            .as_str()
            .filter(|_| ctx.primary.namespaced);
        let ar = &ctx.primary.api_resource;
        let set_id = applyset::id(name, namespace.unwrap_or_default(), &ar.kind, &ar.group);
        let label = match namespace {
            Some(ns) => format!("{} {ns}/{name}", ar.kind),
            None => format!("{} {name}", ar.kind),
        };
        let owner = json!({
            "apiVersion": ar.api_version, "kind": ar.kind, "name": name,
            "uid": meta["uid"], "controller": true, "blockOwnerDeletion": true,
        });
        Parent {
            json: parent,
            name,
            namespace,
            set_id,
            label,
            owner,
        }
    }

    fn uid(&self) -> &'a Json {
        &self.json["metadata"]["uid"]
    }
}

/// A child's group, kind, namespace and name.
type Id = (String, String, String, String);

/// Applies `desired` as the children of `parent`, prunes what is no longer desired,
/// and reports readiness. Nothing is applied unless every child can be owned.
///
/// # Errors
/// An unownable child, or the API server refusing an apply, prune or parent update.
pub async fn reconcile(ctx: &Context<'_>, parent: &Json, desired: Vec<Json>) -> Result<Report> {
    let parent = Parent::of(ctx, parent);

    // 1. Check and complete every child before anything is written.
    let mut children = Vec::with_capacity(desired.len());
    for (index, child) in desired.into_iter().enumerate() {
        children.push(complete(ctx, &parent, index, child).await?);
    }

    // 2. Record the ApplySet on the parent (its id and every kind it may hold) before
    // applying, so a crash between the two can never leave children that pruning
    // would not look for.
    let kinds = record(ctx, &parent, &children).await?;

    // 3. Apply.
    let mut report = Report::default();
    let wanted = apply(ctx, &children, &mut report).await?;

    // 4. Prune what this parent owns but no longer wants.
    for group_kind in &kinds {
        prune(ctx, &parent, group_kind, &wanted, &mut report).await?;
    }
    Ok(report)
}

/// Checks that child `index` can be owned by the parent, and completes it: its
/// namespace, the ApplySet label and the ownerReference.
async fn complete(
    ctx: &Context<'_>,
    parent: &Parent<'_>,
    index: usize,
    mut child: Json,
) -> Result<(Resource, Json)> {
    let what = display(&child);
    let fail = |why: String| Error::Ownership {
        index,
        what: what.clone(),
        parent: parent.label.clone(),
        why,
    };
    let (Some(api_version), Some(kind)) = (child["apiVersion"].as_str(), child["kind"].as_str())
    else {
        return Err(fail("it has no apiVersion or kind".into()));
    };
    let resource = ctx
        .session
        .discovery
        .resolve_gvk(api_version, kind)
        .await
        .map_err(|e| Error::Apply {
            index,
            what: what.clone(),
            source: e.into(),
        })?;
    if child["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err(fail("it has no metadata.name".into()));
    }
    let child_ns = child["metadata"]["namespace"].as_str().map(str::to_owned);
    match (parent.namespace, resource.namespaced, child_ns) {
        (Some(_), false, _) => {
            return Err(fail(
                "a namespaced parent cannot own a cluster-scoped object".into(),
            ));
        }
        (Some(pns), true, Some(cns)) if cns != pns => {
            return Err(fail(format!(
                "it is in namespace {cns:?}, and a parent can only own objects in its own namespace {pns:?}"
            )));
        }
        (Some(pns), true, None) => child["metadata"]["namespace"] = json!(pns),
        (None, true, None) => {
            return Err(fail(
                "a cluster-scoped parent's namespaced child needs metadata.namespace".into(),
            ));
        }
        _ => {}
    }
    if !child["metadata"].is_object() {
        return Err(fail("metadata is not a mapping".into()));
    }
    let watched = watch(ctx, &resource).await?;
    let existing = existing(ctx, &watched, &resource, &child)
        .await
        .map_err(|source| Error::Apply {
            index,
            what: what.clone(),
            source,
        })?;
    if let Some(existing) = existing
        && !adopting(&child)
        && !ours(&existing, &parent.set_id, parent.uid())
    {
        return Err(fail(format!(
            "an object with that name already exists and this controller did not create it \
             (no ownerReference to the parent); kite does not take over what it did not create: \
             delete or rename it, or set the annotation {ADOPT_ANNOTATION}: \"true\" on the child to adopt it"
        )));
    }
    let m = child["metadata"]
        .as_object_mut()
        .ok_or_else(|| fail("metadata is not a mapping".into()))?;
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    labels[applyset::PART_OF_LABEL] = json!(parent.set_id);
    let refs = m.entry("ownerReferences").or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut() {
        list.retain(|r| r["uid"] != parent.owner["uid"]);
        list.push(parent.owner.clone());
    }
    Ok((resource, child))
}

/// Records the parent's ApplySet (its id, and every kind it held or now holds) when it
/// changed; gives those kinds.
async fn record(
    ctx: &Context<'_>,
    parent: &Parent<'_>,
    children: &[(Resource, Json)],
) -> Result<BTreeSet<String>> {
    let meta = &parent.json["metadata"];
    let set_id = &parent.set_id;
    let previous: BTreeSet<String> = applyset::kinds_of(parent.json).into_iter().collect();
    let mut kinds = previous.clone();
    for (_, c) in children {
        kinds.insert(applyset::group_kind(
            c["apiVersion"].as_str().unwrap_or_default(),
            c["kind"].as_str().unwrap_or_default(),
        ));
    }
    let has_id = meta["labels"][applyset::ID_LABEL] == set_id.as_str();
    if !has_id
        || kinds != previous
        || meta["annotations"][applyset::TOOLING_ANNOTATION] != applyset::TOOLING
    {
        let body = json!({"metadata": {
            "labels": {applyset::ID_LABEL: set_id},
            "annotations": {applyset::TOOLING_ANNOTATION: applyset::TOOLING, applyset::KINDS_ANNOTATION: applyset::kinds_value(&kinds)},
        }});
        let target = Target {
            resource: ctx.primary.clone(),
            namespace: parent.namespace.map(str::to_owned),
        };
        let updated = ops::patch(
            ctx.session,
            &target,
            parent.name,
            &kube::api::Patch::Merge(body),
            false,
        )
        .await
        .map_err(Error::Parent)?;
        ctx.writes.record(&updated);
    }
    Ok(kinds)
}

/// Applies the children; reports which changed and which are not ready, and gives them
/// all.
async fn apply(
    ctx: &Context<'_>,
    children: &[(Resource, Json)],
    report: &mut Report,
) -> Result<HashSet<Id>> {
    let mut wanted = HashSet::new();
    for (index, (resource, child)) in children.iter().enumerate() {
        let what = display(child);
        let watched = watch(ctx, resource).await?;
        let ns = child["metadata"]["namespace"].as_str();
        let name = child["metadata"]["name"].as_str().unwrap_or_default();
        wanted.insert((
            resource.api_resource.group.clone(),
            resource.api_resource.kind.clone(),
            ns.unwrap_or_default().to_owned(),
            name.to_owned(),
        ));
        let rv = |o: &Json| o["metadata"]["resourceVersion"].as_str().map(str::to_owned);
        // Read before applying: the watch may deliver the applied object before the
        // comparison below, and a change must still count as one.
        let before = super::informer::Key::of(child)
            .and_then(|k| watched.store.get(&k))
            .and_then(|o| rv(&o));
        let applied = ops::apply(ctx.session, child, ns, FIELD_MANAGER, true, false)
            .await
            .map_err(|source| Error::Apply {
                index,
                what: what.clone(),
                source,
            })?;
        ctx.writes.record(&applied);
        let key = super::informer::Key::of(&applied);
        let cached = key.as_ref().and_then(|k| watched.store.get(k));
        if before.is_none() || before != rv(&applied) {
            report.changed.push(what.clone());
        }
        // The cache has the freshest status (the apply response may predate a rollout).
        let fresh = cached.filter(|c| rv(c) == rv(&applied));
        let current: &Json = fresh.as_deref().unwrap_or(&applied);
        if let Some(why) = readiness::not_ready(current) {
            report.waiting.push(format!("{what} ({why})"));
        }
    }
    Ok(wanted)
}

/// Deletes the objects of `group_kind` in the parent's ApplySet and owned by it that
/// are not `wanted` (nor already going).
async fn prune(
    ctx: &Context<'_>,
    parent: &Parent<'_>,
    group_kind: &str,
    wanted: &HashSet<Id>,
    report: &mut Report,
) -> Result<()> {
    let set_id = &parent.set_id;
    let Ok(resource) = ctx.session.discovery.resolve(group_kind).await else {
        return Ok(());
    };
    let watched = watch(ctx, &resource).await?;
    // The cache's own objects, shared: a reconcile looks at every cached child of
    // the kind but copies none.
    let candidates: Vec<Arc<Json>> = if watched.store.is_synced() {
        watched.store.objects()
    } else {
        let selector = format!("{}={set_id}", applyset::PART_OF_LABEL);
        ops::list(
            ctx.session,
            group_kind,
            Some(parent.namespace.unwrap_or("*")),
            Some(&selector),
            None,
        )
        .await
        .map_err(|source| Error::Prune {
            what: group_kind.to_owned(),
            source,
        })?
        .into_iter()
        .map(Arc::new)
        .collect()
    };
    for obj in candidates {
        let m = &obj["metadata"];
        let id = (
            resource.api_resource.group.clone(),
            resource.api_resource.kind.clone(),
            m["namespace"].as_str().unwrap_or_default().to_owned(),
            m["name"].as_str().unwrap_or_default().to_owned(),
        );
        let ours = m["labels"][applyset::PART_OF_LABEL] == set_id.as_str()
            && m["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["uid"] == *parent.uid()));
        if !ours || wanted.contains(&id) || m["deletionTimestamp"].is_string() {
            continue;
        }
        let target = Target {
            resource: resource.clone(),
            namespace: m["namespace"].as_str().map(str::to_owned),
        };
        let name = m["name"].as_str().unwrap_or_default();
        let what = display(&target.complete((*obj).clone()));
        match target
            .api(ctx.session)
            .delete(name, &kube::api::DeleteParams::default())
            .await
        {
            Ok(_) => report.pruned.push(what),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::Prune {
                    what,
                    source: e.into(),
                });
            }
        }
    }
    Ok(())
}

/// Writes the parent's Ready condition if it changed (through the status subresource
/// when the kind has one).
///
/// # Errors
/// The API server refusing the write.
pub async fn set_ready(
    ctx: &Context<'_>,
    parent: &Json,
    ready: &condition::Ready,
) -> ops::Result<()> {
    let now = format!("{:.0}", k8s_openapi::jiff::Timestamp::now());
    let ns = parent["metadata"]["namespace"]
        .as_str()
        .filter(|_| ctx.primary.namespaced);
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let target = Target {
        resource: ctx.primary.clone(),
        namespace: ns.map(str::to_owned),
    };
    let subresource = ctx.primary.subresources.iter().any(|s| s == "status");
    // The write carries the resourceVersion it was computed from: a condition someone
    // else wrote meanwhile is never overwritten; on a conflict, read and decide again.
    let mut current = std::borrow::Cow::Borrowed(parent);
    for attempt in 1..=CONDITION_ATTEMPTS {
        let Some(conditions) = condition::updated_conditions(&current, ready, &now) else {
            return Ok(());
        };
        let mut body = json!({"status": {"conditions": conditions}});
        if let Some(rv) = current["metadata"]["resourceVersion"].as_str() {
            body["metadata"] = json!({ "resourceVersion": rv });
        }
        let patch = kube::api::Patch::Merge(body);
        match ops::patch(ctx.session, &target, name, &patch, subresource).await {
            Ok(updated) => {
                ctx.writes.record(&updated);
                return Ok(());
            }
            Err(e) if e.code() == Some(409) && attempt < CONDITION_ATTEMPTS => {
                current = std::borrow::Cow::Owned(ops::get_of(ctx.session, &target, name).await?);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
