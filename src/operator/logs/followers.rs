//! How many logs are followed at once: each follower holds one of the API server's
//! connections to the operator for as long as it follows, and the API server reaches
//! every replica from the same address, so without a cap one user (or one tenant with
//! many identities) could hold them all, and with them discovery, which namespace
//! deletion waits for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Logs one user may follow at once.
pub const PER_USER: usize = 8;

/// Logs of one namespace's controllers followed at once: a tenant's many identities
/// (ServiceAccounts it makes) cannot take every place either.
pub const PER_NAMESPACE: usize = 32;

/// Logs followed at once in all: well under the connections the server takes from one
/// peer (`logs::MAX_PER_PEER`), which leaves the rest for discovery and plain reads.
pub const IN_ALL: usize = 128;

/// The followers now, by user and by namespace.
#[derive(Default)]
pub struct Followers {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    by_user: HashMap<String, usize>,
    by_namespace: HashMap<String, usize>,
    all: usize,
}

/// One follower's place; given back when dropped (when its stream ends).
pub struct Slot {
    followers: Arc<Followers>,
    user: String,
    namespace: String,
}

/// Counts one more (or one fewer) under `key`.
fn count(map: &mut HashMap<String, usize>, key: &str, up: bool) {
    if up {
        *map.entry(key.to_owned()).or_default() += 1;
    } else if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Followers {
    /// A place for `user` to follow a log of a controller in `namespace` ("" for a
    /// ClusterStarlarkController), or why not.
    ///
    /// # Errors
    /// The message for a 429: the user's, the namespace's or everyone's limit is
    /// reached.
    pub fn enter(self: &Arc<Self>, user: &str, namespace: &str) -> Result<Slot, String> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.by_user.get(user).copied().unwrap_or(0) >= PER_USER {
            return Err(format!(
                "{user} follows {PER_USER} logs already, the most one user may at once"
            ));
        }
        if counts.by_namespace.get(namespace).copied().unwrap_or(0) >= PER_NAMESPACE {
            return Err(format!(
                "{PER_NAMESPACE} logs of this namespace's controllers are followed already, the most one namespace may at once"
            ));
        }
        if counts.all >= IN_ALL {
            return Err(format!(
                "{IN_ALL} logs are followed already, the most this operator serves at once; try again later"
            ));
        }
        count(&mut counts.by_user, user, true);
        count(&mut counts.by_namespace, namespace, true);
        counts.all += 1;
        Ok(Slot {
            followers: Arc::clone(self),
            user: user.to_owned(),
            namespace: namespace.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .followers
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        count(&mut counts.by_user, &self.user, false);
        count(&mut counts.by_namespace, &self.namespace, false);
        counts.all -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_user_or_namespace_holds_every_place() {
        let f = Arc::new(Followers::default());
        let held: Vec<Slot> = (0..PER_USER)
            .map(|_| f.enter("carol", "t2").unwrap())
            .collect();
        let e = f.enter("carol", "t2").err().unwrap();
        assert!(e.contains("carol follows 8 logs already"), "{e}");
        assert!(f.enter("bob", "t2").is_ok(), "others still may");
        drop(held);
        assert!(
            f.enter("carol", "t2").is_ok(),
            "places come back when streams end"
        );
        // Many identities of one tenant: the namespace's cap.
        let many: Vec<Slot> = (0..PER_NAMESPACE)
            .map(|i| f.enter(&format!("sa{i}"), "t1").unwrap())
            .collect();
        let e = f.enter("sa-more", "t1").err().unwrap();
        assert!(e.contains("this namespace's controllers"), "{e}");
        assert!(
            f.enter("carol", "t2").is_ok(),
            "another namespace still may"
        );
        // And the total.
        let rest: Vec<Slot> = (0..IN_ALL - PER_NAMESPACE)
            .map(|i| f.enter(&format!("u{i}"), &format!("n{}", i / 8)).unwrap())
            .collect();
        let e = f.enter("dave", "t3").err().unwrap();
        assert!(e.contains("the most this operator serves"), "{e}");
        drop((many, rest));
        assert!(f.enter("dave", "t3").is_ok());
    }
}
