//! The generated identity of one StarlarkController: its ServiceAccount, roles and
//! bindings, applied with server-side apply, pruned when the script changes, and
//! removed when the controller is deleted.

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value as Json, json};

use super::fingerprint::fingerprint;
use super::seen::{Place, Seen};
use crate::rbac::Rules;

/// The field manager of everything the operator writes.
/// The field manager of one resource's generated objects: one per owner, so that two
/// resources never share the ownership of a field (`kite-operator/<uid>`).
pub fn manager(uid: &str) -> String {
    format!("kite-operator/{uid}")
}
/// Labels every generated object with the uid of its StarlarkController, so objects
/// the cluster cannot garbage-collect (cluster roles, Roles in other namespaces) can be
/// found and removed.
pub const OWNER_LABEL: &str = "starkite.io/owner-uid";

/// The kinds the operator generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    ServiceAccount,
    Role,
    RoleBinding,
    ClusterRole,
    ClusterRoleBinding,
}

impl Kind {
    /// The namespaced kinds first: a StarlarkController is only ever granted those.
    pub const ALL: [Kind; 5] = [
        Kind::ServiceAccount,
        Kind::Role,
        Kind::RoleBinding,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
    ];

    /// The kind as an object's `kind` field names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ServiceAccount => "ServiceAccount",
            Kind::Role => "Role",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRole => "ClusterRole",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == kind)
    }

    fn resource(self) -> ApiResource {
        let group = match self {
            Kind::ServiceAccount => "",
            _ => "rbac.authorization.k8s.io",
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", self.name()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("rendering the RBAC: {0}")]
    Render(#[from] crate::artifacts::Error),
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
    /// The generated name is taken by an object that another resource (or nobody)
    /// owns: the operator never writes over it.
    #[error(
        "{kind} {name} already exists and belongs to {holder}, not to this {owner_kind}; the operator does not write over it (delete or rename it if it is stale)"
    )]
    Conflict {
        kind: String,
        name: String,
        holder: String,
        owner_kind: String,
    },
    #[error("reading {kind} {name}: {source}")]
    Read {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("listing {kind}: {source}")]
    List { kind: String, source: kube::Error },
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        kind: String,
        name: String,
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Who the identity belongs to.
pub struct Owner<'a> {
    /// StarlarkController or ClusterStarlarkController.
    pub kind: &'a str,
    pub name: &'a str,
    /// None for the cluster-scoped kind.
    pub namespace: Option<String>,
    pub uid: &'a str,
}

/// An identity as generated, kept to restore it when someone deletes or edits part of it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub kind: &'static str,
    pub name: String,
    pub namespace: Option<String>,
    pub uid: String,
    pub service_account: String,
    pub home: String,
    pub rules: Rules,
}

impl Grant {
    /// Applies it again (see [`apply`]).
    ///
    /// # Errors
    /// As [`apply`].
    pub async fn restore(&self, client: &kube::Client, seen: &Seen) -> Result<Applied> {
        let owner = Owner {
            kind: self.kind,
            name: &self.name,
            namespace: self.namespace.clone(),
            uid: &self.uid,
        };
        apply(
            client,
            seen,
            &owner,
            &self.service_account,
            &self.home,
            &self.rules,
        )
        .await
    }
}

fn api(client: &kube::Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// What [`apply`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// It changed at least one object (the others were as wanted).
    pub wrote: bool,
    /// The last change the operator's watches had seen to the owner's objects when it
    /// compared them ([`Seen::last_change`]): a different one later means something
    /// changed that the comparison may have missed.
    pub seen_at: Option<u64>,
}

/// Applies the ServiceAccount `service_account` in `home` and the roles granting
/// `rules`, then deletes generated objects of `owner` that are no longer wanted. An
/// object the operator's watches show exactly as wanted is not written again, and
/// what to delete is taken from them too ([`Seen`]).
///
/// # Errors
/// A wildcard or invalid name, or an API error (the operator retries with backoff).
pub async fn apply(
    client: &kube::Client,
    seen: &Seen,
    owner: &Owner<'_>,
    service_account: &str,
    home: &str,
    rules: &Rules,
) -> Result<Applied> {
    let mut objects = crate::artifacts::identity_objects(rules, service_account, home)?;
    let mut wanted = Vec::new();
    seen.settle().await;
    let mut applied = Applied {
        wrote: false,
        seen_at: seen.last_change(owner.uid),
    };
    for obj in &mut objects {
        label(obj, owner);
        let Some(of) = obj["kind"].as_str().and_then(Kind::parse) else {
            continue;
        };
        let kind = of.name().to_owned();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_owned);
        let place = (ns, name);
        if seen.holds(of, &place, owner.uid, fingerprint(obj, owner.uid)) {
            wanted.push((of, place));
            continue;
        }
        let (ns, name) = place;
        let api = api(client, &of.resource(), ns.as_deref());
        // Never over another resource's identity: an object of this name that is not
        // labelled as ours is someone else's (a collision, or a planted object).
        let version = match api.get_metadata_opt(&name).await {
            Ok(Some(existing)) => {
                let holder = existing
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OWNER_LABEL))
                    .cloned();
                if holder.as_deref() != Some(owner.uid) {
                    return Err(Error::Conflict {
                        kind,
                        name,
                        holder: holder.map_or_else(
                            || "nothing kite generated".to_owned(),
                            |uid| format!("the resource with uid {uid}"),
                        ),
                        owner_kind: owner.kind.to_owned(),
                    });
                }
                existing.metadata.resource_version
            }
            Ok(None) => None,
            Err(source) => {
                return Err(Error::Read { kind, name, source });
            }
        };
        let params = PatchParams::apply(&manager(owner.uid)).force();
        let written = api
            .patch(&name, &params, &Patch::Apply(&*obj))
            .await
            .map_err(|source| Error::Apply {
                kind: kind.clone(),
                name: name.clone(),
                source,
            })?;
        // An apply that changed nothing (a field someone else set keeps the object
        // from ever matching the fingerprint) leaves the version as it was.
        applied.wrote |= version.is_none() || written.metadata.resource_version != version;
        wanted.push((of, (ns, name)));
    }
    let freshness = recent::freshness(owner.uid);
    let within = owner.namespace.as_deref();
    prune(client, Some(seen), (owner.uid, within), &wanted, freshness).await?;
    // Only a write can be missing from the watches and the API server's cache: an
    // apply that wrote nothing (a restore someone provokes by touching a label) does not
    // send the next prune to etcd.
    if applied.wrote {
        recent::applied(owner.uid);
    }
    Ok(applied)
}

/// Whose grants this process applied a moment ago. A prune finds an owner's objects in
/// the operator's watches, or else in the API server's cache: five LISTs from etcd per
/// start, each reading every role, binding and account of the cluster to filter them
/// by label, made an operator's restart quadratic (5000 controllers: 25 000 LISTs of
/// 5000 objects). Both lag etcd by a moment, so what they may not have seen yet is only
/// what was written a moment ago: an owner whose grants were applied within
/// [`recent::WITHIN`] lists from etcd, or an earlier version's objects (a
/// ClusterRoleBinding the new script no longer needs) could be missed and left granting
/// more than the script is now inferred to need until their watch event arrives.
mod recent {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use super::Freshness;

    /// Far beyond the cache's lag behind etcd, even on a loaded API server.
    pub(super) const WITHIN: Duration = Duration::from_secs(30);

    /// A static, not the operator's context: it is what this process wrote, whichever
    /// path (a start, a restore) applied it. Entries older than [`WITHIN`] go at each
    /// insert, so it holds at most the applies of the last 30 s.
    static APPLIED: LazyLock<Mutex<HashMap<String, Instant>>> = LazyLock::new(Mutex::default);

    pub(super) fn freshness(uid: &str) -> Freshness {
        let applied = APPLIED.lock().unwrap_or_else(PoisonError::into_inner);
        match applied.get(uid) {
            Some(at) if at.elapsed() < WITHIN => Freshness::Current,
            _ => Freshness::Cached,
        }
    }

    pub(super) fn applied(uid: &str) {
        let mut applied = APPLIED.lock().unwrap_or_else(PoisonError::into_inner);
        applied.retain(|_, at| at.elapsed() < WITHIN);
        applied.insert(uid.to_owned(), Instant::now());
    }
}

/// Where [`prune`] lists from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freshness {
    /// The operator's watches, or the API server's watch cache (`resourceVersion=0`).
    Cached,
    /// etcd: nothing may be missed (the owner is gone).
    Current,
}

/// Removes every object generated for the controller resource with `uid`: `within`
/// the namespace of a StarlarkController (it is never granted anything outside it,
/// so three namespaced lists rather than five cluster-wide ones), anywhere for a
/// ClusterStarlarkController (`within` empty).
///
/// # Errors
/// An API error.
pub async fn remove(client: &kube::Client, uid: &str, within: &str) -> Result<()> {
    let within = Some(within).filter(|ns| !ns.is_empty());
    prune(client, None, (uid, within), &[], Freshness::Current).await
}

/// [`remove`], from what the operator's watches saw (or the API server's cache): for
/// a removal that may find nothing, repeated as often as decisions are made.
///
/// # Errors
/// An API error.
pub async fn remove_seen(
    client: &kube::Client,
    seen: &Seen,
    uid: &str,
    within: &str,
) -> Result<()> {
    let within = Some(within).filter(|ns| !ns.is_empty());
    // Written a moment ago, the caches may not show it yet: then from etcd.
    prune(
        client,
        Some(seen),
        (uid, within),
        &[],
        recent::freshness(uid),
    )
    .await
}

/// Deletes `uid`'s generated objects but `keep`: those `within` its namespace for a
/// StarlarkController (it is never granted anything outside it), or anywhere. Where
/// they are found: the operator's watches (`seen`) unless they may lag what matters
/// (`Current`); otherwise a LIST, from the API server's cache or from etcd as
/// `freshness` says.
async fn prune(
    client: &kube::Client,
    seen: Option<&Seen>,
    (uid, within): (&str, Option<&str>),
    keep: &[(Kind, Place)],
    freshness: Freshness,
) -> Result<()> {
    let selector = ListParams::default().labels(&format!("{OWNER_LABEL}={uid}"));
    let selector = match freshness {
        Freshness::Cached => selector.match_any(),
        Freshness::Current => selector,
    };
    let kinds = match within {
        Some(_) => &Kind::ALL[..3],
        None => &Kind::ALL[..],
    };
    for &kind in kinds {
        let ar = kind.resource();
        let watched = seen
            .filter(|_| freshness == Freshness::Cached)
            .and_then(|s| s.owned(kind, uid))
            .map(|places| {
                places
                    .into_iter()
                    .filter(|(ns, _)| within.is_none() || ns.as_deref() == within)
                    .collect()
            });
        let found: Vec<Place> = match watched {
            Some(places) => places,
            None => api(client, &ar, within)
                .list_metadata(&selector)
                .await
                .map_err(|source| Error::List {
                    kind: kind.name().to_owned(),
                    source,
                })?
                .items
                .into_iter()
                .map(|item| {
                    (
                        item.metadata.namespace,
                        item.metadata.name.unwrap_or_default(),
                    )
                })
                .collect(),
        };
        for place in found {
            if keep.iter().any(|(k, p)| *k == kind && *p == place) {
                continue;
            }
            let (ns, name) = place;
            match api(client, &ar, ns.as_deref())
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    return Err(Error::Delete {
                        kind: kind.name().to_owned(),
                        name,
                        source,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Labels `obj` for its owner. Objects the owner may own (in its namespace, or
/// anything for a cluster-scoped owner) also get an ownerReference, so the garbage
/// collector removes them with it.
fn label(obj: &mut Json, owner: &Owner<'_>) {
    let meta = &mut obj["metadata"];
    meta["labels"][OWNER_LABEL] = json!(owner.uid);
    let ownable = match &owner.namespace {
        Some(ns) => meta["namespace"].as_str() == Some(ns),
        None => true,
    };
    if ownable {
        meta["ownerReferences"] = json!([{
            "apiVersion": "starkite.io/v1alpha1",
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
        }]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attack round (issue 28): a script changed at once must not keep the previous
    /// version's grants because the API server's cache had not seen them yet.
    #[test]
    fn an_owner_applied_a_moment_ago_prunes_from_etcd() {
        let uid = "7c1d-recent-test";
        assert_eq!(recent::freshness(uid), Freshness::Cached);
        recent::applied(uid);
        assert_eq!(recent::freshness(uid), Freshness::Current);
        assert_eq!(recent::freshness("another-owner"), Freshness::Cached);
    }

    #[test]
    fn owned_in_its_namespace_labelled_everywhere() {
        let owner = Owner {
            kind: "StarlarkController",
            name: "c",
            namespace: Some("team".into()),
            uid: "u-1",
        };
        let mut here =
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "team", "labels": {}}});
        let mut there = json!({"kind": "ClusterRole", "metadata": {"name": "k", "labels": {}}});
        label(&mut here, &owner);
        label(&mut there, &owner);
        assert_eq!(here["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(here["metadata"]["labels"][OWNER_LABEL], "u-1");
        assert!(there["metadata"]["ownerReferences"].is_null());
        assert_eq!(there["metadata"]["labels"][OWNER_LABEL], "u-1");
        let cluster = Owner {
            kind: "ClusterStarlarkController",
            namespace: None,
            ..owner
        };
        let mut role = json!({"kind": "ClusterRole", "metadata": {"name": "k", "labels": {}}});
        label(&mut role, &cluster);
        assert_eq!(
            role["metadata"]["ownerReferences"][0]["kind"],
            "ClusterStarlarkController"
        );
        for kind in Kind::ALL {
            let ar = kind.resource();
            assert!(ar.plural.ends_with('s'), "{}", ar.plural);
            assert_eq!(Kind::parse(kind.name()), Some(kind));
        }
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            let namespaced = !kind.name().starts_with("Cluster");
            assert_eq!(namespaced, i < 3, "the namespaced kinds first: {kind:?}");
        }
        assert_eq!(
            Kind::ClusterRoleBinding.resource().plural,
            "clusterrolebindings"
        );
        assert_eq!(Kind::ServiceAccount.resource().group, "");
    }
}
