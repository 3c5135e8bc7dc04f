//! The HTTP side: a `tower::Service` that routes Kubernetes REST paths to the verbs,
//! discovery and watches, and answers errors with `Status` objects.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value as Json, json};

use super::patch::PatchType;
use super::selector::Selector;
use super::verbs::{self, Options, Target};
use super::watch::{self, Watch};
use super::{Error, Result, Shared, discovery};

pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// How long a watch without `timeoutSeconds` stays open.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// The fake as kube's client sees it.
#[derive(Clone)]
pub struct FakeService {
    pub shared: Arc<Shared>,
}

impl tower::Service<Request<kube::client::Body>> for FakeService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { Ok(handle(&shared, req).await) })
    }
}

/// What a request gets back.
enum Reply {
    Json(StatusCode, Json),
    Watch(Box<Watch>),
}

async fn handle(shared: &Arc<Shared>, req: Request<kube::client::Body>) -> Response<ResponseBody> {
    let (parts, body) = req.into_parts();
    let bytes = match body.collect_bytes().await {
        Ok(b) => b,
        Err(e) => return error(&Error::BadRequest(format!("reading the request body: {e}"))),
    };
    let query: HashMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let content_type = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let request = Incoming {
        method: &parts.method,
        query: &query,
        content_type: &content_type,
        body: &bytes,
    };
    match route(shared, parts.uri.path(), &request) {
        Ok(Reply::Json(code, value)) => respond(code, &value),
        Ok(Reply::Watch(w)) => Response::builder()
            .status(StatusCode::OK)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(watch::start(shared, *w).boxed_unsync())
            .unwrap_or_else(|_| respond(StatusCode::INTERNAL_SERVER_ERROR, &json!({}))),
        Err(e) => error(&e),
    }
}

struct Incoming<'a> {
    method: &'a Method,
    query: &'a HashMap<String, String>,
    content_type: &'a str,
    body: &'a Bytes,
}

impl Incoming<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    /// The body as JSON (YAML accepted for apply patches).
    fn json(&self) -> Result<Json> {
        if self.body.is_empty() {
            return Ok(Json::Null);
        }
        match serde_json::from_slice(self.body) {
            Ok(v) => Ok(v),
            Err(e) if self.content_type.contains("yaml") => {
                let text = std::str::from_utf8(self.body)
                    .map_err(|_| Error::BadRequest("the body is not UTF-8".into()))?;
                let docs = crate::script::yaml::parse_yaml(text)
                    .map_err(|y| Error::BadRequest(format!("invalid YAML body: {y} ({e})")))?;
                Ok(docs.into_iter().next().unwrap_or(Json::Null))
            }
            Err(e) => Err(Error::BadRequest(format!("invalid JSON body: {e}"))),
        }
    }

    fn options(&self, body: &Json) -> Options {
        let body_dry = body["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"));
        Options {
            dry_run: self.param("dryRun") == Some("All") || body_dry,
            manager: self.param("fieldManager").map(str::to_owned),
            force: self.flag("force"),
        }
    }
}

fn route(shared: &Arc<Shared>, path: &str, req: &Incoming) -> Result<Reply> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ok = |v| Ok(Reply::Json(StatusCode::OK, v));
    let store = || shared.lock();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return ok(discovery::version()),
        ["api"] => return ok(discovery::core_versions()),
        ["apis"] => return ok(discovery::groups(&store().kinds)),
        ["api", v] => {
            return discovery::resources(&store().kinds, "", v).map_or_else(|| Err(unknown()), ok);
        }
        ["apis", g, v] => {
            return discovery::resources(&store().kinds, g, v).map_or_else(|| Err(unknown()), ok);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(unknown()),
    };
    let _ = version;
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => (
            Some(*ns),
            *plural,
            tail.first().copied(),
            tail.get(1).copied(),
        ),
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(unknown()),
    };
    if group == "authorization.k8s.io"
        && plural.ends_with("accessreviews")
        && *req.method == Method::POST
    {
        let mut review = req.json()?;
        review["status"] = json!({"allowed": true, "reason": "the fake allows everything"});
        return Ok(Reply::Json(StatusCode::CREATED, review));
    }
    let Some(resource) = store().kinds.by_plural(group, plural).cloned() else {
        return Err(unknown());
    };
    if namespace.is_some() && !resource.namespaced {
        return Err(unknown());
    }
    let (status, scale) = match sub {
        None => (false, false),
        Some("status") if super::kinds::has_status(&resource) => (true, false),
        Some("scale") if super::scale::has_scale(group, plural) => (false, true),
        Some(_) => return Err(unknown()),
    };
    let t = Target {
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        status,
    };
    if t.resource.namespaced
        && t.namespace.is_none()
        && (t.name.is_some() || *req.method != Method::GET)
    {
        return Err(unknown());
    }
    if scale {
        let body = req.json()?;
        let opts = req.options(&body);
        let kind = PatchType::from_content_type(req.content_type);
        let mut store = shared.lock();
        let (code, out) = super::scale::serve(
            &mut store,
            &shared.events,
            &t,
            req.method,
            &body,
            kind,
            &opts,
        )?;
        return Ok(Reply::Json(code, out));
    }
    serve(shared, t, req)
}

fn serve(shared: &Arc<Shared>, t: Target, req: &Incoming) -> Result<Reply> {
    let events = &shared.events;
    let selector = || Selector::parse(req.param("labelSelector"), req.param("fieldSelector"));
    let method = req.method.clone();
    if method == Method::GET && t.name.is_none() {
        if req.flag("watch") {
            let timeout = req
                .param("timeoutSeconds")
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
            return Ok(Reply::Watch(Box::new(Watch {
                selector: selector()?,
                resource_version: req.param("resourceVersion").map(str::to_owned),
                timeout,
                bookmarks: req.flag("allowWatchBookmarks"),
                target: t,
            })));
        }
        let limit = req.param("limit").and_then(|l| l.parse().ok());
        let list = verbs::list(
            &shared.lock(),
            &t,
            &selector()?,
            limit,
            req.param("continue"),
        );
        return Ok(Reply::Json(StatusCode::OK, list));
    }
    let body = req.json()?;
    let opts = req.options(&body);
    let mut store = shared.lock();
    let (code, out) = match method {
        Method::GET => (StatusCode::OK, verbs::get(&store, &t)?),
        Method::POST if t.name.is_none() => (
            StatusCode::CREATED,
            verbs::create(&mut store, events, &t, body, &opts)?,
        ),
        Method::PUT => (
            StatusCode::OK,
            verbs::update(&mut store, events, &t, body, &opts)?,
        ),
        Method::PATCH => {
            let kind = PatchType::from_content_type(req.content_type).ok_or_else(|| {
                Error::BadRequest(format!(
                    "unsupported patch content type {:?}",
                    req.content_type
                ))
            })?;
            let out = if kind == PatchType::Apply {
                verbs::apply(&mut store, events, &t, body, &opts)?
            } else {
                verbs::patch(&mut store, events, &t, &body, kind, &opts)?
            };
            (StatusCode::OK, out)
        }
        Method::DELETE if t.name.is_some() => {
            let out = verbs::delete(&mut store, events, &t, &opts)?;
            let gone = !opts.dry_run && verbs::get(&store, &t).is_err();
            if gone {
                let ar = &t.resource.api_resource;
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success", "details": {"name": t.name, "group": ar.group,
                    "kind": ar.plural, "uid": out["metadata"]["uid"]}});
                (StatusCode::OK, status)
            } else {
                (StatusCode::OK, out)
            }
        }
        Method::DELETE => {
            let names: Vec<String> = verbs::list(&store, &t, &selector()?, None, None)["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
                .collect();
            let mut deleted = Vec::new();
            for name in names {
                let one = Target {
                    name: Some(name),
                    ..t.clone()
                };
                deleted.push(verbs::delete(&mut store, events, &one, &opts)?);
            }
            let ar = &t.resource.api_resource;
            (
                StatusCode::OK,
                json!({"apiVersion": ar.api_version,
                "kind": format!("{}List", ar.kind), "metadata": {}, "items": deleted}),
            )
        }
        _ => {
            return Err(Error::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )));
        }
    };
    Ok(Reply::Json(code, out))
}

fn unknown() -> Error {
    Error::NotFound {
        message: "the server could not find the requested resource".into(),
        details: json!({}),
    }
}

fn respond(code: StatusCode, value: &Json) -> Response<ResponseBody> {
    let body = Full::new(Bytes::from(value.to_string())).boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error(e: &Error) -> Response<ResponseBody> {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::BAD_REQUEST);
    respond(code, &e.status())
}
