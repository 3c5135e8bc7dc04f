//! Least-privilege RBAC inferred from a script's syntax tree, without running it.
//!
//! [`infer`] reads the script (and the files it loads), finds every `k8s` call and the
//! `k8s.control()` options, and turns each into the exact verbs kite's client and runtime
//! send for it. Kinds resolve as kubectl resolves them, against a built-in table of the
//! core kinds, CRDs defined in the script with `k8s.obj.crd(...)`, CRD files given by the
//! user, and the cluster's discovery when one is reachable. What cannot be decided
//! statically (a kind held in a variable) becomes a warning naming its `file:line:col`.

mod catalog;
mod extra;
mod inference;
mod rule;
mod source;

use std::path::PathBuf;

pub use catalog::{Catalog, discover};
pub use extra::parse_rule;
pub use inference::{ControlFacts, Inference, WatchNamespace, WebhookFacts, infer, infer_text};
#[cfg(test)]
pub(crate) use rule::Site;
pub use rule::{Rule, Rules, Scope};

/// Why inference failed. Problems inside the script are warnings, not errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Parse(String),
    #[error("CRD file {path}: {message}")]
    Crd { path: PathBuf, message: String },
    #[error("--rule {rule:?}: {message}")]
    ExtraRule { rule: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
