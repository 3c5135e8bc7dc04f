//! Tests of the fake through a real `kube::Client`.

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::discovery::ApiResource;
use serde_json::{Value as Json, json};

use super::FakeCluster;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn configmaps(fake: &FakeCluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        fake.client("default"),
        "default",
        &resource("v1", "ConfigMap", "configmaps"),
    )
}

fn deployments(fake: &FakeCluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        fake.client("default"),
        "default",
        &resource("apps/v1", "Deployment", "deployments"),
    )
}

fn obj(v: Json) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn js(o: &DynamicObject) -> Json {
    serde_json::to_value(o).unwrap()
}

fn cm(name: &str, labels: Json) -> DynamicObject {
    obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "labels": labels}, "data": {"k": name}}))
}

fn deployment(name: &str) -> Json {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]}}}})
}

fn rv(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[test]
fn create_get_list_with_selectors_and_pages() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = configmaps(&fake);
        for (name, app) in [("a", "web"), ("b", "web"), ("c", "db")] {
            api.create(&PostParams::default(), &cm(name, json!({"app": app})))
                .await
                .unwrap();
        }
        let got = api.get("b").await.unwrap();
        assert_eq!(js(&got)["data"]["k"], "b");
        assert!(got.metadata.uid.is_some() && got.metadata.creation_timestamp.is_some());
        let web = api
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        assert_eq!(web.items.len(), 2);
        let one = api
            .list(&ListParams::default().fields("metadata.name=c"))
            .await
            .unwrap();
        assert_eq!(one.items[0].metadata.name.as_deref(), Some("c"));
        let page = api.list(&ListParams::default().limit(2)).await.unwrap();
        assert_eq!(page.items.len(), 2);
        let token = page.metadata.continue_.clone().unwrap();
        let rest = api
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.items[0].metadata.name.as_deref(), Some("c"));
        let dup = api
            .create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err();
        assert_eq!(code(&dup), 409);
        let missing = api.get("nope").await.unwrap_err();
        assert_eq!(code(&missing), 404);
        assert!(
            missing
                .to_string()
                .contains("configmaps \"nope\" not found"),
            "{missing}"
        );
        assert_eq!(fake.objects().len(), 3);
    });
}

#[test]
fn versions_generations_and_status_isolation() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = deployments(&fake);
        let made = api
            .create(&PostParams::default(), &obj(deployment("web")))
            .await
            .unwrap();
        assert_eq!(made.metadata.generation, Some(1));
        let pp = PatchParams::default();
        let labelled = api
            .patch(
                "web",
                &pp,
                &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
            )
            .await
            .unwrap();
        assert!(rv(&labelled) > rv(&made));
        assert_eq!(labelled.metadata.generation, Some(1));
        let scaled = api
            .patch(
                "web",
                &pp,
                &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"x": 1}})),
            )
            .await
            .unwrap();
        assert_eq!(scaled.metadata.generation, Some(2));
        assert!(
            js(&scaled).get("status").is_none(),
            "main patch ignores status"
        );
        let status = api
            .patch_status(
                "web",
                &pp,
                &Patch::Merge(json!({"spec": {"replicas": 9},
                                                            "status": {"readyReplicas": 3}})),
            )
            .await
            .unwrap();
        assert_eq!(js(&status)["status"]["readyReplicas"], 3);
        assert_eq!(js(&status)["spec"]["replicas"], 3);
        assert_eq!(status.metadata.generation, Some(2));
        let mut stale = made.clone();
        stale.data["spec"]["replicas"] = json!(5);
        let e = api
            .replace("web", &PostParams::default(), &stale)
            .await
            .unwrap_err();
        assert_eq!(code(&e), 409);
        let noop = api
            .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
            .await
            .unwrap();
        assert_eq!(rv(&noop), rv(&status), "a no-op write bumps nothing");
    });
}

#[test]
fn merge_strategic_and_json_patches() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = deployments(&fake);
        api.create(&PostParams::default(), &obj(deployment("web")))
            .await
            .unwrap();
        let pp = PatchParams::default();
        let smp = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:2"}, {"name": "side", "$patch": "delete"}]}}}});
        let out = js(&api.patch("web", &pp, &Patch::Strategic(smp)).await.unwrap());
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:2"}])
        );
        let ops: json_patch::Patch = serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/replicas", "value": 4}]))
        .unwrap();
        let out = js(&api
            .patch("web", &pp, &Patch::<()>::Json(ops))
            .await
            .unwrap());
        assert_eq!(out["spec"]["replicas"], 4);
        let out = js(&api
            .patch(
                "web",
                &pp,
                &Patch::Merge(json!({"spec": {"replicas": null}})),
            )
            .await
            .unwrap());
        assert!(out["spec"].get("replicas").is_none());
    });
}

#[test]
fn server_side_apply_owns_removes_and_conflicts() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = deployments(&fake);
        let mut want = deployment("web");
        want["metadata"]["labels"] = json!({"a": "1", "b": "2"});
        let first = api
            .patch("web", &PatchParams::apply("alpha"), &Patch::Apply(&want))
            .await
            .unwrap();
        assert_eq!(first.metadata.generation, Some(1));
        let managed = first.metadata.managed_fields.clone().unwrap();
        assert_eq!(managed[0].manager.as_deref(), Some("alpha"));
        want["metadata"]["labels"] = json!({"a": "1"});
        let second = api
            .patch("web", &PatchParams::apply("alpha"), &Patch::Apply(&want))
            .await
            .unwrap();
        assert_eq!(js(&second)["metadata"]["labels"], json!({"a": "1"}));
        let theirs = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let e = api
            .patch("web", &PatchParams::apply("beta"), &Patch::Apply(&theirs))
            .await
            .unwrap_err();
        assert_eq!(code(&e), 409);
        assert!(e.to_string().contains("alpha"), "{e}");
        let forced = api
            .patch(
                "web",
                &PatchParams::apply("beta").force(),
                &Patch::Apply(&theirs),
            )
            .await
            .unwrap();
        assert_eq!(js(&forced)["spec"]["replicas"], 5);
        assert_eq!(forced.metadata.generation, Some(2));
        // alpha no longer owns replicas, so dropping it from alpha's apply keeps beta's.
        want["spec"].as_object_mut().unwrap().remove("replicas");
        let after = api
            .patch("web", &PatchParams::apply("alpha"), &Patch::Apply(&want))
            .await
            .unwrap();
        assert_eq!(js(&after)["spec"]["replicas"], 5);
        let writes = fake.writes_since(0);
        assert!(writes.iter().all(|w| w.verb == "apply"));
        assert_eq!(writes[0].manager.as_deref(), Some("alpha"));
    });
}

#[test]
fn finalizers_hold_deletes_and_owners_cascade() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = configmaps(&fake);
        let mut parent = cm("parent", json!({}));
        parent.metadata.finalizers = Some(vec!["kite.io/hold".into()]);
        let parent = api.create(&PostParams::default(), &parent).await.unwrap();
        let uid = parent.metadata.uid.clone().unwrap();
        let child = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "child", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "parent", "uid": uid}]}}),
        );
        api.create(&PostParams::default(), &child).await.unwrap();
        api.delete("parent", &DeleteParams::default())
            .await
            .unwrap();
        let held = api.get("parent").await.unwrap();
        assert!(held.metadata.deletion_timestamp.is_some());
        assert!(api.get("child").await.is_ok());
        api.patch(
            "parent",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        assert_eq!(code(&api.get("parent").await.unwrap_err()), 404);
        assert_eq!(code(&api.get("child").await.unwrap_err()), 404);
        let verbs: Vec<&str> = fake.writes_since(0).iter().map(|w| w.verb).collect();
        assert_eq!(
            verbs,
            ["create", "create", "delete", "patch", "delete", "delete"]
        );
        assert!(fake.objects().is_empty());
    });
}

#[test]
fn dry_run_stores_nothing() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = configmaps(&fake);
        let out = api
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &cm("x", json!({})),
            )
            .await
            .unwrap();
        assert_eq!(out.metadata.name.as_deref(), Some("x"));
        assert!(fake.objects().is_empty());
        assert_eq!(fake.resource_version(), 0);
    });
}

#[test]
fn watches_send_history_live_events_and_a_bookmark() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = configmaps(&fake);
        api.create(&PostParams::default(), &cm("old", json!({"app": "web"})))
            .await
            .unwrap();
        let from = fake.resource_version().to_string();
        api.create(&PostParams::default(), &cm("a", json!({"app": "web"})))
            .await
            .unwrap();
        let params = WatchParams::default().labels("app=web").timeout(1);
        let stream = api.watch(&params, &from).await.unwrap();
        let writer = async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            api.create(&PostParams::default(), &cm("other", json!({"app": "db"})))
                .await
                .unwrap();
            api.delete("a", &DeleteParams::default()).await.unwrap();
        };
        let (events, ()) = tokio::join!(stream.try_collect::<Vec<_>>(), writer);
        let seen: Vec<String> = events
            .unwrap()
            .iter()
            .map(|e| match e {
                WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.clone().unwrap()),
                WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.clone().unwrap()),
                WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.clone().unwrap()),
                WatchEvent::Bookmark(_) => "BOOKMARK".into(),
                WatchEvent::Error(e) => format!("ERROR {}", e.code),
            })
            .collect();
        assert_eq!(seen, ["ADDED a", "DELETED a", "BOOKMARK"]);
        assert_eq!(fake.open_watches(), 0);
        assert!(fake.watches_caught_up());
    });
}

#[test]
fn watches_from_an_expired_version_get_410() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        for i in 0..=super::store::HISTORY + 1 {
            fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": format!("c{i}")}}))
                .unwrap();
        }
        let api = configmaps(&fake);
        let mut stream = api
            .watch(&WatchParams::default().timeout(1), "1")
            .await
            .unwrap()
            .boxed();
        match stream.next().await {
            Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
            other => panic!("expected 410, got {other:?}"),
        }
    });
}

#[test]
fn discovery_resolves_builtin_kinds_and_new_crds() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let discovery = crate::k8s::discovery::Discovery::new(fake.client("default"));
        let deploy = discovery.resolve("deploy").await.unwrap();
        assert_eq!(deploy.api_resource.plural, "deployments");
        assert!(deploy.subresources.contains(&"status".to_owned()));
        assert!(discovery.resolve("pods").await.unwrap().namespaced);
        let crds = Api::<DynamicObject>::all_with(
            fake.client("default"),
            &resource(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
        );
        let crd = obj(json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition", "metadata": {"name": "sites.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Site", "plural": "sites", "shortNames": ["st"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "subresources": {"status": {}}}]}}));
        crds.create(&PostParams::default(), &crd).await.unwrap();
        let site = discovery.resolve("st").await.unwrap();
        assert_eq!(site.api_resource.kind, "Site");
        let sites = Api::<DynamicObject>::namespaced_with(
            fake.client("default"),
            "default",
            &site.api_resource,
        );
        let made = sites
            .create(
                &PostParams::default(),
                &obj(json!({"apiVersion": "example.com/v1",
                "kind": "Site", "metadata": {"name": "s"}, "spec": {"x": 1}})),
            )
            .await
            .unwrap();
        assert_eq!(made.metadata.namespace.as_deref(), Some("default"));
    });
}

#[test]
fn seeding_keeps_status_and_names_problems() {
    let fake = FakeCluster::new();
    let pod = fake
        .seed(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "status": {"phase": "Running"}}),
        )
        .unwrap();
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["metadata"]["namespace"], "default");
    assert_eq!(pod["metadata"]["resourceVersion"], "1");
    let e = fake
        .seed(json!({"apiVersion": "v1", "kind": "Gizmo", "metadata": {"name": "g"}}))
        .unwrap_err();
    assert!(e.to_string().contains("Gizmo \"g\""), "{e}");
    let e = fake
        .seed(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
        .unwrap_err();
    assert!(e.to_string().contains("exists already"), "{e}");
}

#[test]
fn bad_bodies_and_unknown_paths_get_statuses() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let client = fake.client("default");
        let req = hyper::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(b"{not json".to_vec())
            .unwrap();
        let e = client.request::<Json>(req).await.unwrap_err();
        assert_eq!(code(&e), 400);
        let req = hyper::Request::get("/apis/nope.io/v1/things")
            .body(Vec::new())
            .unwrap();
        let e = client.request::<Json>(req).await.unwrap_err();
        assert_eq!(code(&e), 404);
    });
}

#[test]
fn kube_runtime_watchers_list_then_follow() {
    use kube::runtime::watcher::{self, Event};
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = configmaps(&fake);
        api.create(&PostParams::default(), &cm("first", json!({})))
            .await
            .unwrap();
        let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
        let mut names = Vec::new();
        while let Some(event) = events.next().await {
            match event.unwrap() {
                Event::InitApply(o) => names.push(o.metadata.name.unwrap()),
                Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(names, ["first"]);
        api.create(&PostParams::default(), &cm("second", json!({})))
            .await
            .unwrap();
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
            .await
            .unwrap();
        match next {
            Some(Ok(Event::Apply(o))) => assert_eq!(o.metadata.name.as_deref(), Some("second")),
            other => panic!("expected the new object, got {other:?}"),
        }
        assert_eq!(fake.open_watches(), 1);
        // Taken but not yet acted on: the reader has not asked for the next line.
        assert!(!fake.watches_caught_up());
        let more = tokio::time::timeout(std::time::Duration::from_millis(100), events.next()).await;
        assert!(more.is_err(), "nothing more to read: {more:?}");
        assert!(fake.watches_caught_up());
    });
}

#[test]
fn apply_merges_named_lists_across_managers() {
    runtime().block_on(async {
        let fake = FakeCluster::new();
        let api = deployments(&fake);
        let mine = deployment("web");
        api.patch("web", &PatchParams::apply("mine"), &Patch::Apply(&mine))
            .await
            .unwrap();
        let theirs = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [
                {"name": "extra", "image": "x"}]}}}});
        api.patch("web", &PatchParams::apply("theirs"), &Patch::Apply(&theirs))
            .await
            .unwrap();
        let mut fewer = deployment("web");
        fewer["spec"]["template"]["spec"]["containers"] =
            json!([{"name": "web", "image": "nginx:1"}]);
        let out = js(&api
            .patch("web", &PatchParams::apply("mine"), &Patch::Apply(&fewer))
            .await
            .unwrap());
        let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["web", "extra"], "side is pruned, theirs is kept");
        let again = api
            .patch("web", &PatchParams::apply("mine"), &Patch::Apply(&fewer))
            .await
            .unwrap();
        assert_eq!(
            js(&again)["metadata"]["resourceVersion"],
            out["metadata"]["resourceVersion"]
        );
    });
}
