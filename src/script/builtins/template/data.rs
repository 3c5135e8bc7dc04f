//! The values a template works on: the script's data converted once, so rendering never
//! touches the Starlark heap, with Go's truth, type names and `%v` printing.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use starlark::values::bytes::StarlarkBytes;
use starlark::values::dict::DictRef;
use starlark::values::float::StarlarkFloat;
use starlark::values::list::ListRef;
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{UnpackValue, Value, ValueLike};

use crate::script::attrdict::AttrDict;

/// Deeper data than this is refused: it catches self-referential lists.
const MAX_DEPTH: usize = 200;

/// A template value. `Missing` is Go's invalid value (a map key that is not there);
/// `Nil` is a `None` in the data.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Missing,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
    List(Arc<[Data]>),
    /// Sorted by key, as Go ranges over and prints maps.
    Map(Arc<BTreeMap<String, Data>>),
}

/// Why the script's data cannot be rendered; the message names the place in it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot use a {type_name} in template data (at {path})")]
    Unsupported { type_name: String, path: String },
    #[error("dict key {key} at {path} is not a string")]
    NonStringKey { key: String, path: String },
    #[error("integer {value} at {path} does not fit in 64 bits")]
    IntTooLarge { value: String, path: String },
    #[error("data nested deeper than {MAX_DEPTH} levels at {path} (a cycle?)")]
    TooDeep { path: String },
    #[error("converting the template data stopped at {path}: {why}")]
    Stopped { path: String, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Data {
    pub fn str(s: &str) -> Data {
        Data::Str(Arc::from(s))
    }

    /// Converts the script's data; `None` at the top is Go's nil data (no value).
    ///
    /// # Errors
    /// Values with no template form (functions, non-string keys, huge integers, cycles).
    pub fn from_starlark(value: Value) -> Result<Data> {
        if value.is_none() {
            return Ok(Data::Missing);
        }
        convert(value, &mut String::from("$"), 0)
    }

    /// Go's notion of truth: false, 0, nil, and empty strings, lists and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Data::Missing | Data::Nil => false,
            Data::Bool(b) => *b,
            Data::Int(i) => *i != 0,
            Data::Float(f) => *f != 0.0,
            Data::Str(s) => !s.is_empty(),
            Data::List(l) => !l.is_empty(),
            Data::Map(m) => !m.is_empty(),
        }
    }

    /// The Go type name messages use.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Missing | Data::Nil => "<nil>",
            Data::Bool(_) => "bool",
            Data::Int(_) => "int",
            Data::Float(_) => "float64",
            Data::Str(_) => "string",
            Data::List(_) => "[]interface {}",
            Data::Map(_) => "map[string]interface {}",
        }
    }

    /// The value as Go's `fmt.Sprint` writes it (`<no value>` for a missing one, as the
    /// template engine prints it).
    pub fn write_go(&self, out: &mut String) {
        match self {
            Data::Missing => out.push_str("<no value>"),
            Data::Nil => out.push_str("<nil>"),
            Data::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Data::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Data::Float(f) => out.push_str(&go_float(*f)),
            Data::Str(s) => out.push_str(s),
            Data::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    item.nested().write_go(out);
                }
                out.push(']');
            }
            Data::Map(map) => {
                out.push_str("map[");
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    v.nested().write_go(out);
                }
                out.push(']');
            }
        }
    }

    /// The value as Go's `fmt.Sprint` writes it.
    pub fn to_go_string(&self) -> String {
        let mut out = String::new();
        self.write_go(&mut out);
        out
    }

    /// Inside a list or map a missing value is a nil one.
    fn nested(&self) -> &Data {
        if matches!(self, Data::Missing) {
            &Data::Nil
        } else {
            self
        }
    }

    /// The value as a function argument: Go hands functions nil for a missing value.
    pub fn into_arg(self) -> Data {
        if matches!(self, Data::Missing) {
            Data::Nil
        } else {
            self
        }
    }
}

/// A float as Go's `%v` writes it: the shortest digits, with an exponent below 1e-4
/// and from 1e6 up (`1e+06`).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        let s = f.to_string();
        return if s == "-0" { "-0".to_owned() } else { s };
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
}

fn convert(value: Value, path: &mut String, depth: usize) -> Result<Data> {
    let copied = value.unpack_str().map_or(0, str::len);
    if let Some(why) = crate::script::budget::walk_step(copied) {
        return Err(Error::Stopped {
            path: path.chars().take(200).collect(),
            why,
        });
    }
    if depth > MAX_DEPTH {
        let shown: String = path.chars().take(60).collect();
        return Err(Error::TooDeep { path: shown });
    }
    if value.is_none() {
        return Ok(Data::Nil);
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(Data::Bool(b));
    }
    if let Some(s) = value.unpack_str() {
        return Ok(Data::str(s));
    }
    if value.get_type() == "int" {
        return match i64::unpack_value(value) {
            Ok(Some(i)) => Ok(Data::Int(i)),
            _ => Err(Error::IntTooLarge {
                value: value.to_repr(),
                path: path.clone(),
            }),
        };
    }
    if let Some(f) = value.downcast_ref::<StarlarkFloat>() {
        return Ok(Data::Float(f.0));
    }
    if let Some(b) = value.downcast_ref::<StarlarkBytes>() {
        return Ok(Data::str(&String::from_utf8_lossy(b.as_bytes())));
    }
    if let Some(d) = AttrDict::dict_of(value) {
        return convert(d, path, depth);
    }
    if let Some(dict) = DictRef::from_value(value) {
        let mut map = BTreeMap::new();
        for (k, v) in dict.iter() {
            let Some(key) = k.unpack_str() else {
                return Err(Error::NonStringKey {
                    key: k.to_repr(),
                    path: path.clone(),
                });
            };
            map.insert(key.to_owned(), field(v, key, path, depth)?);
        }
        return Ok(Data::Map(Arc::new(map)));
    }
    if let Some(s) = StructRef::from_value(value) {
        let mut map = BTreeMap::new();
        for (k, v) in s.iter() {
            map.insert(k.as_str().to_owned(), field(v, k.as_str(), path, depth)?);
        }
        return Ok(Data::Map(Arc::new(map)));
    }
    let items = ListRef::from_value(value)
        .map(ListRef::content)
        .or_else(|| TupleRef::from_value(value).map(TupleRef::content));
    if let Some(items) = items {
        let mut out = Vec::with_capacity(items.len().min(1024));
        for (i, v) in items.iter().enumerate() {
            let len = path.len();
            let _ = write!(path, "[{i}]");
            out.push(convert(*v, path, depth + 1)?);
            path.truncate(len);
        }
        return Ok(Data::List(Arc::from(out)));
    }
    Err(Error::Unsupported {
        type_name: value.get_type().to_owned(),
        path: path.clone(),
    })
}

fn field(v: Value, key: &str, path: &mut String, depth: usize) -> Result<Data> {
    // The key is copied (into the path, and the map): counted like a value.
    if let Some(why) = crate::script::budget::walk_step(key.len()) {
        return Err(Error::Stopped {
            path: path.chars().take(200).collect(),
            why,
        });
    }
    let len = path.len();
    path.push('.');
    path.push_str(key);
    let out = convert(v, path, depth + 1);
    path.truncate(len);
    out
}
