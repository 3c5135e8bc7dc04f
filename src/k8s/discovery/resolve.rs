//! kubectl's rules for what a kind name denotes.

use super::suggest::{suggest_api_version_kinds, suggest_kinds};
use super::{Error, Resource, Result};

/// Finds the resource a kind name denotes, the way `kubectl get NAME` does.
///
/// `resources` holds every served version of every resource in priority order, as
/// discovery lists them. The name is read, in this order, as:
///
/// 1. `resource.version.group`, if it has two dots or more;
/// 2. `resource.group` or a bare `resource`, where a resource name is first a plural or
///    singular, then a short name, and the group matches exactly, or else as a prefix
///    (`deployments.app`, `hpa.autoscal`);
/// 3. `Kind.version.group`, `Kind.group` or a bare `Kind`.
///
/// The first reading that matches anything wins. If it matches several resources, the
/// one in the core group wins, then the one in the group version listed first (so
/// built-in groups beat CRDs, and a group's preferred version beats the others); two
/// different resources in that same group version are ambiguous. This is kubectl's
/// `PriorityRESTMapper` rule, which is why `events` and `ev` mean the core v1 Events
/// rather than `events.k8s.io`. All comparisons ignore case.
///
/// # Errors
///
/// [`Error::UnknownKind`] (with close names as suggestions) or [`Error::AmbiguousKind`].
pub fn find_kind<'a>(resources: &'a [Resource], kind: &str) -> Result<&'a Resource> {
    use GroupMatch::{Exact, Prefix};
    use NameForm::{Kind, Name, ShortName};

    let unknown = || Error::UnknownKind {
        kind: kind.to_owned(),
        suggestions: suggest_kinds(resources, kind),
    };
    // Subresources are not kinds, and `group/version/resource` is not a kind name.
    if kind.is_empty() || kind.contains('/') {
        return Err(unknown());
    }

    let mut dotted = kind.splitn(3, '.');
    let versioned = match (dotted.next(), dotted.next(), dotted.next()) {
        (Some(name), Some(version), Some(group)) if !version.is_empty() && !group.is_empty() => {
            Some(Query {
                name,
                version: Some(version),
                group: Some(group),
            })
        }
        _ => None,
    };
    let unversioned = match kind.split_once('.') {
        Some((name, group)) => Query {
            name,
            version: None,
            // kubectl reads `pods.` as unqualified.
            group: Some(group).filter(|g| !g.is_empty()),
        },
        None => Query {
            name: kind,
            version: None,
            group: None,
        },
    };

    // kubectl's order: resource names before kinds, the most specific reading first,
    // full names before short names, an exact group before a group prefix.
    let mut tiers: Vec<(Query<'_>, GroupMatch, NameForm)> = Vec::new();
    if let Some(q) = versioned {
        tiers.extend([(q, Exact, Name), (q, Exact, ShortName)]);
    }
    tiers.extend([(unversioned, Exact, Name), (unversioned, Exact, ShortName)]);
    if unversioned.group.is_some() {
        tiers.extend([
            (unversioned, Prefix, ShortName),
            (unversioned, Prefix, Name),
        ]);
    }
    if let Some(q) = versioned {
        tiers.push((q, Exact, Kind));
    }
    tiers.push((unversioned, Exact, Kind));

    for (query, group_match, form) in tiers {
        let hits: Vec<&Resource> = resources
            .iter()
            .filter(|r| query.admits(r, group_match) && form.matches(r, query.name))
            .collect();
        if !hits.is_empty() {
            return pick(resources, kind, &hits);
        }
    }
    Err(unknown())
}

/// One way of reading a kind name.
#[derive(Clone, Copy)]
struct Query<'a> {
    name: &'a str,
    version: Option<&'a str>,
    group: Option<&'a str>,
}

#[derive(Clone, Copy)]
enum GroupMatch {
    Exact,
    Prefix,
}

/// Which names of a resource a reading is compared with.
#[derive(Clone, Copy)]
enum NameForm {
    /// The plural or the singular.
    Name,
    ShortName,
    Kind,
}

impl NameForm {
    fn matches(self, r: &Resource, name: &str) -> bool {
        match self {
            NameForm::Name => {
                r.api_resource.plural.eq_ignore_ascii_case(name)
                    || r.singular.eq_ignore_ascii_case(name)
            }
            NameForm::ShortName => r.short_names.iter().any(|s| s.eq_ignore_ascii_case(name)),
            NameForm::Kind => r.api_resource.kind.eq_ignore_ascii_case(name),
        }
    }
}

impl Query<'_> {
    fn admits(&self, r: &Resource, group_match: GroupMatch) -> bool {
        let ar = &r.api_resource;
        let version_ok = self
            .version
            .is_none_or(|v| ar.version.eq_ignore_ascii_case(v));
        let group_ok = match (self.group, group_match) {
            (None, _) => true,
            (Some(g), GroupMatch::Exact) => ar.group.eq_ignore_ascii_case(g),
            (Some(g), GroupMatch::Prefix) => ar
                .group
                .as_bytes()
                .get(..g.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(g.as_bytes())),
        };
        version_ok && group_ok
    }
}

/// Picks the highest-priority hit: core group first, then the group version that
/// `resources` lists first.
fn pick<'a>(resources: &'a [Resource], kind: &str, hits: &[&'a Resource]) -> Result<&'a Resource> {
    let rank = |r: &Resource| {
        let position = resources
            .iter()
            .position(|o| o.in_group_version(r))
            .unwrap_or(usize::MAX);
        (!r.api_resource.group.is_empty(), position)
    };
    let Some(best) = hits.iter().copied().min_by_key(|r| rank(r)) else {
        return Err(Error::UnknownKind {
            kind: kind.to_owned(),
            suggestions: Vec::new(),
        });
    };
    // A group version lists each resource once, so every tie is a different resource.
    let tied: Vec<&Resource> = hits
        .iter()
        .copied()
        .filter(|r| r.in_group_version(best))
        .collect();
    if tied.len() == 1 {
        return Ok(best);
    }
    Err(Error::AmbiguousKind {
        kind: kind.to_owned(),
        candidates: tied.iter().map(|r| r.qualified_name()).collect(),
    })
}

/// Finds the resource that serves `kind` in `api_version` (`v1`, `apps/v1`), for
/// manifests. The kind is compared exactly, as the API server does.
///
/// # Errors
///
/// [`Error::InvalidApiVersion`] or [`Error::UnknownApiVersionKind`].
pub fn find_api_version_kind<'a>(
    resources: &'a [Resource],
    api_version: &str,
    kind: &str,
) -> Result<&'a Resource> {
    let (group, version) = parse_api_version(api_version)?;
    resources
        .iter()
        .find(|r| {
            let ar = &r.api_resource;
            ar.group == group && ar.version == version && ar.kind == kind
        })
        .ok_or_else(|| Error::UnknownApiVersionKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            suggestions: suggest_api_version_kinds(resources, group, kind),
        })
}

pub(super) fn parse_api_version(api_version: &str) -> Result<(&str, &str)> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let valid = !version.is_empty()
        && !version.contains('/')
        && (group.is_empty() != api_version.contains('/'));
    if valid {
        Ok((group, version))
    } else {
        Err(Error::InvalidApiVersion {
            api_version: api_version.to_owned(),
        })
    }
}
