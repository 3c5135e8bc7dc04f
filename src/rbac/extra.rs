//! `--rule GROUP/RESOURCE:VERB,VERB`: permissions the user adds by hand.

use super::{Error, Result};

/// The verbs Kubernetes' authorizer knows for resources; anything else is a typo.
const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "bind",
    "escalate",
    "impersonate",
    "use",
    "approve",
    "sign",
];

/// Parses `GROUP/RESOURCE[/SUBRESOURCE]:VERB[,VERB...]` into (group, resource, verbs).
/// The core group is written `core` or left empty (`/configmaps:get`); a bare
/// `RESOURCE:VERBS` also means the core group.
///
/// # Errors
/// [`Error::ExtraRule`] naming the part that is wrong. Wildcards are refused.
pub fn parse_rule(text: &str) -> Result<(String, String, Vec<String>)> {
    let err = |message: &str| Error::ExtraRule {
        rule: text.to_owned(),
        message: message.to_owned(),
    };
    if text.contains('*') {
        return Err(err(
            "wildcards are never granted; name the group, resource and verbs",
        ));
    }
    let (target, verbs) = text
        .split_once(':')
        .ok_or_else(|| err("expected GROUP/RESOURCE:VERB,VERB (e.g. apps/deployments:get,list)"))?;
    let (group, resource) = match target.split_once('/') {
        Some((g, r)) => (if g == "core" { "" } else { g }, r),
        None => ("", target),
    };
    let valid_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    if !group.is_empty() && !valid_name(group) {
        return Err(err(&format!("{group:?} is not an API group name")));
    }
    if !resource.split('/').all(valid_name) || resource.split('/').count() > 2 {
        return Err(err(&format!(
            "{resource:?} is not a resource name (plural, lowercase, e.g. deployments or deployments/status)"
        )));
    }
    let verbs: Vec<String> = verbs.split(',').map(|v| v.trim().to_owned()).collect();
    if let Some(bad) = verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
        return Err(err(&format!(
            "unknown verb {bad:?} (known: {})",
            VERBS.join(", ")
        )));
    }
    Ok((group.to_owned(), resource.to_owned(), verbs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_resources_and_verbs() {
        let (g, r, v) = parse_rule("apps/deployments:get,list").unwrap();
        assert_eq!((g.as_str(), r.as_str()), ("apps", "deployments"));
        assert_eq!(v, ["get", "list"]);
        assert_eq!(parse_rule("core/configmaps:get").unwrap().0, "");
        assert_eq!(parse_rule("/configmaps:get").unwrap().0, "");
        assert_eq!(parse_rule("secrets:get").unwrap().1, "secrets");
        assert_eq!(parse_rule("core/pods/log:get").unwrap().1, "pods/log");
        assert_eq!(
            parse_rule("example.com/widgets/status:patch").unwrap(),
            (
                "example.com".into(),
                "widgets/status".into(),
                vec!["patch".into()]
            )
        );
    }

    #[test]
    fn refuses_wildcards_and_typos() {
        for (bad, needle) in [
            ("apps/*:get", "wildcards"),
            ("apps/deployments:*", "wildcards"),
            ("apps/deployments", "expected GROUP/RESOURCE"),
            ("apps/deployments:gett", "unknown verb \"gett\""),
            ("apps/Deployments:get", "not a resource name"),
            ("apps/deployments:", "unknown verb \"\""),
        ] {
            let e = parse_rule(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
            assert!(e.starts_with(&format!("--rule {bad:?}")), "{e}");
        }
    }
}
