//! `base64`: upstream Starkite's `base64.text(s)`, `base64.bytes(b)` and
//! `base64.file(path)` with `encode`/`decode`/`encode_url`/`decode_url` (and `try_`
//! forms), plus kite's own `base64.encode`/`base64.decode` of text, for Secret data
//! (and `base64.try_decode`).
//!
//! # Caveats
//! `base64.file` reads this machine's files: it is in the files capability (behind
//! `--allow-fs`), never a hosted script's. Decoding ignores line breaks, as Go's does.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use base64::Engine;
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::builtins::input::{bytes_of, read_file};
use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;

/// Go's decoders accept bits past the last byte that are not zero; so do these.
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_encode_padding(true)
    .with_decode_allow_trailing_bits(true);
const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);

/// One of the four operations a source or file offers.
#[derive(Clone, Copy)]
enum Op {
    Encode,
    Decode,
    EncodeUrl,
    DecodeUrl,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Decode => "decode",
            Op::EncodeUrl => "encode_url",
            Op::DecodeUrl => "decode_url",
        }
    }
}

/// What went wrong: bad data is the script's to catch with `try_`; running out of the
/// call's budget is not.
enum Failure {
    Data(String),
    Budget(anyhow::Error),
}

/// `op` applied to `data` for `call` (`base64.source.decode`): a string when encoding,
/// bytes when decoding.
fn apply<'v>(heap: Heap<'v>, call: &str, op: Op, data: &[u8]) -> Result<Value<'v>, Failure> {
    // Linear in the data, but its copies count against the call's memory and time.
    if let Some(why) = crate::script::budget::walk_step(data.len()) {
        return Err(Failure::Budget(anyhow::anyhow!("{call}: stopped: {why}")));
    }
    let decode = |engine: &GeneralPurpose| {
        let cleaned: Vec<u8>;
        let input = if data.iter().any(|b| matches!(b, b'\r' | b'\n')) {
            cleaned = data
                .iter()
                .copied()
                .filter(|b| !matches!(b, b'\r' | b'\n'))
                .collect();
            cleaned.as_slice()
        } else {
            data
        };
        engine
            .decode(input)
            .map(|b| heap.alloc(b))
            .map_err(|e| Failure::Data(format!("{call}: illegal base64 data: {e}")))
    };
    match op {
        Op::Encode => Ok(heap.alloc(STANDARD.encode(data))),
        Op::EncodeUrl => Ok(heap.alloc(URL_SAFE.encode(data))),
        Op::Decode => decode(&STANDARD),
        Op::DecodeUrl => decode(&URL_SAFE),
    }
}

/// `apply` as a plain call: every failure is an error.
fn run<'v>(heap: Heap<'v>, call: &str, op: Op, data: &[u8]) -> anyhow::Result<Value<'v>> {
    apply(heap, call, op, data).map_err(|f| match f {
        Failure::Data(e) => anyhow::Error::msg(e),
        Failure::Budget(e) => e,
    })
}

/// `apply` as a `try_` call: bad data becomes a failed result.
fn attempt<'v>(
    heap: Heap<'v>,
    call: &str,
    op: Op,
    data: Result<&[u8], String>,
) -> anyhow::Result<Value<'v>> {
    let outcome = match data {
        Ok(d) => match apply(heap, call, op, d) {
            Ok(v) => Ok(v),
            Err(Failure::Data(e)) => Err(e),
            Err(Failure::Budget(e)) => return Err(e),
        },
        Err(e) => Err(e),
    };
    Ok(result(heap, outcome))
}

/// `base64.text(s)` or `base64.bytes(b)`: data to encode or decode.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Source(Vec<u8>);

starlark::starlark_simple_value!(Source);

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "base64.source({} bytes)", self.0.len())
    }
}

fn source_of(v: Value<'_>) -> anyhow::Result<&[u8]> {
    v.downcast_ref::<Source>()
        .map(|s| s.0.as_slice())
        .ok_or_else(|| anyhow::anyhow!("not a base64.source"))
}

fn on_source<'v>(this: Value<'v>, heap: Heap<'v>, op: Op) -> anyhow::Result<Value<'v>> {
    run(
        heap,
        &format!("base64.source.{}", op.name()),
        op,
        source_of(this)?,
    )
}

fn try_on_source<'v>(this: Value<'v>, heap: Heap<'v>, op: Op) -> anyhow::Result<Value<'v>> {
    let data = source_of(this)?;
    attempt(heap, &format!("base64.source.{}", op.name()), op, Ok(data))
}

#[starlark_module]
fn source_methods(builder: &mut MethodsBuilder) {
    /// The data, as bytes.
    #[starlark(attribute)]
    fn data<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(source_of(this)?))
    }

    /// The data as standard base64 text.
    fn encode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        on_source(this, heap, Op::Encode)
    }

    /// The data, standard base64 text, decoded to bytes.
    fn decode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        on_source(this, heap, Op::Decode)
    }

    /// The data as URL-safe base64 text (`-` and `_`, padded).
    fn encode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        on_source(this, heap, Op::EncodeUrl)
    }

    /// The data, URL-safe base64 text, decoded to bytes.
    fn decode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        on_source(this, heap, Op::DecodeUrl)
    }

    /// `encode()` as a result (`.ok`, `.value`, `.error`).
    fn try_encode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_source(this, heap, Op::Encode)
    }

    /// `decode()` as a result.
    fn try_decode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_source(this, heap, Op::Decode)
    }

    /// `encode_url()` as a result.
    fn try_encode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_source(this, heap, Op::EncodeUrl)
    }

    /// `decode_url()` as a result.
    fn try_decode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_source(this, heap, Op::DecodeUrl)
    }
}

starlark::methods_static!(SOURCE_METHODS = source_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "base64.source")]
impl<'v> StarlarkValue<'v> for Source {
    fn get_methods() -> Option<&'static Methods> {
        Some(SOURCE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

/// `base64.file(path)`: a file whose content is encoded or decoded, read at each call.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct File(String);

starlark::starlark_simple_value!(File);

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "base64.file({:?})", self.0)
    }
}

fn file_of(v: Value<'_>) -> anyhow::Result<&str> {
    v.downcast_ref::<File>()
        .map(|f| f.0.as_str())
        .ok_or_else(|| anyhow::anyhow!("not a base64.file"))
}

fn on_file<'v>(this: Value<'v>, heap: Heap<'v>, op: Op) -> anyhow::Result<Value<'v>> {
    let call = format!("base64.file.{}", op.name());
    let data = read_file(&call, file_of(this)?).map_err(anyhow::Error::msg)?;
    run(heap, &call, op, &data)
}

fn try_on_file<'v>(this: Value<'v>, heap: Heap<'v>, op: Op) -> anyhow::Result<Value<'v>> {
    let call = format!("base64.file.{}", op.name());
    let data = read_file(&call, file_of(this)?);
    attempt(heap, &call, op, data.as_deref().map_err(String::clone))
}

#[starlark_module]
fn file_methods(builder: &mut MethodsBuilder) {
    /// The file's path.
    #[starlark(attribute)]
    fn path(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(file_of(this)?.to_owned())
    }

    /// The file's content as standard base64 text.
    fn encode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        on_file(this, heap, Op::Encode)
    }

    /// The file's content, standard base64 text, decoded to bytes.
    fn decode<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        on_file(this, heap, Op::Decode)
    }

    /// The file's content as URL-safe base64 text.
    fn encode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        on_file(this, heap, Op::EncodeUrl)
    }

    /// The file's content, URL-safe base64 text, decoded to bytes.
    fn decode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        on_file(this, heap, Op::DecodeUrl)
    }

    /// `encode()` as a result (`.ok`, `.value`, `.error`).
    fn try_encode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_file(this, heap, Op::Encode)
    }

    /// `decode()` as a result.
    fn try_decode<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_file(this, heap, Op::Decode)
    }

    /// `encode_url()` as a result.
    fn try_encode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_file(this, heap, Op::EncodeUrl)
    }

    /// `decode_url()` as a result.
    fn try_decode_url<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        try_on_file(this, heap, Op::DecodeUrl)
    }
}

starlark::methods_static!(FILE_METHODS = file_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "base64.file")]
impl<'v> StarlarkValue<'v> for File {
    fn get_methods() -> Option<&'static Methods> {
        Some(FILE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

fn text_source(call: &str, s: Value) -> Result<Source, String> {
    s.unpack_str()
        .map(|s| Source(s.as_bytes().to_vec()))
        .ok_or_else(|| format!("{call}: s must be a string, got {}", s.get_type()))
}

fn bytes_source(call: &str, data: Value) -> Result<Source, String> {
    bytes_of(call, data).map(|b| Source(b.to_vec()))
}

starlark::globals_static!(TEXT_FUNCTIONS = text_functions);

/// The `base64` namespace: kite's `encode` and `decode` of text (`decode` with its
/// derived `try_` form, [`crate::script::try_form`]; `encode` cannot fail) and
/// upstream's sources.
pub fn base64_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, TEXT_FUNCTIONS.globals(), &["decode"]);
    source_functions(builder);
}

/// kite's own `base64.encode` and `base64.decode`, text to text.
#[starlark_module]
fn text_functions(builder: &mut GlobalsBuilder) {
    /// Encodes a string's UTF-8 bytes.
    fn encode(#[starlark(require = pos)] text: &str) -> anyhow::Result<String> {
        Ok(STANDARD.encode(text.as_bytes()))
    }

    /// Decodes to a string; fails when the bytes are not valid UTF-8.
    fn decode(#[starlark(require = pos)] text: &str) -> anyhow::Result<String> {
        let bytes = STANDARD
            .decode(text.trim().as_bytes())
            .map_err(|e| anyhow::anyhow!("base64.decode: {e}"))?;
        String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("base64.decode: the decoded bytes are not UTF-8 text"))
    }
}

/// Upstream's `base64.text` and `base64.bytes`, with their `try_` forms.
#[starlark_module]
fn source_functions(builder: &mut GlobalsBuilder) {
    /// A source of the UTF-8 bytes of `s`, to `.encode()` or `.decode()`.
    fn text(#[starlark(require = pos)] s: Value) -> anyhow::Result<Source> {
        text_source("base64.text", s).map_err(anyhow::Error::msg)
    }

    /// A source of `data` (bytes, or a string's UTF-8 bytes).
    fn bytes(#[starlark(require = pos)] data: Value) -> anyhow::Result<Source> {
        bytes_source("base64.bytes", data).map_err(anyhow::Error::msg)
    }

    /// `text(s)` as a result (`.ok`, `.value`, `.error`).
    fn try_text<'v>(
        #[starlark(require = pos)] s: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = text_source("base64.text", s).map(|s| heap.alloc(s));
        Ok(result(heap, outcome))
    }

    /// `bytes(data)` as a result.
    fn try_bytes<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = bytes_source("base64.bytes", data).map(|s| heap.alloc(s));
        Ok(result(heap, outcome))
    }
}

fn file_at(eval: &Evaluator<'_, '_, '_>, path: &str) -> anyhow::Result<File> {
    Host::of(eval)?.allow("base64.file", Access::Fs)?;
    Ok(File(path.to_owned()))
}

/// `base64.file` reads a file of this machine, so it is part of the files capability
/// (`crate::script::library::Capability::Files`), never of a hosted script's library.
#[starlark_module]
pub fn base64_files(builder: &mut GlobalsBuilder) {
    /// A file whose content is encoded or decoded (needs `--allow-fs`; read at each
    /// call).
    fn file(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<File> {
        file_at(eval, path)
    }

    /// `file(path)` as a result (`.ok`, `.value`, `.error`).
    fn try_file<'v>(
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = file_at(eval, path)
            .map(|f| eval.heap().alloc(f))
            .map_err(|e| e.to_string());
        Ok(result(eval.heap(), outcome))
    }
}

#[cfg(test)]
mod tests;
