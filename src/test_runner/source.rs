//! Test sources as starlark-rust can parse them: upstream's `assert(...)` is a reserved
//! word to starlark-rust's lexer (starlark-go allows it), so the word is rewritten to a
//! stand-in of the same length, outside strings and comments, before parsing. Every
//! position in messages stays as the user wrote it.

use std::borrow::Cow;

/// The name `assert` is registered under; as long as `assert`, so columns do not move.
pub const STAND_IN: &str = "Assert";

/// `source` with each `assert` identifier (not in a string or comment) renamed to
/// [`STAND_IN`]; borrowed when there is none.
pub fn rewrite(source: &str) -> Cow<'_, str> {
    let b = source.as_bytes();
    let mut hits = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'"' || c == b'\'' {
            i = skip_string(b, i);
        } else if c.is_ascii_digit() {
            // A number such as 0x1f or 1e5 holds letters that are not identifiers.
            while i < b.len() && (is_ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &b[start..i];
            let quoted = matches!(b.get(i), Some(b'"' | b'\''));
            if quoted && is_string_prefix(word) {
                i = skip_string(b, i);
            } else if word == b"assert" {
                hits.push(start);
            }
        } else {
            i += 1;
        }
    }
    if hits.is_empty() {
        return Cow::Borrowed(source);
    }
    let mut out = b.to_vec();
    for at in hits {
        out[at..at + STAND_IN.len()].copy_from_slice(STAND_IN.as_bytes());
    }
    // ASCII replaced ASCII, so the text is still UTF-8.
    String::from_utf8(out).map_or(Cow::Borrowed(source), Cow::Owned)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn is_string_prefix(word: &[u8]) -> bool {
    let lower = word.to_ascii_lowercase();
    matches!(
        &lower[..],
        b"r" | b"b" | b"f" | b"rb" | b"br" | b"fr" | b"rf"
    )
}

/// The index just past the string literal whose opening quote is at `start`.
fn skip_string(b: &[u8], start: usize) -> usize {
    let q = b[start];
    let triple = b.get(start..start + 3) == Some(&[q, q, q][..]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q && !triple => return i + 1,
            c if c == q && b.get(i..i + 3) == Some(&[q, q, q][..]) => return i + 3,
            // An unterminated string: the parser reports it where it is.
            b'\n' if !triple => return i,
            _ => i += 1,
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn assert_is_renamed_in_code_only() {
        assert_eq!(
            rewrite("assert(x)\ntest.assert(y, 'assert')  # assert\n"),
            "Assert(x)\ntest.Assert(y, 'assert')  # assert\n"
        );
        assert_eq!(
            rewrite("s = \"\"\"a \"assert\"\nassert\"\"\"\nassert_equal(1, 1)\n"),
            "s = \"\"\"a \"assert\"\nassert\"\"\"\nassert_equal(1, 1)\n"
        );
        assert_eq!(
            rewrite("x = r'\\'assert' + f\"{assert}\"\nassert(1)"),
            "x = r'\\'assert' + f\"{assert}\"\nAssert(1)"
        );
        assert_eq!(
            rewrite("my_assert(1); assert2(2)"),
            "my_assert(1); assert2(2)"
        );
    }

    #[test]
    fn unterminated_strings_end_at_the_line() {
        assert_eq!(rewrite("x = 'oops\nassert(1)"), "x = 'oops\nAssert(1)");
    }
}
