//! Threads a pool has lost to jobs that never end, and what they hold: a thread parked
//! for good by a script's memory overrun, or one stuck in a single builtin well past
//! its call's deadline (a builtin that does not look at it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::{Source, State};
use crate::script::memory;

/// Threads one group (a namespace) may lose before all its members are held. Each
/// keeps its memory (up to twice the script budget) until the process restarts, or a
/// core busy at the lowest priority, so this bounds what one tenant can take that way.
pub const GROUP_LIMIT: usize = 2;

/// How far past the deadline of the script call it runs a thread must be to count as
/// stuck (the call's own deadline, so a job of many calls is never judged as one).
pub const MARGIN: Duration = Duration::from_secs(30);

/// Why a member gets no more jobs, for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// One of its own handlers asked for more memory at once than its whole budget.
    Parked,
    /// One of its own handlers ran past its deadline inside one builtin call.
    Stuck,
    /// Its group's controllers have lost this many threads ([`GROUP_LIMIT`] or more).
    Group { lost: usize },
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Parked => f.write_str(
                "a handler asked for more memory than its limit allows (one block larger than the whole limit, or more after holding 8 times the limit); its thread is held until the operator restarts, and this controller runs no more handlers until it is restarted",
            ),
            Held::Stuck => write!(
                f,
                "a handler is still running {}s past its deadline, inside one call that does not stop at it; its thread is given up (at the lowest priority), and this controller runs no more handlers until it is restarted",
                MARGIN.as_secs()
            ),
            Held::Group { lost } => write!(
                f,
                "handlers of this namespace's controllers were parked for their memory or stuck past their budget {lost} times; their threads are held until the operator restarts, and no controller of this namespace runs handlers until then",
            ),
        }
    }
}

/// The pool's record of its lost threads.
#[derive(Default)]
pub(super) struct Parked {
    /// Pool thread numbers lost (parked, or stuck).
    threads: HashSet<usize>,
    /// Lost threads per group, those of members gone since included.
    groups: HashMap<Arc<str>, usize>,
    /// `memory::parked()` at the last look: no new parked thread while it is unchanged.
    seen: usize,
    /// A member may be held and not told yet (one that joined a held group).
    pub(super) untold: bool,
}

impl Parked {
    /// Pool threads lost now.
    pub(super) fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Whether `group` has lost too many threads to run more jobs.
    pub(super) fn group_held(&self, group: &str) -> Option<Held> {
        self.groups
            .get(group)
            .filter(|n| **n >= GROUP_LIMIT)
            .map(|&lost| Held::Group { lost })
    }

    /// Whether thread `number` is lost.
    pub(super) fn is_lost(&self, number: usize) -> bool {
        self.threads.contains(&number)
    }

    /// Whether thread `number`, whose job just ended, was counted lost (a stuck job
    /// that ended after all); it is not any longer.
    pub(super) fn found(&mut self, number: usize) -> bool {
        self.threads.remove(&number)
    }
}

/// Finds the pool's newly lost threads (parked ones; stuck ones too when `stuck` gives
/// the margin, a scan of every running job) and holds their members, and groups over
/// [`GROUP_LIMIT`]; returns the members not yet told, to tell outside the lock.
pub(super) fn look(state: &mut State, stuck: Option<Duration>) -> Vec<(Arc<dyn Source>, Held)> {
    let State {
        members,
        started,
        parked,
        ..
    } = state;
    let now = memory::parked();
    let new_parked = now != parked.seen;
    parked.seen = now;
    let mut changed = false;
    // Groups whose threads were lost: they hold fewer of the pool's.
    let mut lost_from: Vec<Arc<str>> = Vec::new();
    for (number, busy) in started.iter() {
        if parked.threads.contains(number) {
            continue;
        }
        let parked_here = new_parked && memory::is_parked(busy.thread.tag);
        let stuck_here = stuck.is_some_and(|margin| {
            busy.thread
                .watch
                .overdue()
                .is_some_and(|late| late > margin)
        });
        if !parked_here && !stuck_here {
            continue;
        }
        let Some(m) = members.get_mut(&busy.member) else {
            continue;
        };
        // Only members of a group (the operator's hosted controllers) are held for it.
        if !parked_here && m.group.is_none() {
            continue;
        }
        let why = if parked_here {
            // Recorded here for good: its slot in the allocator's table is free again.
            memory::forget_parked(busy.thread.tag);
            Held::Parked
        } else {
            crate::script::priority::lowest(busy.thread.tid);
            Held::Stuck
        };
        parked.threads.insert(*number);
        changed = true;
        m.lost += 1;
        m.held.get_or_insert(why);
        if let Some(g) = &m.group {
            *parked.groups.entry(g.clone()).or_default() += 1;
            lost_from.push(g.clone());
        }
    }
    if !changed && !parked.untold {
        return Vec::new();
    }
    parked.untold = false;
    if changed {
        for m in members.values_mut().filter(|m| m.held.is_none()) {
            m.held = m.group.as_ref().and_then(|g| parked.group_held(g));
        }
    }
    let tell = members
        .values_mut()
        .filter(|m| m.held.is_some() && !m.told)
        .filter_map(|m| {
            m.told = true;
            Some((m.source.clone(), m.held?))
        })
        .collect();
    for g in &lost_from {
        state.ran(Some(g), -1);
    }
    tell
}

/// Tells each member why it is held.
pub(super) fn tell(members: Vec<(Arc<dyn Source>, Held)>) {
    for (source, why) in members {
        source.held(why);
    }
}
