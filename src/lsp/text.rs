//! Positions in a document (LSP's line and UTF-16 column against byte offsets) and
//! what surrounds a cursor: the dotted name before it, the call it is inside.

use lsp_types::{Position, Range};

/// Converts between byte offsets into one text and LSP positions.
pub struct Lines<'a> {
    text: &'a str,
    /// The byte offset where each line starts.
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { text, starts }
    }

    /// The position of a byte offset (clamped to the text).
    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.text.len());
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts.get(line).copied().unwrap_or_default();
        let column: usize = self
            .text
            .char_indices()
            .skip_while(|(i, _)| *i < start)
            .take_while(|(i, _)| *i < offset)
            .map(|(_, c)| c.len_utf16())
            .sum();
        Position::new(to_u32(line), to_u32(column))
    }

    /// The byte offset of a position; past the end of a line is its end.
    pub fn offset(&self, pos: Position) -> usize {
        let Some(&start) = self.starts.get(pos.line as usize) else {
            return self.text.len();
        };
        let mut column = 0;
        for (i, c) in self.text[start..].char_indices() {
            if c == '\n' || column >= pos.character as usize {
                return start + i;
            }
            column += c.len_utf16();
        }
        self.text.len()
    }

    /// The range of bytes `begin..end`.
    pub fn range(&self, begin: usize, end: usize) -> Range {
        Range::new(self.position(begin), self.position(end))
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The dotted name that ends at `offset`: its parts before the last dot, and the
/// (maybe empty) last part being typed. `k8s.obj.dep|` gives `(["k8s", "obj"], "dep")`.
/// None when the name hangs off something else (`f().x`, `"s".up`, `x[0].y`).
pub fn dotted_before(text: &str, offset: usize) -> Option<(Vec<String>, String)> {
    let head = text.get(..offset)?;
    let start = head
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_ident(*c) || *c == '.')
        .last()
        .map_or(offset, |(i, _)| i);
    let run = &head[start..];
    if head[..start]
        .chars()
        .next_back()
        .is_some_and(|c| matches!(c, ')' | ']' | '}' | '"' | '\''))
    {
        return None;
    }
    let mut parts: Vec<String> = run.split('.').map(str::to_owned).collect();
    let last = parts.pop().unwrap_or_default();
    let bad = |p: &String| p.is_empty() || p.starts_with(|c: char| c.is_ascii_digit());
    if parts.iter().any(bad) {
        return None;
    }
    Some((parts, last))
}

/// The dotted name under the cursor, up to the end of the word the cursor is in:
/// hovering `get` in `k8s.get(...)` gives `k8s.get`; hovering `k8s` gives `k8s`.
/// Returns the name and the byte range of its last part.
pub fn dotted_at(text: &str, offset: usize) -> Option<(String, usize, usize)> {
    let offset = offset.min(text.len());
    let end = offset
        + text
            .get(offset..)?
            .chars()
            .take_while(|c| is_ident(*c))
            .map(char::len_utf8)
            .sum::<usize>();
    let (mut parts, last) = dotted_before(text, end)?;
    if last.is_empty() || last.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let begin = end - last.len();
    parts.push(last);
    Some((parts.join("."), begin, end))
}

/// Where a cursor is, as far as completion cares.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Context {
    /// Inside a string literal or a comment: nothing to complete.
    pub quoted: bool,
    /// The dotted name of the call whose parentheses the cursor is directly inside.
    pub call: Option<String>,
}

/// Scans `text` up to `offset` for open brackets, strings and comments.
pub fn context(text: &str, offset: usize) -> Context {
    let bytes = text.as_bytes();
    let offset = offset.min(bytes.len());
    let mut open: Vec<(u8, usize)> = Vec::new();
    let mut i = 0;
    while i < offset {
        match bytes[i] {
            b'#' => {
                let end = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
                if end >= offset {
                    return Context {
                        quoted: true,
                        call: None,
                    };
                }
                i = end;
            }
            q @ (b'"' | b'\'') => {
                let end = string_end(bytes, i, q);
                if end.is_none_or(|e| e > offset) {
                    return Context {
                        quoted: true,
                        call: None,
                    };
                }
                i = end.unwrap_or(offset);
                continue;
            }
            b @ (b'(' | b'[' | b'{') => open.push((b, i)),
            b')' | b']' | b'}' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let call = match open.last() {
        Some(&(b'(', at)) => {
            let before = text[..at].trim_end();
            dotted_before(before, before.len()).and_then(|(mut parts, last)| {
                (!last.is_empty()).then(|| {
                    parts.push(last);
                    parts.join(".")
                })
            })
        }
        _ => None,
    };
    Context {
        quoted: false,
        call,
    }
}

/// The offset just past the string literal opening at `start` with quote `q`; None when
/// it is not closed.
fn string_end(bytes: &[u8], start: usize, q: u8) -> Option<usize> {
    let triple = bytes.get(start..start + 3) == Some(&[q, q, q][..]);
    let mut j = start + if triple { 3 } else { 1 };
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'\n' if !triple => return None,
            c if c == q => {
                if !triple {
                    return Some(j + 1);
                }
                if bytes.get(j..j + 3) == Some(&[q, q, q][..]) {
                    return Some(j + 3);
                }
                j += 1;
            }
            _ => j += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_utf16_units() {
        let text = "a = 1\nb = \"é😀x\"\n";
        let lines = Lines::new(text);
        let x = text.find('x').unwrap();
        assert_eq!(lines.position(x), Position::new(1, 8));
        assert_eq!(lines.offset(Position::new(1, 8)), x);
        assert_eq!(lines.offset(Position::new(0, 99)), 5);
        assert_eq!(lines.offset(Position::new(9, 0)), text.len());
    }

    #[test]
    fn dotted_names_before_and_at_the_cursor() {
        let text = "x = k8s.obj.dep";
        assert_eq!(
            dotted_before(text, text.len()),
            Some((vec!["k8s".into(), "obj".into()], "dep".into()))
        );
        assert_eq!(dotted_before("f().x", 5), None);
        let text = "p = k8s.get(\"pods\")";
        let at = text.find("get").unwrap() + 1;
        assert_eq!(dotted_at(text, at), Some(("k8s.get".into(), 8, 11)));
        assert_eq!(dotted_at(text, 5).map(|d| d.0), Some("k8s".into()));
    }

    #[test]
    fn the_enclosing_call_skips_strings_and_closed_brackets() {
        let text = "d = k8s.obj.deployment(name=\"a(\", labels={\"x\": f(1)}, ";
        assert_eq!(
            context(text, text.len()).call.as_deref(),
            Some("k8s.obj.deployment")
        );
        assert!(context(text, text.find("a(").unwrap() + 1).quoted);
        assert_eq!(context("x = [1, ", 8).call, None);
        assert!(context("# k8s.", 6).quoted);
    }
}
