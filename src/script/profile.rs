//! `--permissions PROFILE`: upstream Starkite's profile names and inline rules, mapped
//! onto kite's coarser switches.
//!
//! Upstream checks each call against rules scoped to functions, paths and hosts; kite
//! has one switch per kind of access. A rule kite cannot enforce as written is widened
//! to its whole switch with a warning naming the rule when it allows, and narrowed to
//! the whole switch when it denies (denying more is always safe). Anything kite does
//! not recognise is refused, never guessed.

use super::permissions::{Access, Permissions};

/// Why a `--permissions` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a built-in profile name nor inline rules.
    #[error(
        "unknown permission profile {0:?}: kite knows {NAMES}, or inline rules \
         (allow:RULE,...;deny:RULE,...); custom profiles from files or ~/.starkite are not supported"
    )]
    UnknownProfile(String),
    /// A clause that does not start with `allow:` or `deny:`.
    #[error("permission clause {0:?} must start with allow: or deny:")]
    MalformedClause(String),
    /// A rule naming a module or category upstream does not check.
    #[error(
        "unknown permission rule {0:?}: expected module.category[(...)], e.g. fs.read, os.exec, k8s.*"
    )]
    UnknownRule(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The built-in profile names, least to most permissive.
const NAMES: &str = "deny-all, strict, allow-fs, allow-net, allow-local, allow-all";

/// A parsed `--permissions` value: what it grants, and what kite had to widen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The spelling given, for messages.
    pub spec: String,
    pub permissions: Permissions,
    /// One line per rule kite could not enforce as finely as written.
    pub warnings: Vec<String>,
}

/// Parses a `--permissions` value.
///
/// # Errors
/// An unknown profile name, a clause without `allow:`/`deny:`, or an unknown rule,
/// each naming the bad spelling.
pub fn parse(spec: &str) -> Result<Profile> {
    let spec = spec.trim();
    let mut profile = Profile {
        spec: spec.to_owned(),
        permissions: Permissions::none(),
        warnings: Vec::new(),
    };
    if spec.starts_with("allow:") || spec.starts_with("deny:") {
        inline(spec, &mut profile)?;
    } else {
        builtin(spec, &mut profile)?;
    }
    Ok(profile)
}

fn builtin(name: &str, profile: &mut Profile) -> Result<()> {
    use Access::{Env, Exec, Fs, K8s, Net};
    let cwd_writes =
        "writes and deletes are limited to $CWD upstream; kite's --allow-fs allows them anywhere";
    let (grants, widened): (&[Access], &[&str]) = match name {
        "deny-all" => (&[], &[]),
        "strict" => (
            &[Fs],
            &[
                "filesystem access is limited to $CWD upstream; kite's --allow-fs allows it anywhere",
            ],
        ),
        "allow-fs" => (&[Fs, Env], &[cwd_writes]),
        "allow-net" => (&[Fs, Env, Net], &[cwd_writes]),
        "allow-local" => (
            &[Fs, Env, Net, K8s, Exec],
            &[
                cwd_writes,
                "exec is limited to programs under $CWD upstream; kite's --allow-exec runs any program",
            ],
        ),
        "allow-all" => (&[Fs, Env, Net, K8s, Exec], &[]),
        _ => return Err(Error::UnknownProfile(name.to_owned())),
    };
    for access in grants {
        profile.permissions = profile.permissions.with(*access, true);
    }
    profile
        .warnings
        .extend(widened.iter().map(|w| (*w).to_owned()));
    Ok(())
}

fn inline(spec: &str, profile: &mut Profile) -> Result<()> {
    let mut denied = Permissions::none();
    for clause in spec.split(';').map(str::trim).filter(|c| !c.is_empty()) {
        let (allow, rules) = if let Some(r) = clause.strip_prefix("allow:") {
            (true, r)
        } else if let Some(r) = clause.strip_prefix("deny:") {
            (false, r)
        } else {
            return Err(Error::MalformedClause(clause.to_owned()));
        };
        for rule in split_rules(rules) {
            let mapped = map_rule(rule)?;
            if allow {
                profile.permissions = profile.permissions.union(mapped.grants);
                if let Some(why) = mapped.coarser {
                    profile
                        .warnings
                        .push(format!("rule allow:{rule} is widened to {why}"));
                }
                if let Some(note) = mapped.note {
                    profile.warnings.push(format!("rule allow:{rule}: {note}"));
                }
            } else {
                denied = denied.union(mapped.grants);
                if let Some(why) = mapped.coarser {
                    profile.warnings.push(format!(
                        "rule deny:{rule} denies all of {why}, as kite cannot deny part of it"
                    ));
                }
            }
        }
    }
    // Deny rules win over allow rules, in any order, as upstream evaluates them first.
    profile.permissions = profile.permissions.minus(denied);
    Ok(())
}

/// Splits `a,b(x,y:z),c` at the commas outside parentheses.
fn split_rules(rules: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in rules.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(rules[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(rules[start..].trim());
    out.into_iter().filter(|r| !r.is_empty()).collect()
}

/// What one rule means in kite's switches.
struct Mapped {
    grants: Permissions,
    /// Set when the switches cover more than the rule: what they cover.
    coarser: Option<String>,
    /// Something else the user should know.
    note: Option<&'static str>,
}

fn map_rule(rule: &str) -> Result<Mapped> {
    use Access::{Env, Exec, Fs, K8s, Net};
    let bad = || Error::UnknownRule(rule.to_owned());
    let (head, scoped) = match rule.split_once('(') {
        Some((head, rest)) if rest.ends_with(')') && rest.len() > 1 => (head, true),
        Some(_) => return Err(bad()),
        None => (rule, false),
    };
    let (module, category) = head.split_once('.').ok_or_else(bad)?;
    // (grants, true when the grants are exactly what module.category covers)
    let (grants, exact): (&[Access], bool) = match (module, category) {
        ("*", "*") => (&[K8s, Net, Fs, Env, Exec], true),
        ("fs", "*") => (&[Fs], true),
        ("fs", "read" | "write" | "delete") => (&[Fs], false),
        ("os", "exec") => (&[Exec], true),
        ("os", "env") => (&[Env], true),
        ("os", "*") => (&[Exec, Env], true),
        // os.exit needs no permission in kite, and os.chdir needs --allow-fs.
        ("os", "process") => (&[], true),
        ("http", "*") => (&[Net], true),
        ("http", "client" | "server") | ("ssh", "connect") => (&[Net], false),
        ("k8s", "*") => (&[K8s], true),
        ("k8s", "read" | "write" | "exec" | "config") => (&[K8s], false),
        // kite's io questions stdin under --allow-env, with the variables.
        ("io", "*" | "prompt") => (&[Env], false),
        ("ssh", "*" | "transfer") => (&[Net, Fs], false),
        ("ai", "*" | "generate") | ("mcp", "*" | "client" | "server") => {
            return Ok(Mapped {
                grants: Permissions::none(),
                coarser: None,
                note: Some("kite does not provide this module, so the rule has no effect"),
            });
        }
        _ => return Err(bad()),
    };
    let mut permissions = Permissions::none();
    for access in grants {
        permissions = permissions.with(*access, true);
    }
    let flags: Vec<&str> = grants.iter().map(|a| a.flag()).collect();
    let coarser =
        (scoped || !exact).then(|| format!("{} ({})", flags.join(" "), scope_of(module, category)));
    let note = match (module, category) {
        ("os", "process") => Some(
            "os.exit needs no permission in kite; os.chdir needs --allow-fs, which this rule does not grant",
        ),
        ("ssh", "connect") => Some(
            "private keys and known_hosts files also need --allow-fs, which this rule does not grant",
        ),
        _ => None,
    };
    Ok(Mapped {
        grants: permissions,
        coarser,
        note,
    })
}

/// What one of kite's switches covers, for warnings.
fn scope_of(module: &str, category: &str) -> &'static str {
    match (module, category) {
        ("fs", _) => "every read, write and delete anywhere",
        ("os", "env") => "any variable",
        ("os", "exec") => "any program",
        ("os", _) => "any program or variable",
        ("http", _) | ("ssh", "connect") => "all network use",
        ("ssh", _) => "all network use and every file read and write",
        ("k8s", _) => "every Kubernetes API call the credentials allow",
        ("io", _) => "terminal questions and every environment variable",
        _ => "everything",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_map_onto_switches() {
        assert_eq!(parse("deny-all").unwrap().permissions, Permissions::none());
        let all = parse("allow-all").unwrap();
        assert_eq!(all.permissions, Permissions::all());
        assert!(all.warnings.is_empty());
        let fs = parse("allow-fs").unwrap();
        assert_eq!(fs.permissions.granted(), vec![Access::Fs, Access::Env]);
        assert!(fs.warnings[0].contains("--allow-fs"), "{:?}", fs.warnings);
        let local = parse("allow-local").unwrap();
        assert!(local.permissions.exec && local.permissions.k8s);
        assert_eq!(local.warnings.len(), 2);
        assert_eq!(
            parse("strict").unwrap().permissions,
            Permissions::only(Access::Fs)
        );
        let net = parse("allow-net").unwrap().permissions;
        assert!(net.net && !net.k8s && !net.exec);
    }

    #[test]
    fn inline_rules_allow_then_deny() {
        let p = parse("allow:fs.*,os.exec,k8s.*").unwrap();
        assert_eq!(
            p.permissions.granted(),
            vec![Access::K8s, Access::Fs, Access::Exec]
        );
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let p = parse("allow:*.*;deny:os.exec").unwrap();
        assert_eq!(p.permissions, Permissions::all().with(Access::Exec, false));
    }

    #[test]
    fn finer_rules_widen_with_a_warning_naming_them() {
        let p = parse("allow:fs.read(read_file,glob:/etc/**),os.env").unwrap();
        assert_eq!(p.permissions.granted(), vec![Access::Fs, Access::Env]);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(
            p.warnings[0]
                .starts_with("rule allow:fs.read(read_file,glob:/etc/**) is widened to --allow-fs"),
            "{}",
            p.warnings[0]
        );
        // A partial deny takes the whole switch away.
        let p = parse("allow:http.client;deny:http.client(*.internal.*)").unwrap();
        assert!(!p.permissions.net);
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("deny:http.client(*.internal.*) denies all"))
        );
        let p = parse("allow:io.prompt").unwrap();
        assert_eq!(p.permissions, Permissions::only(Access::Env));
        assert!(
            p.warnings[0]
                .contains("--allow-env (terminal questions and every environment variable)"),
            "{:?}",
            p.warnings
        );
        let p = parse("allow:ssh.connect").unwrap();
        assert_eq!(p.permissions, Permissions::only(Access::Net));
        assert!(
            p.warnings[1].contains("also need --allow-fs"),
            "{:?}",
            p.warnings
        );
        let p = parse("allow:ai.generate").unwrap();
        assert_eq!(p.permissions, Permissions::none());
        assert!(p.warnings[0].contains("has no effect"));
    }

    #[test]
    fn unknown_spellings_are_refused_by_name() {
        let e = parse("allow-everything").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown permission profile \"allow-everything\""),
            "{e}"
        );
        let e = parse("allow:fs.reed").unwrap_err();
        assert_eq!(e, Error::UnknownRule("fs.reed".to_owned()));
        let e = parse("allow:fs.read;permit:os.exec").unwrap_err();
        assert_eq!(e, Error::MalformedClause("permit:os.exec".to_owned()));
        assert!(parse("allow:fs.read(").is_err());
        assert!(parse("./team.yaml#deploy").is_err());
    }
}
