//! `http`: upstream Starkite's HTTP client (`http.get(...)`, `http.url(...).post(...)`,
//! `http.config(...)`, `try_` variants); every request needs `--allow-net`.
//!
//! # Caveats
//! A `body` that is a dict (or list, struct, ...) is sent as JSON with
//! `Content-Type: application/json` unless the call names a content type; bytes and
//! strings go as they are. Response bodies over 64 MiB are refused. While a request
//! waits, the handlers of the script's own servers run ([`server`]).

pub mod client;
pub mod response;
pub mod server;
#[cfg(test)]
mod tests;
pub mod url;

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::bytes::StarlarkBytes;
use starlark::values::dict::DictRef;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, Value, ValueLike};

use self::client::{Outgoing, Pool};
use self::response::Response;
use self::url::Url;
use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;

/// What one call asks for, before it is checked and sent.
struct Call<'v> {
    /// The name errors and denials use: `http.get`, `http.url.post`, ...
    name: &'static str,
    method: Method,
    url: Value<'v>,
    body: Option<Value<'v>>,
    headers: Option<Value<'v>>,
    timeout: Option<&'v str>,
}

impl<'v> Call<'v> {
    fn new(
        name: &'static str,
        method: Method,
        url: Value<'v>,
        body: NoneOr<Value<'v>>,
        headers: NoneOr<Value<'v>>,
        timeout: NoneOr<&'v str>,
    ) -> Self {
        Call {
            name,
            method,
            url,
            body: body.into_option(),
            headers: headers.into_option(),
            timeout: timeout.into_option(),
        }
    }

    /// Sends the request and returns an `http.response`. Any status is a response; only
    /// a failure to get one (refused, timed out, too large, ...) is an error.
    fn run(self, eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let name = self.name;
        let host = Host::of(eval)?;
        host.allow(name, Access::Net)?;
        let pool = host.ext::<Pool>();
        let req = self
            .outgoing(&pool)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        // The script may be calling its own `http.server`: serve it meanwhile.
        let reply = server::dispatch::wait(eval, &host.runtime, pool.send(req))
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        Ok(eval.heap().alloc(Response(reply)))
    }

    /// [`Call::run`], with any failure as a result value (`.ok`, `.value`, `.error`).
    fn try_run(self, eval: &mut Evaluator<'v, '_, '_>) -> Value<'v> {
        let out = self.run(eval).map_err(|e| e.to_string());
        result(eval.heap(), out)
    }

    fn outgoing(&self, pool: &Pool) -> Result<Outgoing, String> {
        let defaults = pool.defaults();
        let url = url_text(self.url)?;
        let timeout = match self.timeout.filter(|t| !t.is_empty()) {
            None => defaults.timeout,
            Some(t) => parse_timeout(t)?,
        };
        let mut headers = defaults.headers;
        if let Some(given) = self.headers {
            headers.extend(header_pairs(given)?);
        }
        let (body, json) = match self.body {
            None => (None, false),
            Some(b) => encode_body(b)?,
        };
        if json
            && !headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        }
        Ok(Outgoing {
            method: self.method.clone(),
            url,
            headers,
            body,
            timeout,
        })
    }
}

/// A positive duration string such as "5s".
fn parse_timeout(t: &str) -> Result<Duration, String> {
    match crate::duration::parse(t) {
        Ok(d) if d.is_zero() => Err(format!(
            "timeout {t:?} must be more than zero (leave it out for the default)"
        )),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("timeout: {e}")),
    }
}

/// The URL a call names: a string or an `http.url`.
fn url_text(v: Value) -> Result<String, String> {
    if let Some(s) = v.unpack_str() {
        return Ok(s.to_owned());
    }
    v.downcast_ref::<Url>()
        .map(|u| u.0.clone())
        .ok_or_else(|| format!("url must be a string or http.url, got {}", v.get_type()))
}

/// The `headers` dict as pairs; numbers and booleans are written as text.
fn header_pairs(v: Value) -> Result<Vec<(String, String)>, String> {
    let dict = DictRef::from_value(v)
        .ok_or_else(|| format!("headers must be a dict, got {}", v.get_type()))?;
    let mut out = Vec::with_capacity(dict.len());
    for (k, val) in dict.iter() {
        let name = k
            .unpack_str()
            .ok_or_else(|| format!("headers: name {} is not a string", k.to_repr()))?;
        let value = if let Some(s) = val.unpack_str() {
            s.to_owned()
        } else if matches!(val.get_type(), "int" | "float" | "bool") {
            val.to_str()
        } else {
            return Err(format!(
                "headers: value of {name:?} must be a string, got {}",
                val.get_type()
            ));
        };
        out.push((name.to_owned(), value));
    }
    Ok(out)
}

/// The bytes a `body` sends, and whether they are JSON.
fn encode_body(v: Value) -> Result<(Option<Bytes>, bool), String> {
    if let Some(s) = v.unpack_str() {
        return Ok((Some(Bytes::copy_from_slice(s.as_bytes())), false));
    }
    if let Some(b) = v.downcast_ref::<StarlarkBytes>() {
        return Ok((Some(Bytes::copy_from_slice(b.as_bytes())), false));
    }
    if matches!(v.get_type(), "int" | "float" | "bool") {
        return Ok((Some(Bytes::from(v.to_str())), false));
    }
    let json = crate::script::json::from_starlark(v).map_err(|e| format!("body: {e}"))?;
    let text = serde_json::to_vec(&json).map_err(|e| format!("body: {e}"))?;
    Ok((Some(Bytes::from(text)), true))
}

starlark::globals_static!(CLIENT_FUNCTIONS = http_namespace);
starlark::globals_static!(SERVER_FUNCTIONS = server::server_functions);

/// The `http` namespace: the client's functions and the server's. The requests' `try_`
/// forms are written by hand (they name themselves); those of `url`, `config`, `server`
/// and `serve` are derived ([`crate::script::try_form`]).
pub fn namespace(builder: &mut GlobalsBuilder) {
    use crate::script::try_form::with_tries;
    with_tries(builder, CLIENT_FUNCTIONS.globals(), &["url", "config"]);
    with_tries(builder, SERVER_FUNCTIONS.globals(), &["server", "serve"]);
}

#[starlark_module]
pub fn http_namespace(builder: &mut GlobalsBuilder) {
    /// Sends a GET request.
    fn get<'v>(
        url: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.get", Method::GET, url, body, headers, timeout).run(eval)
    }

    /// `get` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_get<'v>(
        url: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new("http.try_get", Method::GET, url, body, headers, timeout).try_run(eval))
    }

    /// Sends a DELETE request.
    fn delete<'v>(
        url: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.delete", Method::DELETE, url, body, headers, timeout).run(eval)
    }

    /// `delete` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_delete<'v>(
        url: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new(
            "http.try_delete",
            Method::DELETE,
            url,
            body,
            headers,
            timeout,
        )
        .try_run(eval))
    }

    /// Sends a POST request; `body` is text, bytes, or a value sent as JSON.
    fn post<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.post", Method::POST, url, body, headers, timeout).run(eval)
    }

    /// `post` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_post<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new("http.try_post", Method::POST, url, body, headers, timeout).try_run(eval))
    }

    /// Sends a PUT request; `body` is text, bytes, or a value sent as JSON.
    fn put<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.put", Method::PUT, url, body, headers, timeout).run(eval)
    }

    /// `put` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_put<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new("http.try_put", Method::PUT, url, body, headers, timeout).try_run(eval))
    }

    /// Sends a PATCH request; `body` is text, bytes, or a value sent as JSON.
    fn patch<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Call::new("http.patch", Method::PATCH, url, body, headers, timeout).run(eval)
    }

    /// `patch` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_patch<'v>(
        url: Value<'v>,
        #[starlark(default = NoneOr::None)] body: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(Call::new("http.try_patch", Method::PATCH, url, body, headers, timeout).try_run(eval))
    }

    /// A URL object whose methods (`get`, `post`, ... and `try_` variants) send requests.
    fn url<'v>(#[starlark(require = pos)] url: &str, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(Url(url.to_owned())))
    }

    /// Sets this run's default timeout and adds default headers for later requests.
    fn config<'v>(
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] headers: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<starlark::values::none::NoneType> {
        let host = Host::of(eval)?;
        host.allow("http.config", Access::Net)?;
        let err = |e: String| anyhow::anyhow!("http.config: {e}");
        let timeout = match timeout.into_option().filter(|t| !t.is_empty()) {
            Some(t) => Some(parse_timeout(t).map_err(err)?),
            None => None,
        };
        let headers = match headers.into_option() {
            Some(h) => header_pairs(h).map_err(err)?,
            None => Vec::new(),
        };
        host.ext::<Pool>().configure(|d| {
            if let Some(t) = timeout {
                d.timeout = t;
            }
            for (name, value) in headers {
                d.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
                d.headers.push((name, value));
            }
        });
        Ok(starlark::values::none::NoneType)
    }
}
