//! The author reviews a start asks, answered "allowed" a moment ago: an operator that
//! restarts starts thousands of controllers by a few authors, each needing the same few
//! permissions, and asked the API server the same SubjectAccessReviews thousands of
//! times (30 000 for 5000 controllers, which then waited on it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::approval::Author;
use super::authority::{Permission, Result, first_denied};

/// How long an "allowed" answer stands in for another review. A permission taken away
/// from the author within it is seen by the next start after it, and by every running
/// controller's own re-check (`--recheck-period`), which never uses these answers and,
/// when it finds the author denied, forgets every answer about them
/// ([`Reviews::forget`]) so that the decision it leads to asks again.
const ALLOWED_FOR: Duration = Duration::from_secs(10);

/// The most answers kept: when full (after dropping the expired), new answers are not
/// kept, so a flood of distinct ones costs reviews, not memory.
const MAX_ANSWERS: usize = 4096;

/// The permission's attributes, as reviewed (not why it is needed).
type Attributes = [String; 6];

/// Per author, when each permission was last allowed.
type Answers = HashMap<Author, HashMap<Attributes, Instant>>;

/// "Allowed" answers of author reviews, for [`ALLOWED_FOR`]. Keyed by author first: a
/// lookup does not copy the author, and forgetting one is one removal.
#[derive(Default)]
pub struct Reviews {
    allowed: Mutex<Answers>,
}

fn attributes(p: &Permission) -> Attributes {
    [
        p.verb.clone(),
        p.group.clone(),
        p.resource.clone(),
        p.subresource.clone(),
        p.namespace.clone(),
        p.name.clone(),
    ]
}

impl Reviews {
    /// [`first_denied`], asking only about the permissions not allowed a moment ago.
    /// Denials are never kept: a permission granted since is seen at once.
    ///
    /// # Errors
    /// As [`first_denied`].
    pub async fn first_denied(
        &self,
        client: &kube::Client,
        author: &Author,
        wanted: &[Permission],
    ) -> Result<Option<String>> {
        let unknown: Vec<Permission> = {
            let allowed = self.lock();
            let theirs = allowed.get(author);
            wanted
                .iter()
                .filter(|p| {
                    theirs
                        .and_then(|t| t.get(&attributes(p)))
                        .is_none_or(|at| at.elapsed() >= ALLOWED_FOR)
                })
                .cloned()
                .collect()
        };
        if unknown.is_empty() {
            return Ok(None);
        }
        // As old as the first review: an answer is never taken for newer than it is.
        let asked = Instant::now();
        let denied = first_denied(client, author, &unknown).await?;
        if denied.is_none() {
            self.remember(author, &unknown, asked);
        } else {
            self.forget(author);
        }
        Ok(denied)
    }

    /// Forgets every answer about `author`: a review just denied them something.
    pub fn forget(&self, author: &Author) {
        self.lock().remove(author);
    }

    fn remember(&self, author: &Author, allowed: &[Permission], asked: Instant) {
        let mut answers = self.lock();
        let now = Instant::now();
        let mut kept = 0;
        answers.retain(|_, theirs| {
            theirs.retain(|_, at| now.duration_since(*at) < ALLOWED_FOR);
            kept += theirs.len();
            !theirs.is_empty()
        });
        for p in allowed {
            if kept >= MAX_ANSWERS {
                break;
            }
            let theirs = answers.entry(author.clone()).or_default();
            if theirs.insert(attributes(p), asked).is_none() {
                kept += 1;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.allowed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permission(verb: &str, why: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: "apps".into(),
            resource: "deployments".into(),
            subresource: String::new(),
            namespace: "team".into(),
            name: String::new(),
            why: why.into(),
        }
    }

    fn known(r: &Reviews, author: &Author, p: &Permission) -> bool {
        r.lock()
            .get(author)
            .and_then(|theirs| theirs.get(&attributes(p)))
            .is_some_and(|at| at.elapsed() < ALLOWED_FOR)
    }

    #[test]
    fn an_answer_is_for_one_author_and_one_permission_whatever_needs_it() {
        let r = Reviews::default();
        let alice = Author {
            username: "alice".into(),
            ..Author::default()
        };
        let mut alice_in_admins = alice.clone();
        alice_in_admins.groups = vec!["admins".into()];
        r.remember(&alice, &[permission("patch", "a.star:3")], Instant::now());
        assert!(known(&r, &alice, &permission("patch", "b.star:9")));
        assert!(!known(&r, &alice, &permission("delete", "a.star:3")));
        assert!(
            !known(&r, &alice_in_admins, &permission("patch", "a.star:3")),
            "other groups are another identity"
        );
    }

    #[test]
    fn answers_are_bounded() {
        let r = Reviews::default();
        let author = Author::default();
        let many: Vec<Permission> = (0..MAX_ANSWERS + 10)
            .map(|i| permission(&format!("verb{i}"), ""))
            .collect();
        r.remember(&author, &many, Instant::now());
        assert_eq!(r.lock()[&author].len(), MAX_ANSWERS);
        // Across authors too.
        let other = Author {
            username: "other".into(),
            ..Author::default()
        };
        r.remember(&other, &many[..5], Instant::now());
        let total: usize = r.lock().values().map(HashMap::len).sum();
        assert_eq!(total, MAX_ANSWERS);
    }

    /// A re-check that finds the author denied forgets what was allowed, so that the
    /// new decision it leads to asks the API server again (attack round, issue 28).
    #[test]
    fn a_denial_forgets_the_authors_answers_and_only_theirs() {
        let r = Reviews::default();
        let (alice, bob) = (
            Author {
                username: "alice".into(),
                ..Author::default()
            },
            Author {
                username: "bob".into(),
                ..Author::default()
            },
        );
        let patch = permission("patch", "");
        r.remember(&alice, std::slice::from_ref(&patch), Instant::now());
        r.remember(&bob, std::slice::from_ref(&patch), Instant::now());
        r.forget(&alice);
        assert!(!known(&r, &alice, &patch));
        assert!(known(&r, &bob, &patch));
    }

    #[test]
    fn an_answer_is_as_old_as_its_review() {
        let r = Reviews::default();
        let author = Author::default();
        let long_ago = Instant::now()
            .checked_sub(ALLOWED_FOR)
            .expect("a monotonic clock this far along");
        r.remember(&author, &[permission("get", "")], long_ago);
        assert!(!known(&r, &author, &permission("get", "")));
    }
}
