//! The Starlark host: parsing, globals, vars, permissions, printing, diagnostics, AttrDict.

pub mod attrdict;
pub mod budget;
pub mod builtins;
pub mod check;
pub mod deep;
pub mod host;
pub mod journal;
pub mod json;
pub mod library;
pub mod lint;
pub mod loaded;
pub mod loader;
pub mod memory;
pub mod outcome;
pub mod parse;
pub mod permissions;
pub mod printer;
pub mod priority;
pub mod profile;
pub mod run;
pub mod syntax;
pub mod try_form;
pub mod vars;
pub mod yaml;
