//! What the codec builtins share: string-or-bytes arguments, and I/O errors worded as
//! upstream Starkite's (Go's) are, which its scripts test for ("no such file").

use starlark::values::bytes::StarlarkBytes;
use starlark::values::{Value, ValueLike};

/// The bytes of `v`, a string (its UTF-8) or a `bytes` value, as upstream takes data.
///
/// # Errors
/// Any other type: `{call}: argument must be string or bytes, got int`.
pub fn bytes_of<'v>(call: &str, v: Value<'v>) -> Result<&'v [u8], String> {
    if let Some(s) = v.unpack_str() {
        return Ok(s.as_bytes());
    }
    v.downcast_ref::<StarlarkBytes>()
        .map(StarlarkBytes::as_bytes)
        .ok_or_else(|| {
            format!(
                "{call}: argument must be string or bytes, got {}",
                v.get_type()
            )
        })
}

/// The text of `v`, a string or `bytes` holding UTF-8 (YAML, JSON).
///
/// # Errors
/// Another type, or bytes that are not UTF-8.
pub fn text_of<'v>(call: &str, v: Value<'v>) -> Result<&'v str, String> {
    std::str::from_utf8(bytes_of(call, v)?)
        .map_err(|e| format!("{call}: the bytes are not UTF-8 text: {e}"))
}

/// An I/O error as Go words it: `no such file or directory`, not Rust's `No such file
/// or directory (os error 2)`. Scripts written for upstream look for that text.
pub fn io_message(e: &std::io::Error) -> String {
    super::fs::go_error(&e.to_string())
}

/// Reads the file at `path` for `call`: `{call}: open {path}: no such file or directory`
/// when it cannot, as upstream's message reads.
///
/// # Errors
/// The file cannot be read.
pub fn read_file(call: &str, path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{call}: open {path}: {}", io_message(&e)))
}

#[cfg(test)]
mod tests {
    use super::io_message;

    #[test]
    fn io_errors_read_as_go_words_them() {
        let e = std::fs::read("/nonexistent/kite-input-test").unwrap_err();
        assert_eq!(io_message(&e), "no such file or directory");
        let e = std::io::Error::other("Custom");
        assert_eq!(io_message(&e), "custom");
    }
}
