//! Exact conversion between JSON values and Starlark values.
//!
//! JSON objects become [`AttrDict`]s, arrays become lists. Integers stay integers over
//! the whole `i64` and `u64` range; `null` and `None` map to each other.

use serde_json::{Map, Number, Value as Json};
use starlark::collections::SmallMap;
use starlark::values::dict::{Dict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value, ValueLike};

use super::attrdict::AttrDict;

/// Deeper nesting than this is refused: it guards against self-referential lists
/// (`a = []; a.append(a)`) that would otherwise recurse forever.
const MAX_DEPTH: usize = 200;

/// Why a Starlark value has no JSON form. The message names the path inside the value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot convert {type_name} to JSON at {path}")]
    Unsupported { type_name: String, path: String },
    #[error("dict key {key} at {path} is not a string")]
    NonStringKey { key: String, path: String },
    #[error("integer {value} at {path} does not fit in 64 bits")]
    IntTooLarge { value: String, path: String },
    #[error("float {value} at {path} has no JSON form")]
    NonFiniteFloat { value: String, path: String },
    #[error("value nested deeper than {MAX_DEPTH} levels at {path} (a cycle?)")]
    TooDeep { path: String },
    #[error("converting the value to JSON stopped at {path}: {why}")]
    Stopped { path: String, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Converts a JSON value to a Starlark value allocated on `heap`.
pub fn to_starlark<'v>(heap: Heap<'v>, json: &Json) -> Value<'v> {
    match json {
        Json::Null => Value::new_none(),
        Json::Bool(b) => Value::new_bool(*b),
        Json::Number(n) => number_to_starlark(heap, n),
        Json::String(s) => heap.alloc(s.as_str()),
        Json::Array(items) => heap.alloc(AllocList(items.iter().map(|v| to_starlark(heap, v)))),
        Json::Object(map) => object_to_starlark(heap, map),
    }
}

/// Converts a JSON object to an [`AttrDict`].
pub fn object_to_starlark<'v>(heap: Heap<'v>, map: &Map<String, Json>) -> Value<'v> {
    let mut content = SmallMap::with_capacity(map.len());
    for (k, v) in map {
        let key = heap.alloc(k.as_str());
        // Strings always hash; the fallback only keeps this path panic-free.
        if let Ok(hashed) = key.get_hashed() {
            content.insert_hashed(hashed, to_starlark(heap, v));
        }
    }
    AttrDict::alloc(heap, heap.alloc(Dict::new(content)))
}

fn number_to_starlark<'v>(heap: Heap<'v>, n: &Number) -> Value<'v> {
    if let Some(i) = n.as_i64() {
        heap.alloc(i)
    } else if let Some(u) = n.as_u64() {
        heap.alloc(u)
    } else {
        heap.alloc(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Converts a Starlark value to JSON.
///
/// # Errors
/// Values with no JSON form (functions, non-string dict keys, integers beyond 64 bits,
/// NaN, cycles) fail with an error that names where in the value the problem is.
pub fn from_starlark(value: Value) -> Result<Json> {
    convert(value, &mut String::from("$"), 0)
}

fn convert(value: Value, path: &mut String, depth: usize) -> Result<Json> {
    let copied = value.unpack_str().map_or(0, str::len);
    if let Some(why) = crate::script::budget::walk_step(copied) {
        return Err(Error::Stopped {
            path: path.chars().take(200).collect(),
            why,
        });
    }
    if depth > MAX_DEPTH {
        // The path of a cycle repeats itself: its start says enough.
        let mut shown: String = path.chars().take(60).collect();
        if shown.len() < path.len() {
            shown += "...";
        }
        return Err(Error::TooDeep { path: shown });
    }
    if value.is_none() {
        return Ok(Json::Null);
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(Json::Bool(b));
    }
    if let Some(s) = value.unpack_str() {
        return Ok(Json::String(s.to_owned()));
    }
    if value.get_type() == "int" {
        if let Ok(Some(i)) = i64::unpack_value(value) {
            return Ok(Json::from(i));
        }
        if let Ok(Some(u)) = u64::unpack_value(value) {
            return Ok(Json::from(u));
        }
        return Err(Error::IntTooLarge {
            value: value.to_repr(),
            path: path.clone(),
        });
    }
    if let Some(f) = value.downcast_ref::<StarlarkFloat>() {
        return Number::from_f64(f.0)
            .map(Json::Number)
            .ok_or_else(|| Error::NonFiniteFloat {
                value: value.to_repr(),
                path: path.clone(),
            });
    }
    if let Some(d) = AttrDict::dict_of(value) {
        return convert(d, path, depth);
    }
    if let Some(dict) = DictRef::from_value(value) {
        let mut map = Map::new();
        for (k, v) in dict.iter() {
            let Some(key) = k.unpack_str() else {
                return Err(Error::NonStringKey {
                    key: k.to_repr(),
                    path: path.clone(),
                });
            };
            // The key is copied (into the path, and the object): counted like a value.
            if let Some(why) = crate::script::budget::walk_step(key.len()) {
                return Err(Error::Stopped {
                    path: path.chars().take(200).collect(),
                    why,
                });
            }
            let len = path.len();
            path.push('.');
            path.push_str(key);
            let v = convert(v, path, depth + 1)?;
            path.truncate(len);
            map.insert(key.to_owned(), v);
        }
        return Ok(Json::Object(map));
    }
    let items = ListRef::from_value(value)
        .map(starlark::values::list::ListRef::content)
        .or_else(|| TupleRef::from_value(value).map(starlark::values::tuple::TupleRef::content));
    if let Some(items) = items {
        // Grown as converted: a long list of one shared value is refused by the walk's
        // checks, not in one allocation up front.
        let mut out = Vec::with_capacity(items.len().min(1024));
        for (i, v) in items.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            out.push(convert(*v, path, depth + 1)?);
            path.truncate(len);
        }
        return Ok(Json::Array(out));
    }
    Err(Error::Unsupported {
        type_name: value.get_type().to_owned(),
        path: path.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use starlark::environment::Module;

    use super::*;

    /// A small deterministic generator, so failures reproduce.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    #[expect(
        clippy::cast_possible_wrap,
        clippy::cast_possible_truncation,
        reason = "small test values"
    )]
    fn random_json(r: &mut Lcg, depth: u32) -> Json {
        match r.next(if depth > 4 { 6 } else { 8 }) {
            0 => Json::Null,
            1 => json!(r.next(2) == 0),
            2 => json!(i64::MIN + r.next(1000) as i64),
            3 => json!(u64::MAX - r.next(1000)),
            4 => json!((r.next(1_000_000) as f64) / 7.0),
            5 => json!(["", "a", "ünï", "\"q\"", "\n"][r.next(5) as usize]),
            6 => Json::Array((0..r.next(4)).map(|_| random_json(r, depth + 1)).collect()),
            _ => Json::Object(
                (0..r.next(4))
                    .map(|i| (format!("k{i}"), random_json(r, depth + 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn json_round_trips_exactly() {
        let mut r = Lcg(42);
        Module::with_temp_heap(|module| {
            for _ in 0..2000 {
                let original = random_json(&mut r, 0);
                let value = to_starlark(module.heap(), &original);
                assert_eq!(from_starlark(value).unwrap(), original);
            }
        });
    }

    #[test]
    fn integer_edges_survive() {
        Module::with_temp_heap(|module| {
            for n in [
                json!(i64::MIN),
                json!(i64::MAX),
                json!(u64::MAX),
                json!(0),
                json!(-1),
            ] {
                assert_eq!(from_starlark(to_starlark(module.heap(), &n)).unwrap(), n);
            }
        });
    }
}
