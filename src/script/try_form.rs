//! `try_X` and global aliases derived from a namespace's function `X`, rather than
//! written out a second time: upstream Starkite offers `try_X` for every function of a
//! module, returning a Result (`.ok`, `.value`, `.error`) where `X` would fail, and
//! predeclares some of `os`'s functions as globals too.
//!
//! A [`TryForm`] calls `X` with the arguments it is given and turns the error `X`
//! raises into a failed Result with the same text. Two kinds of error still end the
//! call, as they do in the `try_` forms written by hand: a call that does not fit `X`'s
//! signature (the mistake is the script's code, not its data), and any error once the
//! call's time or memory has run out (a stopped script is not the script's to catch).
//!
//! A `try_` form that must differ from `X` is still written by hand, next to `X`: one
//! that names itself in its messages or permission checks (`os.try_cwd`,
//! `concur.try_map`, `http.try_get`), that returns what `X` would not (`os.try_exec`'s
//! output of a failed program), that turns running out of the budget into a Result
//! (`time.try_sleep`, `io.try_prompt`), or whose `X` names the script's line it was
//! called from (`log.try_set_format`: a derived form's call of `X` has no line). The
//! methods of a value (`regexp` patterns, `base64` sources, an `ssh.client`) are written
//! by hand too, as a method is bound to its value when it is looked up and a derived
//! form would have to bind it again. (`k8s.try_X` has its own wrapper, `k8s::try_call`,
//! over the client's bound methods; it also catches a call that does not fit.)
//!
//! A function of a namespace without a `try_` form fails
//! `library::try_forms::every_function_of_every_namespace_has_its_try_form` unless it
//! is on that module's list of exceptions, with the reason.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::docs::{DocItem, DocMember, DocString, DocStringKind};
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::eval::{Arguments, Evaluator};
use starlark::typing::Ty;
use starlark::values::{FrozenValue, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};
use starlark::{ErrorKind, starlark_simple_value};

use crate::script::outcome::result;

/// `try_X`: calls `X` and returns its value, or the error it raises, as a Result.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct TryForm {
    /// `X`, a frozen function.
    inner: FrozenValue,
    /// `try_X`, as `str()` shows it (a builtin shows its own name).
    name: String,
}

starlark_simple_value!(TryForm);

impl fmt::Display for TryForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Whether the call running on this thread has to end whatever it raised: its time or
/// memory has run out, or its controller is stopping.
fn stopping() -> bool {
    crate::script::budget::check().is_err() || crate::script::memory::exhausted()
}

#[starlark_value(type = "function")]
impl<'v> StarlarkValue<'v> for TryForm {
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        match self.inner.to_value().invoke(args, eval) {
            Ok(value) => Ok(result(eval.heap(), Ok(value))),
            // `X`'s own failure, not a call that does not fit it: as the hand-written
            // forms give it, `{:#}` (the message and its causes).
            Err(e) => match e.kind() {
                ErrorKind::Native(cause) if !stopping() => {
                    Ok(result(eval.heap(), Err(format!("{cause:#}"))))
                }
                _ => Err(e),
            },
        }
    }

    /// `X`'s parameters, for `kite check` and the language server, returning a Result.
    fn documentation(&self) -> DocItem {
        match self.inner.to_value().documentation() {
            DocItem::Member(DocMember::Function(mut f)) => {
                let of = self.name.strip_prefix("try_").unwrap_or(&self.name);
                f.docs = DocString::from_docstring(
                    DocStringKind::Rust,
                    &format!("`{of}()` as a result (`.ok`, `.value`, `.error`)."),
                );
                f.ret.typ = Ty::any();
                f.ret.docs = None;
                DocItem::Member(DocMember::Function(f))
            }
            other => other,
        }
    }
}

/// Lets `builder` set the values of `functions`, whose heap it then keeps alive. Every
/// name of `names` must be one of them: a misspelt name would leave a function out in
/// silence (checked in the unit tests, which build every library).
fn refer(builder: &mut GlobalsBuilder, functions: &Globals, names: &[&str]) {
    debug_assert!(
        names
            .iter()
            .all(|n| functions.iter().any(|(name, _)| name == *n)),
        "{names:?} are not all functions of {:?}",
        functions.names().collect::<Vec<_>>()
    );
    builder.frozen_heap().add_reference(functions.heap());
}

/// Adds `functions` (built once, in a [`starlark::environment::GlobalsStatic`]) to
/// `builder`, a namespace's, and right after each of them named in `tries` its `try_`
/// form.
pub fn with_tries(builder: &mut GlobalsBuilder, functions: &Globals, tries: &[&str]) {
    refer(builder, functions, tries);
    for (name, value) in functions.iter() {
        builder.set(name, value);
        if tries.contains(&name) {
            let name = format!("try_{name}");
            builder.set(
                &name,
                TryForm {
                    inner: value,
                    name: name.clone(),
                },
            );
        }
    }
}

/// Adds the functions of `functions` named in `names` to `builder` under the same
/// names: a namespace's functions that upstream predeclares as globals too (`os.env`
/// as `env`), the very same values in both places.
pub fn aliases(builder: &mut GlobalsBuilder, functions: &Globals, names: &[&str]) {
    refer(builder, functions, names);
    for (name, value) in functions.iter().filter(|(name, _)| names.contains(name)) {
        builder.set(name, value);
    }
}

#[cfg(test)]
mod tests {
    use starlark::docs::{DocItem, DocMember};
    use starlark::environment::{GlobalsBuilder, Module};
    use starlark::eval::Evaluator;
    use starlark::starlark_module;
    use starlark::syntax::{AstModule, Dialect};

    use crate::script::builtins::snippets::{eval, eval_allowing};

    /// `half(n)`: `n / 2`, failing with a cause for an odd `n`.
    #[starlark_module]
    fn halves(builder: &mut GlobalsBuilder) {
        fn half(#[starlark(require = pos)] n: i32) -> anyhow::Result<i32> {
            if n % 2 != 0 {
                return Err(anyhow::anyhow!("{n} is odd").context("half: cannot halve"));
            }
            Ok(n / 2)
        }

        fn twice(#[starlark(require = pos)] n: i32) -> anyhow::Result<i32> {
            Ok(n * 2)
        }
    }

    starlark::globals_static!(HALVES = halves);

    /// Runs `code` with `half`, `try_half` and `twice` as globals.
    fn run(code: &str) -> Result<String, String> {
        let globals = GlobalsBuilder::standard()
            .with(|b| super::with_tries(b, HALVES.globals(), &["half"]))
            .build();
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            eval.eval_module(ast, &globals)
                .map(starlark::values::Value::to_repr)
                .map_err(|e| e.to_string())
        })
    }

    #[test]
    fn a_try_form_returns_the_value_or_the_error_as_a_result() {
        assert_eq!(
            run("r = try_half(4)\n(r.ok, r.value, r.error, str(try_half), type(try_half))")
                .unwrap(),
            r#"(True, 2, "", "try_half", "function")"#
        );
        let raised = run("half(3)").unwrap_err();
        let caught = run("r = try_half(3)\n(r.ok, r.value, r.error)").unwrap();
        assert_eq!(caught, r#"(False, None, "half: cannot halve: 3 is odd")"#);
        assert!(raised.contains("half: cannot halve"), "{raised}");
        // Only the functions named get a try_ form.
        assert!(run("try_twice(1)").is_err());
    }

    /// Abuse (a hosted script catching its own end): once the call's time has run out,
    /// or its controller is stopping, `X`'s error is not turned into a Result, so a
    /// script cannot loop on `try_X` past its budget.
    #[test]
    fn a_try_form_past_its_budget_or_stopped_raises() {
        use crate::script::budget::{self, Budget};
        use std::time::Duration;
        let caught = budget::within(Duration::from_mins(1), || run("try_half(3).ok"));
        assert_eq!(caught.as_deref(), Ok("False"));
        let raised = budget::within(Duration::ZERO, || run("try_half(3)")).unwrap_err();
        assert!(raised.contains("half: cannot halve"), "{raised}");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let budget = Budget {
            deadline: std::time::Instant::now() + Duration::from_mins(1),
            stop: Some(budget::Cancel::flag(stop)),
        };
        let raised = budget::scope(budget, || run("try_half(3)")).unwrap_err();
        assert!(raised.contains("half: cannot halve"), "{raised}");
    }

    #[test]
    fn a_call_that_does_not_fit_the_function_still_fails() {
        let e = run("try_half()").unwrap_err();
        assert!(e.contains("Wrong number of positional arguments"), "{e}");
        let e = run("try_half('x')").unwrap_err();
        assert!(e.contains("half"), "{e}");
    }

    #[test]
    fn a_try_form_documents_the_parameters_of_its_function() {
        let globals = GlobalsBuilder::new()
            .with(|b| super::with_tries(b, HALVES.globals(), &["half"]))
            .build();
        let params = |name: &str| match globals
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_value().documentation())
        {
            Some(DocItem::Member(DocMember::Function(f))) => format!("{:?}", f.params),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(params("try_half"), params("half"));
    }

    #[test]
    fn every_function_of_a_derived_namespace_has_its_try_form() {
        // `os.exit` ends the script: there is nothing to return a Result of. Names in
        // capitals are constants (`time.RFC3339`).
        let namespaces = [
            ("os", r#"["exit"]"#),
            ("yaml", "[]"),
            ("json", "[]"),
            ("hash", "[]"),
            ("csv", "[]"),
            ("template", "[]"),
            // `time.now` has never had one; `try_sleep` is written by hand.
            ("time", r#"["now"]"#),
        ];
        for (namespace, without) in namespaces {
            let missing = eval(&format!(
                "[n for n in dir({namespace}) if not n.startswith('try_') \
                 and not n[0].isupper() \
                 and 'try_' + n not in dir({namespace})]"
            ));
            assert_eq!(missing.as_deref(), Ok(without), "{namespace}");
        }
    }

    /// The text of a string's repr.
    fn unquote(repr: &str) -> String {
        let inner = repr.strip_prefix('"').and_then(|r| r.strip_suffix('"'));
        inner
            .unwrap_or(repr)
            .replace("\\n", "\n")
            .replace("\\\"", "\"")
            .replace("\\\\", "\\")
    }

    #[test]
    fn a_try_form_carries_the_error_its_function_raises() {
        let calls = [
            "os.env('HOME')",
            "os.setenv('X', '1')",
            "os.chdir('/')",
            "os.which('sh')",
            "yaml.decode('a: [')",
            "yaml.encode_all(1)",
            "yaml.file('x.yaml')",
            "json.decode('{')",
            "json.encode(json)",
            "hash.bytes(1)",
            "hash.file('x')",
            "csv.source(1)",
            "template.text('{{')",
            "template.render('{{.a}', {})",
            "template.file('x.tmpl')",
            "time.parse('2006', 'x')",
            "time.duration('soon')",
            "time.since(1)",
            "base64.decode('!')",
            "fs.path(1)",
            "http.config(timeout = 'soon')",
            "http.server()",
            "http.serve(None)",
        ];
        for call in calls {
            let raised = eval(call).unwrap_err();
            let (namespace, function) = call.split_once('.').unwrap();
            let caught = eval(&format!("{namespace}.try_{function}.error")).unwrap();
            let caught = unquote(&caught);
            let caught = caught.as_str();
            assert!(
                !caught.is_empty() && raised.contains(caught),
                "{call}: {caught:?} against {raised}"
            );
        }
        let r = eval_allowing("r = os.try_chdir('/nonexistent/kite/dir')\n(r.ok, r.error)");
        let raised = eval_allowing("os.chdir('/nonexistent/kite/dir')").unwrap_err();
        let r = r.unwrap();
        assert!(r.starts_with("(False, \""), "{r}");
        let caught = r.trim_start_matches("(False, \"").trim_end_matches("\")");
        assert!(raised.contains(caught), "{caught:?} against {raised}");
    }

    #[test]
    fn an_alias_is_the_same_function_as_its_namespace_member() {
        assert_eq!(
            eval(
                "[f == getattr(os, n) for n, f in [('env', env), ('which', which), ('pid', pid)]]"
            ),
            Ok("[True, True, True]".to_owned())
        );
    }
}
