//! What the operator's watches of its generated objects have seen: a fingerprint of
//! each, to tell whether applying it again would change anything, and which objects
//! each owner has, so that a start asks the API server nothing when they are as wanted.
//!
//! An operator's restart re-applies the identity of every controller it hosts. Asked
//! of the API server, that was a GET and an apply per object and a LIST per kind: about
//! eight requests per controller, most of the 56 000 of a 5000-controller restart. The
//! watches the operator keeps anyway (to restore what someone deletes) already hold
//! the answer (`docs/design/operator-starts.md`).
//!
//! # Caveats
//! A watch lags the API server by a moment. The fingerprint only ever *skips* a write
//! that would change nothing; an object that changes after it was looked at reaches
//! the same watch, whose event marks its owner's grants for re-applying (see
//! `kinds::generated`), so the skip is corrected as soon as the change is seen. A
//! kind is only trusted once its watch has listed everything (`InitDone`), and not
//! while it lists again after an error; objects gone during a gap are reported as
//! deleted when the new list is complete.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::runtime::watcher::Event;
use tokio::time::Instant;

use super::fingerprint::fingerprint;
use super::grants::{Kind, OWNER_LABEL};

/// How long a start waits for the watches' first complete list before it asks the
/// API server instead: a few seconds even for thousands of objects.
const SETTLE: Duration = Duration::from_secs(15);

/// `(namespace, name)` of a generated object.
pub type Place = (Option<String>, String);

/// Objects one kind's store keeps. Beyond it (someone labelling a flood of objects
/// as generated) the kind is not trusted until a list fits again: starts ask the API
/// server, as they did before the store, rather than the store growing without bound.
const MAX_OBJECTS: usize = 100_000;

/// One object as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sight {
    owner: Arc<str>,
    print: u64,
}

/// What one kind's watch has seen.
#[derive(Default)]
struct Kept {
    /// Some while a watch runs: when it started, to give up waiting for its list.
    since: Option<Instant>,
    /// Its list is complete, not being made again, and within [`MAX_OBJECTS`].
    listed: bool,
    /// More than [`MAX_OBJECTS`] were seen: nothing kept until the next list.
    overflowed: bool,
    objects: HashMap<Place, Sight>,
    owned: HashMap<Arc<str>, HashSet<Place>>,
    /// A list in progress (between `Init` and `InitDone`).
    listing: Option<HashMap<Place, Sight>>,
}

impl Kept {
    /// Keeps `sight` at `place`; gives the previous owner when it changed.
    fn put(&mut self, place: Place, sight: Sight) -> Option<Arc<str>> {
        let before = self.objects.get(&place).map(|old| old.owner.clone());
        if let Some(old) = &before
            && *old != sight.owner
        {
            self.disown(old, &place);
        }
        self.owned
            .entry(sight.owner.clone())
            .or_default()
            .insert(place.clone());
        let owner = sight.owner.clone();
        self.objects.insert(place, sight);
        before.filter(|old| *old != owner)
    }

    fn remove(&mut self, place: &Place) -> Option<Sight> {
        let old = self.objects.remove(place)?;
        self.disown(&old.owner, place);
        Some(old)
    }

    fn disown(&mut self, owner: &Arc<str>, place: &Place) {
        if let Some(places) = self.owned.get_mut(owner) {
            places.remove(place);
            if places.is_empty() {
                self.owned.remove(owner);
            }
        }
    }

    fn clear(&mut self) {
        self.objects.clear();
        self.owned.clear();
    }
}

/// Everything behind the lock.
#[derive(Default)]
struct Inner {
    kinds: HashMap<Kind, Kept>,
    /// Per owner, the number of the last change seen to one of its objects (a new
    /// number for every change, from `changes`): a start compares it before and after
    /// it registers what it granted ([`Seen::changed_since`]).
    touched: HashMap<Arc<str>, u64>,
    changes: u64,
}

impl Inner {
    fn touch(&mut self, owner: &Arc<str>) {
        self.changes += 1;
        self.touched.insert(owner.clone(), self.changes);
    }

    /// Forgets an owner's last change once none of its objects is kept anywhere; a
    /// later change gets a larger number, so a comparison never mistakes it.
    fn tidy(&mut self, owner: &Arc<str>) {
        if !self.kinds.values().any(|k| k.owned.contains_key(owner)) {
            self.touched.remove(owner);
        }
    }
}

/// The generated objects the operator's watches have seen, per kind.
pub struct Seen {
    inner: Mutex<Inner>,
    /// Bumped when a kind's list completes, to wake starts waiting for it.
    listed: tokio::sync::Notify,
    /// [`SETTLE`], but in tests.
    settle: Duration,
    /// [`MAX_OBJECTS`], but in tests.
    max_objects: usize,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            inner: Mutex::default(),
            listed: tokio::sync::Notify::new(),
            settle: SETTLE,
            max_objects: MAX_OBJECTS,
        }
    }
}

impl Seen {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch of `kind` starts: until its list is complete, nothing it saw before is
    /// trusted.
    pub fn watching(&self, kind: Kind) {
        let mut inner = self.lock();
        let kept = inner.kinds.entry(kind).or_default();
        kept.since = Some(Instant::now());
        kept.listed = false;
    }

    /// Takes in one event of the watch of `kind`; gives the objects it touched, and
    /// stand-ins (name, namespace and owner label only) for what a previous owner lost:
    /// an object a completed list no longer has, or one relabelled to another owner.
    pub fn observe<T>(&self, kind: Kind, event: Event<T>) -> Vec<T>
    where
        T: kube::Resource<DynamicType = ()> + serde::Serialize + Default,
    {
        // Outside the lock: an object can be large.
        let seen = match &event {
            Event::InitApply(obj) | Event::Apply(obj) | Event::Delete(obj) => sight(obj),
            Event::Init | Event::InitDone => None,
        };
        let mut inner = self.lock();
        let max = self.max_objects;
        match event {
            Event::Init => {
                let kept = inner.kinds.entry(kind).or_default();
                kept.listed = false;
                kept.overflowed = false;
                kept.listing = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(obj) => {
                let kept = inner.kinds.entry(kind).or_default();
                if let Some(listing) = &mut kept.listing {
                    if listing.len() >= max {
                        kept.overflowed = true;
                        listing.clear();
                    } else if !kept.overflowed
                        && let Some((place, sight)) = seen
                    {
                        listing.insert(place, sight);
                    }
                }
                vec![obj]
            }
            Event::InitDone => {
                let gone = Self::relisted(&mut inner, kind);
                drop(inner);
                self.listed.notify_waiters();
                gone
            }
            Event::Apply(obj) => {
                let mut out = Vec::new();
                let mut touched = Vec::new();
                if let Some((place, sight)) = seen {
                    let kept = inner.kinds.entry(kind).or_default();
                    let changed = kept.objects.get(&place) != Some(&sight);
                    if kept.overflowed {
                        // Nothing kept until the next list.
                    } else if changed && kept.objects.len() >= max {
                        overflow(&mut inner, kind);
                    } else if changed {
                        touched.push(sight.owner.clone());
                        if let Some(old) = kept.put(place.clone(), sight) {
                            out.push(stand_in(&place, &old));
                            touched.push(old);
                        }
                    }
                }
                for owner in &touched {
                    inner.touch(owner);
                    inner.tidy(owner);
                }
                out.push(obj);
                out
            }
            Event::Delete(obj) => {
                if let Some((place, _)) = seen {
                    let kept = inner.kinds.entry(kind).or_default();
                    if let Some(old) = kept.remove(&place) {
                        inner.touch(&old.owner);
                        inner.tidy(&old.owner);
                    }
                }
                vec![obj]
            }
        }
    }

    /// A list of `kind` completed: it replaces what was kept; gives stand-ins for what
    /// it no longer has or now has under another owner, and counts a change for every
    /// owner whose objects differ.
    fn relisted<T>(inner: &mut Inner, kind: Kind) -> Vec<T>
    where
        T: kube::Resource<DynamicType = ()> + Default,
    {
        let kept = inner.kinds.entry(kind).or_default();
        let listed = kept.listing.take().unwrap_or_default();
        if std::mem::take(&mut kept.overflowed) {
            overflow(inner, kind);
            return Vec::new();
        }
        let mut touched: Vec<Arc<str>> = Vec::new();
        let gone: Vec<T> = kept
            .objects
            .iter()
            .filter(|(place, _)| !listed.contains_key(*place))
            .map(|(place, sight)| {
                touched.push(sight.owner.clone());
                stand_in(place, &sight.owner)
            })
            .collect();
        let mut gone = gone;
        for (place, sight) in &listed {
            match kept.objects.get(place) {
                Some(old) if old == sight => {}
                // Relabelled during the gap: the previous owner lost it.
                Some(old) if old.owner != sight.owner => {
                    touched.extend([old.owner.clone(), sight.owner.clone()]);
                    gone.push(stand_in(place, &old.owner));
                }
                _ => touched.push(sight.owner.clone()),
            }
        }
        kept.clear();
        for (place, sight) in listed {
            kept.put(place, sight);
        }
        kept.listed = true;
        for owner in &touched {
            inner.touch(owner);
        }
        for owner in &touched {
            inner.tidy(owner);
        }
        gone
    }

    /// Waits until every watched kind has listed, or its watch has run for
    /// [`SETTLE`].
    pub async fn settle(&self) {
        loop {
            let notified = self.listed.notified();
            let wait = {
                let inner = self.lock();
                inner
                    .kinds
                    .values()
                    .filter(|k| !k.listed && !k.overflowed)
                    .filter_map(|k| k.since.map(|since| since + self.settle))
                    .filter(|deadline| *deadline > Instant::now())
                    .max()
            };
            let Some(deadline) = wait else {
                return;
            };
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    /// Whether `kind`'s watch has the object at `place` as `owner`'s, with the
    /// fingerprint `print`: applying it again would change nothing.
    pub fn holds(&self, kind: Kind, place: &Place, owner: &str, print: u64) -> bool {
        let inner = self.lock();
        inner.kinds.get(&kind).is_some_and(|k| {
            k.listed
                && k.objects
                    .get(place)
                    .is_some_and(|s| &*s.owner == owner && s.print == print)
        })
    }

    /// The objects of `kind` labelled as `owner`'s, if its watch has listed them all.
    pub fn owned(&self, kind: Kind, owner: &str) -> Option<Vec<Place>> {
        let inner = self.lock();
        let kept = inner.kinds.get(&kind).filter(|k| k.listed)?;
        Some(
            kept.owned
                .get(owner)
                .map(|places| places.iter().cloned().collect())
                .unwrap_or_default(),
        )
    }

    /// The number of the last change seen to one of `owner`'s objects, if any is kept.
    pub fn last_change(&self, owner: &str) -> Option<u64> {
        self.lock().touched.get(owner).copied()
    }
}

/// Stops keeping `kind`'s objects until its next list: more than [`MAX_OBJECTS`]. Every
/// owner that had some counts a change (a start that compared against them looks
/// again), and is forgotten unless another kind keeps some of its objects.
fn overflow(inner: &mut Inner, kind: Kind) {
    let kept = inner.kinds.entry(kind).or_default();
    if !kept.overflowed {
        tracing::warn!(
            kind = kind.name(),
            "more generated objects than the operator keeps track of: starts ask the API server about them until a new list fits"
        );
    }
    kept.overflowed = true;
    kept.listed = false;
    let owners: Vec<Arc<str>> = kept.owned.keys().cloned().collect();
    kept.clear();
    for owner in &owners {
        inner.touch(owner);
        inner.tidy(owner);
    }
}

/// Where an object is and what it is, if it carries an owner label.
fn sight<T: kube::Resource + serde::Serialize>(obj: &T) -> Option<(Place, Sight)> {
    let meta = obj.meta();
    let owner = meta.labels.as_ref()?.get(OWNER_LABEL)?;
    let json = serde_json::to_value(obj).ok()?;
    let place = (meta.namespace.clone(), meta.name.clone()?);
    Some((
        place,
        Sight {
            owner: Arc::from(owner.as_str()),
            print: fingerprint(&json, owner),
        },
    ))
}

/// An object that is gone, as the watch's mapper needs it: its place and its owner.
fn stand_in<T: kube::Resource<DynamicType = ()> + Default>(place: &Place, owner: &str) -> T {
    let mut obj = T::default();
    let meta = obj.meta_mut();
    meta.namespace.clone_from(&place.0);
    meta.name = Some(place.1.clone());
    meta.labels = Some([(OWNER_LABEL.to_owned(), owner.to_owned())].into());
    obj
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::rbac::v1::Role;

    use super::*;

    fn role(name: &str, owner: &str) -> Role {
        let mut r = Role::default();
        r.metadata.name = Some(name.into());
        r.metadata.namespace = Some("team".into());
        r.metadata.labels = Some([(OWNER_LABEL.to_owned(), owner.to_owned())].into());
        r
    }

    #[test]
    fn a_kind_is_trusted_once_listed_and_a_relist_reports_what_went() {
        let seen = Seen::default();
        seen.watching(Kind::Role);
        let place: Place = (Some("team".into()), "a".into());
        let print = fingerprint(&serde_json::to_value(role("a", "u-1")).unwrap(), "u-1");
        assert!(seen.owned(Kind::Role, "u-1").is_none(), "not listed yet");
        seen.observe(Kind::Role, Event::<Role>::Init);
        seen.observe(Kind::Role, Event::InitApply(role("a", "u-1")));
        seen.observe(Kind::Role, Event::InitApply(role("b", "u-1")));
        assert!(
            !seen.holds(Kind::Role, &place, "u-1", print),
            "still listing"
        );
        assert!(seen.observe(Kind::Role, Event::<Role>::InitDone).is_empty());
        assert!(seen.holds(Kind::Role, &place, "u-1", print));
        assert!(
            !seen.holds(Kind::Role, &place, "u-2", print),
            "another owner's"
        );
        assert_eq!(seen.owned(Kind::Role, "u-1").unwrap().len(), 2);
        assert!(
            seen.owned(Kind::RoleBinding, "u-1").is_none(),
            "never watched"
        );

        seen.observe(Kind::Role, Event::Delete(role("b", "u-1")));
        assert_eq!(seen.owned(Kind::Role, "u-1").unwrap(), vec![place.clone()]);
        // Taken over by another owner's label: no longer u-1's, which is told.
        let touched = seen.observe(Kind::Role, Event::Apply(role("a", "u-2")));
        let owners: Vec<_> = touched
            .iter()
            .map(|r| r.metadata.labels.as_ref().unwrap()[OWNER_LABEL].as_str())
            .collect();
        assert_eq!(
            owners,
            ["u-1", "u-2"],
            "a stand-in for the previous owner first"
        );
        assert!(seen.owned(Kind::Role, "u-1").unwrap().is_empty());
        assert_eq!(seen.owned(Kind::Role, "u-2").unwrap(), vec![place.clone()]);

        // The watch lists again after an error; "a" went meanwhile.
        seen.observe(Kind::Role, Event::<Role>::Init);
        assert!(seen.owned(Kind::Role, "u-2").is_none(), "listing again");
        seen.observe(Kind::Role, Event::InitApply(role("c", "u-3")));
        let gone = seen.observe(Kind::Role, Event::<Role>::InitDone);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].metadata.name.as_deref(), Some("a"));
        assert_eq!(
            gone[0].metadata.labels.as_ref().unwrap()[OWNER_LABEL],
            "u-2"
        );
        assert!(seen.owned(Kind::Role, "u-2").unwrap().is_empty());

        // Again; "c" was relabelled to u-4 meanwhile: u-3 is told it lost it.
        let before = seen.last_change("u-3");
        seen.observe(Kind::Role, Event::<Role>::Init);
        seen.observe(Kind::Role, Event::InitApply(role("c", "u-4")));
        let lost = seen.observe(Kind::Role, Event::<Role>::InitDone);
        let owners: Vec<_> = lost
            .iter()
            .map(|r| r.metadata.labels.as_ref().unwrap()[OWNER_LABEL].as_str())
            .collect();
        assert_eq!(owners, ["u-3"]);
        assert_ne!(seen.last_change("u-3"), before);
        assert_eq!(seen.owned(Kind::Role, "u-4").unwrap().len(), 1);
    }

    /// Attack round: a tenant labelling a flood of objects as generated makes the
    /// kind untrusted (starts ask the API server), not the store unbounded.
    #[test]
    fn a_flood_of_labelled_objects_is_not_kept() {
        let seen = Seen {
            max_objects: 2,
            ..Seen::default()
        };
        seen.watching(Kind::Role);
        seen.observe(Kind::Role, Event::<Role>::Init);
        for name in ["a", "b", "c"] {
            seen.observe(Kind::Role, Event::InitApply(role(name, "u-1")));
        }
        seen.observe(Kind::Role, Event::<Role>::InitDone);
        assert!(
            seen.owned(Kind::Role, "u-1").is_none(),
            "too many: untrusted"
        );
        assert!(
            seen.lock().touched.is_empty(),
            "no owner's number left behind"
        );
        // Starts do not wait for a kind that overflowed.
        let waited = std::time::Instant::now();
        futures::executor::block_on(seen.settle());
        assert!(waited.elapsed() < Duration::from_secs(1));
        // A later list that fits is trusted again; growing past the bound is not.
        seen.observe(Kind::Role, Event::<Role>::Init);
        seen.observe(Kind::Role, Event::InitApply(role("a", "u-1")));
        seen.observe(Kind::Role, Event::<Role>::InitDone);
        assert_eq!(seen.owned(Kind::Role, "u-1").unwrap().len(), 1);
        seen.observe(Kind::Role, Event::Apply(role("b", "u-1")));
        let before = seen.last_change("u-1");
        assert!(before.is_some());
        seen.observe(Kind::Role, Event::Apply(role("c", "u-1")));
        assert!(seen.owned(Kind::Role, "u-1").is_none());
        assert!(seen.lock().kinds[&Kind::Role].objects.is_empty());
        assert_ne!(
            seen.last_change("u-1"),
            before,
            "a start that compared against the kept objects looks again"
        );
        assert!(seen.lock().touched.is_empty());
    }

    #[test]
    fn a_change_is_counted_for_its_owner_and_an_unchanged_object_is_not() {
        let seen = Seen::default();
        seen.watching(Kind::Role);
        seen.observe(Kind::Role, Event::<Role>::Init);
        seen.observe(Kind::Role, Event::<Role>::InitDone);
        assert_eq!(seen.last_change("u-1"), None);
        seen.observe(Kind::Role, Event::Apply(role("a", "u-1")));
        let first = seen.last_change("u-1");
        assert!(first.is_some());
        seen.observe(Kind::Role, Event::Apply(role("a", "u-1")));
        assert_eq!(seen.last_change("u-1"), first, "the same object again");
        let mut edited = role("a", "u-1");
        edited.rules = Some(vec![k8s_openapi::api::rbac::v1::PolicyRule::default()]);
        seen.observe(Kind::Role, Event::Apply(edited));
        let second = seen.last_change("u-1");
        assert!(second > first);
        seen.observe(Kind::Role, Event::Apply(role("b", "u-2")));
        assert_eq!(seen.last_change("u-1"), second, "another owner's change");
        seen.observe(Kind::Role, Event::Delete(role("a", "u-1")));
        assert_eq!(
            seen.last_change("u-1"),
            None,
            "nothing of it kept: forgotten"
        );
        seen.observe(Kind::Role, Event::Apply(role("a", "u-1")));
        assert!(
            seen.last_change("u-1") > second,
            "a number never used before"
        );
    }

    #[tokio::test]
    async fn settling_waits_for_a_list_and_no_longer_than_its_bound() {
        let bound = Duration::from_millis(300);
        let seen = Arc::new(Seen {
            settle: bound,
            ..Seen::default()
        });
        seen.settle().await;
        seen.watching(Kind::Role);
        let waiter = tokio::spawn({
            let seen = seen.clone();
            async move { seen.settle().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        seen.observe(Kind::Role, Event::<Role>::Init);
        seen.observe(Kind::Role, Event::<Role>::InitDone);
        waiter.await.unwrap();
        // A watch that never lists holds a start up for its bound, and no longer.
        seen.watching(Kind::RoleBinding);
        let start = Instant::now();
        seen.settle().await;
        assert!(start.elapsed() >= bound, "{:?}", start.elapsed());
        let again = Instant::now();
        seen.settle().await;
        assert!(
            again.elapsed() < bound,
            "a second start does not wait again"
        );
    }
}
