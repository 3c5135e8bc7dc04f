//! Which member of a pool gets the next thread. Members that may have a job wait their
//! turn in a ready line (a queue's waker puts its member there), delayed work waits on a
//! timer, and a member whose group is at its share waits with its group until one of
//! the group's jobs ends. Finding a job so costs the same with ten members as with ten
//! thousand: an operator hosting thousands of mostly idle controllers must not ask each
//! of them for work whenever one has some (it once spent three quarters of its CPU so).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{IDLE_WAIT, State, group_limit};

/// How often every member not in line is asked whether it has work: what a member
/// gains without its waker being called (leadership won, a lease renewed) waits at
/// most this long, as it did when every member was asked on every turn.
const SWEEP: Duration = IDLE_WAIT;

/// A job for a pool thread.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The pool's lines and timers.
#[derive(Default)]
pub(super) struct Schedule {
    /// Members that may have a job, in turn order; each at most once while it is
    /// `queued` (an entry of a member that left or was unqueued is skipped).
    ready: VecDeque<u64>,
    /// When a member's delayed work is due; an entry that is not the member's
    /// `timer` any more is skipped.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    groups: HashMap<Arc<str>, Group>,
    /// Groups with a job running or a member in line: what shares are counted over.
    active: usize,
    /// When every member was last asked ([`SWEEP`]).
    swept: Option<Instant>,
    /// The pool's most threads, which shares are of.
    cap: usize,
}

/// One tenant's counts.
#[derive(Default)]
struct Group {
    /// Its jobs on threads that serve the pool (lost threads are not counted).
    running: usize,
    /// Its members in line, in the ready line or in `waiting`.
    queued: usize,
    /// Members passed over while the group was at its share, in their order.
    waiting: VecDeque<u64>,
}

impl Group {
    fn active(&self) -> bool {
        self.running > 0 || self.queued > 0
    }
}

impl Schedule {
    /// A schedule for a pool of at most `cap` threads.
    pub(super) fn new(cap: usize) -> Self {
        Schedule {
            cap,
            ..Schedule::default()
        }
    }

    /// Changes `group`'s counts. A job fewer lets as many of its waiting members back
    /// in line as it has room for, and a group fewer raises every share, so then each
    /// group's waiting members are let in up to its new room. Never more: a namespace
    /// of thousands of waiting controllers would otherwise cost a pass over all of them
    /// at every job's end.
    fn count(&mut self, group: &Arc<str>, running: isize, queued: isize) {
        let g = self.groups.entry(group.clone()).or_default();
        let was = g.active();
        g.running = g.running.saturating_add_signed(running);
        g.queued = g.queued.saturating_add_signed(queued);
        let is = g.active();
        match (was, is) {
            (false, true) => self.active += 1,
            (true, false) => {
                self.active -= 1;
                self.groups.remove(group);
                let waiting: Vec<Arc<str>> = self
                    .groups
                    .iter()
                    .filter(|(_, g)| !g.waiting.is_empty())
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in &waiting {
                    self.release(name);
                }
                return;
            }
            _ => {}
        }
        if running < 0 {
            self.release(group);
        }
    }

    /// Lets `group`'s first waiting members back in line, as many as it has room for.
    fn release(&mut self, group: &Arc<str>) {
        let limit = group_limit(self.cap, self.active);
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let room = limit.saturating_sub(g.running).min(g.waiting.len());
        self.ready.extend(g.waiting.drain(..room));
    }

    /// Whether `group` holds its share of the pool's `cap` threads now.
    fn full(&self, group: &Arc<str>) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| g.running >= group_limit(self.cap, self.active))
    }

    /// How long a thread with nothing to do sleeps: until the earliest timer or the
    /// next sweep, and never longer than [`IDLE_WAIT`].
    pub(super) fn wait_for(&self, now: Instant) -> Duration {
        let sweep = self.swept.map_or(Duration::ZERO, |t| {
            (t + SWEEP).saturating_duration_since(now)
        });
        let timer = self
            .timers
            .peek()
            .map(|Reverse((at, _))| at.saturating_duration_since(now));
        timer
            .map_or(sweep, |t| t.min(sweep))
            .clamp(Duration::from_millis(1), IDLE_WAIT)
    }

    /// Whether a member waits in the ready line (another thread may take it).
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

impl State {
    /// Puts member `id` in line, unless it is already or takes no more jobs; true when
    /// it was put in line.
    pub(super) fn enqueue(&mut self, id: u64) -> bool {
        let Some(m) = self.members.get_mut(&id) else {
            return false;
        };
        if m.queued || m.leaving || m.held.is_some() {
            return false;
        }
        m.queued = true;
        let group = m.group.clone();
        self.schedule.ready.push_back(id);
        if let Some(g) = group {
            self.schedule.count(&g, 0, 1);
        }
        true
    }

    /// Takes member `id` out of line.
    fn unqueue(&mut self, id: u64) {
        let Some(m) = self.members.get_mut(&id) else {
            return;
        };
        if !std::mem::take(&mut m.queued) {
            return;
        }
        if let Some(g) = m.group.clone() {
            self.schedule.count(&g, 0, -1);
        }
    }

    /// Forgets member `id`, which is gone from `members`: it is out of line.
    pub(super) fn removed(&mut self, group: Option<&Arc<str>>, queued: bool) {
        if let (Some(g), true) = (group, queued) {
            self.schedule.count(g, 0, -1);
        }
    }

    /// A job of member `id` started (`running` 1), or one ended or lost its thread
    /// (`running` -1): its group's count of running jobs.
    pub(super) fn ran(&mut self, group: Option<&Arc<str>>, running: isize) {
        if let Some(g) = group {
            self.schedule.count(g, running, 0);
        }
    }

    /// The next job: the first member in line that may take one and has one.
    pub(super) fn pick(&mut self, now: Instant) -> Option<(u64, Job)> {
        self.fire_timers(now);
        self.sweep(now);
        for _ in 0..self.schedule.ready.len() {
            let id = self.schedule.ready.pop_front()?;
            let Some(m) = self.members.get(&id) else {
                continue;
            };
            if !m.queued {
                continue;
            }
            if m.leaving || m.held.is_some() || m.in_flight >= m.limit {
                // Back in line when one of its jobs ends (or never, if it takes no more).
                self.unqueue(id);
                continue;
            }
            let group = m.group.clone();
            if let Some(g) = &group
                && self.schedule.full(g)
            {
                if let Some(waiting) = self.schedule.groups.get_mut(g) {
                    waiting.waiting.push_back(id);
                }
                continue;
            }
            let source = m.source.clone();
            if let Some(job) = source.take() {
                if let Some(m) = self.members.get_mut(&id) {
                    m.in_flight += 1;
                }
                self.ran(group.as_ref(), 1);
                // It may have more: after the others in line.
                self.schedule.ready.push_back(id);
                return Some((id, job));
            }
            self.unqueue(id);
            if let Some(due) = source.next_due_in() {
                self.set_timer(id, now + due.max(Duration::from_millis(1)));
            }
        }
        None
    }

    /// Remembers when member `id` has work due, if sooner than what it had.
    fn set_timer(&mut self, id: u64, at: Instant) {
        let Some(m) = self.members.get_mut(&id) else {
            return;
        };
        if m.timer.is_some_and(|t| t <= at) {
            return;
        }
        m.timer = Some(at);
        self.schedule.timers.push(Reverse((at, id)));
        // Entries a sooner time replaced stay until their own time: rebuilt when they
        // outnumber the live ones, so requeues that keep moving sooner stay bounded.
        if self.schedule.timers.len() > 2 * self.members.len() + 64 {
            self.schedule.timers = self
                .members
                .iter()
                .filter_map(|(id, m)| m.timer.map(|at| Reverse((at, *id))))
                .collect();
        }
    }

    /// Puts in line the members whose timers are due.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((at, id))) = self.schedule.timers.peek().copied() {
            if at > now {
                break;
            }
            self.schedule.timers.pop();
            let Some(m) = self.members.get_mut(&id) else {
                continue;
            };
            if m.timer != Some(at) {
                continue;
            }
            m.timer = None;
            self.enqueue(id);
        }
    }

    /// Once every [`SWEEP`], asks each member out of line whether it has work.
    fn sweep(&mut self, now: Instant) {
        if self
            .schedule
            .swept
            .is_some_and(|t| now.saturating_duration_since(t) < SWEEP)
        {
            return;
        }
        self.schedule.swept = Some(now);
        // Waiting members are let back in a few at a time; one that left meanwhile
        // may have taken a place, so all are looked at again here.
        for g in self.schedule.groups.values_mut() {
            self.schedule.ready.extend(g.waiting.drain(..));
        }
        let idle: Vec<(u64, Arc<dyn super::Source>)> = self
            .members
            .iter()
            .filter(|(_, m)| !m.queued && !m.leaving && m.held.is_none())
            .map(|(id, m)| (*id, m.source.clone()))
            .collect();
        for (id, source) in idle {
            match source.next_due_in() {
                Some(d) if d.is_zero() => {
                    self.enqueue(id);
                }
                Some(d) => self.set_timer(id, now + d),
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_fewer_lets_waiting_members_back_in_line_up_to_the_new_share() {
        let mut s = Schedule::new(6);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        s.count(&a, 2, 1);
        s.count(&b, 0, 1);
        assert_eq!(s.active, 2);
        assert!(s.full(&a), "two groups: a share of 2");
        s.groups.get_mut(&a).unwrap().waiting.extend([7, 8, 9]);
        // b leaves the line: a alone may hold 3, one more than it runs.
        s.count(&b, 0, -1);
        assert_eq!(s.active, 1);
        assert!(!s.full(&a));
        assert_eq!(s.ready, [7]);
        assert!(!s.groups.contains_key(&b), "an idle group is forgotten");
    }

    /// Attack round (issue 28): a namespace of thousands of waiting controllers costs
    /// a job's end only the members it has room for.
    #[test]
    fn a_job_ending_lets_in_only_as_many_as_its_group_has_room_for() {
        let mut s = Schedule::new(6);
        let a: Arc<str> = Arc::from("a");
        s.count(&a, 3, 1);
        s.groups.get_mut(&a).unwrap().waiting.extend(0..5000);
        s.count(&a, -1, 0);
        assert_eq!(s.ready, [0], "alone, a share of 3: room for one");
        assert_eq!(s.groups[&a].waiting.len(), 4999);
        assert_eq!(s.active, 1, "still in line");
    }

    #[test]
    fn a_thread_sleeps_until_the_earliest_timer_or_the_next_sweep() {
        let mut s = Schedule::default();
        let now = Instant::now();
        assert_eq!(s.wait_for(now), Duration::from_millis(1), "never swept");
        s.swept = Some(now);
        assert_eq!(s.wait_for(now), SWEEP);
        s.timers.push(Reverse((now + Duration::from_millis(30), 1)));
        assert_eq!(s.wait_for(now), Duration::from_millis(30));
    }
}
