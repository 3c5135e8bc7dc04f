//! `hash`: MD5, SHA-1, SHA-256 and SHA-512 hex digests of text, bytes or a file, as
//! upstream Starkite's `hash.text(s).sha256()` (for a ConfigMap's checksum annotation).
//!
//! # Caveats
//! `hash.file` reads the local file system, so it needs `--allow-fs`; it streams the
//! file, so its size does not count against the script's memory.

use std::fmt;
use std::io::Read;
use std::path::PathBuf;

use allocative::Allocative;
use md5::Digest;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::{NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::host::Host;
use crate::script::permissions::Access;

/// What is hashed.
#[derive(Debug, Allocative)]
enum Input {
    Bytes(Vec<u8>),
    File(#[allocative(skip)] PathBuf),
}

/// `hash.text(...)`, `hash.bytes(...)` or `hash.file(...)`: call a digest on it.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Source(Input);

starlark::starlark_simple_value!(Source);

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Input::Bytes(b) => write!(f, "<hash.source of {} bytes>", b.len()),
            Input::File(p) => write!(f, "<hash.file {}>", p.display()),
        }
    }
}

#[derive(Clone, Copy)]
enum Algorithm {
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

/// One digest in progress.
enum Hasher {
    Md5(md5::Md5),
    Ring(ring::digest::Context),
}

impl Hasher {
    fn new(a: Algorithm) -> Self {
        match a {
            Algorithm::Md5 => Hasher::Md5(md5::Md5::new()),
            Algorithm::Sha1 => Hasher::Ring(ring::digest::Context::new(
                &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            )),
            Algorithm::Sha256 => Hasher::Ring(ring::digest::Context::new(&ring::digest::SHA256)),
            Algorithm::Sha512 => Hasher::Ring(ring::digest::Context::new(&ring::digest::SHA512)),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(data),
            Hasher::Ring(c) => c.update(data),
        }
    }

    fn hex(self) -> String {
        let bytes: Vec<u8> = match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Ring(c) => c.finish().as_ref().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Source {
    /// The hex digest.
    ///
    /// # Errors
    /// A file that cannot be read, naming it and why.
    fn digest(&self, a: Algorithm) -> Result<String, String> {
        let mut h = Hasher::new(a);
        match &self.0 {
            Input::Bytes(b) => h.update(b),
            Input::File(path) => {
                let mut file = std::fs::File::open(path)
                    .map_err(|e| format!("hash.file: {}: {e}", path.display()))?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = file
                        .read(&mut buf)
                        .map_err(|e| format!("hash.file: {}: {e}", path.display()))?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
        }
        Ok(h.hex())
    }
}

fn source_of(v: Value<'_>) -> anyhow::Result<&Source> {
    v.downcast_ref::<Source>()
        .ok_or_else(|| anyhow::anyhow!("not a hash source"))
}

fn attempt<'v>(eval: &Evaluator<'v, '_, '_>, outcome: Result<String, String>) -> Value<'v> {
    let heap = eval.heap();
    crate::script::outcome::result(heap, outcome.map(|s| heap.alloc(s)))
}

#[starlark_module]
fn source_methods(builder: &mut MethodsBuilder) {
    /// The MD5 hex digest.
    fn md5(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        source_of(this)?
            .digest(Algorithm::Md5)
            .map_err(anyhow::Error::msg)
    }

    /// The SHA-1 hex digest.
    fn sha1(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        source_of(this)?
            .digest(Algorithm::Sha1)
            .map_err(anyhow::Error::msg)
    }

    /// The SHA-256 hex digest.
    fn sha256(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        source_of(this)?
            .digest(Algorithm::Sha256)
            .map_err(anyhow::Error::msg)
    }

    /// The SHA-512 hex digest.
    fn sha512(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        source_of(this)?
            .digest(Algorithm::Sha512)
            .map_err(anyhow::Error::msg)
    }

    /// `md5()` as a result (`.ok`, `.value`, `.error`).
    fn try_md5<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(attempt(eval, source_of(this)?.digest(Algorithm::Md5)))
    }

    /// `sha1()` as a result.
    fn try_sha1<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(attempt(eval, source_of(this)?.digest(Algorithm::Sha1)))
    }

    /// `sha256()` as a result.
    fn try_sha256<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(attempt(eval, source_of(this)?.digest(Algorithm::Sha256)))
    }

    /// `sha512()` as a result.
    fn try_sha512<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(attempt(eval, source_of(this)?.digest(Algorithm::Sha512)))
    }
}

starlark::methods_static!(SOURCE_METHODS = source_methods);

#[allow(clippy::elidable_lifetime_names)] // the starlark_value macro names the lifetime
#[starlark_value(type = "hash.source")]
impl<'v> StarlarkValue<'v> for Source {
    fn get_methods() -> Option<&'static Methods> {
        Some(SOURCE_METHODS.methods())
    }
}

#[starlark_module]
pub fn hash_namespace(builder: &mut GlobalsBuilder) {
    /// A source to hash: the UTF-8 bytes of `s`.
    fn text(#[starlark(require = pos)] s: &str) -> anyhow::Result<Source> {
        Ok(Source(Input::Bytes(s.as_bytes().to_vec())))
    }

    /// A source to hash: a string's bytes, or a list of integers 0..255.
    fn bytes(#[starlark(require = pos)] data: Value) -> anyhow::Result<Source> {
        if let Some(s) = data.unpack_str() {
            return Ok(Source(Input::Bytes(s.as_bytes().to_vec())));
        }
        let items = starlark::values::list::ListRef::from_value(data)
            .map(|l| l.content().to_vec())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "hash.bytes: data must be a string or a list of integers 0..255, not {}",
                    data.get_type()
                )
            })?;
        let bytes = items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.unpack_i32()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| {
                        anyhow::anyhow!("hash.bytes: data[{i}] = {v} is not an integer 0..255")
                    })
            })
            .collect::<anyhow::Result<Vec<u8>>>()?;
        Ok(Source(Input::Bytes(bytes)))
    }
}

/// `hash.file`: reads a file of this machine, so it is part of the files capability
/// (`crate::script::library::Capability::Files`), never of a hosted script's library.
#[starlark_module]
pub fn hash_files(builder: &mut GlobalsBuilder) {
    /// A source to hash: the file at `path` (needs `--allow-fs`), read when a digest is
    /// asked for.
    fn file(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<Source> {
        Host::of(eval)?.allow("hash.file", Access::Fs)?;
        Ok(Source(Input::File(PathBuf::from(path))))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    #[test]
    fn digests_of_text_as_the_standard_vectors() {
        assert_eq!(
            eval("hash.text('hello').sha256()").unwrap(),
            "\"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\""
        );
        assert_eq!(
            eval("hash.text('abc').md5()").unwrap(),
            "\"900150983cd24fb0d6963f7d28e17f72\""
        );
        assert_eq!(
            eval("hash.text('abc').sha1()").unwrap(),
            "\"a9993e364706816aba3e25717850c26c9cd0d89d\""
        );
        assert!(
            eval("hash.text('abc').sha512()")
                .unwrap()
                .starts_with("\"ddaf35a193617aba")
        );
        assert_eq!(
            eval("hash.bytes([97, 98, 99]).md5() == hash.text('abc').md5()").unwrap(),
            "True"
        );
    }

    #[test]
    fn bad_input_and_files_need_the_flag() {
        let e = eval("hash.bytes([1, 300])").unwrap_err();
        assert!(
            e.contains("hash.bytes: data[1] = 300 is not an integer 0..255"),
            "{e}"
        );
        let e = eval("hash.bytes(1)").unwrap_err();
        assert!(e.contains("must be a string or a list"), "{e}");
        // The test host allows nothing.
        let e = eval("hash.file('Cargo.toml').sha256()").unwrap_err();
        assert!(e.contains("hash.file needs --allow-fs"), "{e}");
    }

    #[test]
    fn files_and_try() {
        use crate::script::builtins::testing::eval_allowing;
        let dir = std::env::temp_dir().join(format!("kite-hash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.txt");
        std::fs::write(&path, "hello").unwrap();
        let p = path.display();
        assert_eq!(
            eval_allowing(&format!(
                "hash.file('{p}').sha256() == hash.text('hello').sha256()"
            ))
            .unwrap(),
            "True"
        );
        let out = eval_allowing(&format!(
            "r = hash.file('{p}.missing').try_sha256()\n(r.ok, 'hash.file:' in r.error)"
        ))
        .unwrap();
        assert_eq!(out, "(False, True)");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
