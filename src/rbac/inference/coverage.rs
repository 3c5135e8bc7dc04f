//! Which inference rule covers each `k8s` function: every function a script can call
//! either has one or is listed as needing no permission, so a new function cannot
//! silently get a too-narrow Role (a test walks the client's whole method table).

use super::{calls, pod_io, workload};

/// How inference knows what a `k8s` function needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// A verb on the kind its first argument names (`get`, `list`, `patch`, ...).
    Kind,
    /// A write of the object it is given (`create`, `apply`, `status`, `event`).
    Object,
    /// A pod subresource (`logs`, `exec`, `cp`, `port_forward`).
    PodIo,
    /// A workload or node helper with its own rule (`scale`, `drain`, `top_pods`, ...).
    Workload,
    /// `k8s.control` and `k8s.webhook`: their own inference (the watch, the events).
    Runtime,
    /// Reaches nothing that RBAC guards.
    Nothing(&'static str),
}

/// Functions that need no permission, and why.
const NOTHING: &[(&str, &str)] = &[
    ("yaml", "renders YAML locally"),
    ("config", "makes a client; its calls are inferred"),
    ("context", "reads the client's settings"),
    ("namespace_name", "reads the client's settings"),
    ("version", "GET /version, open to every authenticated user"),
    (
        "api_resources",
        "discovery, open to every authenticated user",
    ),
    ("fake", "an in-memory cluster (kite test)"),
];

/// The rule that covers `method` (without its `try_` prefix), if any.
pub fn coverage(method: &str) -> Option<Coverage> {
    if calls::kind_verbs(method).is_some() {
        return Some(Coverage::Kind);
    }
    if calls::OBJECT_WRITES.contains(&method) {
        return Some(Coverage::Object);
    }
    if pod_io::subresource(method).is_some() {
        return Some(Coverage::PodIo);
    }
    if workload::needs(method, None, false, false).is_some() {
        return Some(Coverage::Workload);
    }
    if matches!(method, "control" | "webhook") {
        return Some(Coverage::Runtime);
    }
    NOTHING
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, why)| Coverage::Nothing(why))
}

#[cfg(test)]
mod tests {
    use super::coverage;

    /// Every function of `kite run`'s client (the operator's is a subset) is covered.
    #[test]
    fn every_k8s_function_is_covered_or_needs_nothing() {
        let uncovered: Vec<String> = crate::k8s::module::all_method_names()
            .into_iter()
            .filter(|m| coverage(m).is_none())
            .collect();
        assert!(
            uncovered.is_empty(),
            "k8s functions no inference rule covers (add one in src/rbac/inference, or list them in coverage::NOTHING with why): {uncovered:?}"
        );
    }
}
