//! The operator's hosted controllers, one entry per StarlarkController.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::approval::Author;
use super::authority::Permission;
use super::grants::Grant;
use super::hosted::Hosted;
use super::resource::StarlarkControllerStatus;
use super::status::{self, Live, Outcome};
use crate::script::journal::Journal;

/// `(namespace, name)` of a StarlarkController.
pub type Key = (String, String);

/// A status to write, and whose.
pub type PendingStatus = (Key, StarlarkControllerStatus);

/// What the operator holds for one StarlarkController.
#[derive(Default)]
pub struct Entry {
    pub uid: String,
    /// What was started (generation and script); equal means nothing to do.
    pub fingerprint: u64,
    pub hosted: Option<Hosted>,
    pub outcome: Outcome,
    /// The ConfigMap the script comes from, whose changes reload the controller.
    pub script_ref: Option<(String, String)>,
    /// The status last written, to skip writes that change nothing, and when.
    pub written: Option<StarlarkControllerStatus>,
    pub written_at: Option<Instant>,
    /// When a write of its counts alone was last handed out, written or not: the
    /// counts' turn goes round past writes that fail (a deleted object's 404s, a
    /// timeout) rather than stay at the head of the line.
    pub counts_tried_at: Option<Instant>,
    /// The identity generated for the running controller, re-applied when someone
    /// deletes or edits part of it.
    pub grants: Option<Arc<Grant>>,
    /// Set when a generated object changed; the next reconcile re-applies the grants.
    pub grants_changed: bool,
    /// Objects generated for it may remain though nothing runs: their removal failed.
    pub grants_remain: bool,
    /// Starts that failed in a row (reset when one succeeds): how long until the next.
    pub failed_starts: u32,
    /// Who approved what runs, and what they must keep holding; checked again now and
    /// then, since an author can lose permissions without any change here.
    pub authority: Option<Arc<Authority>>,
    pub authority_checked: Option<Instant>,
    /// What the controller said, for `kite logs`: kept across restarts of the same
    /// object (its uid) by the same author, and shown only to that author (or whom
    /// RBAC lets read it): a new author, or a new object of the same name, starts a
    /// new one. Dropped when nothing runs.
    pub journal: Option<Era>,
}

/// How long after a controller was stopped for what its caches held every start in its
/// namespace is charged that much: it is refused at once meanwhile, rather than let its
/// caches fill again every retry. The charge belongs to the namespace, not to the
/// object, so deleting and re-creating it, or starting the same watch under another
/// name, does not escape it. Afterwards the namespace is given a fresh chance (the
/// objects may be gone).
pub const RESERVE_FOR: Duration = Duration::from_mins(10);

/// One journal and whose it is.
pub struct Era {
    pub uid: String,
    /// The username of the author whose approval runs the controller writing it.
    pub author: String,
    pub journal: Arc<Journal>,
}

/// The author of a running controller and the permissions it was granted on their behalf.
#[derive(Debug)]
pub struct Authority {
    pub author: Author,
    pub permissions: Vec<Permission>,
    /// The rules the controller was started with (within its namespace), checked
    /// against the ceiling as it is now without analysing the script again.
    pub resolved: crate::rbac::Rules,
}

/// The entries, behind a lock that is never held across an await.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<Entries>,
    /// Per namespace: what a controller's caches held when it was stopped for it, and
    /// until when every start there is charged that much from the outset
    /// ([`Registry::audit_caches`]). Kept when the object goes.
    reserves: Mutex<HashMap<String, (usize, Instant)>>,
}

/// The entries by key, and the key of each object's uid: a watch event on a generated
/// object names its owner by uid, and a scan of every entry per event was quadratic at
/// a restart (about 15 000 events, each a pass over 5000 entries, at 5000 controllers).
#[derive(Default)]
struct Entries {
    by_key: HashMap<Key, Entry>,
    by_uid: HashMap<String, Key>,
}

impl Entries {
    /// Forgets `key`'s entry and its uid.
    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let e = self.by_key.remove(key)?;
        if self.by_uid.get(&e.uid) == Some(key) {
            self.by_uid.remove(&e.uid);
        }
        Some(e)
    }
}

impl std::ops::Deref for Entries {
    type Target = HashMap<Key, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.by_key
    }
}

impl std::ops::DerefMut for Entries {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.by_key
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fingerprint of what runs for `key`, if anything was decided for it.
    pub fn fingerprint(&self, key: &Key) -> Option<u64> {
        self.lock().get(key).map(|e| e.fingerprint)
    }

    /// Records a decision (and the controller now running, if any); returns the
    /// controller it replaces, which the caller stops.
    pub fn decide(
        &self,
        key: Key,
        uid: &str,
        fingerprint: u64,
        outcome: Outcome,
        hosted: Option<Hosted>,
        script_ref: Option<(String, String)>,
    ) -> Option<Hosted> {
        let mut guard = self.lock();
        let entries = &mut *guard;
        if entries.by_uid.get(uid) != Some(&key) {
            entries.by_uid.insert(uid.to_owned(), key.clone());
        }
        let entry = entries.by_key.entry(key.clone()).or_default();
        if entry.uid != uid {
            // A new object with the same name: its status starts afresh.
            entry.written = None;
            if entries.by_uid.get(&entry.uid).is_some_and(|k| *k == key) {
                entries.by_uid.remove(&entry.uid);
            }
        }
        uid.clone_into(&mut entry.uid);
        entry.fingerprint = fingerprint;
        entry.outcome = outcome;
        entry.script_ref = script_ref;
        // What does not run keeps no journal (it is charged to no quota).
        if hosted.is_none() {
            entry.journal = None;
        } else {
            entry.failed_starts = 0;
        }
        std::mem::replace(&mut entry.hosted, hosted)
    }

    /// Remembers the identity generated for `key` (None: nothing generated).
    pub fn set_grants(&self, key: &Key, grants: Option<Arc<Grant>>) {
        if let Some(e) = self.lock().get_mut(key) {
            e.grants = grants;
            e.grants_changed = false;
        }
    }

    /// Counts one more failed start of `key`; returns the failures in a row.
    pub fn failed_start(&self, key: &Key) -> u32 {
        self.lock().get_mut(key).map_or(1, |e| {
            e.failed_starts = e.failed_starts.saturating_add(1);
            e.failed_starts
        })
    }

    /// Whether objects generated for `key` may be in the cluster: it runs with grants,
    /// or their removal failed.
    pub fn may_hold_grants(&self, key: &Key) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|e| e.grants.is_some() || e.grants_remain)
    }

    /// Records whether a removal of `key`'s generated objects is still owed.
    pub fn set_grants_remain(&self, key: &Key, remain: bool) {
        if let Some(e) = self.lock().get_mut(key) {
            e.grants_remain = remain;
        }
    }

    /// Remembers who approved what runs for `key` (None: nothing runs), as checked now.
    pub fn set_authority(&self, key: &Key, authority: Option<Arc<Authority>>) {
        if let Some(e) = self.lock().get_mut(key) {
            e.authority = authority;
            e.authority_checked = Some(Instant::now());
        }
    }

    /// The authority of what runs for `key`, if a controller runs.
    pub fn running_authority(&self, key: &Key) -> Option<Arc<Authority>> {
        let entries = self.lock();
        let e = entries.get(key)?;
        e.hosted.as_ref().and(e.authority.clone())
    }

    /// How long until `key`'s authority is due a check every `period` (at least a
    /// second).
    pub fn until_due(&self, key: &Key, period: Duration) -> Duration {
        let entries = self.lock();
        let checked = entries.get(key).and_then(|e| e.authority_checked);
        checked
            .map_or(period, |t| period.saturating_sub(t.elapsed()))
            .max(Duration::from_secs(1))
    }

    /// The authority of `key` if it was last checked more than `period` ago; it counts
    /// as checked from now (so that concurrent reconciles do not check it twice).
    pub fn authority_due(&self, key: &Key, period: Duration) -> Option<Arc<Authority>> {
        let mut entries = self.lock();
        let e = entries.get_mut(key)?;
        let due = e.authority_checked.is_none_or(|t| t.elapsed() >= period);
        if !due {
            return None;
        }
        e.authority_checked = Some(Instant::now());
        e.authority.clone()
    }

    /// Makes the author check of `key` due again (the last one could not finish).
    pub fn author_unchecked(&self, key: &Key) {
        if let Some(e) = self.lock().get_mut(key) {
            e.authority_checked = None;
        }
    }

    /// Whether an entry belongs to the object with `uid`.
    pub fn knows_uid(&self, uid: &str) -> bool {
        let entries = self.lock();
        entries
            .by_uid
            .get(uid)
            .and_then(|key| entries.by_key.get(key))
            .is_some_and(|e| e.uid == uid)
    }

    /// The key whose generated objects carry the owner label `uid`; marks its grants
    /// for re-applying.
    pub fn grants_changed(&self, uid: &str) -> Option<Key> {
        let mut guard = self.lock();
        let entries = &mut *guard;
        let key = entries.by_uid.get(uid)?;
        let entry = entries
            .by_key
            .get_mut(key)
            .filter(|e| e.uid == uid && e.grants.is_some())?;
        entry.grants_changed = true;
        Some(key.clone())
    }

    /// Marks `key`'s grants for re-applying, if it has some; true if it does.
    pub fn mark_grants_changed(&self, key: &Key) -> bool {
        self.lock()
            .get_mut(key)
            .filter(|e| e.grants.is_some())
            .is_some_and(|e| {
                e.grants_changed = true;
                true
            })
    }

    /// The grants of `key` to re-apply, if one of its generated objects changed.
    pub fn take_changed_grants(&self, key: &Key) -> Option<Arc<Grant>> {
        let mut entries = self.lock();
        let e = entries.get_mut(key)?;
        if !std::mem::take(&mut e.grants_changed) {
            return None;
        }
        e.grants.clone()
    }

    /// Takes the controller running for `key` out, for the caller to stop; the rest of
    /// the entry stays.
    /// How a running controller reaches its shared informers, to ask again whether it
    /// may.
    pub fn access(&self, key: &Key) -> Option<crate::control::informers::Access> {
        self.lock()
            .get(key)
            .and_then(|e| e.hosted.as_ref())
            .map(|h| h.controller.access())
    }

    /// The journal of the object `uid` at `key` as `author` runs it: the one it had,
    /// or a new one.
    pub fn journal(&self, key: &Key, uid: &str, author: &str) -> Arc<Journal> {
        let mut entries = self.lock();
        let entry = entries.entry(key.clone()).or_default();
        match &entry.journal {
            Some(era) if era.uid == uid && era.author == author => era.journal.clone(),
            _ => {
                let journal = Arc::new(Journal::default());
                entry.journal = Some(Era {
                    uid: uid.to_owned(),
                    author: author.to_owned(),
                    journal: journal.clone(),
                });
                journal
            }
        }
    }

    /// What `kite logs` needs of `key` while its controller runs: its journal, and
    /// the author that journal belongs to.
    pub fn log_of(&self, key: &Key) -> Option<(Arc<Journal>, String)> {
        let entries = self.lock();
        let entry = entries.get(key)?;
        entry.hosted.as_ref()?;
        let era = entry.journal.as_ref()?;
        Some((era.journal.clone(), era.author.clone()))
    }

    /// Charges each running controller what it keeps now, its caches' share included
    /// ([`Hosted::recharge`]); takes out the ones that no longer fit, with the message
    /// saying why. The caller stops them and has them reconciled again, which refuses
    /// them (reason `MemoryQuota`) until [`RESERVE_FOR`] has passed.
    pub fn audit_caches(&self, shares: &HashMap<u64, usize>) -> Vec<(Key, Hosted, String)> {
        let mut over = Vec::new();
        let mut entries = self.lock();
        for (key, entry) in entries.iter_mut() {
            let Some(hosted) = entry.hosted.as_mut() else {
                continue;
            };
            if let Err((cached, message)) = hosted.recharge(shares) {
                self.hold_reserve(&key.0, cached);
                // Decided again at its next reconcile, not taken as still running.
                entry.fingerprint = 0;
                if let Some(h) = entry.hosted.take() {
                    over.push((key.clone(), h, message));
                }
            }
        }
        over
    }

    /// Charges every start in `namespace` `cached` bytes for [`RESERVE_FOR`] (the larger
    /// of this and a reserve it already has).
    fn hold_reserve(&self, namespace: &str, cached: usize) {
        let mut reserves = self
            .reserves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        reserves.retain(|_, (_, until)| *until > now);
        let reserve = reserves.entry(namespace.to_owned()).or_insert((0, now));
        *reserve = (reserve.0.max(cached), now + RESERVE_FOR);
    }

    /// What a start of `key` is charged for its caches from the outset: its namespace's
    /// reserve (see [`Registry::audit_caches`] and [`RESERVE_FOR`]).
    pub fn reserve(&self, key: &Key) -> usize {
        let reserves = self
            .reserves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match reserves.get(&key.0) {
            Some((bytes, until)) if Instant::now() < *until => *bytes,
            _ => 0,
        }
    }

    pub fn take_hosted(&self, key: &Key) -> Option<Hosted> {
        self.lock().get_mut(key).and_then(|e| e.hosted.take())
    }

    /// Forgets `key`; returns its uid and controller, which the caller stops.
    ///
    /// With `uid`, only if the entry is that object's: a new object of the same name
    /// keeps what it runs.
    pub fn forget(&self, key: &Key, uid: Option<&str>) -> Option<(String, Option<Hosted>)> {
        let mut entries = self.lock();
        if let Some(uid) = uid
            && entries.get(key).is_some_and(|e| e.uid != uid)
        {
            return None;
        }
        entries.remove(key).map(|e| (e.uid, e.hosted))
    }

    /// Forgets `key`; returns its controller, which the caller stops.
    pub fn remove(&self, key: &Key) -> Option<Hosted> {
        self.lock().remove(key).and_then(|e| e.hosted)
    }

    /// Every controller, for shutdown.
    pub fn drain(&self) -> Vec<Hosted> {
        let mut entries = self.lock();
        entries.by_uid.clear();
        entries
            .by_key
            .drain()
            .filter_map(|(_, e)| e.hosted)
            .collect()
    }

    /// Every StarlarkController decided so far (all of them depend on the ceiling).
    pub fn keys(&self) -> Vec<Key> {
        self.lock().keys().cloned().collect()
    }

    /// StarlarkControllers whose script comes from the ConfigMap `namespace/name`.
    pub fn referencing(&self, namespace: &str, name: &str) -> Vec<Key> {
        self.lock()
            .iter()
            .filter(|(_, e)| {
                e.script_ref
                    .as_ref()
                    .is_some_and(|(n, m)| n == namespace && m == name)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Statuses that differ from what was last written: where the decision changed
    /// (all of them), and where only the counts did, once their last write is
    /// `counts_every` old ([`status::counts_only`]): at most `counts_at_most` of
    /// those, the longest waiting first (since their last write or last handing out,
    /// [`Entry::counts_tried_at`]).
    ///
    /// # Caveats
    /// The cap is what keeps the counts' rate: controllers started together (every one
    /// of them, after a restart) fall due together, and writing them all at once put a
    /// thousand status writes into one second of the API server's, which every
    /// controller's own calls waited behind (issue 28's drift p99 at 1000).
    pub fn pending_statuses(
        &self,
        counts_every: Duration,
        counts_at_most: usize,
    ) -> (Vec<PendingStatus>, Vec<PendingStatus>) {
        let mut counts = Vec::new();
        let mut entries = self.lock();
        let decided: Vec<PendingStatus> = entries
            .iter()
            .filter_map(|(k, e)| {
                let live = e.hosted.as_ref().map(live).unwrap_or_default();
                let next = status::render(&e.outcome, &live, e.written.as_ref());
                match (&e.written, e.written_at) {
                    (Some(w), _) if *w == next => None,
                    (Some(w), Some(at)) if status::counts_only(&next, w) => {
                        let since = e.counts_tried_at.map_or(at, |tried| tried.max(at));
                        if since.elapsed() >= counts_every {
                            counts.push((since, (k.clone(), next)));
                        }
                        None
                    }
                    _ => Some((k.clone(), next)),
                }
            })
            .collect();
        counts.sort_by_key(|(since, _)| *since);
        counts.truncate(counts_at_most);
        let now = Instant::now();
        for (_, (key, _)) in &counts {
            if let Some(e) = entries.get_mut(key) {
                e.counts_tried_at = Some(now);
            }
        }
        let counts = counts.into_iter().map(|(_, w)| w).collect();
        (decided, counts)
    }

    /// Remembers a status as written.
    pub fn written(&self, key: &Key, status: StarlarkControllerStatus) {
        if let Some(e) = self.lock().get_mut(key) {
            e.written = Some(status);
            e.written_at = Some(Instant::now());
        }
    }

    /// Adds every hosted controller's metric series, labelled by StarlarkController.
    pub fn add_metrics(&self, scrape: &mut crate::control::metrics::Scrape) {
        let entries = self.lock();
        let hosted: Vec<(String, &Hosted)> = entries
            .iter()
            .filter_map(|((ns, name), e)| {
                let shown = if ns.is_empty() {
                    name.clone()
                } else {
                    format!("{ns}/{name}")
                };
                e.hosted.as_ref().map(|h| (shown, h))
            })
            .collect();
        let series = hosted
            .into_iter()
            .map(|(cr, h)| h.controller.series(vec![("starlarkcontroller", cr)]))
            .collect();
        scrape.controllers(series);
    }

    /// Each StarlarkController's Ready condition, as (resource, reason, ready): what
    /// an alert on controllers that do not run (NotApproved, ScriptError, ...) needs.
    pub fn readiness(&self) -> Vec<(String, String, bool)> {
        self.lock()
            .iter()
            .filter_map(|((ns, name), e)| {
                let ready = e.outcome.conditions.iter().find(|c| c.type_ == "Ready")?;
                let shown = if ns.is_empty() {
                    name.clone()
                } else {
                    format!("{ns}/{name}")
                };
                Some((shown, ready.reason.clone(), ready.ok))
            })
            .collect()
    }

    /// How many StarlarkControllers are running.
    pub fn running(&self) -> usize {
        self.lock().values().filter(|e| e.hosted.is_some()).count()
    }
}

fn live(h: &Hosted) -> Live {
    let (reconciles, errors) = h.controller.counts();
    let latest = h.controller.latest();
    Live {
        reconciles,
        errors,
        last_error: latest.error,
        last_reconcile: latest.reconcile,
        recent: latest.recent.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A requeue of an object that went must not stop a new object of the same name
    /// created in between (issue 26, round 8).
    #[test]
    fn a_cache_reserve_belongs_to_the_namespace_and_outlives_the_object() {
        let registry = Registry::default();
        let key: Key = ("t".into(), "c".into());
        registry.decide(key.clone(), "u", 1, Outcome::default(), None, None);
        registry.hold_reserve("t", 100);
        registry.hold_reserve("t", 40);
        assert_eq!(registry.reserve(&key), 100, "the larger reserve stays");
        assert!(registry.forget(&key, Some("u")).is_some());
        assert_eq!(
            registry.reserve(&key),
            100,
            "re-creating it does not escape"
        );
        let renamed: Key = ("t".into(), "other-name".into());
        assert_eq!(registry.reserve(&renamed), 100, "nor does another name");
        assert_eq!(
            registry.reserve(&("u".into(), "c".into())),
            0,
            "another namespace"
        );
    }

    #[test]
    fn counts_alone_are_written_a_few_at_a_time_the_longest_unwritten_first() {
        let registry = Registry::default();
        let busier = status::Live {
            reconciles: 5,
            ..Default::default()
        };
        let now = Instant::now();
        for i in 0..5u64 {
            let key: Key = ("t".into(), format!("c{i}"));
            registry.decide(
                key.clone(),
                &format!("u{i}"),
                1,
                Outcome::default(),
                None,
                None,
            );
            let written = status::render(&Outcome::default(), &busier, None);
            let mut entries = registry.lock();
            let e = entries.get_mut(&key).unwrap();
            e.written = Some(written);
            e.written_at = now.checked_sub(Duration::from_secs(10 + i));
        }
        // A decision never written: never held back by the cap.
        registry.decide(
            ("t".into(), "new".into()),
            "n",
            1,
            Outcome::default(),
            None,
            None,
        );
        let names = |due: Vec<PendingStatus>| -> Vec<String> {
            let mut names: Vec<String> = due.into_iter().map(|((_, name), _)| name).collect();
            names.sort();
            names
        };
        let (decided, counts) = registry.pending_statuses(Duration::from_secs(1), 2);
        assert_eq!(names(decided), ["new"]);
        assert_eq!(names(counts), ["c3", "c4"]);
        // Never written (their writes failed): the others' turn comes all the same.
        let (_, counts) = registry.pending_statuses(Duration::from_secs(1), 2);
        assert_eq!(names(counts), ["c1", "c2"]);
        let (_, counts) = registry.pending_statuses(Duration::from_secs(1), 2);
        assert_eq!(names(counts), ["c0"]);
        let (decided, counts) = registry.pending_statuses(Duration::from_mins(1), 2);
        assert_eq!(names(decided), ["new"]);
        assert!(counts.is_empty(), "none is due yet");
    }

    #[test]
    fn forgetting_a_gone_object_leaves_a_new_one_of_the_same_name() {
        let registry = Registry::default();
        let key: Key = ("t".into(), "c".into());
        registry.decide(key.clone(), "new-uid", 1, Outcome::default(), None, None);
        assert!(registry.forget(&key, Some("old-uid")).is_none());
        assert_eq!(
            registry.fingerprint(&key),
            Some(1),
            "the new object's entry stays"
        );
        let (uid, _) = registry.forget(&key, Some("new-uid")).unwrap();
        assert_eq!(uid, "new-uid");
        assert_eq!(registry.fingerprint(&key), None);
        // Without a uid (a requeue that did not know it), the entry goes.
        registry.decide(key.clone(), "x", 1, Outcome::default(), None, None);
        assert!(registry.forget(&key, None).is_some());
    }

    #[test]
    fn a_generated_objects_owner_is_found_by_uid_only_while_it_holds_grants() {
        let registry = Registry::default();
        let key: Key = ("t".into(), "c".into());
        let grant = |uid: &str| {
            Some(Arc::new(Grant {
                kind: "StarlarkController",
                name: "c".into(),
                namespace: Some("t".into()),
                uid: uid.into(),
                service_account: "sa".into(),
                home: "t".into(),
                rules: crate::rbac::Rules::default(),
            }))
        };
        registry.decide(key.clone(), "one", 1, Outcome::default(), None, None);
        assert_eq!(registry.grants_changed("one"), None, "no grants yet");
        registry.set_grants(&key, grant("one"));
        assert_eq!(registry.grants_changed("one"), Some(key.clone()));
        assert!(registry.take_changed_grants(&key).is_some());
        // A new object of the same name: the old uid no longer names it.
        registry.decide(key.clone(), "two", 1, Outcome::default(), None, None);
        assert_eq!(registry.grants_changed("one"), None);
        assert_eq!(registry.grants_changed("two"), Some(key.clone()));
        assert!(!registry.knows_uid("one") && registry.knows_uid("two"));
        // Another object must not be found through a key it never had.
        let other: Key = ("t".into(), "d".into());
        registry.decide(other.clone(), "three", 1, Outcome::default(), None, None);
        assert_eq!(registry.grants_changed("three"), None);
        // Gone: neither is found, and nothing is left behind.
        registry.forget(&key, Some("two"));
        registry.remove(&other);
        assert_eq!(registry.grants_changed("two"), None);
        assert!(!registry.knows_uid("two"));
        assert!(registry.lock().by_uid.is_empty());
        registry.decide(key.clone(), "four", 1, Outcome::default(), None, None);
        drop(registry.drain());
        assert!(registry.lock().by_uid.is_empty());
    }
}
