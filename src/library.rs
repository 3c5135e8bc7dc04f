//! The libraries scripts see, composed from the layers: `kite run`'s (every capability,
//! every `k8s` function) and, in [`hosted`], the operator's allowlist.
//!
//! The host (`script`) knows neither `k8s` nor `control`; this is the one place that
//! puts them together, for `kite run`, `kite check`, `kite test` and `kite operator`.

pub mod hosted;
#[cfg(test)]
mod try_forms;

use std::sync::OnceLock;

use starlark::environment::{Methods, MethodsBuilder};

use crate::k8s::module::{Edition, ModuleAttr};
use crate::script::library::{Builder, Library};
use crate::{control, k8s};

/// The edition of `k8s` that `kite run`, `kite dev` and `kite test` scripts get: every
/// function, `k8s.fake`, `k8s.webhook` and `k8s.testing`.
pub struct Kite;

fn kite_methods(builder: &mut MethodsBuilder) {
    k8s::module::client_methods(builder);
    k8s::module::local_methods(builder);
    control::request::control_method(builder);
    control::webhook::webhook_method(builder);
    crate::fake_cluster::builtin::fake_method(builder);
}

starlark::methods_static!(KITE_METHODS = kite_methods);

impl Edition for Kite {
    fn methods() -> &'static Methods {
        KITE_METHODS.methods()
    }

    fn module_attrs() -> &'static [ModuleAttr] {
        &[("testing", testing_namespace)]
    }
}

/// `k8s.testing`, handed the library its controllers under test are loaded with:
/// this one, as `harness` cannot name the layer above it.
fn testing_namespace() -> starlark::values::FrozenValue {
    crate::harness::namespace(library)
}

/// The composed library, built once.
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| builder().build())
}

/// The composed library, still open for a command to add its own globals (`kite test`
/// adds the assertions).
pub fn builder() -> Builder {
    Library::builder()
        .globals(k8s::module::register::<Kite>)
        .module("k8s", k8s::module::loadable::<Kite>)
        .signatures(k8s::module::signatures)
        .signatures(control::request::signatures)
        .signatures(control::webhook::signatures)
        .signatures(crate::fake_cluster::builtin::signatures)
        .signatures(crate::harness::signatures)
}
#[cfg(test)]
mod tests {
    use super::library;
    use crate::script::lint::tests::problems;

    /// The sweep of upstream's builder keywords, through `kite check` (here because
    /// only the top of the crate sees the whole library).
    #[test]
    fn kite_check_accepts_every_upstream_keyword() {
        let mut refused = Vec::new();
        for (builder, kw) in crate::k8s::obj::tests_keywords::upstream() {
            let code = format!("k8s.obj.{builder}({kw} = 1)\n");
            refused.extend(problems(library(), &code));
        }
        assert!(refused.is_empty(), "kite check refused: {refused:#?}");
    }

    #[test]
    fn check_refusals_list_each_accepted_keyword_once() {
        let found = problems(
            library(),
            "k8s.obj.cluster_role_binding(name = 'b', bogus = 1)\n",
        );
        let msg = found.join("\n");
        let accepted = msg.split("accepted: ").nth(1).unwrap_or_default();
        let names: Vec<&str> = accepted.trim_end_matches(')').split(", ").collect();
        assert_eq!(names.iter().filter(|n| **n == "name").count(), 1, "{msg}");
        assert!(names.contains(&"role_ref"), "{msg}");
    }

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

    /// Runs `code` with the whole library and every permission; the value of its
    /// last expression, or the error.
    fn run_all(code: &str) -> Result<String, String> {
        run_with(code, crate::script::permissions::Permissions::all())
    }

    fn run_with(
        code: &str,
        permissions: crate::script::permissions::Permissions,
    ) -> Result<String, String> {
        use starlark::environment::Module;
        use starlark::eval::Evaluator;
        use starlark::syntax::{AstModule, Dialect};

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let host = crate::script::host::Host::new(
            library(),
            crate::script::vars::Vars::default(),
            permissions,
            rt.handle().clone(),
        );
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse("test.star", code.to_owned(), &Dialect::Extended)
                .map_err(|e| e.to_string())?;
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&host);
            eval.eval_module(ast, host.library.globals())
                .map(starlark::values::Value::to_repr)
                .map_err(|e| e.to_string())
        })
    }

    #[test]
    fn k8s_fake_serves_every_call() {
        let code = r#"
f = k8s.fake(yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: seeded\ndata:\n  a: '1'\n")
f.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"x": "y"}})
got = f.get("configmap", "cm")
seeded = f.get("cm", "seeded")
other = f.config(namespace = "other").list("configmaps")
k8s.fake(default = True, objects = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}])
[got["data"]["x"], seeded["data"]["a"], len(other), len(k8s.list("pods")), len(f.list("pods"))]
"#;
        assert_eq!(run_all(code), Ok(r#"["y", "1", 0, 1, 0]"#.to_owned()));
    }

    #[test]
    fn k8s_fake_names_the_bad_document() {
        let e = run_all(r"k8s.fake(yaml = 'a: 1\n---\nkind: [\n')").unwrap_err();
        assert!(e.contains("k8s.fake: yaml document 1"), "{e}");
        let e = run_all(
            "k8s.fake(objects = [{'apiVersion': 'v1', 'kind': 'Nope', 'metadata': {'name': 'n'}}])",
        )
        .unwrap_err();
        assert!(
            e.contains("k8s.fake: objects[0]: seeding Nope \"n\""),
            "{e}"
        );
    }

    #[test]
    fn calls_of_missing_k8s_functions_are_named_with_the_closest() {
        let found = problems(
            library(),
            "k8s.gett('pods', 'x')\nk8s.obj.deploymnt(name = 'x')\nk8s.testing.controler('c.star', cluster = None)\n",
        );
        let all = found.join("\n");
        assert!(
            all.contains("k8s.gett(): k8s has no function \"gett\"; did you mean \"get\"?"),
            "{all}"
        );
        assert!(all.contains("did you mean \"deployment\"?"), "{all}");
        assert!(all.contains("did you mean \"controller\"?"), "{all}");
        for fine in [
            "k8s.try_get('pods', 'x')",
            "k8s.control('pods', reconcile = None)",
            "k8s.fake().get('pods', 'x')",
            "k8s.testing.ready(None, 'deployment', 'web')",
            "time.sleep(1)",
            "def f():\n    k8s = None\n    k8s.whatever()\n",
        ] {
            assert_eq!(problems(library(), fine), Vec::<String>::new(), "{fine}");
        }
    }

    /// A fake needs no permission because it reaches nothing: the exemption must not
    /// stretch to real clusters, and fixture files must stay below the test's directory.
    #[test]
    fn a_fake_opens_no_door_to_a_cluster_or_the_files() {
        let none = crate::script::permissions::Permissions::default();
        assert_eq!(
            run_with("len(k8s.fake(default = True).list('pods'))", none),
            Ok("0".to_owned()),
            "a fake needs no flag"
        );
        let e = run_with("k8s.list('pods')", none).unwrap_err();
        assert!(e.contains("needs --allow-k8s"), "no fake, no cluster: {e}");
        let e = run_with(
            "k8s.fake(default = True)\nk8s.config(context = 'prod').list('pods')",
            none,
        )
        .unwrap_err();
        assert!(
            e.contains("needs --allow-k8s"),
            "another context is a cluster: {e}"
        );
        let e = run_with(
            "k8s.fake(default = True)\nk8s.config(kubeconfig = '/etc/kubeconfig').list('pods')",
            crate::script::permissions::Permissions::all(),
        )
        .unwrap_err();
        assert!(e.contains("not available here"), "pinned to the fake: {e}");
        for path in ["../secrets.yaml", "/etc/passwd", "a/../../b.yaml"] {
            let e = run_with(&format!("k8s.fake(files = [{path:?}])"), none).unwrap_err();
            assert!(
                e.contains("must be relative to the test file and stay below its directory"),
                "{path}: {e}"
            );
        }
    }

    #[test]
    fn webhook_keywords_are_checked() {
        let found = problems(library(), "k8s.webhook('/v', validate=None, prot=1)");
        assert!(
            found
                .iter()
                .any(|p| p.contains("unknown keyword argument \"prot\"")),
            "{found:?}"
        );
        let ok = "k8s.webhook('/v', validate=None, mutate=None, port=1, tls_cert='', tls_key='', timeout='5s', failure_policy='Fail')";
        assert!(problems(library(), ok).is_empty());
    }
}
