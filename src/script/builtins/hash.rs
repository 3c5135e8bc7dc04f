//! `hash`: MD5, SHA-1, SHA-256 and SHA-512 hex digests of text, bytes or a file, as
//! upstream Starkite's `hash.text(s).sha256()` (for a ConfigMap's checksum annotation).
//!
//! # Caveats
//! `hash.file` reads the local file system, so it needs `--allow-fs`; it streams the
//! file, so its size does not count against the script's memory.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::io::Read;
use std::path::PathBuf;

use allocative::Allocative;
use md5::Digest;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::builtins::input::{bytes_of, io_message};
use crate::script::host::Host;
use crate::script::permissions::Access;

/// What is hashed.
#[derive(Debug, Allocative)]
enum Input {
    Bytes(Vec<u8>),
    File(#[allocative(skip)] PathBuf),
}

/// `hash.text(...)` or `hash.bytes(...)` (type `hash.source`), or `hash.file(...)`
/// (type `hash.file`, in [`File`]): call a digest on it.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Source(Input);

starlark::starlark_simple_value!(Source);

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Input::Bytes(b) => write!(f, "hash.source({} bytes)", b.len()),
            Input::File(p) => write!(f, "hash.file({:?})", p.display().to_string()),
        }
    }
}

/// `hash.file(path)`: a [`Source`] of its own type, so that its methods (which read
/// the file) are named apart from those a hosted script may call.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct File(Source);

starlark::starlark_simple_value!(File);

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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
                let mut file = std::fs::File::open(path).map_err(|e| {
                    format!("hash.file: open {}: {}", path.display(), io_message(&e))
                })?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = file.read(&mut buf).map_err(|e| {
                        format!("hash.file: read {}: {}", path.display(), io_message(&e))
                    })?;
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
        .or_else(|| v.downcast_ref::<File>().map(|f| &f.0))
        .ok_or_else(|| anyhow::anyhow!("not a hash source"))
}

fn attempt<'v>(eval: &Evaluator<'v, '_, '_>, outcome: Result<String, String>) -> Value<'v> {
    let heap = eval.heap();
    crate::script::outcome::result(heap, outcome.map(|s| heap.alloc(s)))
}

#[starlark_module]
fn source_data(builder: &mut MethodsBuilder) {
    /// The data hashed, as bytes.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        match &source_of(this)?.0 {
            Input::Bytes(b) => Ok(heap.alloc(b.as_slice())),
            Input::File(_) => Err(anyhow::anyhow!("hash.source.data: not a hash.source")),
        }
    }
}

#[starlark_module]
fn file_path(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        match &source_of(this)?.0 {
            Input::File(p) => Ok(p.display().to_string()),
            Input::Bytes(_) => Err(anyhow::anyhow!("hash.file.path: not a hash.file")),
        }
    }
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

starlark::methods_static!(
    SOURCE_METHODS = |b| {
        source_methods(b);
        source_data(b);
    }
);
starlark::methods_static!(
    FILE_METHODS = |b| {
        source_methods(b);
        file_path(b);
    }
);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "hash.source")]
impl<'v> StarlarkValue<'v> for Source {
    fn get_methods() -> Option<&'static Methods> {
        Some(SOURCE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !matches!(&self.0, Input::Bytes(b) if b.is_empty())
    }
}

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "hash.file")]
impl<'v> StarlarkValue<'v> for File {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }
}

/// The bytes of `data`: a string's, bytes, or (kite's own) a list of integers 0..255.
fn data_of(data: Value) -> Result<Vec<u8>, String> {
    let Some(list) = starlark::values::list::ListRef::from_value(data) else {
        return bytes_of("hash.bytes", data)
            .map(<[u8]>::to_vec)
            .map_err(|e| format!("{e} (or a list of integers 0..255)"));
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            if let Some(why) = crate::script::budget::walk_step(1) {
                return Err(format!("hash.bytes: stopped: {why}"));
            }
            v.unpack_i32()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| format!("hash.bytes: data[{i}] = {v} is not an integer 0..255"))
        })
        .collect()
}

fn text_of(s: Value) -> Result<Source, String> {
    s.unpack_str()
        .map(|s| Source(Input::Bytes(s.as_bytes().to_vec())))
        .ok_or_else(|| format!("hash.text: s must be a string, got {}", s.get_type()))
}

starlark::globals_static!(FUNCTIONS = hash_functions);
starlark::globals_static!(FILE_FUNCTIONS = hash_file_functions);

/// `hash.text` and `hash.bytes`, each with its `try_` form ([`crate::script::try_form`]).
pub fn hash_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &["text", "bytes"]);
}

/// `hash.file` and its `try_` form.
pub fn hash_files(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FILE_FUNCTIONS.globals(), &["file"]);
}

#[starlark_module]
fn hash_functions(builder: &mut GlobalsBuilder) {
    /// A source to hash: the UTF-8 bytes of `s`.
    fn text(#[starlark(require = pos)] s: Value) -> anyhow::Result<Source> {
        text_of(s).map_err(anyhow::Error::msg)
    }

    /// A source to hash: bytes, a string's bytes, or a list of integers 0..255.
    fn bytes(#[starlark(require = pos)] data: Value) -> anyhow::Result<Source> {
        Ok(Source(Input::Bytes(
            data_of(data).map_err(anyhow::Error::msg)?,
        )))
    }
}

fn file_at(eval: &Evaluator<'_, '_, '_>, path: &str) -> Result<File, String> {
    Host::of(eval)
        .and_then(|h| h.allow("hash.file", Access::Fs))
        .map_err(|e| e.to_string())?;
    Ok(File(Source(Input::File(PathBuf::from(path)))))
}

/// `hash.file`: reads a file of this machine, so it is part of the files capability
/// (`crate::script::library::Capability::Files`), never of a hosted script's library.
#[starlark_module]
fn hash_file_functions(builder: &mut GlobalsBuilder) {
    /// A source to hash: the file at `path` (needs `--allow-fs`), read when a digest is
    /// asked for.
    fn file(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<File> {
        file_at(eval, path).map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

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
    fn bytes_data_and_types() {
        assert_eq!(
            eval("hash.bytes(b'abc').md5() == hash.text('abc').md5()").unwrap(),
            "True"
        );
        assert_eq!(
            eval("s = hash.text('hi')\n(s.data, type(s), str(s))").unwrap(),
            "(b\"hi\", \"hash.source\", \"hash.source(2 bytes)\")"
        );
        assert_eq!(
            eval("r = hash.try_bytes(1)\n(r.ok, 'string or bytes' in r.error)").unwrap(),
            "(False, True)"
        );
        assert_eq!(
            eval("hash.try_text('a').value.sha1()").unwrap(),
            "\"86f7e437faa5a7fce15d1ddcb9eaeaea377667b8\""
        );
        assert_eq!(
            crate::script::builtins::snippets::eval_allowing(
                "f = hash.file('/tmp/x')\n(f.path, type(f))"
            )
            .unwrap(),
            "(\"/tmp/x\", \"hash.file\")"
        );
        assert!(
            eval("hash.try_file('/tmp/x').error")
                .unwrap()
                .contains("--allow-fs")
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
        assert!(
            e.contains("hash.bytes: argument must be string or bytes, got int"),
            "{e}"
        );
        // The test host allows nothing.
        let e = eval("hash.file('Cargo.toml').sha256()").unwrap_err();
        assert!(e.contains("hash.file needs --allow-fs"), "{e}");
    }

    #[test]
    fn files_and_try() {
        use crate::script::builtins::snippets::eval_allowing;
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
