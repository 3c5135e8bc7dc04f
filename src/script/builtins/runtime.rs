//! `runtime`: the platform kite runs on, as upstream Starkite's module names it
//! (`platform`, `arch`, `cpu_count`, `uname`, `version`, `go_version`).
//!
//! # Caveats
//! kite is not a Go program: `go_version()` says so instead of naming a Go release.

#![expect(unsafe_code, reason = "uname (libc)")]

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::dict::AllocDict;
use starlark::values::{Heap, Value};

/// The operating system under Go's name for it (`GOOS`), as upstream reports it.
fn platform() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

/// The CPU architecture under Go's name for it (`GOARCH`).
fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// A NUL-terminated field of `utsname` as text.
fn field(raw: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|c| **c != 0)
        // c_char is i8 or u8 by target; either way the byte is the same.
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn uname(heap: Heap<'_>) -> anyhow::Result<Value<'_>> {
    // SAFETY: utsname is plain data; uname fills it and NUL-terminates each field.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the struct's size.
    if unsafe { libc::uname(&raw mut u) } != 0 {
        anyhow::bail!("runtime.uname: {}", std::io::Error::last_os_error());
    }
    Ok(heap.alloc(AllocDict([
        ("system", field(&u.sysname)),
        ("node", field(&u.nodename)),
        ("release", field(&u.release)),
        ("version", field(&u.version)),
        ("machine", field(&u.machine)),
    ])))
}

#[starlark_module]
pub fn runtime_namespace(builder: &mut GlobalsBuilder) {
    /// The operating system, as Go names it: `"linux"`, `"darwin"`, ...
    fn platform() -> anyhow::Result<&'static str> {
        Ok(platform())
    }

    /// The CPU architecture, as Go names it: `"amd64"`, `"arm64"`, ...
    fn arch() -> anyhow::Result<&'static str> {
        Ok(arch())
    }

    /// The number of CPUs kite may run on.
    fn cpu_count() -> anyhow::Result<i64> {
        let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    }

    /// The machine's `uname`: `system`, `node`, `release`, `version`, `machine`.
    fn uname<'v>(heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        uname(heap)
    }

    /// kite's version.
    fn version() -> anyhow::Result<&'static str> {
        Ok(crate::version::VERSION)
    }

    /// Upstream's Go release; kite has none, and says so.
    fn go_version() -> anyhow::Result<&'static str> {
        Ok("none: kite is written in Rust, not go")
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn facts_of_the_platform() {
        let out = eval(
            "u = runtime.uname()\n[runtime.platform() in ['linux', 'darwin'], runtime.arch() != '', runtime.cpu_count() > 0, sorted(u.keys()), u['system'] != '', runtime.version() != '', 'go' in runtime.go_version()]",
        )
        .unwrap();
        assert_eq!(
            out,
            r#"[True, True, True, ["machine", "node", "release", "system", "version"], True, True, True]"#
        );
    }
}
