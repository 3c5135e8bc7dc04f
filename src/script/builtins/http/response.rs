//! `http.response`: what every request returns (`status_code`, `status`, `body`,
//! `headers`, `get_text()`, `get_bytes()`), as upstream Starkite's.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::collections::SmallMap;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::dict::Dict;
use starlark::values::list::AllocList;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::client::Reply;
use crate::script::outcome::result;

/// A response read in full.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Response(#[allocative(skip)] pub Reply);

starlark::starlark_simple_value!(Response);

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<http.response {}>", self.0.status_text)
    }
}

fn reply_of(v: Value<'_>) -> anyhow::Result<&Reply> {
    v.downcast_ref::<Response>()
        .map(|r| &r.0)
        .ok_or_else(|| anyhow::anyhow!("not an http.response"))
}

/// The body as text; bytes that are not UTF-8 become U+FFFD, as upstream's Go string
/// would carry them through unchecked.
fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

/// The headers as upstream gives them: one value as a string, several as a list.
fn header_dict<'v>(heap: Heap<'v>, reply: &Reply) -> Value<'v> {
    let mut content = SmallMap::with_capacity(reply.headers.len());
    for (name, values) in &reply.headers {
        let value = match values.as_slice() {
            [one] => heap.alloc(one.as_str()),
            many => heap.alloc(AllocList(many.iter().map(String::as_str))),
        };
        // Strings always hash; the fallback only keeps this path panic-free.
        if let Ok(key) = heap.alloc(name.as_str()).get_hashed() {
            content.insert_hashed(key, value);
        }
    }
    heap.alloc(Dict::new(content))
}

#[starlark_module]
fn response_methods(builder: &mut MethodsBuilder) {
    /// The status code, e.g. 200.
    #[starlark(attribute)]
    fn status_code(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(i32::from(reply_of(this)?.status))
    }

    /// The status line's text, e.g. "200 OK".
    #[starlark(attribute)]
    fn status(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(reply_of(this)?.status_text.clone())
    }

    /// The body as bytes, as upstream's (`get_text()` decodes it).
    #[starlark(attribute)]
    fn body<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(reply_of(this)?.body.as_ref()))
    }

    /// The headers, by canonical name (`Content-Type`); a repeated header is a list.
    #[starlark(attribute)]
    fn headers<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(header_dict(heap, reply_of(this)?))
    }

    /// The body as text.
    fn get_text(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(text(reply_of(this)?))
    }

    /// The body as bytes.
    fn get_bytes<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(reply_of(this)?.body.as_ref()))
    }

    /// `get_text()` as a result (it cannot fail; upstream offers it).
    fn try_get_text<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let out = reply_of(this).map(|r| heap.alloc(text(r)));
        Ok(result(heap, out.map_err(|e| e.to_string())))
    }

    /// `get_bytes()` as a result (it cannot fail; upstream offers it).
    fn try_get_bytes<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let out = reply_of(this).map(|r| heap.alloc(r.body.as_ref()));
        Ok(result(heap, out.map_err(|e| e.to_string())))
    }
}

starlark::methods_static!(RESPONSE_METHODS = response_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "http.response")]
impl<'v> StarlarkValue<'v> for Response {
    fn get_methods() -> Option<&'static Methods> {
        Some(RESPONSE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        true
    }
}
