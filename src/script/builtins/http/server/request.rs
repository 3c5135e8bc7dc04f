//! What an `http.server` handler receives and returns: the `http.request` value, the
//! `next` step a middleware calls, and the answer made of what the handler returned.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt::{self, Display};

use allocative::Allocative;
use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::collections::SmallMap;
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_complex_value;
use starlark::values::bytes::StarlarkBytes;
use starlark::values::dict::{Dict, DictRef};
use starlark::values::list::AllocList;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

use super::listen::{Answer, Received};

/// A request as a handler sees it, upstream's `http.request`.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, Allocative, NoSerialize)]
#[repr(C)]
pub struct RequestGen<V: ValueLifetimeless> {
    #[freeze(identity)]
    method: String,
    #[freeze(identity)]
    path: String,
    #[freeze(identity)]
    url: String,
    #[freeze(identity)]
    remote_addr: String,
    #[freeze(identity)]
    host: String,
    /// The route's wildcards, by name.
    params: V,
    /// The query: one value as a string, several as a list.
    query: V,
    /// The headers by canonical name, several values joined with ", " (as Go's).
    headers: V,
    /// Text, or bytes when the body is not UTF-8.
    body: V,
}

starlark_complex_value!(pub Request);

const ATTRS: [&str; 9] = [
    "body",
    "headers",
    "host",
    "method",
    "params",
    "path",
    "query",
    "remote_addr",
    "url",
];

/// A dict of string keys.
fn dict<'v>(heap: Heap<'v>, entries: impl IntoIterator<Item = (String, Value<'v>)>) -> Value<'v> {
    let mut content = SmallMap::new();
    for (k, v) in entries {
        // Strings always hash; the fallback only keeps this path panic-free.
        if let Ok(key) = heap.alloc(k).get_hashed() {
            content.insert_hashed(key, v);
        }
    }
    heap.alloc(Dict::new(content))
}

impl<'v> Request<'v> {
    /// The request's value on `heap`.
    pub fn alloc(heap: Heap<'v>, r: Received, params: Vec<(String, String)>) -> Value<'v> {
        let mut query: Vec<(String, Vec<String>)> = Vec::new();
        for (k, v) in form_urlencoded::parse(r.raw_query.as_bytes()) {
            match query.iter_mut().find(|(n, _)| *n == k) {
                Some((_, values)) => values.push(v.into_owned()),
                None => query.push((k.into_owned(), vec![v.into_owned()])),
            }
        }
        let query = query.into_iter().map(|(k, vs)| {
            let v = match vs.as_slice() {
                [one] => heap.alloc(one.as_str()),
                many => heap.alloc(AllocList(many.iter().map(String::as_str))),
            };
            (k, v)
        });
        let headers = r
            .headers
            .into_iter()
            .map(|(k, vs)| (k, heap.alloc(vs.join(", "))));
        let params = params.into_iter().map(|(k, v)| (k, heap.alloc(v)));
        let body = match std::str::from_utf8(&r.body) {
            Ok(s) => heap.alloc(s),
            Err(_) => heap.alloc(r.body.as_ref()),
        };
        heap.alloc_complex(Request {
            method: r.method,
            path: r.path,
            url: r.url,
            remote_addr: r.remote_addr,
            host: r.host,
            params: dict(heap, params),
            query: dict(heap, query),
            headers: dict(heap, headers),
            body,
        })
    }
}

impl<V: ValueLifetimeless> Display for RequestGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http.request({} {})", self.method, self.path)
    }
}

#[starlark_value(type = "http.request")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for RequestGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(match attribute {
            "method" => heap.alloc(self.method.as_str()),
            "path" => heap.alloc(self.path.as_str()),
            "url" => heap.alloc(self.url.as_str()),
            "remote_addr" => heap.alloc(self.remote_addr.as_str()),
            "host" => heap.alloc(self.host.as_str()),
            "params" => self.params.to_value(),
            "query" => self.query.to_value(),
            "headers" => self.headers.to_value(),
            "body" => self.body.to_value(),
            _ => return None,
        })
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        ATTRS.contains(&attribute)
    }

    fn dir_attr(&self) -> Vec<String> {
        ATTRS.iter().map(|s| (*s).to_owned()).collect()
    }
}

/// What a middleware gets as `next`: calling it runs the rest of the chain.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, Allocative, NoSerialize)]
#[repr(C)]
pub struct NextGen<V: ValueLifetimeless> {
    /// The middleware after this point, then the handler.
    chain: Vec<V>,
}

starlark_complex_value!(pub Next);

impl<V: ValueLifetimeless> Display for NextGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.chain.len() > 1 {
            "middleware"
        } else {
            "handler"
        };
        write!(f, "<{what}>")
    }
}

#[starlark_value(type = "function")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for NextGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        args.no_named_args()?;
        let req = args.positional1(eval.heap())?;
        let chain: Vec<Value<'v>> = self.chain.iter().map(|v| v.to_value()).collect();
        call_chain(eval, &chain, req)
    }
}

/// Calls `chain[0](req, next)` where `next` runs the rest; the last is the handler,
/// called as `handler(req)`.
pub fn call_chain<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    chain: &[Value<'v>],
    req: Value<'v>,
) -> starlark::Result<Value<'v>> {
    match chain {
        [] => Ok(Value::new_none()),
        [handler] => eval.eval_function(*handler, &[req], &[]),
        [middleware, rest @ ..] => {
            let next = eval.heap().alloc_complex(Next {
                chain: rest.to_vec(),
            });
            eval.eval_function(*middleware, &[req, next], &[])
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer a handler's value makes, as upstream's: None is 204, a string is 200
/// text, a dict with a `body` is `status`, `headers` and `body`, and any other dict is
/// sent as JSON.
///
/// # Errors
/// Any other value, a bad status or header, or a dict that is not JSON.
pub fn answer_of(v: Value) -> Result<Answer, String> {
    let answer = |status, content_type: &'static str, body: Bytes| Answer {
        status,
        headers: vec![(CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    };
    if v.is_none() {
        return Ok(Answer {
            status: StatusCode::NO_CONTENT,
            headers: Vec::new(),
            body: Bytes::new(),
        });
    }
    if let Some(s) = v.unpack_str() {
        return Ok(answer(
            StatusCode::OK,
            TEXT,
            Bytes::copy_from_slice(s.as_bytes()),
        ));
    }
    let Some(d) = DictRef::from_value(v) else {
        return Err(format!(
            "handler must return a dict, string, or None; got {}",
            v.get_type()
        ));
    };
    let Some(body) = d.get_str("body") else {
        let json = crate::script::json::from_starlark(v).map_err(|e| format!("json: {e}"))?;
        let text = serde_json::to_vec(&json).map_err(|e| format!("json: {e}"))?;
        return Ok(answer(
            StatusCode::OK,
            "application/json; charset=utf-8",
            Bytes::from(text),
        ));
    };
    let status = match d.get_str("status") {
        None => StatusCode::OK,
        Some(s) if s.is_none() => StatusCode::OK,
        Some(s) => s
            .unpack_i32()
            .and_then(|code| u16::try_from(code).ok())
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or_else(|| format!("status must be an HTTP status code, got {}", s.to_repr()))?,
    };
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    if let Some(h) = d.get_str("headers").filter(|h| !h.is_none()) {
        for (name, value) in crate::script::builtins::http::header_pairs(h)? {
            let bad = |e: &dyn Display| format!("header {name:?}: {e}");
            let name_ = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(&e))?;
            let value = HeaderValue::from_str(&value).map_err(|e| bad(&e))?;
            // A later value for a name replaces an earlier one (Go's `Header.Set`).
            headers.retain(|(n, _)| *n != name_);
            headers.push((name_, value));
        }
    }
    if !headers.iter().any(|(n, _)| *n == CONTENT_TYPE) {
        headers.push((CONTENT_TYPE, HeaderValue::from_static(TEXT)));
    }
    let body = if let Some(s) = body.unpack_str() {
        Bytes::copy_from_slice(s.as_bytes())
    } else if let Some(b) = body.downcast_ref::<StarlarkBytes>() {
        Bytes::copy_from_slice(b.as_bytes())
    } else {
        Bytes::from(body.to_str())
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}
