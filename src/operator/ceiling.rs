//! The administrator's ceiling: a ClusterRole that bounds what the operator may grant.
//!
//! Without it, anyone allowed to create a StarlarkController could grant their script
//! anything the operator can grant. Every generated rule must be covered by the
//! ceiling's rules, matched as the RBAC authorizer matches them.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::Api;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::rbac::{Rule, Rules};

/// The ClusterRole the operator reads by default (aggregatable, see `config/rbac`).
pub(crate) const DEFAULT_CEILING: &str = "starkite-controller-ceiling";

/// Why the ceiling could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the ceiling ClusterRole {0:?} does not exist, so the operator grants nothing")]
    FindCeiling(String),
    #[error("reading the ceiling ClusterRole {name:?}: {source}")]
    ReadCeiling { name: String, source: kube::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The longest a ceiling read is used without its watch saying anything: what a
/// broken watch could keep stale.
const CACHE_FOR: Duration = Duration::from_secs(30);

/// The ceiling as last read, until its watch reports a change ([`Cache::changed`]).
#[derive(Default)]
pub struct Cache {
    /// When it was read, in which epoch, and what was read.
    #[expect(clippy::type_complexity, reason = "a private slot read in one place")]
    slot: tokio::sync::Mutex<Option<(Instant, u64, std::result::Result<Ceiling, String>)>>,
    /// Bumped at each change the watch reports.
    epoch: AtomicU64,
}

impl Cache {
    /// The ceiling ClusterRole (or one aggregated into it) changed: read it again.
    pub fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// The rules of the ceiling ClusterRole.
#[derive(Debug, Clone, Default)]
pub struct Ceiling {
    rules: Vec<PolicyRule>,
}

impl Ceiling {
    pub fn new(rules: Vec<PolicyRule>) -> Self {
        Ceiling { rules }
    }

    /// Reads the ClusterRole `name` (with its aggregated rules).
    ///
    /// # Errors
    /// [`Error::FindCeiling`] when it does not exist, or the API error.
    pub async fn fetch(client: &kube::Client, name: &str) -> Result<Ceiling> {
        let api: Api<ClusterRole> = Api::all(client.clone());
        match api.get_opt(name).await {
            Ok(Some(role)) => Ok(Ceiling::new(role.rules.unwrap_or_default())),
            Ok(None) => Err(Error::FindCeiling(name.to_owned())),
            Err(source) => Err(Error::ReadCeiling {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Whether `name` exists, through `cache`: one GET for every reconcile in the
    /// meantime, not one each (a restart of 5000 controllers once read it 31 000 times).
    ///
    /// # Errors
    /// As [`fetch`](Ceiling::fetch), but for a missing ceiling, which is the `Err`
    /// inside (kept, as a ceiling that is read).
    pub async fn read(
        cache: &Cache,
        client: &kube::Client,
        name: &str,
    ) -> Result<std::result::Result<Ceiling, String>> {
        let mut slot = cache.slot.lock().await;
        let epoch = cache.epoch.load(Ordering::Acquire);
        if let Some((at, read_in, ceiling)) = &*slot
            && *read_in == epoch
            && at.elapsed() < CACHE_FOR
        {
            return Ok(ceiling.clone());
        }
        let ceiling = match Ceiling::fetch(client, name).await {
            Ok(c) => Ok(c),
            Err(e @ Error::FindCeiling(_)) => Err(e.to_string()),
            Err(e) => return Err(e),
        };
        // Read in the epoch before the GET: a change seen during it reads again.
        *slot = Some((Instant::now(), epoch, ceiling.clone()));
        Ok(ceiling)
    }

    /// A digest of the rules, to notice when the administrator changes them.
    pub fn fingerprint(&self) -> String {
        serde_json::to_string(&self.rules).unwrap_or_default()
    }

    /// The first generated permission the ceiling does not cover, described for status:
    /// e.g. `delete on secrets in namespace team`.
    pub fn first_outside(&self, rules: &Rules) -> Option<String> {
        for rule in rules.sorted() {
            for verb in &rule.verbs {
                if !self.rules.iter().any(|c| covers(c, rule, verb)) {
                    let mut what = format!("{verb} on {}", rule.qualified_resource());
                    if !rule.resource_names.is_empty() {
                        what += &format!(" named {}", rule.resource_names.join(","));
                    }
                    return Some(format!("{what} ({})", rule.scope));
                }
            }
        }
        None
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Whether `ceiling` allows `verb` on everything `rule` names.
fn covers(ceiling: &PolicyRule, rule: &Rule, verb: &str) -> bool {
    let groups = ceiling.api_groups.as_deref().unwrap_or_default();
    let resources = ceiling.resources.as_deref().unwrap_or_default();
    let resource_ok = resources.iter().any(|r| {
        r == "*"
            || *r == rule.resource
            || rule
                .resource
                .split_once('/')
                .is_some_and(|(_, sub)| r.strip_prefix("*/") == Some(sub))
    });
    let names_ok = match ceiling.resource_names.as_deref() {
        None | Some([]) => true,
        Some(allowed) => {
            !rule.resource_names.is_empty()
                && rule.resource_names.iter().all(|n| allowed.contains(n))
        }
    };
    has(groups, &rule.group) && resource_ok && has(&ceiling.verbs, verb) && names_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::{Scope, Site};

    fn policy(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            verbs: v(verbs),
            ..Default::default()
        }
    }

    fn rules(group: &str, resource: &str, verbs: &[&str], names: &[&str]) -> Rules {
        let mut r = Rules::default();
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let site = Site {
            position: "c.star:1:1".into(),
            what: "x".into(),
        };
        r.add(group, resource, verbs, Scope::Cluster, &names, site);
        r
    }

    #[test]
    fn covered_rules_pass_and_the_first_outside_is_named() {
        let ceiling = Ceiling::new(vec![
            policy(&["apps"], &["deployments"], &["list", "watch", "patch"]),
            policy(&[""], &["events"], &["*"]),
            policy(&["*"], &["*/status"], &["patch"]),
        ]);
        assert_eq!(
            ceiling.first_outside(&rules("apps", "deployments", &["list", "patch"], &[])),
            None
        );
        assert_eq!(
            ceiling.first_outside(&rules("", "events", &["create", "get"], &[])),
            None
        );
        assert_eq!(
            ceiling.first_outside(&rules("x.io", "sites/status", &["patch"], &[])),
            None
        );
        assert_eq!(
            ceiling
                .first_outside(&rules("apps", "deployments", &["delete", "list"], &[]))
                .as_deref(),
            Some("delete on deployments.apps (cluster)")
        );
        assert_eq!(
            ceiling
                .first_outside(&rules("", "secrets", &["get"], &[]))
                .as_deref(),
            Some("get on secrets (cluster)")
        );
    }

    #[test]
    fn resource_names_narrow_the_ceiling() {
        let mut named = policy(&["coordination.k8s.io"], &["leases"], &["get", "update"]);
        named.resource_names = Some(vec!["a".into()]);
        let ceiling = Ceiling::new(vec![named]);
        assert_eq!(
            ceiling.first_outside(&rules("coordination.k8s.io", "leases", &["get"], &["a"])),
            None
        );
        assert!(
            ceiling
                .first_outside(&rules("coordination.k8s.io", "leases", &["get"], &["b"]))
                .is_some()
        );
        assert!(
            ceiling
                .first_outside(&rules("coordination.k8s.io", "leases", &["get"], &[]))
                .is_some()
        );
    }
}
