//! The library a script sees: its globals, the modules `load()` names without a file,
//! and the signatures `kite check` holds calls to.
//!
//! The host provides the standard part ([`Library::standard`]); the layers above add
//! theirs through a [`Builder`], and the top of the crate composes them
//! (`crate::library`). So the host never names the layers that extend it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension, Module};

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
}

/// Composes a [`Library`]: the standard globals plus what each layer adds.
pub struct Builder {
    globals: GlobalsBuilder,
    modules: Vec<(&'static str, ModuleFn)>,
    signatures: Vec<SignaturesFn>,
}

impl Library {
    /// A builder that starts from the standard globals: the Starlark standard library,
    /// `print`, `struct`, `json`, `base64`, `strings`, `fmt` (and `printf`, `println`,
    /// `sprintf`), `hash`, `uuid`, `yaml`, `regexp`, `log`, `template`, `http` (the client), `time`, `retry`, the `var_*` readers, and the
    /// upstream modules kite leaves out (which fail saying so).
    pub fn builder() -> Builder {
        let globals = GlobalsBuilder::extended_by(&[
            LibraryExtension::StructType,
            LibraryExtension::Print,
            LibraryExtension::Map,
            LibraryExtension::Filter,
            LibraryExtension::Partial,
            LibraryExtension::Debug,
            LibraryExtension::SetType,
        ])
        .with_namespace("json", builtins::json::json_namespace)
        .with_namespace("base64", builtins::base64::base64_namespace)
        .with_namespace("strings", builtins::strings::strings_namespace)
        .with_namespace("fmt", builtins::fmt::fmt_namespace)
        .with_namespace("hash", builtins::hash::hash_namespace)
        .with_namespace("uuid", builtins::uuid::uuid_namespace)
        .with_namespace("yaml", builtins::yaml::yaml_namespace)
        .with_namespace("regexp", builtins::regexp::regexp_namespace)
        .with_namespace("log", builtins::log::log_namespace)
        .with_namespace("os", builtins::os::os_namespace)
        .with(builtins::os::os_globals)
        .with_namespace("fs", builtins::fs::fs_namespace)
        .with(builtins::fs::fs_globals)
        .with_namespace("template", builtins::template::template_namespace)
        .with_namespace("time", builtins::time::time_namespace)
        .with_namespace("retry", builtins::retry::retry_namespace)
        .with_namespace("http", builtins::http::http_namespace)
        .with(builtins::fmt::fmt_globals)
        .with(builtins::vars::var_builtins)
        .with(builtins::unprovided::unprovided_modules);
        Builder {
            globals,
            modules: Vec::new(),
            signatures: Vec::new(),
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

    /// Adds the signatures the layers registered to `known`.
    pub fn add_signatures(&self, known: &mut BTreeMap<String, Signature>) {
        for add in &self.signatures {
            add(known);
        }
    }
}

impl Builder {
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
        }
    }
}
