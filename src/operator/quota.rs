//! The memory a namespace's hosted controllers keep between reconciles (their frozen
//! modules, and kite's own share per controller), bounded per namespace, so that one
//! tenant's controllers cannot fill the operator's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What kite itself keeps per hosted controller (queue, cache entries, status, and its
/// journal at its fullest), charged on top of its module: many small controllers count
/// too.
pub const OVERHEAD: usize = 256 * 1024 + crate::script::journal::MAX_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the controller keeps {} MiB (its script's values after the top level, kite's share, and the caches of what it watches), and namespace {namespace}'s other controllers keep {} MiB: over the operator's limit of {} MiB per namespace (--namespace-memory)",
        mib(*.wanted), mib(*.used), mib(*.limit)
    )]
    Charge {
        namespace: String,
        wanted: usize,
        used: usize,
        limit: usize,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn mib(bytes: usize) -> String {
    #[expect(
        clippy::cast_precision_loss,
        reason = "a message: one decimal is all it shows"
    )]
    let m = bytes as f64 / (1024.0 * 1024.0);
    format!("{m:.1}")
}

/// Each namespace's kept memory, against one limit.
#[derive(Debug)]
pub struct Quota {
    limit: usize,
    used: Mutex<HashMap<String, usize>>,
}

/// Memory charged to a namespace while a controller runs; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    quota: Arc<Quota>,
    namespace: String,
    bytes: usize,
}

impl Quota {
    /// A limit of `limit` bytes per namespace.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Quota {
            limit,
            used: Mutex::default(),
        })
    }

    /// Charges `bytes` (plus [`OVERHEAD`]) to `namespace` for as long as the returned
    /// [`Charge`] lives.
    ///
    /// # Errors
    /// [`Error::Charge`] when the namespace would keep more than the limit; nothing is
    /// charged then.
    pub fn charge(self: &Arc<Self>, namespace: &str, bytes: usize) -> Result<Charge> {
        let wanted = bytes.saturating_add(OVERHEAD);
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let now = used.get(namespace).copied().unwrap_or(0);
        if now.saturating_add(wanted) > self.limit {
            return Err(Error::Charge {
                namespace: namespace.to_owned(),
                wanted,
                used: now,
                limit: self.limit,
            });
        }
        *used.entry(namespace.to_owned()).or_default() = now + wanted;
        Ok(Charge {
            quota: self.clone(),
            namespace: namespace.to_owned(),
            bytes: wanted,
        })
    }

    /// What `namespace` keeps now.
    #[cfg(test)]
    pub fn used(&self, namespace: &str) -> usize {
        let used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.get(namespace).copied().unwrap_or(0)
    }
}

impl Charge {
    /// Makes the charge `bytes` (plus [`OVERHEAD`]): what the controller keeps now that
    /// its caches have grown or shrunk.
    ///
    /// # Errors
    /// [`Error::Charge`] when the namespace would keep more than the limit; the charge
    /// is left as it was then.
    pub fn resize(&mut self, bytes: usize) -> Result<()> {
        let wanted = bytes.saturating_add(OVERHEAD);
        let mut used = self
            .quota
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = used.get(&self.namespace).copied().unwrap_or(0);
        let others = now.saturating_sub(self.bytes);
        if wanted > self.bytes && others.saturating_add(wanted) > self.quota.limit {
            return Err(Error::Charge {
                namespace: self.namespace.clone(),
                wanted,
                used: others,
                limit: self.quota.limit,
            });
        }
        used.insert(self.namespace.clone(), others.saturating_add(wanted));
        self.bytes = wanted;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut used = self
            .quota
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = used.get_mut(&self.namespace) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                used.remove(&self.namespace);
            }
        }
    }
}

/// The memory limit of this process's cgroup (v2), when it has one.
fn cgroup_limit() -> Option<u64> {
    std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Says once, at start, when the worst case of running handlers (`threads` at
/// `script_memory` each) does not fit the container's memory limit: the first tenant to
/// use its whole budget would get the operator killed, and every tenant with it.
pub fn warn_if_oversized(threads: usize, script_memory: usize, namespace_memory: usize) {
    let Some(limit) = cgroup_limit() else {
        return;
    };
    let worst = (threads as u64).saturating_mul(script_memory as u64);
    if worst.saturating_add(namespace_memory as u64) > limit {
        tracing::warn!(
            threads,
            script_memory_mib = script_memory >> 20,
            namespace_memory_mib = namespace_memory >> 20,
            limit_mib = limit >> 20,
            "handlers at their whole --script-memory on every thread, with one namespace's --namespace-memory, would pass the container's memory limit: lower the two flags or raise the limit"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_keeps_no_more_than_its_limit_and_gets_it_back() {
        let quota = Quota::new(OVERHEAD * 10);
        let first = quota.charge("a", OVERHEAD * 4).unwrap();
        let second = quota.charge("a", OVERHEAD * 4).unwrap();
        let e = quota.charge("a", OVERHEAD).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "namespace a's other controllers keep {} MiB",
                mib(OVERHEAD * 10)
            )) && e.contains(&format!(
                "limit of {} MiB per namespace (--namespace-memory)",
                mib(OVERHEAD * 10)
            )),
            "{e}"
        );
        // Another namespace has its own.
        let other = quota.charge("b", OVERHEAD * 8).unwrap();
        drop(second);
        assert_eq!(quota.used("a"), OVERHEAD * 5);
        let third = quota.charge("a", OVERHEAD * 3).unwrap();
        drop((first, third, other));
        assert_eq!(quota.used("a") + quota.used("b"), 0);
    }

    #[test]
    fn a_charge_grows_only_within_the_limit_and_shrinks_freely() {
        let quota = Quota::new(OVERHEAD * 10);
        let mut grows = quota.charge("a", OVERHEAD).unwrap();
        let _other = quota.charge("a", OVERHEAD * 3).unwrap();
        grows.resize(OVERHEAD * 4).unwrap();
        assert_eq!(quota.used("a"), OVERHEAD * 9);
        let e = grows.resize(OVERHEAD * 6).unwrap_err().to_string();
        assert!(
            e.contains(&format!("other controllers keep {} MiB", mib(OVERHEAD * 4))),
            "{e}"
        );
        assert_eq!(
            quota.used("a"),
            OVERHEAD * 9,
            "a refused resize keeps the old charge"
        );
        grows.resize(0).unwrap();
        assert_eq!(quota.used("a"), OVERHEAD * 5);
        drop(grows);
        assert_eq!(quota.used("a"), OVERHEAD * 4);
    }
}
