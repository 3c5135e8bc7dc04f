//! The Kubernetes releases kite supports, and the check of an API server against them.
//!
//! kite is built and tested against the newest minor (`make test`) and the oldest
//! (`make test-compat`); see the README's "Supported Kubernetes versions". Every API
//! kite relies on is GA in the oldest: server-side apply, watch bookmarks, Leases,
//! core/v1 Events, admission `matchConditions` and ValidatingAdmissionPolicy (both
//! 1.30). A server outside the range is told once, as a warning: what it lacks is then
//! said by the call that needs it (for the operator's webhook, see
//! `operator::registration`).

use k8s_openapi::apimachinery::pkg::version::Info;

/// The oldest supported minor (of Kubernetes 1.x).
pub const OLDEST: u32 = 34;
/// The newest supported minor.
pub const NEWEST: u32 = 37;
/// The range, as messages name it.
pub const SUPPORTED: &str = "1.34 to 1.37";

/// The minor of a server's version: `minor` ("34", "34+" on some providers), or the
/// one in `gitVersion` ("v1.34.4-eks-...") when `minor` is not a number.
pub fn minor(info: &Info) -> Option<u32> {
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    digits(&info.minor).or_else(|| {
        let rest = info.git_version.strip_prefix("v1.")?;
        digits(rest)
    })
}

/// Why `info` is outside the supported range, if it is.
pub fn problem(info: &Info) -> Option<String> {
    let Some(m) = minor(info) else {
        return Some(format!(
            "the API server's version {:?} is not one kite can read; kite supports Kubernetes {SUPPORTED}",
            info.git_version
        ));
    };
    if info.major.trim_end_matches('+') != "1" || m < OLDEST {
        Some(format!(
            "the API server is Kubernetes {}, older than kite supports ({SUPPORTED}): calls that need a newer API fail with the API server's answer",
            info.git_version
        ))
    } else if m > NEWEST {
        Some(format!(
            "the API server is Kubernetes {}, newer than kite is tested with ({SUPPORTED})",
            info.git_version
        ))
    } else {
        None
    }
}

/// Asks the API server for its version and warns when it is outside the range. Never
/// fails: a server that does not answer is reported by the calls that follow.
pub async fn warn_if_unsupported(client: kube::Client) {
    let asked = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.apiserver_version(),
    )
    .await;
    match asked {
        Ok(Ok(info)) => {
            if let Some(problem) = problem(&info) {
                tracing::warn!(version = %info.git_version, "{problem}");
            } else {
                tracing::debug!(version = %info.git_version, "API server version");
            }
        }
        Ok(Err(e)) => tracing::debug!(error = %e, "reading the API server's version"),
        Err(_) => tracing::debug!("reading the API server's version: no answer within 10s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, git: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git.into(),
            ..Info::default()
        }
    }

    #[test]
    fn the_range_is_checked_by_minor() {
        assert_eq!(problem(&info("1", "34", "v1.34.4")), None);
        assert_eq!(problem(&info("1", "37", "v1.37.2")), None);
        assert_eq!(problem(&info("1", "35+", "v1.35.1-eks-1")), None);
        assert_eq!(problem(&info("1", "", "v1.36.0-gke.100")), None);
        let old = problem(&info("1", "29", "v1.29.9")).unwrap();
        assert!(
            old.contains("v1.29.9") && old.contains("older") && old.contains(SUPPORTED),
            "{old}"
        );
        let new = problem(&info("1", "40", "v1.40.0")).unwrap();
        assert!(new.contains("newer"), "{new}");
        let odd = problem(&info("1", "x", "weird")).unwrap();
        assert!(odd.contains("\"weird\""), "{odd}");
    }
}
