//! `fmt` (`printf`, `println`, `sprintf`, also as globals, and their `try_` forms in
//! the namespace): Go-style formatting, as upstream Starkite's scripts use it.
//!
//! # Caveats
//! Output is line-based (through `print`, so a hosted script's lines carry its name and
//! rate limit): `printf` drops one trailing newline of its text instead of doubling it,
//! and a text without one still ends its line.

use std::fmt::Write;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::float::UnpackFloat;
use starlark::values::none::NoneType;
use starlark::values::{UnpackValue, Value};

use crate::script::host::Host;

/// One `%` directive's flags, width and precision (also the template module's
/// `printf`).
#[derive(Default, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) minus: bool,
    pub(crate) plus: bool,
    pub(crate) sharp: bool,
    pub(crate) space: bool,
    pub(crate) zero: bool,
    pub(crate) width: Option<usize>,
    pub(crate) precision: Option<usize>,
}

impl Spec {
    /// `body` padded to the width: spaces (left or right), or zeros after the sign.
    /// Reads the flags after a `%` (`- + # 0` and space), leaving width and precision.
    pub(crate) fn flags(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Self {
        let mut spec = Spec::default();
        while let Some(&f) = chars.peek() {
            match f {
                '-' => spec.minus = true,
                '+' => spec.plus = true,
                '#' => spec.sharp = true,
                ' ' => spec.space = true,
                '0' => spec.zero = true,
                _ => break,
            }
            chars.next();
        }
        spec
    }

    pub(crate) fn pad(&self, body: &str, numeric: bool) -> String {
        let len = body.chars().count();
        let Some(width) = self.width.filter(|w| *w > len) else {
            return body.to_owned();
        };
        let fill = width - len;
        if self.minus {
            return format!("{body}{}", " ".repeat(fill));
        }
        if self.zero && numeric {
            let split = usize::from(body.starts_with(['-', '+', ' ']));
            return format!("{}{}{}", &body[..split], "0".repeat(fill), &body[split..]);
        }
        format!("{}{body}", " ".repeat(fill))
    }

    pub(crate) fn sign(&self, negative: bool) -> &'static str {
        match (negative, self.plus, self.space) {
            (true, ..) => "-",
            (false, true, _) => "+",
            (false, false, true) => " ",
            _ => "",
        }
    }
}

/// The text `%v` and `%s` give a value: a string as it is, anything else as `str()`.
fn plain(v: Value) -> String {
    v.unpack_str().map_or_else(|| v.to_str(), str::to_owned)
}

/// Go's `%!verb(type=value)` for an argument the verb cannot format.
fn bad(verb: char, v: Value) -> String {
    format!("%!{verb}({}={})", v.get_type(), plain(v))
}

fn integer(spec: &Spec, verb: char, v: Value) -> Option<String> {
    if v.unpack_bool().is_some() {
        return None;
    }
    let i = i64::unpack_value(v).ok().flatten()?;
    let digits = match verb {
        'd' => i.unsigned_abs().to_string(),
        'x' => format!("{:x}", i.unsigned_abs()),
        'X' => format!("{:X}", i.unsigned_abs()),
        'o' => format!("{:o}", i.unsigned_abs()),
        'b' => format!("{:b}", i.unsigned_abs()),
        _ => return None,
    };
    let prefix = match (spec.sharp, verb) {
        (true, 'x') => "0x",
        (true, 'X') => "0X",
        (true, 'o') => "0",
        _ => "",
    };
    Some(format!("{}{prefix}{digits}", spec.sign(i < 0)))
}

fn float(spec: &Spec, verb: char, v: Value) -> Option<String> {
    if v.unpack_bool().is_some() {
        return None;
    }
    let x = UnpackFloat::unpack_value(v).ok().flatten()?.0;
    let prec = spec.precision.unwrap_or(6);
    let body = match verb {
        'f' | 'F' => format!("{:.prec$}", x.abs()),
        'e' => format!("{:.prec$e}", x.abs()),
        'E' => format!("{:.prec$E}", x.abs()),
        'g' | 'G' => match spec.precision {
            Some(prec) => format!("{:.prec$}", x.abs()),
            None => x.abs().to_string(),
        },
        _ => return None,
    };
    // Go writes exponents with a sign and two digits: 1.5e+03.
    let body = match body.split_once(['e', 'E']) {
        Some((m, e)) if matches!(verb, 'e' | 'E') => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!(
                "{m}{}{sign}{digits:0>2}",
                if verb == 'e' { 'e' } else { 'E' }
            )
        }
        _ => body,
    };
    Some(format!(
        "{}{body}",
        spec.sign(x.is_sign_negative() && x != 0.0)
    ))
}

/// One directive applied to one argument.
fn directive(spec: &Spec, verb: char, v: Value) -> String {
    let truncate = |s: String| match spec.precision {
        Some(p) => s.chars().take(p).collect(),
        None => s,
    };
    let (body, numeric) = match verb {
        'v' if v.unpack_str().is_none() && v.unpack_bool().is_none() => {
            match (integer(spec, 'd', v), float(spec, 'g', v)) {
                (Some(s), _) | (None, Some(s)) => (s, true),
                _ => (plain(v), false),
            }
        }
        'v' | 's' => (truncate(plain(v)), false),
        'q' => match v.unpack_str() {
            Some(s) => (super::strings::quote(s), false),
            None => (bad(verb, v), false),
        },
        't' => match v.unpack_bool() {
            Some(b) => (b.to_string(), false),
            None => (bad(verb, v), false),
        },
        'c' => match i64::unpack_value(v)
            .ok()
            .flatten()
            .and_then(|i| u32::try_from(i).ok())
            .and_then(char::from_u32)
        {
            Some(c) => (c.to_string(), false),
            None => (bad(verb, v), false),
        },
        'T' => (v.get_type().to_owned(), false),
        'd' | 'o' | 'b' => match integer(spec, verb, v) {
            Some(s) => (s, true),
            None => (bad(verb, v), false),
        },
        'x' | 'X' => match (integer(spec, verb, v), v.unpack_str()) {
            (Some(s), _) => (s, true),
            (None, Some(s)) => {
                let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
                (if verb == 'X' { hex.to_uppercase() } else { hex }, false)
            }
            _ => (bad(verb, v), false),
        },
        'f' | 'F' | 'e' | 'E' | 'g' | 'G' => match float(spec, verb, v) {
            Some(s) => (s, true),
            None => (bad(verb, v), false),
        },
        other => (bad(other, v), false),
    };
    spec.pad(&body, numeric)
}

/// Go's `fmt.Sprintf` over Starlark values: `%v %s %d %f %e %g %t %q %x %X %o %b %c %T
/// %%`, with the flags `- + # 0` and space, a width and a precision (`*` takes them
/// from the arguments). Mistakes show in the text as Go shows them: `%!d(string=x)`,
/// `%!s(MISSING)`, `%!(EXTRA int=1)`.
///
/// # Errors
/// The call's memory or time ran out while formatting (arguments that repeat one
/// large string many times over).
pub fn sprintf(format: &str, args: &[Value]) -> Result<String, String> {
    let mut out = String::with_capacity(format.len());
    let mut args = args.iter().copied();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = Spec::flags(&mut chars);
        let mut number = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
            if chars.peek() == Some(&'*') {
                chars.next();
                return args
                    .next()
                    .and_then(|v| i64::unpack_value(v).ok().flatten())
                    .and_then(|i| usize::try_from(i).ok());
            }
            let mut n = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = Some(n.unwrap_or(0) * 10 + d as usize);
                chars.next();
            }
            n
        };
        spec.width = number(&mut chars);
        if chars.peek() == Some(&'.') {
            chars.next();
            spec.precision = Some(number(&mut chars).unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        match args.next() {
            Some(v) => {
                let piece = directive(&spec, verb, v);
                checked(piece.len())?;
                out.push_str(&piece);
            }
            None => {
                let _ = write!(out, "%!{verb}(MISSING)");
            }
        }
    }
    let mut extra = Vec::new();
    for v in args {
        let piece = format!("{}={}", v.get_type(), plain(v));
        checked(piece.len())?;
        extra.push(piece);
    }
    if !extra.is_empty() {
        let _ = write!(out, "%!(EXTRA {})", extra.join(", "));
    }
    Ok(out)
}

/// Counts `bytes` formatted against the call's budgets (see `budget::walk_step`).
fn checked(bytes: usize) -> Result<(), String> {
    match crate::script::budget::walk_step(bytes) {
        Some(why) => Err(format!("fmt: formatting stopped: {why}")),
        None => Ok(()),
    }
}

/// Writes `text` as one line through the script's `print`.
pub(crate) fn emit(eval: &mut Evaluator<'_, '_, '_>, text: &str) -> anyhow::Result<NoneType> {
    let host = Host::of(eval)?;
    let print = host
        .library
        .globals()
        .iter()
        .find(|(name, _)| *name == "print")
        .map(|(_, v)| v.to_value())
        .ok_or_else(|| anyhow::anyhow!("fmt: this library has no print"))?;
    let line = eval.heap().alloc(text.strip_suffix('\n').unwrap_or(text));
    eval.eval_function(print, &[line], &[])
        .map_err(|e| anyhow::anyhow!("{}", e.without_diagnostic()))?;
    Ok(NoneType)
}

fn println_text(args: &[Value]) -> Result<String, String> {
    let mut pieces = Vec::new();
    for v in args {
        let piece = plain(*v);
        checked(piece.len())?;
        pieces.push(piece);
    }
    Ok(pieces.join(" "))
}

/// `printf`, `println` and `sprintf`: in the `fmt` namespace and as globals.
#[starlark_module]
fn fmt_functions(builder: &mut GlobalsBuilder) {
    /// Prints `format` with `args` filled in (Go verbs: `%s %d %v %q %.2f` ...).
    fn printf<'v>(
        #[starlark(require = pos)] format: &str,
        #[starlark(args)] args: starlark::values::tuple::UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let text = sprintf(format, &args.items).map_err(anyhow::Error::msg)?;
        emit(eval, &text)
    }

    /// Prints the arguments separated by spaces.
    fn println<'v>(
        #[starlark(args)] args: starlark::values::tuple::UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let text = println_text(&args.items).map_err(anyhow::Error::msg)?;
        emit(eval, &text)
    }

    /// `format` with `args` filled in, as a string.
    fn sprintf<'v>(
        #[starlark(require = pos)] format: &str,
        #[starlark(args)] args: starlark::values::tuple::UnpackTuple<Value<'v>>,
    ) -> anyhow::Result<String> {
        self::sprintf(format, &args.items).map_err(anyhow::Error::msg)
    }
}

starlark::globals_static!(FUNCTIONS = fmt_functions);

/// The `fmt` namespace: its functions, each with its `try_` form
/// ([`crate::script::try_form`]).
pub fn fmt_namespace(builder: &mut GlobalsBuilder) {
    let tries = ["printf", "println", "sprintf"];
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &tries);
}

/// The global aliases `printf`, `println` and `sprintf`.
pub fn fmt_globals(builder: &mut GlobalsBuilder) {
    fmt_functions(builder);
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    fn f(code: &str) -> String {
        let out = eval(&format!("sprintf({code})")).unwrap();
        out[1..out.len() - 1].replace("\\\"", "\"")
    }

    #[test]
    fn verbs_as_go_formats_them() {
        assert_eq!(
            f(r#""deploy %s to %s (replicas=%d)", "myapp", "prod", 3"#),
            "deploy myapp to prod (replicas=3)"
        );
        assert_eq!(f(r#""%q", "hello world""#), r#""hello world""#);
        assert_eq!(
            f(r#""%.2f|%f|%e", 3.14159, 2, 1500.0"#),
            "3.14|2.000000|1.500000e+03"
        );
        assert_eq!(
            f(r#""%v %v %v %v", [1, 2, 3], "s", True, None"#),
            "[1, 2, 3] s True None"
        );
        assert_eq!(f(r#""100%%""#), "100%");
        assert_eq!(
            f(r#""%5d|%-5d|%05d|%+d", 42, 42, -42, 7"#),
            "   42|42   |-0042|+7"
        );
        assert_eq!(
            f(r#""%x %X %#x %o %b %c", 255, 255, 255, 8, 5, 65"#),
            "ff FF 0xff 10 101 A"
        );
        assert_eq!(f(r#""%t %T %T", False, 1, {}"#), "false int dict");
        assert_eq!(
            f(r#""%.3s|%8s|%-4s|", "abcdef", "right", "l""#),
            "abc|   right|l   |"
        );
        assert_eq!(f(r#""%*d", 4, 7"#), "   7");
        assert_eq!(f(r#""%x", "hi""#), "6869");
    }

    #[test]
    fn mistakes_show_in_the_text() {
        assert_eq!(f(r#""%d", "x""#), "%!d(string=x)");
        assert_eq!(f(r#""%s and %s", "one""#), "one and %!s(MISSING)");
        assert_eq!(f(r#""%d", 1, "two""#), "1%!(EXTRA string=two)");
        assert_eq!(f(r#""%z", 1"#), "%!z(int=1)");
        assert_eq!(f(r#""50%""#), "50%!(NOVERB)");
        assert_eq!(f(r#""%d", True"#), "%!d(bool=True)");
    }

    #[test]
    fn namespace_and_aliases() {
        assert_eq!(eval("fmt.sprintf('%d-%s', 1, 'a')").unwrap(), "\"1-a\"");
        assert_eq!(eval("printf('x %d\\n', 1)").unwrap(), "None");
        assert_eq!(eval("fmt.println('a', 1)").unwrap(), "None");
        let e = eval("sprintf()").unwrap_err();
        assert!(e.contains("format"), "{e}");
        assert_eq!(
            eval("r = fmt.try_sprintf('%d-%s', 1, 'a')\n(r.ok, r.value, fmt.try_println('a').ok)"),
            Ok("(True, \"1-a\", True)".to_owned())
        );
    }
}
