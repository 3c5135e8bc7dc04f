//! Sharding StarlarkControllers over the operator's replicas (`--shards auto`): each
//! replica holds a membership Lease, each controller goes to the live replica its uid
//! hashes highest with (rendezvous hashing), and `status.replica` is the claim that
//! keeps one from running on two replicas at once. See `docs/design/sharing.md`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::tenant::Tenant;
use crate::control::leader::{self, LeaderConfig, Validity};

/// Membership leases are named with this prefix and the replica's identity.
pub const LEASE_PREFIX: &str = "kite-operator-shard-";
/// A replica whose lease has not been renewed for this long is gone: its controllers
/// are taken over once it has passed.
const LEASE_DURATION: Duration = Duration::from_secs(10);
const RENEW_DEADLINE: Duration = Duration::from_secs(7);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// How often the live replicas are looked up.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// A membership lease left unrenewed this long (its replica is long gone) is deleted.
const FORGET_AFTER: Duration = Duration::from_mins(10);
/// How long one API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("claiming {what} for replica {replica}: {source}")]
    Claim {
        what: String,
        replica: String,
        source: kube::Error,
    },
    #[error("claiming {what} for replica {replica}: no answer within 10s")]
    ClaimTimeout { what: String, replica: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether this replica runs a controller resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It is this replica's, and claimed in its status.
    Mine,
    /// Another replica's (or not yet free): look again after this long.
    Elsewhere(Duration),
}

/// This replica's view of the shards.
pub struct Shards {
    identity: String,
    client: kube::Client,
    /// The live replicas (identities, sorted); empty while this replica's own lease is
    /// not valid.
    members: watch::Receiver<Vec<String>>,
    /// This replica's membership: hosted controllers write nothing once it lapses.
    validity: Arc<Validity>,
    /// Each live replica's logs API address (its lease's [`LOGS_ANNOTATION`]), for
    /// forwarding a log request to the replica that runs the controller.
    logs: Addresses,
    /// Completes once the lease has been let go (after `release`).
    kept: std::sync::Mutex<Option<leader::Done>>,
}

/// Each live replica's logs address, by identity.
type Addresses = Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>;

/// The lease annotation with a replica's logs API address (`host:port`).
pub const LOGS_ANNOTATION: &str = "starkite.io/logs-address";

impl Shards {
    /// Joins: holds this replica's membership Lease in `namespace` and keeps the list
    /// of live replicas current, until `release` turns true (the lease is then
    /// released, so the others take over at once). Both run on a thread of their own
    /// with their own connection from `config` (see [`leader::isolated`]), so that a
    /// replica busy starting its share still renews on time.
    pub fn join(
        (client, config): (kube::Client, kube::Config),
        namespace: &str,
        identity: &str,
        logs_address: Option<String>,
        release: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let validity = Validity::new();
        let mut lease = LeaderConfig::new(lease_name(identity), namespace, identity);
        lease.lease_duration = LEASE_DURATION;
        lease.renew_deadline = RENEW_DEADLINE;
        lease.retry_period = RETRY_PERIOD;
        if let Some(address) = logs_address {
            lease
                .annotations
                .insert(LOGS_ANNOTATION.to_owned(), address);
        }
        let (members_tx, members) = watch::channel(Vec::new());
        let logs = Arc::default();
        let keep = {
            let (namespace, identity) = (namespace.to_owned(), identity.to_owned());
            let (validity, logs) = (validity.clone(), Arc::clone(&logs));
            move |client: kube::Client| async move {
                let shutdown = move || {
                    let mut rx = release.clone();
                    async move {
                        let _ = rx.wait_for(|r| *r).await;
                    }
                };
                let (held_tx, held) = watch::channel(false);
                let elect =
                    leader::run(client.clone(), lease, held_tx, validity.clone(), shutdown());
                let looked = look(
                    client,
                    namespace,
                    identity,
                    held,
                    validity,
                    (members_tx, logs),
                    shutdown(),
                );
                tokio::join!(elect, looked);
            }
        };
        let kept = leader::isolated("kite-shard", (client.clone(), config), keep);
        Arc::new(Self {
            identity: identity.to_owned(),
            client,
            members,
            validity,
            logs,
            kept: std::sync::Mutex::new(Some(kept)),
        })
    }

    /// Waits at most `within` for the lease to be let go, once `release` was sent: the
    /// others take this replica's share at once instead of after the lease expires.
    pub async fn left(&self, within: Duration) {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(kept) = kept {
            let _ = tokio::time::timeout(within, kept).await;
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The logs API address of the live replica `identity`, if it serves one.
    pub fn logs_address(&self, identity: &str) -> Option<String> {
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(identity)
            .cloned()
    }

    /// This replica's membership, which hosted controllers' writes depend on.
    pub fn validity(&self) -> Arc<Validity> {
        self.validity.clone()
    }

    /// The live replicas now.
    pub fn members(&self) -> Vec<String> {
        self.members.borrow().clone()
    }

    /// Changes whenever the live replicas do: every resource must be looked at again.
    pub fn changes(&self) -> watch::Receiver<Vec<String>> {
        self.members.clone()
    }

    /// Decides whether this replica runs `cr`, claiming it in `status.replica` when it
    /// is this replica's by the hash and no live replica holds it.
    ///
    /// # Errors
    /// The claim could not be written (a conflict is not an error: it is looked at
    /// again).
    pub async fn claim<K: Tenant>(&self, cr: &K) -> Result<Claim> {
        let members = self.members();
        let uid = cr.uid().unwrap_or_default();
        if owner(&uid, &members) != Some(self.identity.as_str()) {
            return Ok(Claim::Elsewhere(Duration::from_mins(1)));
        }
        match cr.replica() {
            Some(r) if r == self.identity => return Ok(Claim::Mine),
            // Still running on a live replica: it lets go when it sees the change.
            Some(r) if !r.is_empty() && members.iter().any(|m| m == r) => {
                return Ok(Claim::Elsewhere(RETRY_PERIOD));
            }
            _ => {}
        }
        let body = json!({
            "metadata": {"resourceVersion": cr.resource_version()},
            "status": {"replica": self.identity},
        });
        match self.write(cr, body).await {
            Ok(()) => {
                tracing::info!(controller = %cr.display(), replica = %self.identity, "claimed");
                Ok(Claim::Mine)
            }
            Err(Error::Claim {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 => Ok(Claim::Elsewhere(Duration::from_millis(500))),
            Err(e) => Err(e),
        }
    }

    /// Gives `cr` up, once its controller here has stopped: clears `status.replica`
    /// if it still names this replica.
    ///
    /// # Errors
    /// The write failed; the claim then lapses with this replica's membership.
    ///
    /// # Caveats
    /// A replica whose own lease is not valid (it missed its renew deadline) writes
    /// nothing: its claim names a replica the others no longer count as live, so they
    /// take the resource anyway, and if it renews first its claims still stand, with
    /// nothing to write back.
    /// Releasing and re-claiming every resource on each lapse was two writes per
    /// controller, which at thousands of controllers made the next renewal late.
    pub async fn release<K: Tenant>(&self, cr: &K) -> Result<()> {
        if cr.replica() != Some(self.identity.as_str()) || !self.validity.valid() {
            return Ok(());
        }
        let body = json!({
            "metadata": {"resourceVersion": cr.resource_version()},
            "status": {"replica": null},
        });
        match self.write(cr, body).await {
            Err(Error::Claim {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 || s.code == 404 => Ok(()),
            other => other,
        }
    }

    async fn write<K: Tenant>(&self, cr: &K, body: serde_json::Value) -> Result<()> {
        let name = cr.name_any();
        let api = cr.api_of(&self.client);
        let params = PatchParams::default();
        let patch = Patch::Merge(body);
        match tokio::time::timeout(CALL_TIMEOUT, api.patch_status(&name, &params, &patch)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(Error::Claim {
                what: cr.display(),
                replica: self.identity.clone(),
                source,
            }),
            Err(_) => Err(Error::ClaimTimeout {
                what: cr.display(),
                replica: self.identity.clone(),
            }),
        }
    }
}

/// The membership Lease of replica `identity`: a valid object name whatever the
/// identity is (pod names are; `host_pid` is not).
pub fn lease_name(identity: &str) -> String {
    let mut name: String = identity
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(200);
    let name = name.trim_matches(|c| c == '-' || c == '.');
    format!(
        "{LEASE_PREFIX}{name}-{:08x}",
        fnv1a(identity.as_bytes()) & 0xffff_ffff
    )
}

/// The live replica a resource with `uid` belongs to: the one scoring highest for it
/// (rendezvous hashing), so a replica joining or leaving moves only the resources whose
/// top choice it is or was.
pub fn owner<'a>(uid: &str, members: &'a [String]) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| {
            let mut key = Vec::with_capacity(uid.len() + m.len() + 1);
            key.extend_from_slice(uid.as_bytes());
            key.push(0);
            key.extend_from_slice(m.as_bytes());
            (mix(fnv1a(&key)), m.as_str())
        })
        .map(String::as_str)
}

/// Whether a change of the live replicas from `old` to `new` means this replica (`me`)
/// must look at a resource again: its owner moved to or from `me`, or its claim
/// (`replica`, from `status.replica`) disagrees with who owns it now. Looking at every
/// resource on every change made each change cost a reconcile of the whole fleet in
/// every replica, which at thousands of controllers delayed the lease renewals that
/// caused the next change.
pub fn moves(
    uid: &str,
    replica: Option<&str>,
    (old, new): (&[String], &[String]),
    me: &str,
) -> bool {
    let (was, is) = (owner(uid, old), owner(uid, new));
    let mine = Some(me);
    (was != is && (was == mine || is == mine)) || ((is == mine) != (replica == mine))
}

/// FNV-1a: stable across processes and versions, unlike the standard hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A finalizer (splitmix64's) so that nearby inputs score independently.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Keeps `members` current: the holders of unexpired membership leases, this replica
/// only while its own lease is valid.
async fn look(
    client: kube::Client,
    namespace: String,
    identity: String,
    held: watch::Receiver<bool>,
    validity: Arc<Validity>,
    (members, logs): (watch::Sender<Vec<String>>, Addresses),
    shutdown: impl std::future::Future<Output = ()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Looked at again after LOOK_EVERY, or as soon as a live replica's lease runs
        // out if that is sooner: its share is taken over at the expiry, not up to a
        // look later.
        let mut next = LOOK_EVERY;
        let listed = tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default())).await;
        match listed {
            Ok(Ok(leases)) => {
                let now = Timestamp::now();
                let mut live = Vec::new();
                let mut addresses = std::collections::HashMap::new();
                for lease in leases.items {
                    let name = lease.name_any();
                    if !name.starts_with(LEASE_PREFIX) {
                        continue;
                    }
                    let address = lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(LOGS_ANNOTATION))
                        .cloned();
                    let Some(spec) = lease.spec else { continue };
                    let holder = spec.holder_identity.unwrap_or_default();
                    if let Some(address) = address.filter(|_| !holder.is_empty()) {
                        addresses.insert(holder.clone(), address);
                    }
                    let age = spec
                        .renew_time
                        .map(|t| Duration::try_from(now.duration_since(t.0)).unwrap_or_default());
                    let lasts = Duration::from_secs(
                        u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
                    );
                    let mine = holder == identity;
                    if mine {
                        // Our own membership counts only while it is valid here.
                        if *held.borrow() && validity.valid() {
                            live.push(holder);
                        }
                    } else if let Some(left) = age
                        .filter(|_| !holder.is_empty())
                        .and_then(|a| lasts.checked_sub(a))
                        .filter(|left| !left.is_zero())
                    {
                        next = next.min(left + Duration::from_millis(50));
                        live.push(holder);
                    } else if age.is_none_or(|a| a > FORGET_AFTER) {
                        let _ = tokio::time::timeout(
                            CALL_TIMEOUT,
                            api.delete(&name, &kube::api::DeleteParams::default()),
                        )
                        .await;
                    }
                }
                live.sort();
                live.dedup();
                addresses.retain(|holder, _| live.contains(holder));
                *logs
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = addresses;
                members.send_if_modified(|m| {
                    if *m == live {
                        false
                    } else {
                        tracing::info!(replicas = ?live, "shard members changed");
                        *m = live;
                        true
                    }
                });
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "listing the shard leases"),
            Err(_) => tracing::warn!("listing the shard leases timed out"),
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(next) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("kite-operator-{i}")).collect()
    }

    #[test]
    fn resources_spread_evenly_and_a_change_moves_only_its_share() {
        let uids: Vec<String> = (0..3000)
            .map(|i| format!("0f8e{i:04x}-1c2d-4e5f-8a9b-{:012x}", i * 7919))
            .collect();
        let three = replicas(3);
        let mut counts = std::collections::HashMap::new();
        for u in &uids {
            *counts.entry(owner(u, &three).unwrap()).or_insert(0) += 1;
        }
        for (r, c) in &counts {
            assert!((900..=1100).contains(c), "{r} has {c} of 3000");
        }
        // A fourth joins: only what it takes moves.
        let four = replicas(4);
        let moved: Vec<&String> = uids
            .iter()
            .filter(|u| owner(u, &three) != owner(u, &four))
            .collect();
        assert!(
            moved
                .iter()
                .all(|u| owner(u, &four) == Some("kite-operator-3"))
        );
        assert!((600..=900).contains(&moved.len()), "{}", moved.len());
        // One leaves: only its share moves.
        let two: Vec<String> = three
            .iter()
            .filter(|r| *r != "kite-operator-1")
            .cloned()
            .collect();
        assert!(uids.iter().all(|u| {
            owner(u, &three) == Some("kite-operator-1") || owner(u, &three) == owner(u, &two)
        }));
        assert_eq!(owner("x", &[]), None);
    }

    #[test]
    fn a_change_looks_again_only_at_what_moves_to_or_from_this_replica() {
        let uids: Vec<String> = (0..3000).map(|i| format!("uid-{i}")).collect();
        let (three, four) = (replicas(3), replicas(4));
        let me = "kite-operator-0";
        let claimed = |u: &str, members: &[String]| owner(u, members).map(str::to_owned);
        // Settled under three (each resource claimed by its owner), then a fourth joins.
        let looked: Vec<&String> = uids
            .iter()
            .filter(|u| moves(u, claimed(u, &three).as_deref(), (&three, &four), me))
            .collect();
        // Only this replica's resources that the newcomer takes, and nothing else.
        assert!(!looked.is_empty());
        assert!(looked.iter().all(|u| owner(u, &three) == Some(me)
            && owner(u, &four) == Some("kite-operator-3")));
        assert_eq!(
            looked.len(),
            uids.iter()
                .filter(|u| owner(u, &three) == Some(me) && owner(u, &four) != Some(me))
                .count()
        );
        assert!(looked.len() < uids.len() / 5, "{} of 3000", looked.len());
        // This replica's own lease lapsed (no members): everything it held is let go.
        let held = uids.iter().filter(|u| owner(u, &three) == Some(me)).count();
        let dropped = uids
            .iter()
            .filter(|u| moves(u, claimed(u, &three).as_deref(), (&three, &[]), me))
            .count();
        assert_eq!(dropped, held);
        // And back: all of them are claimed again, whatever their stale status says.
        let back = uids
            .iter()
            .filter(|u| moves(u, claimed(u, &three).as_deref(), (&[], &three), me))
            .count();
        assert_eq!(back, held);
        // Nothing changed, but a resource is claimed by someone else though it is ours
        // (a replica that left), or by us though it is not: both are looked at.
        let ours = uids.iter().find(|u| owner(u, &three) == Some(me)).unwrap();
        let theirs = uids.iter().find(|u| owner(u, &three) != Some(me)).unwrap();
        assert!(moves(ours, Some("gone"), (&three, &three), me));
        assert!(moves(theirs, Some(me), (&three, &three), me));
        assert!(!moves(ours, Some(me), (&three, &three), me));
        assert!(!moves(theirs, Some("gone"), (&three, &three), me));
    }

    #[test]
    fn lease_names_are_valid_whatever_the_identity() {
        let n = lease_name("My_Host_1234");
        assert!(n.starts_with("kite-operator-shard-my-host-1234-"), "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        );
        assert_ne!(
            lease_name("a_1"),
            lease_name("a-1"),
            "distinct identities, distinct leases"
        );
        assert!(lease_name(&"x".repeat(400)).len() <= 253);
    }
}
