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
    /// Running other programs (`--allow-exec`).
    Exec,
}

impl Access {
    /// The flag that grants this access.
    pub fn flag(self) -> &'static str {
        match self {
            Access::K8s => "--allow-k8s",
            Access::Net => "--allow-net",
            Access::Fs => "--allow-fs",
            Access::Env => "--allow-env",
            Access::Exec => "--allow-exec",
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
#[expect(
    clippy::struct_excessive_bools,
    reason = "one switch per flag, as the command line has"
)]
pub struct Permissions {
    pub k8s: bool,
    pub net: bool,
    pub fs: bool,
    pub env: bool,
    pub exec: bool,
}

impl Permissions {
    /// Everything allowed (`--allow-all`).
    pub fn all() -> Self {
        Self {
            k8s: true,
            net: true,
            fs: true,
            env: true,
            exec: true,
        }
    }

    /// Nothing allowed: pure computation only (upstream's `deny-all`).
    pub fn none() -> Self {
        Self::default()
    }

    /// The cluster and nothing else, as the operator grants the scripts it hosts.
    pub fn k8s_only() -> Self {
        Self {
            k8s: true,
            ..Self::none()
        }
    }

    /// Only `access`.
    pub fn only(access: Access) -> Self {
        Self::none().with(access, true)
    }

    /// This set with `access` switched on or off.
    #[must_use]
    pub fn with(mut self, access: Access, allowed: bool) -> Self {
        *self.slot(access) = allowed;
        self
    }

    /// What either set allows.
    #[must_use]
    pub fn union(self, other: Self) -> Self {
        Self {
            k8s: self.k8s || other.k8s,
            net: self.net || other.net,
            fs: self.fs || other.fs,
            env: self.env || other.env,
            exec: self.exec || other.exec,
        }
    }

    /// This set without anything `other` allows.
    #[must_use]
    pub fn minus(self, other: Self) -> Self {
        Self {
            k8s: self.k8s && !other.k8s,
            net: self.net && !other.net,
            fs: self.fs && !other.fs,
            env: self.env && !other.env,
            exec: self.exec && !other.exec,
        }
    }

    /// The kinds of access this set allows.
    pub fn granted(self) -> Vec<Access> {
        [
            Access::K8s,
            Access::Net,
            Access::Fs,
            Access::Env,
            Access::Exec,
        ]
        .into_iter()
        .filter(|a| self.allows(*a))
        .collect()
    }

    /// True when `access` is allowed.
    pub fn allows(self, access: Access) -> bool {
        match access {
            Access::K8s => self.k8s,
            Access::Net => self.net,
            Access::Fs => self.fs,
            Access::Env => self.env,
            Access::Exec => self.exec,
        }
    }

    fn slot(&mut self, access: Access) -> &mut bool {
        match access {
            Access::K8s => &mut self.k8s,
            Access::Net => &mut self.net,
            Access::Fs => &mut self.fs,
            Access::Env => &mut self.env,
            Access::Exec => &mut self.exec,
        }
    }

    /// Checks that `call` may use `access`.
    ///
    /// # Errors
    /// [`Denied`], naming the call and the flag that would allow it.
    pub fn check(&self, call: &str, access: Access) -> Result<(), Denied> {
        if self.allows(access) {
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
        let err = Permissions::k8s_only()
            .check("os.exec", Access::Exec)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "permission denied: os.exec needs --allow-exec (or --allow-all)"
        );
    }

    #[test]
    fn sets_combine() {
        let p = Permissions::only(Access::Fs).union(Permissions::only(Access::Exec));
        assert_eq!(p.granted(), vec![Access::Fs, Access::Exec]);
        assert!(p.check("fs.read", Access::Fs).is_ok());
        assert!(p.check("os.env", Access::Env).is_err());
        let q = Permissions::all().minus(Permissions::only(Access::Exec));
        assert!(!q.exec && q.fs && q.k8s);
        assert!(Permissions::all().check("os.exec", Access::Exec).is_ok());
    }
}
