//! Go's predefined template functions (`and` and `or` short-circuit, so the executor
//! runs those itself).

use std::cmp::Ordering;
use std::sync::Arc;

use super::data::Data;
use super::format::{sprint, sprintf, sprintln};

/// The functions a template may call.
const BUILTINS: &[&str] = &[
    "and", "call", "eq", "ge", "gt", "html", "index", "js", "le", "len", "lt", "ne", "not", "or",
    "print", "printf", "println", "slice", "urlquery",
];

pub fn is_builtin(name: &str) -> bool {
    BUILTINS.contains(&name)
}

/// How many arguments a function takes: the fixed ones, and whether more may follow.
pub fn arity(name: &str) -> (usize, bool) {
    match name {
        "and" | "or" | "index" | "slice" | "printf" | "eq" | "call" => (1, true),
        "not" | "len" => (1, false),
        "ne" | "lt" | "le" | "gt" | "ge" => (2, false),
        _ => (0, true),
    }
}

/// Calls the function `name` (not `and`/`or`) with evaluated arguments.
///
/// # Errors
/// What Go's function returns, e.g. `index out of range: 5`.
pub fn call(name: &str, args: &[Data]) -> Result<Data, String> {
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Data::Nil);
    let rest = args.get(1..).unwrap_or_default();
    Ok(match name {
        "not" => Data::Bool(!arg(0).truth()),
        "len" => Data::Int(length(&arg(0))?),
        "index" => index(arg(0), rest)?,
        "slice" => slice(&arg(0), rest)?,
        "print" => Data::str(&sprint(args)),
        "println" => Data::str(&sprintln(args)),
        "printf" => match arg(0) {
            Data::Str(f) => Data::str(&sprintf(&f, rest)),
            other => {
                return Err(format!(
                    "wrong type for value; expected string; got {}",
                    other.type_name()
                ));
            }
        },
        "eq" => {
            if args.len() < 2 {
                return Err("missing argument for comparison".to_owned());
            }
            let mut any = false;
            for b in rest {
                any |= equal(&args[0], b)?;
            }
            Data::Bool(any)
        }
        "ne" => Data::Bool(!equal(&arg(0), &arg(1))?),
        "lt" => Data::Bool(less(&arg(0), &arg(1))? == Ordering::Less),
        "le" => Data::Bool(less(&arg(0), &arg(1))? != Ordering::Greater),
        "gt" => Data::Bool(less(&arg(0), &arg(1))? == Ordering::Greater),
        "ge" => Data::Bool(less(&arg(0), &arg(1))? != Ordering::Less),
        "html" => Data::str(&html(&text_of(args))),
        "js" => Data::str(&js(&text_of(args))),
        "urlquery" => Data::str(&urlquery(&text_of(args))),
        "call" => {
            return Err(match arg(0) {
                Data::Nil | Data::Missing => "call of nil".to_owned(),
                other => format!("non-function of type {}", other.type_name()),
            });
        }
        other => return Err(format!("function {other:?} not defined")),
    })
}

/// The text the escaping functions work on: one string as it is, else `Sprint`.
fn text_of(args: &[Data]) -> String {
    match args {
        [Data::Str(s)] => s.to_string(),
        _ => sprint(args),
    }
}

fn length(d: &Data) -> Result<i64, String> {
    let n = match d {
        Data::Str(s) => s.len(),
        Data::List(l) => l.len(),
        Data::Map(m) => m.len(),
        Data::Nil | Data::Missing => return Err("len of nil pointer".to_owned()),
        other => return Err(format!("len of type {}", other.type_name())),
    };
    i64::try_from(n).map_err(|_| "len too large".to_owned())
}

/// An index into a list or string of length `len` (a slice bound may equal it).
fn position(i: &Data, len: usize, bound: bool) -> Result<usize, String> {
    match i {
        Data::Int(i) => usize::try_from(*i)
            .ok()
            .filter(|i| *i < len || (bound && *i == len))
            .ok_or_else(|| format!("index out of range: {i}")),
        Data::Nil | Data::Missing => Err("cannot index slice/array with nil".to_owned()),
        other => Err(format!(
            "cannot index slice/array with type {}",
            other.type_name()
        )),
    }
}

fn index(mut item: Data, indices: &[Data]) -> Result<Data, String> {
    for i in indices {
        item = match &item {
            Data::List(l) => l[position(i, l.len(), false)?].clone(),
            Data::Str(s) => Data::Int(i64::from(s.as_bytes()[position(i, s.len(), false)?])),
            Data::Map(m) => match i {
                Data::Str(k) => m.get(&**k).cloned().unwrap_or(Data::Nil),
                other => {
                    return Err(format!(
                        "value has type {}; should be string",
                        other.type_name()
                    ));
                }
            },
            Data::Nil | Data::Missing => return Err("index of untyped nil".to_owned()),
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

fn slice(item: &Data, indices: &[Data]) -> Result<Data, String> {
    let len = match item {
        Data::Str(s) => s.len(),
        Data::List(l) => l.len(),
        Data::Nil | Data::Missing => return Err("slice of untyped nil".to_owned()),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let max = if matches!(item, Data::Str(_)) { 2 } else { 3 };
    if indices.len() > max {
        return Err(format!("too many slice indexes: {}", indices.len()));
    }
    if matches!(item, Data::Str(_)) && indices.len() == 3 {
        return Err("cannot 3-index slice a string".to_owned());
    }
    let mut bounds = [0, len, len];
    for (k, i) in indices.iter().enumerate() {
        bounds[k] = position(i, len, true)?;
        if k > 0 && bounds[k - 1] > bounds[k] {
            return Err(format!(
                "invalid slice index: {} > {}",
                bounds[k - 1],
                bounds[k]
            ));
        }
    }
    let (from, to) = (bounds[0], bounds[1].max(bounds[0]));
    Ok(match item {
        Data::Str(s) => Data::str(
            s.get(from..to)
                .ok_or_else(|| format!("slice [{from}:{to}] splits a character"))?,
        ),
        Data::List(l) => Data::List(Arc::from(&l[from..to])),
        _ => Data::Nil,
    })
}

/// Go's `eq` of two values: basic kinds compare, nil equals only nil.
fn equal(a: &Data, b: &Data) -> Result<bool, String> {
    Ok(match (a, b) {
        (Data::Nil | Data::Missing, Data::Nil | Data::Missing) => true,
        (Data::Nil | Data::Missing, _) | (_, Data::Nil | Data::Missing) => false,
        (Data::Bool(x), Data::Bool(y)) => x == y,
        (Data::Int(x), Data::Int(y)) => x == y,
        #[expect(clippy::float_cmp, reason = "Go's eq compares floats exactly")]
        (Data::Float(x), Data::Float(y)) => x == y,
        (Data::Str(x), Data::Str(y)) => x == y,
        (Data::List(_) | Data::Map(_), _) => {
            return Err(format!("non-comparable type {}", a.type_name()));
        }
        (_, Data::List(_) | Data::Map(_)) => {
            return Err(format!("non-comparable type {}", b.type_name()));
        }
        _ => return Err("incompatible types for comparison".to_owned()),
    })
}

/// The order of two values of the same basic kind (not bool).
fn less(a: &Data, b: &Data) -> Result<Ordering, String> {
    let basic = |d: &Data| matches!(d, Data::Int(_) | Data::Float(_) | Data::Str(_));
    if !basic(a) || !basic(b) {
        return Err("invalid type for comparison".to_owned());
    }
    match (a, b) {
        (Data::Int(x), Data::Int(y)) => Ok(x.cmp(y)),
        (Data::Float(x), Data::Float(y)) => Ok(x.partial_cmp(y).unwrap_or(Ordering::Equal)),
        (Data::Str(x), Data::Str(y)) => Ok(x.as_bytes().cmp(y.as_bytes())),
        _ => Err("incompatible types for comparison".to_owned()),
    }
}

/// Go's `HTMLEscapeString`.
fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `JSEscapeString`.
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if u32::from(c) < 0x20 || (!c.is_ascii() && c.is_control()) => {
                out.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn urlquery(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
