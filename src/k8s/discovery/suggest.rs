//! Close names for a kind that resolves to nothing.

use super::Resource;
use super::cache::preferred;

/// How many close names an unknown-kind error offers.
const MAX_SUGGESTIONS: usize = 5;

/// Inputs longer than this cannot be a resource name (a DNS subdomain plus a resource
/// name); skipping suggestions for them keeps the edit distance cheap.
const MAX_SUGGESTION_INPUT: usize = 320;

/// Names close to `input` that resolve, as `plural.group`, best first.
pub(super) fn suggest_kinds(resources: &[Resource], input: &str) -> Vec<String> {
    if input.len() > MAX_SUGGESTION_INPUT {
        return Vec::new();
    }
    let input = input.to_lowercase();
    let limit = suggestion_distance(&input);
    let mut scored: Vec<(usize, usize, String)> = preferred(resources)
        .iter()
        .enumerate()
        .filter_map(|(position, r)| {
            let ar = &r.api_resource;
            let kind = ar.kind.to_lowercase();
            let mut forms: Vec<String> = [ar.plural.as_str(), r.singular.as_str(), kind.as_str()]
                .into_iter()
                .chain(r.short_names.iter().map(String::as_str))
                .map(str::to_lowercase)
                .collect();
            if !ar.group.is_empty() {
                let qualified: Vec<String> =
                    forms.iter().map(|f| format!("{f}.{}", ar.group)).collect();
                forms.extend(qualified);
            }
            let score = forms
                .iter()
                .map(|f| {
                    if input.len() >= 3 && f.starts_with(&input) {
                        0
                    } else {
                        strsim::levenshtein(&input, f)
                    }
                })
                .min()?;
            (score <= limit).then(|| (score, position, r.qualified_name()))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, _, name)| name)
        .collect()
}

/// `apiVersion Kind` pairs close to a missing one: the same kind in other versions or
/// groups, else close kinds of the same group.
pub(super) fn suggest_api_version_kinds(
    resources: &[Resource],
    group: &str,
    kind: &str,
) -> Vec<String> {
    let show = |r: &Resource| format!("{} {}", r.api_resource.api_version, r.api_resource.kind);
    let same_kind: Vec<String> = resources
        .iter()
        .filter(|r| r.api_resource.kind.eq_ignore_ascii_case(kind))
        .map(show)
        .take(MAX_SUGGESTIONS)
        .collect();
    if !same_kind.is_empty() || kind.len() > MAX_SUGGESTION_INPUT {
        return same_kind;
    }
    let kind = kind.to_lowercase();
    let limit = suggestion_distance(&kind);
    let mut scored: Vec<(usize, usize, String)> = resources
        .iter()
        .enumerate()
        .filter(|(_, r)| r.api_resource.group == group)
        .filter_map(|(position, r)| {
            let score = strsim::levenshtein(&kind, &r.api_resource.kind.to_lowercase());
            (score <= limit).then(|| (score, position, show(r)))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, _, s)| s)
        .collect()
}

/// How many edits still make a name "close": a third of its length, at least one.
fn suggestion_distance(input: &str) -> usize {
    (input.chars().count() / 3).max(1)
}
