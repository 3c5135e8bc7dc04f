//! The library a script sees: its globals, the modules `load()` names without a file,
//! and the signatures `kite check` holds calls to.
//!
//! The host provides the standard part ([`Library::standard`]); the layers above add
//! theirs through a [`Builder`], and the top of the crate composes them
//! (`crate::library`). So the host never names the layers that extend it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::values::{Heap, Value};

use super::builtins;
use super::lint::Signature;

/// Adds the values of a module that `load()` names without a file.
pub type ModuleFn = fn(&Module);

/// Adds signatures of builtins that the globals' own docs do not describe (methods of
/// values, builtins that take `**kwargs` and check the names themselves).
pub type SignaturesFn = fn(&mut BTreeMap<String, Signature>);

/// The globals, loadable modules and extra signatures scripts see.
pub struct Library {
    globals: Globals,
    modules: Vec<(&'static str, ModuleFn)>,
    signatures: Vec<SignaturesFn>,
    withheld: Option<Withheld>,
    /// [`Library::reachable`], worked out on first use.
    reachable: OnceLock<BTreeSet<String>>,
}

/// What a narrower library leaves out of a fuller one, so that `kite check` can say
/// "not available in kite operator" instead of "undefined".
#[derive(Clone, Copy)]
pub struct Withheld {
    /// The fuller library (`kite run`'s).
    pub full: fn() -> &'static Library,
    /// Where this library is used, for messages: "kite operator".
    pub place: &'static str,
}

/// Composes a [`Library`]: the standard globals plus what each layer adds.
pub struct Builder {
    globals: GlobalsBuilder,
    modules: Vec<(&'static str, ModuleFn)>,
    signatures: Vec<SignaturesFn>,
    withheld: Option<Withheld>,
}

/// A reviewed group of builtins a library is composed of. `kite run` gets them all; the
/// operator's hosted scripts get only the ones its allowlist names
/// (`crate::library::hosted`), so a builtin that is in no capability a hosted library
/// names does not exist for hosted scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// The Starlark language's own functions (`type` naming builtins as Go's Starlark
    /// does), `struct`, `map`, `filter`, `partial`, `debug`, `set`, and upstream's
    /// `Result(ok, value, error)`: pure.
    Language,
    /// `print`, `fmt` and its `printf`/`println`/`sprintf` globals: text to the run's
    /// printer (a hosted controller's goes to the operator's log, tagged with it).
    Print,
    /// `json`, `base64`, `strings`, `uuid`, `regexp`, and the pure parts of `hash`,
    /// `yaml` and `template`: computations on values.
    Codecs,
    /// `log`: records to the process's log (tagged with the controller when hosted).
    Log,
    /// `time` and `retry`: the clock, and waits that end with the call's time budget.
    Time,
    /// `var_str`, `var_int`, `var_bool`, `var_float`, `var_names`, `var_list`, `var_dict`
    /// and the `vars` module: the run's own variables.
    Vars,
    /// Files of this machine: `fs`, `hash.file`, `yaml.file`, `yaml.source`,
    /// `json.file`, `json.source`, `base64.file`, `template.file` (each also behind
    /// `--allow-fs`).
    Files,
    /// The process and its machine: `os` and its global aliases (behind `--allow-env`,
    /// `--allow-exec`), and `runtime` (the platform's facts).
    Os,
    /// HTTP: the `http` client and server (behind `--allow-net`).
    Http,
    /// Data formats and archives: `csv`, `gzip`, `zip` (what reads or writes a file is
    /// behind `--allow-fs`) and `table`. Not hosted: mostly files of this machine.
    Formats,
    /// Questions on kite's terminal: `io` (behind `--allow-env`; reads stdin).
    Terminal,
    /// `concur`: batches of calls to the script's own functions (made in turn on its
    /// thread), which wait as long as their calls do.
    Concur,
    /// `defer` and `on_signal`: cleanup at the end of a script's own run, and the
    /// process's signals (a hosted script's run is the operator's).
    Lifecycle,
    /// Remote shells and file copies: `ssh` (behind `--allow-net`, and `--allow-fs` for
    /// keys and local files).
    Ssh,
    /// Upstream's modules kite leaves out, which fail saying so when used.
    Unprovided,
}

impl Capability {
    /// Every capability: what `kite run` composes.
    pub const ALL: &[Capability] = &[
        Capability::Language,
        Capability::Print,
        Capability::Codecs,
        Capability::Log,
        Capability::Time,
        Capability::Vars,
        Capability::Files,
        Capability::Os,
        Capability::Http,
        Capability::Formats,
        Capability::Terminal,
        Capability::Concur,
        Capability::Lifecycle,
        Capability::Ssh,
        Capability::Unprovided,
    ];
}

impl Library {
    /// A builder that starts from every standard capability ([`Capability::ALL`]).
    pub fn builder() -> Builder {
        Library::builder_of(Capability::ALL)
    }

    /// A builder that starts from the standard globals of `caps` only.
    pub fn builder_of(caps: &[Capability]) -> Builder {
        use builtins::{fmt, fs, os};
        let has = |c| caps.contains(&c);
        let mut extensions = Vec::new();
        if has(Capability::Language) {
            extensions.extend([
                LibraryExtension::StructType,
                LibraryExtension::Map,
                LibraryExtension::Filter,
                LibraryExtension::Partial,
                LibraryExtension::Debug,
                LibraryExtension::SetType,
            ]);
        }
        if has(Capability::Print) {
            extensions.push(LibraryExtension::Print);
        }
        let mut globals = if has(Capability::Language) {
            GlobalsBuilder::extended_by(&extensions).with(super::outcome::result_global)
        } else {
            let mut b = GlobalsBuilder::new();
            for e in extensions {
                e.add(&mut b);
            }
            b
        };
        if has(Capability::Language) {
            // After the language's own: upstream names builtins' type apart from defs'.
            globals = globals.with(builtins::types::type_global);
        }
        if has(Capability::Codecs) {
            globals = codecs(globals, has(Capability::Files));
        }
        if has(Capability::Print) {
            globals = globals
                .with_namespace("fmt", fmt::fmt_namespace)
                .with(fmt::fmt_globals);
        }
        if has(Capability::Log) {
            globals = globals.with_namespace("log", builtins::log::log_namespace);
        }
        if has(Capability::Time) {
            globals = globals
                .with_namespace("time", builtins::time::time_namespace)
                .with_namespace("retry", builtins::retry::retry_namespace);
        }
        if has(Capability::Vars) {
            globals = globals
                .with(builtins::vars::var_builtins)
                .with_namespace("vars", builtins::vars::vars_namespace);
        }
        if has(Capability::Os) {
            globals = globals
                .with_namespace("os", os::os_namespace)
                .with(os::os_globals)
                .with_namespace("runtime", builtins::runtime::runtime_namespace);
        }
        if has(Capability::Files) {
            globals = globals
                .with_namespace("fs", fs::fs_namespace)
                .with(fs::fs_globals);
        }
        if has(Capability::Http) {
            globals = globals.with_namespace("http", builtins::http::namespace);
        }
        if has(Capability::Concur) {
            globals = globals.with_namespace("concur", builtins::concur::concur_namespace);
        }
        if has(Capability::Formats) {
            globals = globals
                .with_namespace("csv", builtins::csv::csv_namespace)
                .with_namespace("gzip", builtins::archive::gzip::gzip_namespace)
                .with_namespace("zip", builtins::archive::zip::zip_namespace)
                .with_namespace("table", builtins::table::table_namespace);
        }
        if has(Capability::Terminal) {
            globals = globals.with_namespace("io", builtins::io::io_namespace);
        }
        if has(Capability::Lifecycle) {
            globals = globals.with(builtins::lifecycle::lifecycle_globals);
        }
        if has(Capability::Ssh) {
            globals = globals.with_namespace("ssh", builtins::ssh::ssh_namespace);
        }
        if has(Capability::Unprovided) {
            globals = globals.with(builtins::unprovided::unprovided_modules);
        }
        Builder {
            globals,
            modules: Vec::new(),
            signatures: Vec::new(),
            withheld: None,
        }
    }

    /// The standard globals alone, for the host's own tests and tools.
    pub fn standard() -> &'static Library {
        static STANDARD: OnceLock<Library> = OnceLock::new();
        STANDARD.get_or_init(|| Library::builder().build())
    }

    /// The globals every script is evaluated with.
    pub fn globals(&self) -> &Globals {
        &self.globals
    }

    /// The module `load(name)` names without a file, if there is one.
    pub fn module(&self, name: &str) -> Option<(&'static str, ModuleFn)> {
        self.modules.iter().copied().find(|(n, _)| *n == name)
    }

    /// The names of the modules `load()` can name without a file.
    pub fn module_names(&self) -> Vec<&'static str> {
        self.modules.iter().map(|(n, _)| *n).collect()
    }

    /// What this library leaves out of a fuller one, if it is a narrower edition.
    pub fn withheld(&self) -> Option<Withheld> {
        self.withheld
    }

    /// The problem with `name` (a global, or a dotted path from one: `k8s.fake`) when
    /// the fuller library has it and this one does not.
    pub fn withheld_message(&self, name: &str) -> Option<String> {
        let w = self.withheld?;
        if self.reachable().contains(name) || !(w.full)().reachable().contains(name) {
            return None;
        }
        Some(format!(
            "{name} is not available in {}: its scripts reach only the allowlist of capabilities (see the README's security model)",
            w.place
        ))
    }

    /// Every global and every attribute reachable from one without calling anything
    /// (namespaces, module values, methods), as dotted names: what a script can name.
    /// Computed once per library.
    pub fn reachable(&self) -> &BTreeSet<String> {
        self.reachable.get_or_init(|| {
            let mut names = BTreeSet::new();
            Heap::temp(|heap| {
                for (name, value) in self.globals.iter() {
                    walk(heap, name, value.to_value(), 0, &mut names);
                }
            });
            names
        })
    }

    /// Adds the signatures the layers registered to `known`.
    pub fn add_signatures(&self, known: &mut BTreeMap<String, Signature>) {
        for add in &self.signatures {
            add(known);
        }
    }
}

/// The codecs' namespaces (json, base64, strings, hash, uuid, yaml, regexp, template),
/// with their file functions when `files` is granted.
fn codecs(globals: GlobalsBuilder, files: bool) -> GlobalsBuilder {
    use builtins::{hash, template, yaml};
    globals
        .with_namespace("json", |b| {
            builtins::json::json_namespace(b);
            if files {
                builtins::json::json_files(b);
            }
        })
        .with_namespace("base64", |b| {
            builtins::base64::base64_namespace(b);
            if files {
                builtins::base64::base64_files(b);
            }
        })
        .with_namespace("strings", builtins::strings::strings_namespace)
        .with_namespace("hash", |b| {
            hash::hash_namespace(b);
            if files {
                hash::hash_files(b);
            }
        })
        .with_namespace("uuid", builtins::uuid::uuid_namespace)
        .with_namespace("yaml", |b| {
            yaml::yaml_namespace(b);
            if files {
                yaml::yaml_files(b);
            }
        })
        .with_namespace("regexp", builtins::regexp::regexp_namespace)
        .with_namespace("template", |b| {
            template::template_namespace(b);
            if files {
                template::template_files(b);
            }
        })
}

/// Values whose attributes are names of their own (namespaces, module values, values
/// with methods) are walked; functions and plain data are leaves.
fn walk<'v>(
    heap: Heap<'v>,
    name: &str,
    value: Value<'v>,
    depth: usize,
    out: &mut BTreeSet<String>,
) {
    out.insert(name.to_owned());
    // Nothing kite offers nests deeper than k8s.obj.<builder>.
    // Plain data has the language's own methods, not names of kite's.
    if depth > 4
        || matches!(
            value.get_type(),
            "function"
                | "string"
                | "int"
                | "bool"
                | "float"
                | "NoneType"
                | "list"
                | "dict"
                | "tuple"
                | "set"
        )
    {
        return;
    }
    for attr in value.dir_attr() {
        let full = format!("{name}.{attr}");
        match value.get_attr(&attr, heap) {
            Ok(Some(v)) => walk(heap, &full, v, depth + 1, out),
            _ => {
                out.insert(full);
            }
        }
    }
}

impl Builder {
    /// Marks the library as a narrower edition of `withheld.full`.
    #[must_use]
    pub fn withheld(mut self, withheld: Withheld) -> Self {
        self.withheld = Some(withheld);
        self
    }

    /// Adds globals.
    #[must_use]
    pub fn globals(mut self, add: impl FnOnce(&mut GlobalsBuilder)) -> Self {
        add(&mut self.globals);
        self
    }

    /// Adds a module that `load(name)` (or `load("@kite//name")`) names without a file.
    #[must_use]
    pub fn module(mut self, name: &'static str, add: ModuleFn) -> Self {
        self.modules.push((name, add));
        self
    }

    /// Adds signatures for `kite check`.
    #[must_use]
    pub fn signatures(mut self, add: SignaturesFn) -> Self {
        self.signatures.push(add);
        self
    }

    pub fn build(self) -> Library {
        Library {
            globals: self.globals.build(),
            modules: self.modules,
            signatures: self.signatures,
            withheld: self.withheld,
            reachable: OnceLock::new(),
        }
    }
}
