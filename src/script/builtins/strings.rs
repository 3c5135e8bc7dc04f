//! `strings`: upstream Starkite's string helpers beyond Starlark's own methods
//! (padding, `cut`, case-insensitive equality, Go-style quoting).

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::{Value, tuple::AllocTuple};

fn fill_char(func: &str, fillchar: &str) -> anyhow::Result<char> {
    let mut chars = fillchar.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(c),
        _ => anyhow::bail!("strings.{func}: fillchar must be one character, not {fillchar:?}"),
    }
}

/// `s` padded to `width` characters: `left` of the padding before it, the rest after.
fn pad(
    func: &str,
    s: &str,
    width: i32,
    fillchar: &str,
    left: fn(usize) -> usize,
) -> anyhow::Result<String> {
    let fill = fill_char(func, fillchar)?;
    let len = s.chars().count();
    let width = usize::try_from(width).unwrap_or(0);
    if width <= len {
        return Ok(s.to_owned());
    }
    let padding = width - len;
    let before = left(padding);
    let mut out = String::with_capacity(s.len() + padding);
    out.extend(std::iter::repeat_n(fill, before));
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, padding - before));
    Ok(out)
}

/// Go's `strconv.Quote`: double quotes, with escapes for quotes, backslashes and
/// anything not printable.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if u32::from(c) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.Unquote` for the three quote forms: `"..."` with escapes, `` `...` ``
/// raw, and `'c'` (one character).
///
/// # Errors
/// Anything that is not one quoted literal, with why.
pub fn unquote(s: &str) -> Result<String, String> {
    let invalid = |why: &str| format!("strings.unquote: {s:?}: {why}");
    let mut chars = s.chars();
    let (Some(open), Some(close)) = (chars.next(), chars.next_back()) else {
        return Err(invalid("not a quoted string"));
    };
    if open != close || !matches!(open, '"' | '`' | '\'') {
        return Err(invalid("not a quoted string"));
    }
    let body = chars.as_str();
    if open == '`' {
        if body.contains('`') {
            return Err(invalid("a back-quoted string cannot contain a back quote"));
        }
        return Ok(body.replace('\r', ""));
    }
    let mut out = String::new();
    let mut it = body.chars();
    while let Some(c) = it.next() {
        if c == open {
            return Err(invalid("an unescaped quote inside"));
        }
        if c == '\n' {
            return Err(invalid("a newline inside"));
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let esc = it
            .next()
            .ok_or_else(|| invalid("it ends with a backslash"))?;
        let hex = |it: &mut std::str::Chars<'_>, n: usize| -> Result<u32, String> {
            let digits: String = it.by_ref().take(n).collect();
            if digits.len() != n {
                return Err(invalid("a short escape"));
            }
            u32::from_str_radix(&digits, 16).map_err(|_| invalid("a bad hex escape"))
        };
        let decoded = match esc {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'v' => '\x0b',
            '\\' => '\\',
            '"' if open == '"' => '"',
            '\'' if open == '\'' => '\'',
            'x' => char::from_u32(hex(&mut it, 2)?).ok_or_else(|| invalid("a bad \\x escape"))?,
            'u' => char::from_u32(hex(&mut it, 4)?).ok_or_else(|| invalid("a bad \\u escape"))?,
            'U' => char::from_u32(hex(&mut it, 8)?).ok_or_else(|| invalid("a bad \\U escape"))?,
            other => return Err(invalid(&format!("an unknown escape \\{other}"))),
        };
        out.push(decoded);
    }
    if open == '\'' && out.chars().count() != 1 {
        return Err(invalid(
            "a single-quoted literal holds exactly one character",
        ));
    }
    Ok(out)
}

#[starlark_module]
pub fn strings_namespace(builder: &mut GlobalsBuilder) {
    /// `s` left-justified in `width` characters, padded with `fillchar`.
    fn ljust(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] width: i32,
        #[starlark(default = " ")] fillchar: &str,
    ) -> anyhow::Result<String> {
        pad("ljust", s, width, fillchar, |_| 0)
    }

    /// `s` right-justified in `width` characters, padded with `fillchar`.
    fn rjust(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] width: i32,
        #[starlark(default = " ")] fillchar: &str,
    ) -> anyhow::Result<String> {
        pad("rjust", s, width, fillchar, |p| p)
    }

    /// `s` centred in `width` characters, padded with `fillchar` (an odd padding puts
    /// the extra character after it).
    fn center(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] width: i32,
        #[starlark(default = " ")] fillchar: &str,
    ) -> anyhow::Result<String> {
        pad("center", s, width, fillchar, |p| p / 2)
    }

    /// `(before, after, found)`: `s` cut at the first `sep`; `(s, "", False)` without one.
    fn cut<'v>(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] sep: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let heap = eval.heap();
        let (before, after, found) = match s.split_once(sep) {
            Some((b, a)) => (b, a, true),
            None => (s, "", false),
        };
        Ok(heap.alloc(AllocTuple([
            heap.alloc(before),
            heap.alloc(after),
            Value::new_bool(found),
        ])))
    }

    /// Whether `s` and `t` are equal ignoring case.
    fn equal(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] t: &str,
    ) -> anyhow::Result<bool> {
        Ok(s.to_lowercase() == t.to_lowercase())
    }

    /// Whether `s` contains any character of `chars`.
    fn has_any(
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] chars: &str,
    ) -> anyhow::Result<bool> {
        Ok(s.chars().any(|c| chars.contains(c)))
    }

    /// `s` as a double-quoted literal with Go's escapes.
    fn quote(#[starlark(require = pos)] s: &str) -> anyhow::Result<String> {
        Ok(self::quote(s))
    }

    /// The text of a quoted literal (`"..."`, `` `...` `` or `'c'`).
    fn unquote(#[starlark(require = pos)] s: &str) -> anyhow::Result<String> {
        self::unquote(s).map_err(anyhow::Error::msg)
    }

    /// `unquote` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_unquote<'v>(
        #[starlark(require = pos)] s: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let heap = eval.heap();
        let outcome = self::unquote(s).map(|t| heap.alloc(t));
        Ok(crate::script::outcome::result(heap, outcome))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn padding() {
        assert_eq!(eval("strings.ljust('kite', 8)").unwrap(), "\"kite    \"");
        assert_eq!(
            eval("strings.rjust('kite', 8, '.')").unwrap(),
            "\"....kite\""
        );
        assert_eq!(
            eval("strings.center('kite', 20, '-')").unwrap(),
            "\"--------kite--------\""
        );
        assert_eq!(eval("strings.center('ab', 5, '*')").unwrap(), "\"*ab**\"");
        assert_eq!(eval("strings.ljust('kite', 2)").unwrap(), "\"kite\"");
        // (Starlark's repr escapes non-ASCII, so these compare in Starlark.)
        assert_eq!(eval("strings.rjust('é', 3) == '  é'").unwrap(), "True");
        let e = eval("strings.ljust('a', 3, '--')").unwrap_err();
        assert!(
            e.contains("strings.ljust: fillchar must be one character"),
            "{e}"
        );
    }

    #[test]
    fn cut_equal_has_any() {
        assert_eq!(
            eval("strings.cut('host:8080', ':')").unwrap(),
            "(\"host\", \"8080\", True)"
        );
        assert_eq!(
            eval("strings.cut('no-colon', ':')").unwrap(),
            "(\"no-colon\", \"\", False)"
        );
        assert_eq!(eval("strings.equal('Hello', 'hELLO')").unwrap(), "True");
        assert_eq!(eval("strings.equal('a', 'b')").unwrap(), "False");
        assert_eq!(eval("strings.has_any('hello!', '!@#')").unwrap(), "True");
        assert_eq!(eval("strings.has_any('hello', '!@#')").unwrap(), "False");
    }

    #[test]
    fn quoting_round_trips() {
        assert_eq!(
            eval(r#"strings.quote('hello "world"\n')"#).unwrap(),
            r#""\"hello \\\"world\\\"\\n\"""#
        );
        for s in ["plain", "tab\there", "quote\"and\\slash", "ünï\u{7}", ""] {
            assert_eq!(super::unquote(&super::quote(s)).as_deref(), Ok(s));
        }
        assert_eq!(
            eval("strings.unquote('`raw\\\\n`')").unwrap(),
            "\"raw\\\\n\""
        );
        assert_eq!(eval("strings.unquote(\"'x'\")").unwrap(), "\"x\"");
        assert_eq!(
            eval(r#"strings.unquote('"\\u00e9"') == 'é'"#).unwrap(),
            "True"
        );
    }

    #[test]
    fn unquote_errors_and_try() {
        let e = eval("strings.unquote('plain')").unwrap_err();
        assert!(
            e.contains("strings.unquote: \"plain\": not a quoted string"),
            "{e}"
        );
        let e = eval(r#"strings.unquote('"bad \\q"')"#).unwrap_err();
        assert!(e.contains("unknown escape \\q"), "{e}");
        assert_eq!(
            eval("r = strings.try_unquote('nope')\n(r.ok, r.value, 'not a quoted' in r.error)")
                .unwrap(),
            "(False, None, True)"
        );
        assert_eq!(
            eval("r = strings.try_unquote('\"ok\"')\n(r.ok, r.value, r.error)").unwrap(),
            "(True, \"ok\", \"\")"
        );
    }
}
