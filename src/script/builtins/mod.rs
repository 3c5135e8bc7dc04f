//! Starlark builtins, one file per namespace; `super::library` assembles them.

pub mod archive;
pub mod base64;
pub mod concur;
pub mod csv;
pub mod fmt;
pub mod fs;
pub mod hash;
pub mod http;
pub mod input;
pub mod io;
pub mod json;
pub mod lifecycle;
pub mod log;
pub mod os;
pub mod regexp;
pub mod retry;
pub mod runtime;
pub mod ssh;
pub mod strings;
pub mod table;
pub mod template;
pub mod time;
pub mod types;
pub mod unprovided;
pub mod uuid;
pub mod vars;
pub mod yaml;

#[cfg(test)]
pub(crate) mod snippets;
