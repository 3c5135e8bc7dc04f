//! Go's `fmt.Sprint`, `Sprintln` and `Sprintf` over template values, for the `print`,
//! `println` and `printf` functions (and `html`, `js`, `urlquery` of several values).

use std::fmt::Write;

use super::data::{Data, go_float};
use super::exec::MAX_OUTPUT;
use crate::script::builtins::fmt::Spec;
use crate::script::builtins::strings::quote;

/// `fmt.Sprint`: spaces only between operands when neither is a string.
pub fn sprint(args: &[Data]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        let is_str = |d: &Data| matches!(d, Data::Str(_));
        if i > 0 && !is_str(a) && !is_str(&args[i - 1]) {
            out.push(' ');
        }
        a.write_go(&mut out);
    }
    out
}

/// `fmt.Sprintln`: spaces between all operands, and a newline.
pub fn sprintln(args: &[Data]) -> String {
    let Some(pieces) = bounded(args.iter().map(Data::to_go_string)) else {
        return TOO_LONG.to_owned();
    };
    let mut out = pieces.join(" ");
    out.push('\n');
    out
}

/// What a formatted value longer than a template may write shows instead.
const TOO_LONG: &str = "%!(TOO LONG)";

/// The pieces, unless together they pass what a template may write
/// ([`MAX_OUTPUT`]) or the script's memory budget: a few operands (the same large value
/// many times, a padded list) can format to far more than their data.
fn bounded(pieces: impl Iterator<Item = String>) -> Option<Vec<String>> {
    let mut total = 0usize;
    let mut out = Vec::new();
    for piece in pieces {
        total = total.saturating_add(piece.len());
        if total > MAX_OUTPUT || crate::script::memory::exhausted() {
            return None;
        }
        out.push(piece);
    }
    Some(out)
}

/// Go's `%!verb(type=value)` for an operand the verb does not fit.
fn bad(verb: char, d: &Data) -> String {
    match d {
        Data::Nil | Data::Missing => format!("%!{verb}(<nil>)"),
        _ => format!("%!{verb}({}={})", d.type_name(), d.to_go_string()),
    }
}

fn integer(spec: Spec, verb: char, i: i64) -> Option<String> {
    let n = i.unsigned_abs();
    let digits = match verb {
        'd' | 'v' => n.to_string(),
        'x' => format!("{n:x}"),
        'X' => format!("{n:X}"),
        'o' => format!("{n:o}"),
        'O' => format!("0o{n:o}"),
        'b' => format!("{n:b}"),
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

/// An exponent as Go writes it: a sign and at least two digits.
fn go_exponent(s: &str, upper: bool) -> String {
    let Some((m, e)) = s.split_once('e') else {
        return s.to_owned();
    };
    let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
    format!("{m}{}{sign}{digits:0>2}", if upper { 'E' } else { 'e' })
}

#[expect(
    clippy::many_single_char_names,
    reason = "x, a, p, m, e: the usual names in float formatting"
)]
fn float(spec: Spec, verb: char, x: f64) -> Option<String> {
    if !x.is_finite() {
        let body = if x.is_nan() {
            "NaN"
        } else if x > 0.0 {
            "Inf"
        } else {
            "-Inf"
        };
        let sign = if x > 0.0 { spec.sign(false) } else { "" };
        return Some(format!("{}{body}", if x.is_nan() { "" } else { sign }));
    }
    let a = x.abs();
    let body = match (verb, spec.precision) {
        ('f' | 'F', p) => {
            let p = p.unwrap_or(6);
            format!("{a:.p$}")
        }
        ('e' | 'E', p) => {
            let p = p.unwrap_or(6);
            go_exponent(&format!("{a:.p$e}"), verb == 'E')
        }
        ('g' | 'G' | 'v', None) => go_float(a),
        ('g' | 'G' | 'v', Some(p)) => {
            let p = p.max(1);
            let sci = format!("{a:.prec$e}", prec = p - 1);
            let (m, e) = sci.split_once('e').unwrap_or((&sci, "0"));
            let exp: i64 = e.parse().unwrap_or(0);
            let trim = |s: &str| {
                if s.contains('.') {
                    s.trim_end_matches('0').trim_end_matches('.').to_owned()
                } else {
                    s.to_owned()
                }
            };
            if exp < -4 || exp >= i64::try_from(p).unwrap_or(i64::MAX) {
                go_exponent(&format!("{}e{exp}", trim(m)), verb == 'G')
            } else {
                let decimals =
                    usize::try_from(i64::try_from(p).unwrap_or(0) - 1 - exp).unwrap_or(0);
                trim(&format!("{a:.decimals$}"))
            }
        }
        _ => return None,
    };
    Some(format!(
        "{}{body}",
        spec.sign(x.is_sign_negative() && x != 0.0)
    ))
}

/// One directive applied to one operand (lists and maps: to each element).
fn directive(spec: Spec, verb: char, d: &Data) -> String {
    let truncate = |s: &str| match spec.precision {
        Some(p) => s.chars().take(p).collect(),
        None => s.to_owned(),
    };
    let (body, numeric) = match (verb, d) {
        ('T', _) => (d.type_name().to_owned(), false),
        ('v', Data::Nil | Data::Missing) => ("<nil>".to_owned(), false),
        ('v' | 's', Data::Str(s)) => (truncate(s), false),
        ('v' | 't', Data::Bool(b)) => (b.to_string(), false),
        ('v' | 'd' | 'x' | 'X' | 'o' | 'O' | 'b', Data::Int(i)) => match integer(spec, verb, *i) {
            Some(s) => (s, true),
            None => (bad(verb, d), false),
        },
        ('c', Data::Int(i)) => match u32::try_from(*i).ok().and_then(char::from_u32) {
            Some(c) => (c.to_string(), false),
            None => (bad(verb, d), false),
        },
        ('q', Data::Int(i)) => match u32::try_from(*i).ok().and_then(char::from_u32) {
            Some(c) => (format!("'{c}'"), false),
            None => (bad(verb, d), false),
        },
        ('U', Data::Int(i)) => (format!("U+{i:04X}"), false),
        ('v' | 'e' | 'E' | 'f' | 'F' | 'g' | 'G', Data::Float(x)) => match float(spec, verb, *x) {
            Some(s) => (s, true),
            None => (bad(verb, d), false),
        },
        ('q', Data::Str(s)) => (quote(s), false),
        ('x' | 'X', Data::Str(s)) => {
            let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
            (if verb == 'X' { hex.to_uppercase() } else { hex }, false)
        }
        (_, Data::List(items)) => {
            let Some(inner) = bounded(items.iter().map(|e| directive(spec, verb, e))) else {
                return TOO_LONG.to_owned();
            };
            return format!("[{}]", inner.join(" "));
        }
        (_, Data::Map(map)) => {
            let inner = bounded(map.iter().map(|(k, v)| {
                format!(
                    "{}:{}",
                    directive(spec, verb, &Data::str(k)),
                    directive(spec, verb, v)
                )
            }));
            let Some(inner) = inner else {
                return TOO_LONG.to_owned();
            };
            return format!("map[{}]", inner.join(" "));
        }
        _ => (bad(verb, d), false),
    };
    spec.pad(&body, numeric)
}

/// Go's `fmt.Sprintf`: `%v %s %d %q %t %x %X %o %b %c %U %e %f %g %T %%`, the flags
/// `- + # 0` and space, width and precision (`*` takes them from the operands).
/// Mistakes show in the text as Go shows them (`%!d(string=x)`, `%!s(MISSING)`).
pub fn sprintf(format: &str, args: &[Data]) -> String {
    let mut out = String::with_capacity(format.len());
    let mut args = args.iter();
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
                return match args.next() {
                    Some(Data::Int(i)) => usize::try_from(*i).ok(),
                    _ => None,
                };
            }
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                chars.next();
            }
            n
        };
        spec.width = number(&mut chars).map(|w| w.min(1 << 16));
        if chars.peek() == Some(&'.') {
            chars.next();
            spec.precision = Some(number(&mut chars).unwrap_or(0).min(1 << 10));
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
            Some(d) => out.push_str(&directive(spec, verb, d)),
            None => {
                let _ = write!(out, "%!{verb}(MISSING)");
            }
        }
    }
    let extra = bounded(args.map(|d| match d {
        Data::Nil | Data::Missing => "<nil>".to_owned(),
        _ => format!("{}={}", d.type_name(), d.to_go_string()),
    }));
    let Some(extra) = extra else {
        return TOO_LONG.to_owned();
    };
    if !extra.is_empty() {
        let _ = write!(out, "%!(EXTRA {})", extra.join(", "));
    }
    out
}
