//! One evaluated top level per distinct hosted script: controllers of one namespace
//! that run the same source with the same vars share the parse, the evaluation and the
//! frozen module, and keep apart only what differs (queue, status, identity, journal).
//!
//! A top level is shared only when it computed from its source and vars alone: one that
//! called the cluster or wrote a log record ([`Host::reached`]) did so for its own
//! controller, which the next one must do again for itself. What it printed is kept
//! and printed again for each controller that shares it.
//!
//! The key holds the namespace and the approving author: controllers of different
//! tenants, or of two authors in one namespace, never share anything here, not even
//! the fact that their scripts are equal.
//!
//! [`Host::reached`]: crate::script::host::Host::reached

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use starlark::environment::FrozenModule;

use crate::control::request::ControlRequest;

/// What identifies a top level: where it runs, its source and its vars. Not its file
/// name (each controller's own): a controller that shares another's top level names
/// its own file in messages (`Host::file_alias`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub namespace: String,
    /// The approving author: two authors' controllers never share, so that neither
    /// learns from the other's run (what it printed, when it started) or that their
    /// scripts are equal.
    pub author: String,
    pub script: Arc<str>,
    pub vars: BTreeMap<String, String>,
}

/// An evaluated top level that stopped at `k8s.control(...)`.
pub struct TopLevel {
    /// The file name it was evaluated under, which its module's positions name.
    pub file_name: String,
    pub module: FrozenModule,
    /// Where each function is defined, for messages.
    pub positions: HashMap<String, String>,
    pub request: ControlRequest,
    /// What the evaluation left allocated: charged to every controller that uses it,
    /// as if each had its own (the quota is a bound, and stays one however modules
    /// are shared).
    pub kept: usize,
    /// What it printed, printed again for each controller that shares it.
    pub printed: Vec<String>,
}

/// The top levels in use, each kept as long as a controller holds it.
#[derive(Default)]
pub struct Modules {
    by_key: Mutex<HashMap<Key, Weak<TopLevel>>>,
}

impl Modules {
    /// The top level evaluated for `key`, while a controller still holds it.
    pub fn get(&self, key: &Key) -> Option<Arc<TopLevel>> {
        self.lock().get(key).and_then(Weak::upgrade)
    }

    /// Keeps `top` for the controllers that come with the same `key`; returns it,
    /// shared. One that another start put first is used instead, so that two starts
    /// racing end up holding one module.
    pub fn insert(&self, key: Key, top: TopLevel) -> Arc<TopLevel> {
        let mut by_key = self.lock();
        if let Some(first) = by_key.get(&key).and_then(Weak::upgrade) {
            return first;
        }
        // Entries nobody holds go, so the map is as large as the set of distinct
        // scripts running.
        by_key.retain(|_, t| t.strong_count() > 0);
        let top = Arc::new(top);
        by_key.insert(key, Arc::downgrade(&top));
        top
    }

    /// Distinct top levels held now.
    pub fn len(&self) -> usize {
        self.lock()
            .values()
            .filter(|t| t.strong_count() > 0)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Weak<TopLevel>>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top() -> TopLevel {
        let spec = crate::control::spec::ControlSpec::for_tests("deployments");
        TopLevel {
            file_name: "a.star".into(),
            module: starlark::environment::FrozenModule::from_globals(
                &starlark::environment::Globals::standard(),
            )
            .unwrap(),
            positions: HashMap::new(),
            request: ControlRequest {
                spec,
                session: crate::k8s::session::SessionKey::default(),
            },
            kept: 0,
            printed: vec![],
        }
    }

    fn key(namespace: &str, vars: &[(&str, &str)]) -> Key {
        Key {
            namespace: namespace.into(),
            author: "alice".into(),
            script: Arc::from("k8s.control(\"deployments\")"),
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn equal_scripts_share_a_top_level_while_one_holds_it() {
        let modules = Modules::default();
        let first = modules.insert(key("t", &[("max", "3")]), top());
        let same = modules.get(&key("t", &[("max", "3")])).unwrap();
        assert!(Arc::ptr_eq(&first, &same));
        // A second evaluation that raced the first ends up with the first's.
        let raced = modules.insert(key("t", &[("max", "3")]), top());
        assert!(Arc::ptr_eq(&first, &raced));
        // Other vars, or another namespace's tenant, share nothing.
        assert!(modules.get(&key("t", &[("max", "4")])).is_none());
        assert!(modules.get(&key("u", &[("max", "3")])).is_none());
        let mallory = Key {
            author: "mallory".into(),
            ..key("t", &[("max", "3")])
        };
        assert!(modules.get(&mallory).is_none(), "nor does another author");
        assert_eq!(modules.len(), 1);
        drop((first, same, raced));
        assert!(
            modules.get(&key("t", &[("max", "3")])).is_none(),
            "gone with its last holder"
        );
        assert_eq!(modules.len(), 0);
    }
}
