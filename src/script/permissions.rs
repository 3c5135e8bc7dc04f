//! Permission flags: everything that reaches outside the process is denied until allowed.

/// A kind of access a builtin needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The Kubernetes API (`--allow-k8s`; `--allow-net` implies it).
    K8s,
    /// Other network access (`--allow-net`).
    Net,
    /// The filesystem beyond the scripts themselves (`--allow-fs`).
    Fs,
    /// Environment variables (`--allow-env`).
    Env,
}

impl Access {
    fn flag(self) -> &'static str {
        match self {
            Access::K8s => "--allow-k8s",
            Access::Net => "--allow-net",
            Access::Fs => "--allow-fs",
            Access::Env => "--allow-env",
        }
    }
}

/// A denied call, e.g. `permission denied: k8s.get needs --allow-k8s (or --allow-all)`.
#[derive(Debug, thiserror::Error)]
#[error("permission denied: {call} needs {flag} (or --allow-all)")]
pub struct Denied {
    pub call: String,
    pub flag: &'static str,
}

/// What this run may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Permissions {
    pub k8s: bool,
    pub net: bool,
    pub fs: bool,
    pub env: bool,
}

impl Permissions {
    /// Everything allowed (`--allow-all`).
    pub fn all() -> Self {
        Self {
            k8s: true,
            net: true,
            fs: true,
            env: true,
        }
    }

    /// Builds the permissions from the command-line flags.
    pub fn from_flags(all: bool, k8s: bool, net: bool, fs: bool, env: bool) -> Self {
        if all {
            return Self::all();
        }
        // Upstream scripts are run with --allow-net; the cluster is network access.
        Self {
            k8s: k8s || net,
            net,
            fs,
            env,
        }
    }

    /// Checks that `call` may use `access`.
    ///
    /// # Errors
    /// [`Denied`], naming the call and the flag that would allow it.
    pub fn check(&self, call: &str, access: Access) -> Result<(), Denied> {
        let allowed = match access {
            Access::K8s => self.k8s,
            Access::Net => self.net,
            Access::Fs => self.fs,
            Access::Env => self.env,
        };
        if allowed {
            Ok(())
        } else {
            Err(Denied {
                call: call.to_owned(),
                flag: access.flag(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_names_the_call_and_flag() {
        let err = Permissions::default()
            .check("k8s.get", Access::K8s)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "permission denied: k8s.get needs --allow-k8s (or --allow-all)"
        );
    }

    #[test]
    fn net_implies_k8s_and_all_allows_everything() {
        let p = Permissions::from_flags(false, false, true, false, false);
        assert!(p.check("k8s.get", Access::K8s).is_ok());
        assert!(p.check("fs.read", Access::Fs).is_err());
        let all = Permissions::from_flags(true, false, false, false, false);
        assert!(all.check("os.getenv", Access::Env).is_ok());
    }
}
