//! The shared informers' tests, against a fake API server of two ConfigMaps.

use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::time::Duration;

/// A server whose list holds two ConfigMaps and whose watches end at once.
fn client() -> kube::Client {
    let service = tower::service_fn(|req: hyper::Request<kube::client::Body>| async move {
        let body = if req.uri().query().is_some_and(|q| q.contains("watch=true")) {
            String::new()
        } else {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "7"},
                "items": [
                    {"metadata": {"name": "a", "namespace": "t", "resourceVersion": "5"}},
                    {"metadata": {"name": "b", "namespace": "t", "resourceVersion": "6"}},
                ],
            })
            .to_string()
        };
        let body = Full::new(Bytes::from(body)).map_err(|e: Infallible| match e {});
        Ok::<_, Infallible>(hyper::Response::new(body.boxed_unsync()))
    });
    kube::Client::new(service, "t")
}

fn configmaps() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

fn want<'a>(ar: &'a ApiResource, labels: Option<&'a str>) -> Want<'a> {
    Want {
        resource: ar,
        namespaced: true,
        namespace: Some("t"),
        labels,
        fields: None,
    }
}

fn session() -> Session {
    Session::from_client(client(), "t".into(), false)
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn equal_wants_share_one_informer_until_the_last_subscriber_goes() {
    let access = Access::private();
    let (ar, session) = (configmaps(), session());
    let one = access.open(&session, &want(&ar, None)).await.unwrap();
    let two = access.open(&session, &want(&ar, None)).await.unwrap();
    let other = access.open(&session, &want(&ar, Some("x"))).await.unwrap();
    assert!(Arc::ptr_eq(&one.store(), &two.store()));
    assert!(!Arc::ptr_eq(&one.store(), &other.store()));
    assert_eq!(access.informers().running(), 2);
    let first = one.subscribe(|_| {}, || {});
    let second = two.subscribe(|_| {}, || {});
    drop(other);
    assert_eq!(access.informers().running(), 1);
    drop(first);
    assert_eq!(access.informers().running(), 1, "one subscriber is left");
    drop(second);
    assert_eq!(access.informers().running(), 0);
    // Its task ends once the last subscriber has gone.
    tokio::time::timeout(
        Duration::from_secs(5),
        access.informers().join(Duration::from_secs(5)),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_late_subscriber_first_gets_what_is_cached() {
    let access = Access::private();
    let (ar, session) = (configmaps(), session());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let early = {
        let seen = seen.clone();
        access
            .open(&session, &want(&ar, None))
            .await
            .unwrap()
            .subscribe(
                move |c| {
                    seen.lock()
                        .unwrap()
                        .push(("early", c.object()["metadata"]["name"].clone()));
                },
                || {},
            )
    };
    let store = access
        .open(&session, &want(&ar, None))
        .await
        .unwrap()
        .store();
    until("the list is cached", || store.is_synced()).await;
    let late = {
        let seen = seen.clone();
        access
            .open(&session, &want(&ar, None))
            .await
            .unwrap()
            .subscribe(
                move |c| match c {
                    Change::Added(o) => seen
                        .lock()
                        .unwrap()
                        .push(("late", o["metadata"]["name"].clone())),
                    other => panic!("a replay is of additions only: {other:?}"),
                },
                || {},
            )
    };
    let mut got: Vec<_> = seen.lock().unwrap().clone();
    got.sort_by_key(|(who, name)| (*who, name.to_string()));
    assert_eq!(
        got,
        [
            ("early", "a".into()),
            ("early", "b".into()),
            ("late", "a".into()),
            ("late", "b".into()),
        ]
    );
    drop((early, late));
}

struct Refusing;

impl Gate for Refusing {
    fn admit<'a>(
        &'a self,
        user: &'a str,
        resource: &'a ApiResource,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Admission>> {
        Box::pin(async move {
            Err(Error::Refuse(format!(
                "{user} may not watch {}",
                resource.plural
            )))
        })
    }
}

#[tokio::test]
async fn a_refused_subscriber_starts_nothing() {
    let informers = Informers::new(tokio::runtime::Handle::current(), Some(Arc::new(Refusing)));
    let access = informers.access(Some("system:serviceaccount:t:x".into()), Some("t"));
    let err = access
        .open(&session(), &want(&configmaps(), None))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "system:serviceaccount:t:x may not watch configmaps"
    );
    assert_eq!(informers.running(), 0);
}

/// Admits while `open` is true.
struct Toggle(std::sync::atomic::AtomicBool);

impl Gate for Toggle {
    fn admit<'a>(
        &'a self,
        user: &'a str,
        _: &'a ApiResource,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Admission>> {
        Box::pin(async move {
            if self.0.load(Ordering::Relaxed) {
                Ok(Admission::Own)
            } else {
                Err(Error::Refuse(format!(
                    "{user} may not watch in {namespace:?}"
                )))
            }
        })
    }
}

#[tokio::test]
async fn reauthorizing_asks_again_about_what_was_admitted() {
    let gate = Arc::new(Toggle(true.into()));
    let informers = Informers::new(tokio::runtime::Handle::current(), Some(gate.clone()));
    let access = informers.access(Some("robot".into()), Some("t"));
    let _sub = access
        .open(&session(), &want(&configmaps(), None))
        .await
        .unwrap()
        .subscribe(|_| {}, || {});
    access.reauthorize().await.unwrap();
    gate.0.store(false, Ordering::Relaxed);
    let err = access.clone().reauthorize().await.err().unwrap();
    assert_eq!(err.to_string(), "robot may not watch in Some(\"t\")");
}

#[tokio::test]
async fn a_callback_may_drop_a_subscription() {
    let access = Access::private();
    let (ar, session) = (configmaps(), session());
    let slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = access.open(&session, &want(&ar, None)).await.unwrap();
    let store = other.store();
    *slot.lock().unwrap() = Some(other.subscribe(|_| {}, || {}));
    let first = {
        let (slot, dropped) = (slot.clone(), dropped.clone());
        access
            .open(&session, &want(&ar, None))
            .await
            .unwrap()
            .subscribe(
                move |_| {
                    // What a controller's last reference going away in a callback does.
                    drop(slot.lock().unwrap().take());
                    dropped.store(true, Ordering::Relaxed);
                },
                || {},
            )
    };
    until("the list delivered", || {
        store.is_synced() && dropped.load(Ordering::Relaxed)
    })
    .await;
    assert!(slot.lock().unwrap().is_none());
    assert_eq!(
        access.informers().running(),
        1,
        "the first still subscribes"
    );
    drop(first);
}

/// Admits everyone into the shared informers, counting the reviews.
#[derive(Default)]
struct Admitting(std::sync::atomic::AtomicUsize);

impl Gate for Admitting {
    fn admit<'a>(
        &'a self,
        _: &'a str,
        _: &'a ApiResource,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Admission>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { Ok(Admission::Shared(client())) })
    }
}

#[tokio::test]
async fn a_group_starts_no_more_informers_than_its_limit_but_may_join_others() {
    let gate = Arc::new(Admitting::default());
    let informers = Informers::new(tokio::runtime::Handle::current(), Some(gate.clone()));
    informers.limit_groups(1);
    let tenant = informers.access(Some("system:serviceaccount:t:a".into()), Some("t"));
    let neighbour = informers.access(Some("system:serviceaccount:u:b".into()), Some("u"));
    let (ar, session) = (configmaps(), session());
    let first = tenant
        .open(&session, &want(&ar, Some("x=1")))
        .await
        .unwrap()
        .subscribe(|_| {}, || {});
    let err = tenant
        .open(&session, &want(&ar, Some("x=2")))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "t's controllers already watch 1 distinct (kind, namespace, selectors), the operator's limit per namespace (--namespace-watches): watching configmaps in t with labels x=2 would start one more"
    );
    assert_eq!(informers.running(), 1, "the refused watch did not start");
    assert_eq!(
        gate.0.load(Ordering::Relaxed),
        1,
        "refused before any review was asked"
    );
    // The neighbour has a limit of its own; the tenant may then join its informer,
    // which costs the process nothing more.
    let theirs = neighbour
        .open(&session, &want(&ar, Some("x=2")))
        .await
        .unwrap()
        .subscribe(|_| {}, || {});
    let joined = tenant
        .open(&session, &want(&ar, Some("x=2")))
        .await
        .unwrap()
        .subscribe(|_| {}, || {});
    assert_eq!(informers.running(), 2);
    // Its informers now count against the tenant too: a third is refused, until the
    // tenant lets one go.
    assert!(matches!(
        tenant.open(&session, &want(&ar, Some("x=3"))).await,
        Err(Error::Limit { .. })
    ));
    drop((first, joined));
    let _third = tenant
        .open(&session, &want(&ar, Some("x=3")))
        .await
        .unwrap()
        .subscribe(|_| {}, || {});
    drop(theirs);
}
