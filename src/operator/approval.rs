//! The approval a controller resource carries: who wrote its spec, signed by the
//! operator, so that the operator runs only specs its admission check has seen.
//!
//! The admission webhook stamps the annotation [`ANNOTATION`] on every create and on
//! every change of the spec: the requesting user (name, uid, groups, extra) and an
//! HMAC-SHA256 over that user, the resource's kind, namespace and name, and its spec,
//! keyed by a Secret in the operator's namespace. A spec created while the webhook was
//! not installed has no approval; an edited annotation, or one copied from another
//! resource, does not verify. Either way the operator starts nothing.

use std::collections::BTreeMap;

use base64::Engine;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

/// The annotation holding the approval.
pub const ANNOTATION: &str = "starkite.io/approval";

/// Why an approval does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "no {ANNOTATION} annotation: the spec was not seen by the operator's admission webhook"
    )]
    Find,
    #[error("the {ANNOTATION} annotation is not an approval: {0}")]
    Decode(String),
    #[error(
        "the {ANNOTATION} annotation does not match this spec: it was edited, copied, or the spec changed without the webhook"
    )]
    Verify,
    /// Older than `--approval-max-age`.
    #[error(
        "the approval is {age_secs}s old, older than the operator's --approval-max-age of {max_secs}s"
    )]
    Expire { age_secs: u64, max_secs: u64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The user who wrote a spec, as the API server authenticated them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Author {
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What is signed: the resource and its spec.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub kind: &'a str,
    /// Empty for the cluster-scoped kind.
    pub namespace: &'a str,
    pub name: &'a str,
    pub spec: &'a Json,
    /// The script a `spec.scriptFrom` names, as read when approved: its content is
    /// pinned (by SHA-256), so a changed ConfigMap runs only once approved again.
    /// None for an inline script (the spec holds it) or a ConfigMap that was missing.
    pub script_from: Option<&'a str>,
}

#[derive(Serialize, Deserialize)]
struct Stamp {
    author: Author,
    /// When it was signed, in seconds since the Unix epoch (signed too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<u64>,
    mac: String,
}

/// The signing key, from the operator's Secret, and how long an approval holds.
pub struct Key {
    key: hmac::Key,
    max_age: Option<std::time::Duration>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Key {
    pub fn new(secret: &[u8]) -> Self {
        Key {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            max_age: None,
        }
    }

    /// Approvals older than `max_age` no longer verify ([`Error::Expire`]).
    #[must_use]
    pub fn with_max_age(mut self, max_age: Option<std::time::Duration>) -> Self {
        self.max_age = max_age;
        self
    }

    /// The annotation value approving `subject` as written by `author`.
    pub fn sign(&self, subject: Subject<'_>, author: &Author) -> String {
        self.sign_at(subject, author, now_secs())
    }

    fn sign_at(&self, subject: Subject<'_>, author: &Author, at: u64) -> String {
        let tag = hmac::sign(&self.key, &message(subject, author, Some(at)));
        let stamp = Stamp {
            author: author.clone(),
            at: Some(at),
            mac: b64().encode(tag.as_ref()),
        };
        b64().encode(serde_json::to_vec(&stamp).unwrap_or_default())
    }

    /// The author of `subject`, if `annotation` approves it.
    ///
    /// # Errors
    /// A missing, malformed or non-matching approval.
    pub fn verify(&self, subject: Subject<'_>, annotation: Option<&str>) -> Result<Author> {
        let text = annotation.ok_or(Error::Find)?;
        let raw = b64()
            .decode(text)
            .map_err(|e| Error::Decode(e.to_string()))?;
        let stamp: Stamp =
            serde_json::from_slice(&raw).map_err(|e| Error::Decode(e.to_string()))?;
        let mac = b64()
            .decode(&stamp.mac)
            .map_err(|e| Error::Decode(e.to_string()))?;
        hmac::verify(&self.key, &message(subject, &stamp.author, stamp.at), &mac)
            .map_err(|_| Error::Verify)?;
        if let Some(max) = self.max_age {
            // An approval from before signing times were kept counts as infinitely old.
            let age_secs = stamp
                .at
                .map_or(u64::MAX, |at| now_secs().saturating_sub(at));
            if age_secs > max.as_secs() {
                return Err(Error::Expire {
                    age_secs,
                    max_secs: max.as_secs(),
                });
            }
        }
        Ok(stamp.author)
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The signed bytes: canonical JSON (objects with sorted keys) of everything approved.
fn message(subject: Subject<'_>, author: &Author, at: Option<u64>) -> Vec<u8> {
    let mut doc = json!({
        "kind": subject.kind,
        "namespace": subject.namespace,
        "name": subject.name,
        "spec": subject.spec,
        "author": author,
    });
    if let Some(at) = at {
        doc["at"] = json!(at);
    }
    if let Some(script) = subject.script_from {
        let digest = ring::digest::digest(&ring::digest::SHA256, script.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        doc["script_sha256"] = json!(hex);
    }
    let mut out = Vec::new();
    canonical(&doc, &mut out);
    out
}

/// JSON with object keys sorted, so that key order (which kite otherwise keeps) cannot
/// change what is signed.
fn canonical(v: &Json, out: &mut Vec<u8>) {
    match v {
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(k).unwrap_or_default());
                out.push(b':');
                canonical(&map[k], out);
            }
            out.push(b'}');
        }
        Json::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        other => out.extend(serde_json::to_vec(other).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn author(name: &str) -> Author {
        Author {
            username: name.into(),
            uid: "u-1".into(),
            groups: vec!["team-a".into(), "system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn a_signed_spec_verifies_and_names_its_author() {
        let key = Key::new(b"secret");
        let spec = json!({"script": "k8s.control(\"pods\")", "vars": {"b": "1", "a": "2"}});
        let subject = Subject {
            kind: "StarlarkController",
            namespace: "team-a",
            name: "c",
            spec: &spec,
            script_from: None,
        };
        let stamp = key.sign(subject, &author("alice"));
        assert_eq!(key.verify(subject, Some(&stamp)).unwrap(), author("alice"));

        // The same spec with its keys in another order is the same spec.
        let reordered = json!({"vars": {"a": "2", "b": "1"}, "script": "k8s.control(\"pods\")"});
        let same = Subject {
            spec: &reordered,
            ..subject
        };
        assert!(key.verify(same, Some(&stamp)).is_ok());
    }

    #[test]
    fn anything_else_is_refused() {
        let key = Key::new(b"secret");
        let spec = json!({"script": "x"});
        let subject = Subject {
            kind: "StarlarkController",
            namespace: "team-a",
            name: "c",
            spec: &spec,
            script_from: None,
        };
        let stamp = key.sign(subject, &author("alice"));
        assert_eq!(key.verify(subject, None), Err(Error::Find));
        assert!(matches!(
            key.verify(subject, Some("not base64!")),
            Err(Error::Decode(_))
        ));
        let other_spec = json!({"script": "y"});
        for changed in [
            Subject {
                spec: &other_spec,
                ..subject
            },
            Subject {
                name: "d",
                ..subject
            },
            Subject {
                namespace: "team-b",
                ..subject
            },
            Subject {
                kind: "ClusterStarlarkController",
                ..subject
            },
            Subject {
                script_from: Some("x"),
                ..subject
            },
        ] {
            assert_eq!(key.verify(changed, Some(&stamp)), Err(Error::Verify));
        }
        // A forged author: the signature no longer matches.
        let mut forged: Stamp = serde_json::from_slice(&b64().decode(&stamp).unwrap()).unwrap();
        forged.author = author("admin");
        let forged = b64().encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(key.verify(subject, Some(&forged)), Err(Error::Verify));
        // A ConfigMap's content is pinned: changed content needs a new approval.
        let from = Subject {
            script_from: Some("k8s.control('pods')"),
            ..subject
        };
        let pinned = key.sign(from, &author("alice"));
        assert!(key.verify(from, Some(&pinned)).is_ok());
        let changed = Subject {
            script_from: Some("k8s.control('secrets')"),
            ..subject
        };
        assert_eq!(key.verify(changed, Some(&pinned)), Err(Error::Verify));
        // A forged signing time does not verify either.
        let mut old: Stamp = serde_json::from_slice(&b64().decode(&stamp).unwrap()).unwrap();
        old.at = old.at.map(|t| t + 1);
        let old = b64().encode(serde_json::to_vec(&old).unwrap());
        assert_eq!(key.verify(subject, Some(&old)), Err(Error::Verify));
        // Another operator's key.
        assert_eq!(
            Key::new(b"other").verify(subject, Some(&stamp)),
            Err(Error::Verify)
        );
    }

    #[test]
    fn approvals_expire_after_the_max_age() {
        let spec = json!({"script": "x"});
        let subject = Subject {
            kind: "StarlarkController",
            namespace: "team-a",
            name: "c",
            spec: &spec,
            script_from: None,
        };
        let day = std::time::Duration::from_hours(24);
        let key = Key::new(b"secret").with_max_age(Some(day));
        let fresh = key.sign(subject, &author("alice"));
        assert!(key.verify(subject, Some(&fresh)).is_ok());
        let old = key.sign_at(subject, &author("alice"), now_secs() - 2 * 86_400);
        assert!(matches!(
            key.verify(subject, Some(&old)),
            Err(Error::Expire {
                max_secs: 86_400,
                ..
            })
        ));
        // Without a max age, age does not matter.
        assert!(Key::new(b"secret").verify(subject, Some(&old)).is_ok());
    }
}
