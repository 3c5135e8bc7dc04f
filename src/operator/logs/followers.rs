//! How many logs are followed at once: each follower holds one of the API server's
//! connections to the operator for as long as it follows, and the API server reaches
//! every replica from the same address, so without a cap one user could hold them all
//! (and with them discovery, which namespace deletion waits for).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Logs one user may follow at once.
pub const PER_USER: usize = 8;

/// Logs followed at once in all: well under the connections the server takes from one
/// peer (`logs::MAX_PER_PEER`), which leaves the rest for discovery and plain reads.
pub const IN_ALL: usize = 128;

/// The followers now, by user.
#[derive(Default)]
pub struct Followers {
    by_user: Mutex<HashMap<String, usize>>,
}

/// One follower's place; given back when dropped (when its stream ends).
pub struct Slot {
    followers: Arc<Followers>,
    user: String,
}

impl Followers {
    /// A place for `user` to follow a log, or why not.
    ///
    /// # Errors
    /// The message for a 429: the user's or everyone's limit is reached.
    pub fn enter(self: &Arc<Self>, user: &str) -> Result<Slot, String> {
        let mut by_user = self.by_user.lock().unwrap_or_else(PoisonError::into_inner);
        let all: usize = by_user.values().sum();
        let mine = by_user.get(user).copied().unwrap_or(0);
        if mine >= PER_USER {
            return Err(format!(
                "{user} follows {PER_USER} logs already, the most one user may at once"
            ));
        }
        if all >= IN_ALL {
            return Err(format!(
                "{IN_ALL} logs are followed already, the most this operator serves at once; try again later"
            ));
        }
        *by_user.entry(user.to_owned()).or_default() += 1;
        Ok(Slot {
            followers: Arc::clone(self),
            user: user.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_user = self
            .followers
            .by_user
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = by_user.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                by_user.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_cannot_hold_every_place() {
        let f = Arc::new(Followers::default());
        let held: Vec<Slot> = (0..PER_USER).map(|_| f.enter("carol").unwrap()).collect();
        let e = f.enter("carol").err().unwrap();
        assert!(e.contains("carol follows 8 logs already"), "{e}");
        assert!(f.enter("bob").is_ok(), "others still may");
        drop(held);
        assert!(
            f.enter("carol").is_ok(),
            "places come back when streams end"
        );
        let many: Vec<Slot> = (0..IN_ALL)
            .filter_map(|i| f.enter(&format!("u{i}")).ok())
            .collect();
        assert_eq!(many.len(), IN_ALL);
        assert!(
            f.enter("dave")
                .err()
                .unwrap()
                .contains("the most this operator serves")
        );
    }
}
