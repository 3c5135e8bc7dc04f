//! The logs API's routes: discovery, and one log per StarlarkController, which its
//! author may read, and anyone a Role grants `get` on `starlarkcontrollers/log`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::front_proxy::FrontProxy;
use super::{GROUP, VERSION};
use crate::operator::approval::Author;
use crate::operator::authority::Permission;
use crate::operator::registry::{Key, Registry};
use crate::script::journal::{Entry, Journal};

/// What every request needs.
pub struct State {
    pub client: kube::Client,
    pub registry: Arc<Registry>,
    pub front_proxy: FrontProxy,
    /// Who follows logs now (each holds a connection while it does).
    pub followers: Arc<super::followers::Followers>,
    /// With `--shards`: how to reach the replica that runs a controller.
    pub forward: Option<super::forward::Forward>,
}

type Body = BoxBody<Bytes, hyper::Error>;

/// How often a follower checks that its controller still exists.
const GONE_CHECK: Duration = Duration::from_secs(5);

/// Answers one request.
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "only get is served",
        );
    }
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let base = format!("/apis/{GROUP}/{VERSION}");
    match path.as_str() {
        "/healthz" | "/readyz" | "/livez" => return full(StatusCode::OK, "text/plain", "ok"),
        "/apis" => return full(StatusCode::OK, JSON, &group_list().to_string()),
        p if p == format!("/apis/{GROUP}") => {
            return full(StatusCode::OK, JSON, &group().to_string());
        }
        p if p == base => return full(StatusCode::OK, JSON, &resources().to_string()),
        _ => {}
    }
    let Some(target) = path.strip_prefix(&base).and_then(Target::parse) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let Some(caller) = state.front_proxy.caller(req.headers()) else {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "no user named by the front proxy",
        );
    };
    let query = Query::parse(req.uri().query().unwrap_or_default());
    // A follower's place is taken before anything else: forwarded or not, it holds a
    // connection for as long as it follows.
    let slot = if query.follow {
        match state.followers.enter(&caller.username, &target.key.0) {
            Ok(slot) => Some(slot),
            Err(why) => return status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", &why),
        }
    } else {
        None
    };
    let found = state.registry.log_of(&target.key);
    if found.is_none()
        && !req.headers().contains_key(super::forward::FORWARDED)
        && let Some(forward) = &state.forward
        && let Some(owner) = forward.owner(&state.client, &target.key).await
    {
        return match owner {
            // The replica that runs it decides who may read it (its author, say).
            super::forward::Owner::At(address) => match forward.send(&address, &req).await {
                Ok(answer) => answer.map(|body| {
                    // The slot goes when the stream does.
                    BodyExt::boxed(body.map_frame(move |frame| {
                        let _held = &slot;
                        frame
                    }))
                }),
                Err(e) => status(
                    StatusCode::BAD_GATEWAY,
                    "BadGateway",
                    &format!("the replica that runs it: {e}"),
                ),
            },
            super::forward::Owner::Unreachable(replica) => {
                match may_read(&state.client, &caller, &target, None).await {
                    Ok(true) => status(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                        &format!("it runs on replica {replica}, which serves no logs API"),
                    ),
                    _ => forbidden(&caller, &target),
                }
            }
        };
    }
    match may_read(&state.client, &caller, &target, found.as_ref()).await {
        Ok(true) => {}
        Ok(false) => return forbidden(&caller, &target),
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e),
    }
    let Some((journal, _)) = found else {
        let message = format!(
            "{}.starkite.io {:?} is not running in this operator (it has no log here)",
            target.resource, target.key.1
        );
        return status(StatusCode::NOT_FOUND, "NotFound", &message);
    };
    let first = journal.read(0, query.since, query.tail);
    if !query.follow {
        let text: String = first.iter().map(|e| query.line(e)).collect();
        return full(StatusCode::OK, "text/plain; charset=utf-8", &text);
    }
    follow(state, target.key, journal, first, query, slot)
}

/// Streams `first`, then every entry added, until the controller is gone or the
/// client goes.
fn follow(
    state: Arc<State>,
    key: Key,
    journal: Arc<Journal>,
    first: Vec<Entry>,
    query: Query,
    slot: Option<super::followers::Slot>,
) -> Response<Body> {
    let after = first.last().map_or(
        journal.read(0, None, None).last().map_or(0, |e| e.seq),
        |e| e.seq,
    );
    let head: String = first.iter().map(|e| query.line(e)).collect();
    let rx = journal.subscribe();
    let rest = futures::stream::unfold((rx, after, false), move |(mut rx, after, done)| {
        let (state, key, journal, query) =
            (state.clone(), key.clone(), journal.clone(), query.clone());
        async move {
            if done {
                return None;
            }
            loop {
                let still = state
                    .registry
                    .log_of(&key)
                    .is_some_and(|(j, _)| Arc::ptr_eq(&j, &journal));
                if !still {
                    return None;
                }
                let _ = tokio::time::timeout(GONE_CHECK, rx.changed()).await;
                let new = journal.read(after, None, None);
                if let Some(last) = new.last() {
                    let text: String = new.iter().map(|e| query.line(e)).collect();
                    return Some((Bytes::from(text), (rx, last.seq, false)));
                }
            }
        }
    });
    let stream = futures::stream::once(async move { Bytes::from(head) })
        .chain(rest)
        .map(move |b| {
            // The follower's place goes when the stream does.
            let _held = &slot;
            Ok::<_, Infallible>(Frame::data(b))
        });
    Response::builder()
        .status(StatusCode::OK)
        .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(BodyExt::boxed(
            StreamBody::new(stream).map_err(|never| match never {}),
        ))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// The refusal RBAC's own words would give.
fn forbidden(caller: &Author, target: &Target) -> Response<Body> {
    let place = if target.key.0.is_empty() {
        String::new()
    } else {
        format!(" in the namespace {:?}", target.key.0)
    };
    let message = format!(
        "User {:?} cannot get resource \"{}/log\" in API group \"starkite.io\"{place}",
        caller.username, target.resource,
    );
    status(StatusCode::FORBIDDEN, "Forbidden", &message)
}

/// Whether `caller` may read the log of `target`: its author may, and anyone a
/// SubjectAccessReview allows `get` on its `log` subresource.
async fn may_read(
    client: &kube::Client,
    caller: &Author,
    target: &Target,
    found: Option<&(Arc<Journal>, String)>,
) -> Result<bool, String> {
    // The author of what wrote this journal: a journal is never shared between two
    // authors (registry::Era).
    if found.is_some_and(|(_, author)| !author.is_empty() && *author == caller.username) {
        return Ok(true);
    }
    let permission = Permission {
        verb: "get".into(),
        group: "starkite.io".into(),
        resource: target.resource.into(),
        subresource: "log".into(),
        namespace: target.key.0.clone(),
        name: target.key.1.clone(),
        why: "reading the log".into(),
    };
    crate::operator::authority::allowed(client, caller, &permission)
        .await
        .map_err(|e| e.to_string())
}

/// The object a log path names.
#[derive(Debug, PartialEq)]
struct Target {
    resource: &'static str,
    key: Key,
}

impl Target {
    /// `/namespaces/NS/starlarkcontrollers/NAME/log` or `/clusterstarlarkcontrollers/NAME/log`.
    fn parse(rest: &str) -> Option<Self> {
        let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
        let (resource, key) = match parts.as_slice() {
            ["namespaces", ns, "starlarkcontrollers", name, "log"] => (
                "starlarkcontrollers",
                ((*ns).to_owned(), (*name).to_owned()),
            ),
            ["clusterstarlarkcontrollers", name, "log"] => (
                "clusterstarlarkcontrollers",
                (String::new(), (*name).to_owned()),
            ),
            _ => return None,
        };
        // Object names as the API server allows them; an empty namespace would name a
        // ClusterStarlarkController's entry.
        let valid = |s: &str| {
            !s.is_empty()
                && s.len() <= 253
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
                && s.starts_with(|c: char| c.is_ascii_alphanumeric())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        };
        let namespace_ok = (resource == "clusterstarlarkcontrollers") == key.0.is_empty();
        (valid(&key.1) && namespace_ok && (key.0.is_empty() || valid(&key.0)))
            .then_some(Target { resource, key })
    }
}

/// A log request's options, named as for a pod's log.
#[derive(Debug, Clone, Default, PartialEq)]
struct Query {
    follow: bool,
    since: Option<SystemTime>,
    tail: Option<usize>,
    timestamps: bool,
}

impl Query {
    fn parse(query: &str) -> Self {
        let mut q = Query::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "follow" => q.follow = v == "true",
                "timestamps" => q.timestamps = v == "true",
                "tailLines" => q.tail = v.parse().ok(),
                "sinceSeconds" => {
                    q.since = v
                        .parse::<u64>()
                        .ok()
                        .and_then(|s| SystemTime::now().checked_sub(Duration::from_secs(s)));
                }
                _ => {}
            }
        }
        q
    }

    fn line(&self, e: &Entry) -> String {
        if self.timestamps {
            let at = jiff::Timestamp::try_from(e.at)
                .map_or_else(|_| String::new(), |t| format!("{t:.3} "));
            format!("{at}{}\n", e.text)
        } else {
            format!("{}\n", e.text)
        }
    }
}

const JSON: &str = "application/json";

fn group() -> serde_json::Value {
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [{"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION}],
        "preferredVersion": {"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION},
    })
}

fn group_list() -> serde_json::Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]})
}

/// Only the `log` subresources: nothing here can be listed or deleted, so the
/// namespace and garbage collectors pass this group by.
fn resources() -> serde_json::Value {
    let resource = |name: &str, namespaced: bool, kind: &str| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get"]});
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [
            resource("starlarkcontrollers/log", true, "StarlarkControllerLog"),
            resource("clusterstarlarkcontrollers/log", false, "ClusterStarlarkControllerLog"),
        ],
    })
}

fn empty() -> Body {
    BodyExt::boxed(Full::new(Bytes::new()).map_err(|never| match never {}))
}

fn full(code: StatusCode, content_type: &str, body: &str) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(BodyExt::boxed(
            Full::new(Bytes::from(body.to_owned())).map_err(|never| match never {}),
        ))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// A Kubernetes `Status` failure, as kubectl and kube-rs read errors.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    full(code, JSON, &body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths_name_their_object() {
        assert_eq!(
            Target::parse("/namespaces/team/starlarkcontrollers/web/log"),
            Some(Target {
                resource: "starlarkcontrollers",
                key: ("team".into(), "web".into())
            })
        );
        assert_eq!(
            Target::parse("/clusterstarlarkcontrollers/all/log").map(|t| t.key),
            Some((String::new(), "all".into()))
        );
        for bad in [
            "/namespaces/team/starlarkcontrollers/web",
            "/namespaces//starlarkcontrollers/web/log",
            "/namespaces/team/pods/web/log",
            "/clusterstarlarkcontrollers//log",
            "/namespaces/team/starlarkcontrollers/../log",
            "/namespaces/Team/starlarkcontrollers/web/log",
        ] {
            assert_eq!(Target::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn queries_read_as_for_pods() {
        let q = Query::parse("follow=true&tailLines=10&sinceSeconds=300&timestamps=true");
        assert!(q.follow && q.timestamps);
        assert_eq!(q.tail, Some(10));
        assert!(q.since.is_some_and(|s| s < SystemTime::now()));
        assert_eq!(Query::parse("tailLines=x"), Query::default());
    }
}
