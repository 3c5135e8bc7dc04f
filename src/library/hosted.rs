//! The library of a script that `kite operator` hosts: an allowlist of reviewed
//! capabilities, composed explicitly. Anything not named here does not exist for hosted
//! scripts; `kite check --hosted` (and the operator's own check) says so.
//!
//! Who uses it: the author of a StarlarkController or ClusterStarlarkController, whose
//! script is untrusted code. What it reaches: the cluster, only through the
//! controller's own impersonated identity (or the operator's shared caches that the
//! identity was checked against), and pure computation. Nothing here reads or writes a
//! file, a socket, a process or the environment of the operator's machine, and every
//! wait ends with the handler's time budget.
//!
//! Adding a builtin to a capability named here, or a method to a value reachable from
//! one, fails `tests::everything_reachable_is_on_the_allowlist` until the name is added
//! to `allowlist.txt` beside this file: that is the review.

use std::sync::OnceLock;

use starlark::environment::{Methods, MethodsBuilder};

use crate::k8s::module::{Edition, ModuleAttr};
use crate::script::library::{Capability, Library, Withheld};
use crate::{control, k8s};

/// Where messages say hosted scripts run.
pub const PLACE: &str = "kite operator";

/// The host's capabilities a hosted script gets, each with why it is safe.
pub const CAPABILITIES: &[Capability] = &[
    // The language itself: pure.
    Capability::Language,
    // print/fmt: text to the hosted printer (the operator's log, tagged).
    Capability::Print,
    // json, base64, strings, uuid, regexp and the pure parts of hash, yaml and
    // template: computations on values; their file functions are in `Files`.
    Capability::Codecs,
    // log: records to the operator's log.
    Capability::Log,
    // time and retry: the clock; every wait ends with the handler's budget.
    Capability::Time,
    // var_*: the StarlarkController's own spec.vars.
    Capability::Vars,
    // Not: Files, Os, Http, Ssh (this machine's files, processes, environment and network),
    // Formats (csv/gzip/zip read and write files), Terminal (io reads stdin),
    // Concur (batches that wait as long as their calls; not reviewed for hosting),
    // Lifecycle (the process's signals; a handler's run is the operator's), Unprovided
    // (they only fail).
];

/// The edition of `k8s` hosted scripts get: the cluster calls (each one impersonated)
/// and `k8s.control`. Not `k8s.fake` or `k8s.testing` (they load files and run other
/// scripts), `k8s.webhook` (a listener), `k8s.port_forward` (a listener) or `k8s.cp`
/// (files).
pub struct Operator;

fn operator_methods(builder: &mut MethodsBuilder) {
    k8s::module::client_methods(builder);
    control::request::control_method(builder);
}

starlark::methods_static!(OPERATOR_METHODS = operator_methods);

impl Edition for Operator {
    fn methods() -> &'static Methods {
        OPERATOR_METHODS.methods()
    }

    fn module_attrs() -> &'static [ModuleAttr] {
        &[]
    }
}

/// The hosted library, built once.
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        Library::builder_of(CAPABILITIES)
            .globals(k8s::module::register::<Operator>)
            .module("k8s", k8s::module::loadable::<Operator>)
            .signatures(k8s::module::signatures)
            .signatures(control::request::signatures)
            .withheld(Withheld {
                full: super::library,
                place: PLACE,
            })
            .build()
    })
}

/// `kite check --hosted`: checks a script against the hosted library.
///
/// # Errors
/// As [`crate::script::check::check`]; what the operator leaves out is named as "not
/// available in kite operator".
pub fn check(path: &std::path::Path) -> Result<String, crate::script::check::Error> {
    crate::script::check::check(library(), path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use starlark::docs::{DocItem, DocMember};
    use starlark::environment::Module;
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};
    use starlark::values::Value;

    use super::library;

    /// The reviewed list: every name a hosted script can reach.
    const ALLOWLIST: &str = include_str!("allowlist.txt");

    /// Values hosted builtins return whose methods are names of their own, each made by
    /// an expression, keyed by the type their functions declare.
    const SAMPLES: &[(&str, &str)] = &[
        ("k8s.client", "k8s.config(namespace = 'x')"),
        ("hash.source", "hash.text('a')"),
        ("base64.source", "base64.text('a')"),
        ("regexp.pattern", "regexp.compile('a')"),
        ("regexp.match", "regexp.compile('a').find('a')"),
        ("template", "template.text('x')"),
        ("time", "time.now()"),
        ("duration", "time.duration('1s')"),
        ("logger", "log.logger()"),
        ("result", "regexp.try_compile('a')"),
        ("AttrDict", "json.decode('{}')"),
    ];

    /// Types that are plain data: their attributes are the language's own.
    fn plain(ty: &str) -> bool {
        let base = ty.split(['[', ' ', '|']).next().unwrap_or(ty);
        ty.starts_with('(')
            || base.starts_with("typing.")
            || matches!(
                base,
                "str"
                    | "int"
                    | "bool"
                    | "float"
                    | "None"
                    | "NoneType"
                    | "list"
                    | "dict"
                    | "tuple"
                    | "typing.Any"
                    | "typing.Callable"
                    | "function"
                    | "bytes"
                    | "range"
                    | "set"
            )
    }

    /// The types every reachable builtin declares it returns, beyond plain data.
    fn returned_types(names: &BTreeSet<String>) -> BTreeSet<String> {
        let mut types = BTreeSet::new();
        Module::with_temp_heap(|module| {
            let heap = module.heap();
            for (name, value) in library().globals().iter() {
                collect(heap, name, value.to_value(), 0, &mut types);
            }
            let _ = names;
        });
        types
    }

    fn collect<'v>(
        heap: starlark::values::Heap<'v>,
        name: &str,
        value: Value<'v>,
        depth: usize,
        out: &mut BTreeSet<String>,
    ) {
        if let DocItem::Member(DocMember::Function(f)) = value.documentation() {
            for ty in f.ret.typ.to_string().split(" | ") {
                if !plain(ty) {
                    out.insert(ty.to_owned());
                }
            }
            return;
        }
        if depth > 4 {
            return;
        }
        for attr in value.dir_attr() {
            if let Ok(Some(v)) = value.get_attr(&attr, heap) {
                collect(heap, &format!("{name}.{attr}"), v, depth + 1, out);
            }
        }
    }

    /// A runtime and a host as the operator gives a hosted script (cluster access only).
    fn hosted_host() -> (tokio::runtime::Runtime, crate::script::host::Host) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let host = crate::script::host::Host::new(
            library(),
            crate::script::vars::Vars::default(),
            crate::script::permissions::Permissions::k8s_only(),
            rt.handle().clone(),
        );
        (rt, host)
    }

    /// What a hosted script can reach: the library's globals and their attributes, and
    /// the methods of every value type a hosted builtin returns (as `<type>.method`).
    fn reachable() -> BTreeSet<String> {
        let mut names = library().reachable().clone();
        let (_rt, host) = hosted_host();
        for (ty, code) in SAMPLES {
            Module::with_temp_heap(|module| {
                let ast = AstModule::parse("sample.star", (*code).to_owned(), &Dialect::Extended)
                    .unwrap();
                let mut eval = Evaluator::new(&module);
                eval.extra = Some(&host);
                let v = eval
                    .eval_module(ast, library().globals())
                    .unwrap_or_else(|e| panic!("{code}: {e}"));
                for attr in v.dir_attr() {
                    names.insert(format!("<{ty}>.{attr}"));
                }
            });
        }
        names
    }

    /// A new builtin, namespace, `k8s` function or method of a returned value fails here
    /// until someone decides it is safe for untrusted scripts and adds it to
    /// `allowlist.txt` (or keeps it out of the hosted library).
    #[test]
    fn everything_reachable_is_on_the_allowlist() {
        let found = reachable();
        let listed: BTreeSet<String> = ALLOWLIST
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        let new: Vec<&String> = found.difference(&listed).collect();
        let gone: Vec<&String> = listed.difference(&found).collect();
        assert!(
            new.is_empty() && gone.is_empty(),
            "reachable from a hosted script but not on src/library/allowlist.txt (review, then add or withhold): {new:#?}\n\
             on the allowlist but no longer reachable (remove): {gone:#?}"
        );
    }

    /// Every value type a hosted builtin says it returns has a sample above, so its
    /// methods are enumerated too.
    #[test]
    fn every_returned_type_has_a_sample() {
        let types = returned_types(&BTreeSet::new());
        let sampled: BTreeSet<&str> = SAMPLES.iter().map(|(t, _)| *t).collect();
        let missing: Vec<&String> = types
            .iter()
            .filter(|t| !sampled.contains(t.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "returned by hosted builtins, not sampled: {missing:#?}"
        );
    }

    /// Runs `code` as the operator runs a hosted script (its library, cluster access
    /// only, no directory to load from); the error, if any.
    fn run_hosted(code: &str) -> Result<String, String> {
        let (_rt, host) = hosted_host();
        crate::script::run::run_text(
            "tenant.star",
            code,
            &host,
            std::time::Duration::from_secs(5),
        )
        .map(|_| String::new())
        .map_err(|e| e.to_string())
    }

    /// The attack of issue 26 and its variants: every way a tenant's script could read a
    /// file, open a socket or run a process on the operator's machine is not there.
    #[test]
    fn a_hosted_script_reaches_no_file_socket_process_or_environment() {
        let attacks = [
            (
                "k8s.testing.controller('/etc/hostname', cluster = None)",
                "testing",
            ),
            ("k8s.fake(files = ['Cargo.toml'])", "fake"),
            ("getattr(k8s, 'fake')()", "fake"),
            ("getattr(k8s, 'testing')", "testing"),
            ("k8s.webhook('/v', validate = None)", "webhook"),
            ("k8s.cp('p', 'p:/etc/passwd', '/tmp/x')", "cp"),
            ("k8s.try_cp('p', 'p:/etc/passwd', '/tmp/x')", "try_cp"),
            ("k8s.port_forward('p', 80)", "port_forward"),
            (
                "k8s.config(namespace = 'x').port_forward('p', 80)",
                "port_forward",
            ),
            ("yaml.file('/etc/hostname').decode()", "file"),
            ("yaml.source({}).write_file('/tmp/x')", "source"),
            ("hash.file('/etc/hostname').sha256()", "file"),
            ("hash.try_file('/etc/hostname')", "try_file"),
            ("json.file('/etc/hostname').decode()", "file"),
            ("json.try_file('/etc/hostname')", "try_file"),
            ("json.source({}).write_file('/tmp/x')", "source"),
            ("json.try_source({})", "try_source"),
            ("base64.file('/etc/hostname').encode()", "file"),
            ("base64.try_file('/etc/hostname')", "try_file"),
            ("yaml.try_file('/etc/hostname')", "try_file"),
            ("yaml.try_source({})", "try_source"),
            ("template.file('/etc/hostname')", "file"),
            ("template.try_file('/etc/hostname')", "try_file"),
            ("fs.read_text('/etc/hostname')", "fs"),
            ("read_text('/etc/hostname')", "read_text"),
            ("path('/etc/hostname')", "path"),
            ("os.env('HOME')", "os"),
            ("env('HOME')", "env"),
            ("exec('id')", "exec"),
            ("hostname()", "hostname"),
            ("http.get('http://127.0.0.1:1/')", "http"),
            ("csv.file('/etc/hostname').read()", "csv"),
            ("gzip.file('/etc/x.gz').decompress('/tmp/x')", "gzip"),
            ("zip.file('/tmp/x.zip').write('/etc/hostname')", "zip"),
            ("io.prompt('password: ', secret = True)", "io"),
            ("table.new(['a'])", "table"),
        ];
        for (code, missing) in attacks {
            let e = run_hosted(code).expect_err(code);
            assert!(
                e.contains(missing)
                    && (e.contains("not found")
                        || e.contains("has no attribute")
                        || e.contains("not supported on type")),
                "{code}: {e}"
            );
        }
        let e = run_hosted("load('/etc/hostname', 'x')").unwrap_err();
        assert!(e.contains("no directory to load files from"), "{e}");
        let e = run_hosted("k8s.config(kubeconfig = '/etc/hostname').list('pods')").unwrap_err();
        assert!(!e.contains("localhost") && !e.contains("127.0"), "{e}");
    }

    /// `kite check --hosted` names what the operator leaves out, where it is used.
    #[test]
    fn check_names_what_kite_operator_leaves_out() {
        let code = "def r(o):\n    k8s.testing.controller('x.star', cluster = None)\n    os.env('X')\n    k8s.fake()\n\nk8s.control('pods', reconcile = r)\n";
        let e = crate::script::check::check_text(library(), "t.star", code)
            .unwrap_err()
            .to_string();
        for want in [
            "t.star:2:5: k8s.testing is not available in kite operator",
            "t.star:3:5: os is not available in kite operator",
            "t.star:4:5: k8s.fake is not available in kite operator",
        ] {
            assert!(e.contains(want), "{want}\n{e}");
        }
        assert!(!e.contains("undefined"), "{e}");
        assert!(!e.contains("has no function"), "{e}");
        // The same script is fine for kite run.
        assert!(crate::script::check::check_text(super::super::library(), "t.star", code).is_ok());
        // A misspelling is still a misspelling.
        let e = crate::script::check::check_text(library(), "t.star", "k8s.gett('pods', 'x')\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean \"get\""), "{e}");
    }
}
