//! The Starlark host: parsing, globals, vars, permissions, printing, diagnostics, AttrDict.

pub mod attrdict;
pub mod builtins;
pub mod check;
pub mod host;
pub mod json;
pub mod lint;
pub mod loader;
pub mod permissions;
pub mod run;
pub mod syntax;
pub mod vars;
