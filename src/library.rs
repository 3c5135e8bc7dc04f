//! The library every script sees, composed from the layers: the host's standard
//! globals, the `k8s` module (also loadable as `load("k8s", "k8s")`), and the
//! `k8s.control` method of the control layer.
//!
//! The host (`script`) knows neither `k8s` nor `control`; this is the one place that
//! puts them together, for `kite run`, `kite check` and `kite operator`.

use std::sync::OnceLock;

use crate::script::library::Library;
use crate::{control, k8s};

/// The composed library, built once.
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        // Before any client value is used: the method table is fixed on first use.
        k8s::module::extend_methods(control::request::control_method);
        Library::builder()
            .globals(k8s::module::register)
            .module("k8s", k8s::module::loadable)
            .signatures(k8s::module::signatures)
            .signatures(control::request::signatures)
            .build()
    })
}

#[cfg(test)]
mod tests {
    use super::library;
    use crate::script::lint::tests::problems;

    #[test]
    fn k8s_calls_are_checked_against_their_signatures() {
        let found = problems(library(), "k8s.get('pods', 'x', namespce='y')\n");
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("1:1: k8s.get(): unknown keyword argument \"namespce\"")),
            "{found:?}"
        );
        assert!(problems(library(), "k8s.list('pods', namespace='x')").is_empty());
    }

    #[test]
    fn builder_and_control_keywords_are_checked() {
        let found = problems(library(), "k8s.obj.deployment(name='x', replica=2)");
        assert!(
            found
                .iter()
                .any(|p| p.contains("unknown keyword argument \"replica\"")),
            "{found:?}"
        );
        assert!(
            problems(
                library(),
                "k8s.obj.deployment('x', replicas=2, containers=[])"
            )
            .is_empty()
        );
        let found = problems(library(), "k8s.control('pods', reconcile=None, workerz=2)");
        assert!(
            found
                .iter()
                .any(|p| p.contains("unknown keyword argument \"workerz\"")),
            "{found:?}"
        );
    }
}
