//! Every function `X` of every namespace a script sees (`os`, `json`, `k8s`,
//! `k8s.testing`, ...) has `try_X` beside it, as upstream Starkite offers one for each
//! function of a module, unless it is on [`WITHOUT_TRY`] with the reason why not. Here
//! because only the top of the crate composes the whole library (`k8s` included).

use std::collections::{BTreeMap, BTreeSet};

use starlark::values::{Heap, Value};

/// Functions that have no `try_` form on purpose, in groups sharing one reason:
/// `(namespace, functions, reason)`.
const WITHOUT_TRY: &[(&str, &[&str], &str)] = &[
    (
        "base64",
        &["encode"],
        "kite's own (upstream has no base64.encode): every string encodes, so it cannot fail",
    ),
    (
        "k8s",
        &["control", "webhook"],
        "they hand the script over to the controller or webhook by ending its top level: a Result would swallow the hand-off",
    ),
    (
        "k8s",
        &["fake"],
        "kite's own test double: a fake that cannot be set up is the test's own failure",
    ),
    (
        "k8s.testing",
        &["controller", "ready"],
        "kite's own test harness (upstream has no k8s.testing): a setup that fails is the test's own failure",
    ),
    (
        "log",
        &["debug", "info", "warn", "error"],
        "a record fails only on the script's own arguments; upstream's log has no try_ forms",
    ),
    (
        "os",
        &["exit"],
        "it ends the script: there is nothing left to hand a Result to",
    ),
    (
        "runtime",
        &[
            "arch",
            "cpu_count",
            "go_version",
            "platform",
            "uname",
            "version",
        ],
        "facts of the platform, which cannot fail; upstream's runtime has no try_ forms",
    ),
    (
        "strings",
        &[
            "center", "cut", "equal", "has_any", "ljust", "quote", "rjust",
        ],
        "pure text functions that fail only on the script's own arguments (a two-character fillchar); upstream's strings has no try_ forms",
    ),
    (
        "table",
        &["new", "print"],
        "a constructor and its printer, which fail only on the script's own arguments; upstream's table has no try_ forms",
    ),
    (
        "time",
        &["now"],
        "the clock cannot fail; upstream's time has no try_ forms",
    ),
    (
        "user",
        &["gid", "home", "id", "name"],
        "upstream's struct of os aliases has no try_ forms: os.try_groupid, os.try_home, os.try_userid and os.try_username are theirs",
    ),
    (
        "uuid",
        &["v4"],
        "it cannot fail; upstream's uuid has no try_ forms",
    ),
    (
        "vars",
        &[
            "var_bool",
            "var_dict",
            "var_float",
            "var_int",
            "var_list",
            "var_names",
            "var_str",
        ],
        "upstream's vars has no try_ forms: an unset variable takes the default, and one that does not parse is the run's --var to fix",
    ),
];

/// Namespaces none of whose functions has a `try_` form, with the reason:
/// `(namespace, reason)`.
const NAMESPACES_WITHOUT_TRY: &[(&str, &str)] = &[(
    "k8s.obj",
    "builders of manifests, which fail only on the script's own keywords (kite check finds them); upstream's k8s.obj has no try_ forms",
)];

/// A namespace as a script sees it: its functions, and its `try_` forms.
#[derive(Default)]
struct Namespace {
    functions: BTreeSet<String>,
    tries: BTreeSet<String>,
}

impl Namespace {
    fn has_try(&self, function: &str) -> bool {
        self.tries.contains(&format!("try_{function}"))
    }
}

/// Plain data: constants (`time.RFC3339`), whose attributes are the language's methods.
const DATA: &[&str] = &[
    "string", "int", "bool", "float", "NoneType", "list", "dict", "tuple", "set", "bytes",
];

/// Every namespace of `kite run`'s library, by its dotted name: each global that is a
/// value with attributes (a namespace, or `k8s`), and each such attribute of one, in
/// turn (`k8s.obj`).
fn namespaces() -> BTreeMap<String, Namespace> {
    let mut out = BTreeMap::new();
    Heap::temp(|heap| {
        for (name, value) in super::library().globals().iter() {
            walk(heap, name, value.to_value(), &mut out);
        }
    });
    out
}

fn walk<'v>(heap: Heap<'v>, path: &str, value: Value<'v>, out: &mut BTreeMap<String, Namespace>) {
    let ty = value.get_type();
    let attrs = value.dir_attr();
    // A function, plain data, or a value with no attributes (upstream's modules kite
    // leaves out) is no namespace.
    if ty == "function" || DATA.contains(&ty) || attrs.is_empty() {
        return;
    }
    let mut namespace = Namespace::default();
    for attr in attrs {
        if attr.starts_with("try_") {
            namespace.tries.insert(attr);
            continue;
        }
        let Ok(Some(member)) = value.get_attr(&attr, heap) else {
            continue;
        };
        if member.get_type() != "function" {
            walk(heap, &format!("{path}.{attr}"), member, out);
        } else if member.dir_attr().is_empty() {
            // (A type, `int` among the language's globals, has attributes: not a call
            // that fails on data.)
            namespace.functions.insert(attr);
        }
    }
    out.insert(path.to_owned(), namespace);
}

/// `(namespace, function)` of every entry of [`WITHOUT_TRY`], each as often as listed.
fn excepted() -> Vec<(&'static str, &'static str)> {
    WITHOUT_TRY
        .iter()
        .flat_map(|(ns, functions, _)| functions.iter().map(move |f| (*ns, *f)))
        .collect()
}

#[test]
fn every_function_of_every_namespace_has_its_try_form() {
    let found = namespaces();
    // The walk sees what a script sees, nested namespaces and `k8s`'s own try_ forms
    // included.
    for (ns, function) in [
        ("os", "env"),
        ("json", "decode"),
        ("k8s", "get"),
        ("k8s.testing", "controller"),
    ] {
        assert!(
            found
                .get(ns)
                .is_some_and(|n| n.functions.contains(function)),
            "the walk missed {ns}.{function}: {:?}",
            found.keys().collect::<Vec<_>>()
        );
    }
    assert!(found["k8s"].has_try("get"), "the walk missed k8s.try_get");
    assert!(found.contains_key("k8s.obj"), "the walk missed k8s.obj");

    let excepted = excepted();
    let missing: Vec<String> = found
        .iter()
        .filter(|(ns, _)| !NAMESPACES_WITHOUT_TRY.iter().any(|(n, _)| n == ns))
        .flat_map(|(ns, namespace)| {
            namespace
                .functions
                .iter()
                .filter(|f| !namespace.has_try(f))
                .filter(|f| !excepted.contains(&(ns.as_str(), f.as_str())))
                .map(move |f| format!("{ns}.try_{f}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "missing try_ forms: {missing:#?}\n\
         Upstream Starkite offers try_X (a Result: .ok, .value, .error) for every function X \
         of a module. For each one above, either derive it where the namespace is built, with \
         crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &[\"X\", ...]) \
         (as src/script/builtins/json.rs does; src/script/try_form.rs says when one is \
         written by hand instead), or, when a Result makes no sense for X (it cannot fail, it \
         ends the script, its errors are the script's own code), add (namespace, X) to \
         WITHOUT_TRY in src/library/try_forms.rs with a one-line reason. A try_ form that \
         hosted scripts reach also goes on src/library/allowlist.txt."
    );
}

#[test]
fn every_exception_names_a_function_without_a_try_form() {
    let found = namespaces();
    let mut problems = Vec::new();
    let excepted = excepted();
    for (i, (ns, function)) in excepted.iter().enumerate() {
        if excepted[..i].contains(&(*ns, *function)) {
            problems.push(format!("{ns}.{function} is listed twice"));
        }
        match found.get(*ns) {
            None => problems.push(format!(
                "{ns}.{function}: there is no namespace {ns} (remove the entry)"
            )),
            Some(n) if !n.functions.contains(*function) => problems.push(format!(
                "{ns}.{function}: {ns} has no function {function} (remove the entry)"
            )),
            Some(n) if n.has_try(function) => problems.push(format!(
                "{ns}.{function}: {ns}.try_{function} exists (remove the entry)"
            )),
            Some(_) => {}
        }
    }
    for (ns, reason) in NAMESPACES_WITHOUT_TRY {
        if reason.trim().is_empty() {
            problems.push(format!("{ns}: an entry needs a reason"));
        }
        match found.get(*ns) {
            Some(n) if n.functions.is_empty() => {
                problems.push(format!("{ns} has no functions (remove the entry)"));
            }
            Some(n) if !n.tries.is_empty() => problems.push(format!(
                "{ns} has try_ forms {:?}: list its functions without one in WITHOUT_TRY instead",
                n.tries
            )),
            Some(_) => {}
            None => problems.push(format!("there is no namespace {ns} (remove the entry)")),
        }
        if WITHOUT_TRY.iter().any(|(n, _, _)| n == ns) {
            problems.push(format!("{ns} is in both lists"));
        }
    }
    for (ns, functions, reason) in WITHOUT_TRY {
        if functions.is_empty() || reason.trim().is_empty() {
            problems.push(format!("{ns}: an entry needs functions and a reason"));
        }
    }
    assert!(
        problems.is_empty(),
        "the exceptions of src/library/try_forms.rs are out of date: {problems:#?}"
    );
}
