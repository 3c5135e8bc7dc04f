//! `k8s.event`: core/v1 Events attached to an object, aggregated like client-go's
//! correlator so a repeated event bumps `count` instead of piling up new objects.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value as Json, json};

use super::ops::{Error, Result};
use super::session::Session;

/// What the script asked to record.
pub struct EventSpec<'a> {
    pub reason: &'a str,
    pub message: &'a str,
    pub type_: &'a str,
    pub namespace: Option<&'a str>,
}

/// The longest name, namespace, kind, uid, resourceVersion or apiVersion of an object
/// an event is recorded on (a DNS subdomain's 253 characters).
const NAME_LIMIT: usize = 253;

/// The reporting component named on every event kite records.
pub const COMPONENT: &str = "starkite";

fn events_api(session: &Session, namespace: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    Api::namespaced_with(session.client_here(), namespace, &ar)
}

/// A name that is the same for identical events of one object, so that a repeat finds
/// the earlier event even from another process: `<object>.<hash>`.
fn event_name(obj_name: &str, uid: &str, spec: &EventSpec) -> String {
    // FNV-1a: stable across builds and processes, unlike std's DefaultHasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [uid, obj_name, spec.reason, spec.message, spec.type_] {
        for b in part.bytes().chain([0xff]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let base: String = obj_name.chars().take(200).collect();
    format!("{base}.{h:016x}")
}

fn now() -> String {
    format!("{:.0}", Timestamp::now())
}

/// An event checked and built, ready to be written now or by a [`Recorder`].
///
/// [`Recorder`]: super::recorder::Recorder
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The event's name: equal for identical events of one object.
    pub name: String,
    /// The object it is about (`namespace/kind/name/uid`): its events are written in
    /// order.
    pub object: String,
    namespace: String,
    /// The Event as it is created (count 1).
    pub body: Json,
    /// The body's size as JSON: what it takes while it waits.
    bytes: usize,
}

impl Prepared {
    /// The event's reason, for messages.
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or_default()
    }

    /// What it takes while it waits: the body as JSON, its keys, and a share for the
    /// allocations around them. Every field counts, so that no part of the object the
    /// script passed can ride along uncounted.
    pub fn weight(&self) -> usize {
        const REST: usize = 1024;
        REST + self.bytes + self.name.len() + self.object.len() + self.namespace.len()
    }

    /// Takes the later time of an identical event merged into this one.
    pub fn touch(&mut self, later: &Prepared) {
        self.body["lastTimestamp"] = later.body["lastTimestamp"].clone();
    }
}

/// Checks what the script asked for and builds the Event on `obj`.
///
/// # Errors
/// An object without kind or name, a bad type or an empty reason.
pub fn prepare(session: &Session, obj: &Json, spec: &EventSpec<'_>) -> Result<Prepared> {
    if !matches!(spec.type_, "Normal" | "Warning") {
        return Err(Error::Invalid(format!(
            "type must be \"Normal\" or \"Warning\", not {:?}",
            spec.type_
        )));
    }
    if spec.reason.is_empty() {
        return Err(Error::Invalid("reason must not be empty".into()));
    }
    let meta = &obj["metadata"];
    let name = meta["name"]
        .as_str()
        .ok_or_else(|| Error::Manifest("the object has no metadata.name".into()))?;
    let kind = obj["kind"]
        .as_str()
        .ok_or_else(|| Error::Manifest("the object has no kind".into()))?;
    let obj_ns = meta["namespace"].as_str();
    let namespace = spec.namespace.or(obj_ns).unwrap_or("default");
    let uid = meta["uid"].as_str().unwrap_or_default();
    let api_version = match &obj["apiVersion"] {
        Json::Null => None,
        v => Some(
            v.as_str()
                .ok_or_else(|| Error::Manifest("the object's apiVersion is not a string".into()))?,
        ),
    };
    // What names the object is copied into the Event: each is a name or a version, never
    // a payload (an object with a 100 MB apiVersion is not one the API server served).
    for (field, value) in [
        ("apiVersion", api_version),
        ("kind", Some(kind)),
        ("metadata.name", Some(name)),
        ("metadata.namespace", obj_ns),
        ("metadata.uid", meta["uid"].as_str()),
        ("metadata.resourceVersion", meta["resourceVersion"].as_str()),
        ("namespace", spec.namespace),
    ] {
        if let Some(v) = value.filter(|v| v.len() > NAME_LIMIT) {
            return Err(Error::Manifest(format!(
                "the object's {field} is {} bytes; a name or version is at most {NAME_LIMIT}",
                v.len()
            )));
        }
    }
    let event_name = event_name(name, uid, spec);
    let ts = now();
    let mut involved = json!({"apiVersion": api_version, "kind": kind, "name": name});
    for (k, v) in [
        ("namespace", obj_ns),
        ("uid", meta["uid"].as_str()),
        ("resourceVersion", meta["resourceVersion"].as_str()),
    ] {
        if let Some(v) = v {
            involved[k] = json!(v);
        }
    }
    let body = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name, "namespace": namespace},
        "involvedObject": involved,
        "reason": spec.reason,
        "message": spec.message,
        "type": spec.type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": session.instance.clone().unwrap_or_else(hostname),
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    });
    let bytes = serde_json::to_vec(&body).map_err(Error::Encode)?.len();
    Ok(Prepared {
        object: format!("{}/{kind}/{name}/{uid}", obj_ns.unwrap_or_default()),
        name: event_name,
        namespace: namespace.to_owned(),
        body,
        bytes,
    })
}

/// Records (or aggregates) an event on `obj` and waits for the write. Returns the
/// Event.
///
/// # Errors
/// As [`prepare`], or the API server's error.
pub async fn record(session: &Session, obj: &Json, spec: &EventSpec<'_>) -> Result<Json> {
    let prepared = prepare(session, obj, spec)?;
    write(session, &prepared, 1).await
}

/// Writes `event` standing for `count` identical ones: created with that count, or an
/// existing one's count raised by it. Returns the Event.
///
/// # Errors
/// The API server's error.
pub async fn write(session: &Session, event: &Prepared, count: i64) -> Result<Json> {
    let api = events_api(session, &event.namespace);
    let mut body = event.body.clone();
    body["count"] = json!(count);
    let ts = body["lastTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let dry_run = session.dry_run;
    let body = serde_json::to_vec(&body).map_err(Error::Encode)?;
    // Sent and decoded as JSON: an event per reconcile is common, so no typed detour.
    let request = kube::core::Request::new(api.resource_url())
        .create(
            &PostParams {
                dry_run,
                ..Default::default()
            },
            body,
        )
        .map_err(kube::Error::BuildRequest)?;
    match api.clone().into_client().request::<Json>(request).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            bump(&api, &event.name, &ts, count, dry_run).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Attempts at one count before it is given up (and reported as failed). With the
/// pauses between them (2 ms doubling, each up to twice that), a count that keeps
/// losing holds its writer's slot for at most about 125 ms beyond its round trips:
/// anyone who may patch an Event can make every attempt lose.
const BUMP_ATTEMPTS: u32 = 6;

/// Counts an existing event `by` more. The resourceVersion precondition keeps two
/// writers from losing a count; a conflict is retried after a jittered pause.
///
/// # Caveats
/// Several controllers that report the same thing about one object (the operator's
/// controllers in one namespace, each correcting the same drift) count one Event
/// together. Retried at once, four of them lost counts to each other within three
/// retries (issue 28's bench); the pause spreads them apart. A count still lost is
/// reported, never retried for long: the pauses are bounded (see [`BUMP_ATTEMPTS`]).
async fn bump(
    api: &Api<DynamicObject>,
    name: &str,
    ts: &str,
    by: i64,
    dry_run: bool,
) -> Result<Json> {
    let mut attempt = 0;
    loop {
        let existing = api.get(name).await?;
        let count = existing.data["count"]
            .as_i64()
            .unwrap_or(1)
            .saturating_add(by);
        let patch = json!({
            "metadata": {"resourceVersion": existing.metadata.resource_version},
            "count": count,
            "lastTimestamp": ts,
        });
        let params = PatchParams {
            dry_run,
            ..Default::default()
        };
        match api.patch(name, &params, &Patch::Merge(patch)).await {
            Err(kube::Error::Api(s)) if s.code == 409 && attempt + 1 < BUMP_ATTEMPTS => {
                let pause = Duration::from_millis(2 << attempt.min(4));
                tokio::time::sleep(crate::duration::jittered(pause, 1.0)).await;
                attempt += 1;
            }
            other => return to_json(&other?),
        }
    }
}

fn to_json(obj: &DynamicObject) -> Result<Json> {
    serde_json::to_value(obj).map_err(Error::Encode)
}

fn hostname() -> String {
    static HOSTNAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOSTNAME.get_or_init(read_hostname).clone()
}

fn read_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kite".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(reason: &'a str, message: &'a str) -> EventSpec<'a> {
        EventSpec {
            reason,
            message,
            type_: "Normal",
            namespace: None,
        }
    }

    #[test]
    fn identical_events_share_a_name_and_different_ones_do_not() {
        let a = event_name("web", "u1", &spec("R", "m"));
        assert_eq!(a, event_name("web", "u1", &spec("R", "m")));
        assert_ne!(a, event_name("web", "u1", &spec("R", "other")));
        assert_ne!(a, event_name("web", "u2", &spec("R", "m")));
        assert!(a.starts_with("web."));
    }

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn session() -> Session {
        let service = tower::service_fn(|_req: hyper::Request<kube::client::Body>| async {
            Err::<hyper::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                "no server",
            ))
        });
        Session::from_client(kube::Client::new(service, "t"), "t".into(), false)
    }

    /// A server where the Event exists, holding `count`, and whose first `conflicts`
    /// patches of it lose a race; counts the patches it was sent.
    fn contended(conflicts: usize, patches: Arc<AtomicUsize>) -> Session {
        use http_body_util::BodyExt;
        let service = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let patches = patches.clone();
            async move {
                let (status, body) = match req.method().as_str() {
                    "POST" => (
                        409,
                        json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "AlreadyExists", "code": 409}),
                    ),
                    "GET" => (
                        200,
                        json!({"apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": "e", "namespace": "t", "resourceVersion": "7"},
                        "count": 4}),
                    ),
                    _ if patches.fetch_add(1, Ordering::SeqCst) < conflicts => (
                        409,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Conflict", "code": 409}),
                    ),
                    _ => {
                        let sent = req.into_body().collect().await.unwrap().to_bytes();
                        let mut patch: Json = serde_json::from_slice(&sent).unwrap();
                        patch["apiVersion"] = json!("v1");
                        patch["kind"] = json!("Event");
                        patch["metadata"]["name"] = json!("e");
                        (200, patch)
                    }
                };
                let body = http_body_util::Full::new(bytes::Bytes::from(body.to_string()))
                    .map_err(|e: std::convert::Infallible| match e {});
                let mut answer = hyper::Response::new(body.boxed_unsync());
                *answer.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                Ok::<_, std::convert::Infallible>(answer)
            }
        });
        Session::from_client(kube::Client::new(service, "t"), "t".into(), false)
    }

    /// Several controllers counting one Event: a count that loses a few races in a
    /// row is still written, not given up after the third.
    #[tokio::test]
    async fn a_count_that_loses_races_is_retried_until_it_lands() {
        let patches = Arc::new(AtomicUsize::new(0));
        let session = contended(5, patches.clone());
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "t", "uid": "u"}});
        let event = prepare(&session, &obj, &spec("R", "m")).unwrap();
        let written = tokio::time::timeout(Duration::from_secs(30), write(&session, &event, 2))
            .await
            .expect("written within 30 s")
            .expect("written");
        assert_eq!(written["count"], 6, "4 counted before, 2 now");
        assert_eq!(
            patches.load(Ordering::SeqCst),
            6,
            "5 lost races, then the write"
        );
        // Against a server where every count loses, it gives up and says so.
        let session = contended(usize::MAX, Arc::new(AtomicUsize::new(0)));
        let lost = tokio::time::timeout(Duration::from_secs(30), write(&session, &event, 1))
            .await
            .expect("gave up within 30 s");
        assert!(lost.is_err(), "{lost:?}");
    }

    /// The names copied from the object are names, never a payload that would ride in
    /// the recorder's queue; and what waits is weighed whole.
    #[tokio::test]
    async fn the_objects_names_are_bounded_and_an_event_is_weighed_whole() {
        let session = session();
        let big = "v".repeat(10_000);
        for (path, obj) in [
            (
                "apiVersion",
                json!({"apiVersion": big, "kind": "K", "metadata": {"name": "a"}}),
            ),
            (
                "apiVersion",
                json!({"apiVersion": {"x": 1}, "kind": "K", "metadata": {"name": "a"}}),
            ),
            ("kind", json!({"kind": big, "metadata": {"name": "a"}})),
            (
                "metadata.uid",
                json!({"kind": "K", "metadata": {"name": "a", "uid": big}}),
            ),
            (
                "metadata.resourceVersion",
                json!({"kind": "K", "metadata": {"name": "a", "resourceVersion": big}}),
            ),
        ] {
            let e = prepare(&session, &obj, &spec("R", "m"))
                .err()
                .map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains(path)),
                "{path}: {e:?}"
            );
        }
        let obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}});
        let long = "r".repeat(5000);
        let event = prepare(&session, &obj, &spec(&long, &"m".repeat(7000))).unwrap();
        assert!(event.weight() > 12_000, "{}", event.weight());
    }
}
