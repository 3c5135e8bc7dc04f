//! `http.url(...)`: a URL value whose methods send requests, as upstream Starkite's.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use hyper::Method;
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::{NoSerialize, StarlarkValue, Value, starlark_value};

use super::Call;

/// A URL to send requests to; checked when a request is sent, as upstream does.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Url(pub String);

starlark::starlark_simple_value!(Url);

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http.url({:?})", self.0)
    }
}

#[starlark_module]
fn url_methods(builder: &mut MethodsBuilder) {
    /// Sends a GET request.
    fn get<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.url.get", Method::GET, this, body, headers, timeout).run(eval)
    }

    /// `get` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_get<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.url.try_get",
            Method::GET,
            this,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }

    /// Sends a DELETE request.
    fn delete<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new(
            "http.url.delete",
            Method::DELETE,
            this,
            body,
            headers,
            timeout,
        )
        .run(eval)
    }

    /// `delete` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_delete<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.url.try_delete",
            Method::DELETE,
            this,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }

    /// Sends a POST request; `body` is text, bytes, or a value sent as JSON.
    fn post<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.url.post", Method::POST, this, body, headers, timeout).run(eval)
    }

    /// `post` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_post<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.url.try_post",
            Method::POST,
            this,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }

    /// Sends a PUT request; `body` is text, bytes, or a value sent as JSON.
    fn put<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.url.put", Method::PUT, this, body, headers, timeout).run(eval)
    }

    /// `put` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_put<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.url.try_put",
            Method::PUT,
            this,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }

    /// Sends a PATCH request; `body` is text, bytes, or a value sent as JSON.
    fn patch<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new(
            "http.url.patch",
            Method::PATCH,
            this,
            body,
            headers,
            timeout,
        )
        .run(eval)
    }

    /// `patch` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_patch<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.url.try_patch",
            Method::PATCH,
            this,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }
}

starlark::methods_static!(URL_METHODS = url_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "http.url")]
impl<'v> StarlarkValue<'v> for Url {
    fn get_methods() -> Option<&'static Methods> {
        Some(URL_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}
