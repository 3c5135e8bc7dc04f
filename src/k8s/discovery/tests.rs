//! Resolution and suggestions against a discovery fixture.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use serde_json::json;

use super::cache::{api_version_of, parse_resource_list, preferred};
use super::*;

fn list(group: &str, version: &str, resources: serde_json::Value) -> Vec<Resource> {
    let list: APIResourceList = serde_json::from_value(json!({
        "groupVersion": api_version_of(group, version),
        "resources": resources,
    }))
    .expect("valid APIResourceList");
    parse_resource_list(group, version, &list)
}

fn res(name: &str, singular: &str, kind: &str, short: &[&str]) -> serde_json::Value {
    json!({"name": name, "singularName": singular, "kind": kind, "namespaced": true,
           "verbs": ["get", "list", "watch"], "shortNames": short})
}

fn sub(name: &str, kind: &str) -> serde_json::Value {
    json!({"name": name, "singularName": "", "kind": kind, "namespaced": true, "verbs": ["get"]})
}

/// A cluster in the order discovery lists it: core, then built-in groups, then CRDs.
fn cluster() -> Vec<Resource> {
    [
        list(
            "",
            "v1",
            json!([
                res("pods", "pod", "Pod", &["po"]),
                sub("pods/status", "Pod"),
                sub("pods/log", "Pod"),
                res("services", "service", "Service", &["svc"]),
                res("configmaps", "configmap", "ConfigMap", &["cm"]),
                res("events", "event", "Event", &["ev"]),
                // An old server without singular names.
                res("namespaces", "", "Namespace", &["ns"]),
            ]),
        ),
        list(
            "apps",
            "v1",
            json!([
                res("deployments", "deployment", "Deployment", &["deploy"]),
                sub("deployments/status", "Deployment"),
                sub("deployments/scale", "Scale"),
                res("statefulsets", "statefulset", "StatefulSet", &["sts"]),
            ]),
        ),
        list(
            "events.k8s.io",
            "v1",
            json!([res("events", "event", "Event", &["ev"])]),
        ),
        list(
            "autoscaling",
            "v2",
            json!([res(
                "horizontalpodautoscalers",
                "horizontalpodautoscaler",
                "HorizontalPodAutoscaler",
                &["hpa"]
            )]),
        ),
        list(
            "autoscaling",
            "v1",
            json!([res(
                "horizontalpodautoscalers",
                "horizontalpodautoscaler",
                "HorizontalPodAutoscaler",
                &["hpa"]
            )]),
        ),
        list(
            "example.com",
            "v1",
            json!([
                res("people", "person", "Human", &["hu"]),
                res("widgets", "widget", "Widget", &["wd"])
            ]),
        ),
        list(
            "other.example.com",
            "v1",
            json!([res("widgets", "widget", "Widget", &[])]),
        ),
        list(
            "clash.test",
            "v1",
            json!([
                res("foos", "foo", "Foo", &["dup"]),
                res("bars", "bar", "Bar", &["dup"])
            ]),
        ),
    ]
    .concat()
}

#[track_caller]
fn resolves(kind: &str, api_version: &str, plural: &str) {
    let resources = cluster();
    let found = find_kind(&resources, kind).unwrap_or_else(|e| panic!("{kind}: {e}"));
    assert_eq!(
        (
            found.api_resource.api_version.as_str(),
            found.api_resource.plural.as_str()
        ),
        (api_version, plural),
        "{kind}"
    );
}

#[track_caller]
fn unknown(kind: &str) -> Vec<String> {
    match find_kind(&cluster(), kind) {
        Err(Error::UnknownKind {
            kind: k,
            suggestions,
        }) => {
            assert_eq!(k, kind);
            suggestions
        }
        other => panic!("{kind}: expected UnknownKind, got {other:?}"),
    }
}

#[test]
fn plural_singular_and_kind() {
    resolves("deployments", "apps/v1", "deployments");
    resolves("deployment", "apps/v1", "deployments");
    resolves("Deployment", "apps/v1", "deployments");
    resolves("pods", "v1", "pods");
    resolves("pod", "v1", "pods");
    resolves("ConfigMap", "v1", "configmaps");
    // A kind that is neither the plural nor the singular.
    resolves("Human", "example.com/v1", "people");
    resolves("person", "example.com/v1", "people");
}

#[test]
fn singular_is_guessed_when_discovery_omits_it() {
    resolves("namespace", "v1", "namespaces");
    let resources = cluster();
    let ns = find_kind(&resources, "ns").unwrap();
    assert_eq!(ns.singular, "namespace");
}

#[test]
fn short_names() {
    resolves("deploy", "apps/v1", "deployments");
    resolves("po", "v1", "pods");
    resolves("svc", "v1", "services");
    resolves("cm", "v1", "configmaps");
    resolves("hu", "example.com/v1", "people");
}

#[test]
fn qualified_with_a_group() {
    resolves("deployments.apps", "apps/v1", "deployments");
    resolves("deployment.apps", "apps/v1", "deployments");
    resolves("Deployment.apps", "apps/v1", "deployments");
    resolves("deploy.apps", "apps/v1", "deployments");
    resolves("widgets.example.com", "example.com/v1", "widgets");
    resolves("Widget.example.com", "example.com/v1", "widgets");
    resolves(
        "widgets.other.example.com",
        "other.example.com/v1",
        "widgets",
    );
    resolves("Human.example.com", "example.com/v1", "people");
    resolves("events.events.k8s.io", "events.k8s.io/v1", "events");
    resolves("Event.events.k8s.io", "events.k8s.io/v1", "events");
    // A trailing dot qualifies nothing, as in kubectl.
    resolves("pods.", "v1", "pods");
}

#[test]
fn qualified_with_a_group_prefix() {
    resolves("deployments.app", "apps/v1", "deployments");
    resolves("deploy.app", "apps/v1", "deployments");
    resolves("hpa.autoscal", "autoscaling/v2", "horizontalpodautoscalers");
    resolves("events.events", "events.k8s.io/v1", "events");
    resolves("Widget.example", "example.com/v1", "widgets");
    // An exact group beats a prefix of a longer one.
    resolves("widgets.example.com", "example.com/v1", "widgets");
}

#[test]
fn qualified_with_a_version_and_group() {
    resolves("deployments.v1.apps", "apps/v1", "deployments");
    resolves("Deployment.v1.apps", "apps/v1", "deployments");
    resolves(
        "hpa.v1.autoscaling",
        "autoscaling/v1",
        "horizontalpodautoscalers",
    );
    // Unversioned, the preferred version wins.
    resolves("hpa", "autoscaling/v2", "horizontalpodautoscalers");
    resolves(
        "horizontalpodautoscalers.autoscaling",
        "autoscaling/v2",
        "horizontalpodautoscalers",
    );
}

#[test]
fn case_is_ignored() {
    resolves("DEPLOYMENTS", "apps/v1", "deployments");
    resolves("dEpLoY", "apps/v1", "deployments");
    resolves("deployment", "apps/v1", "deployments");
    resolves("configmap", "v1", "configmaps");
    resolves("Deployments.APPS", "apps/v1", "deployments");
    resolves("PO", "v1", "pods");
    resolves("human", "example.com/v1", "people");
}

#[test]
fn core_group_wins_over_others() {
    resolves("events", "v1", "events");
    resolves("event", "v1", "events");
    resolves("Event", "v1", "events");
    resolves("ev", "v1", "events");
    // Even if the slice lists the core group last.
    let mut reversed = cluster();
    reversed.reverse();
    let found = find_kind(&reversed, "events").unwrap();
    assert_eq!(found.api_resource.group, "");
}

#[test]
fn earlier_group_wins_over_later_one() {
    resolves("widgets", "example.com/v1", "widgets");
    resolves("Widget", "example.com/v1", "widgets");
}

#[test]
fn same_name_in_one_group_version_is_ambiguous() {
    match find_kind(&cluster(), "dup") {
        Err(e @ Error::AmbiguousKind { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("foos.clash.test"), "{msg}");
            assert!(msg.contains("bars.clash.test"), "{msg}");
        }
        other => panic!("expected AmbiguousKind, got {other:?}"),
    }
}

#[test]
fn unknown_kind_suggests_close_names() {
    let suggestions = unknown("deploymnt");
    assert_eq!(
        suggestions.first().map(String::as_str),
        Some("deployments.apps")
    );
    let err = find_kind(&cluster(), "deploymnt").unwrap_err();
    assert!(
        err.to_string().starts_with(
            "no resource type \"deploymnt\" in the cluster (known kinds include: deployments.apps"
        ),
        "{err}"
    );
    assert_eq!(unknown("deployments.appz"), ["deployments.apps"]);
    assert!(unknown("widgit").contains(&"widgets.example.com".to_owned()));
}

#[test]
fn unknown_kind_without_close_names_lists_none() {
    assert!(unknown("zzzzzzzzzzzz").is_empty());
    let err = find_kind(&cluster(), "zzzzzzzzzzzz").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no resource type \"zzzzzzzzzzzz\" in the cluster"
    );
}

#[test]
fn subresources_are_never_kinds() {
    unknown("deployments/status");
    unknown("pods/log");
    unknown("status");
    unknown("scale");
    unknown("Scale");
    let resources = cluster();
    let deployments = find_kind(&resources, "deploy").unwrap();
    assert_eq!(deployments.subresources, ["status", "scale"]);
    assert!(
        resources
            .iter()
            .all(|r| !r.api_resource.plural.contains('/'))
    );
}

#[test]
fn wrong_group_or_version_does_not_match() {
    unknown("deployments.batch");
    unknown("deployments.v2.apps");
    // kubectl matches group prefixes for resource names only, not for kinds.
    unknown("Human.example");
}

#[test]
fn odd_input_does_not_panic() {
    for input in [
        "",
        ".",
        "..",
        "...",
        ".apps",
        "a.b.c.d",
        "/",
        "ä.ö",
        "Ⅻ",
        "\0",
        " pods",
        "pods ",
        "deployments..apps",
        "é",
    ] {
        let _ = find_kind(&cluster(), input);
    }
    let long = "x".repeat(100_000);
    assert!(unknown(&long).is_empty());
}

#[test]
fn api_version_and_kind() {
    let resources = cluster();
    let find = |v, k| find_api_version_kind(&resources, v, k).map(|r| r.api_resource.clone());
    let d = find("apps/v1", "Deployment").unwrap();
    assert_eq!(
        (d.plural.as_str(), d.version.as_str()),
        ("deployments", "v1")
    );
    assert_eq!(find("v1", "ConfigMap").unwrap().plural, "configmaps");
    assert_eq!(find("v1", "Event").unwrap().group, "");
    assert_eq!(
        find("events.k8s.io/v1", "Event").unwrap().group,
        "events.k8s.io"
    );
    // A non-preferred version resolves to exactly that version.
    assert_eq!(
        find("autoscaling/v1", "HorizontalPodAutoscaler")
            .unwrap()
            .version,
        "v1"
    );
    assert_eq!(
        find("autoscaling/v2", "HorizontalPodAutoscaler")
            .unwrap()
            .version,
        "v2"
    );
}

#[test]
fn unknown_api_version_and_kind_suggest_served_ones() {
    let resources = cluster();
    let err = find_api_version_kind(&resources, "apps/v2", "Deployment").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no resource type for kind \"Deployment\" in apiVersion \"apps/v2\" in the cluster \
         (known kinds include: apps/v1 Deployment)"
    );
    let err = find_api_version_kind(&resources, "apps/v1", "deployment").unwrap_err();
    assert!(err.to_string().contains("apps/v1 Deployment"), "{err}");
    let err = find_api_version_kind(&resources, "apps/v1", "StatefulSett").unwrap_err();
    assert!(err.to_string().contains("apps/v1 StatefulSet"), "{err}");
    assert!(err.is_miss());
}

#[test]
fn malformed_api_versions_are_rejected() {
    let resources = cluster();
    for bad in ["", "/", "/v1", "apps/", "a/b/c"] {
        match find_api_version_kind(&resources, bad, "Deployment") {
            Err(Error::InvalidApiVersion { api_version }) => assert_eq!(api_version, bad),
            other => panic!("{bad:?}: expected InvalidApiVersion, got {other:?}"),
        }
    }
}

#[test]
fn preferred_lists_each_resource_once_in_its_preferred_version() {
    let all = preferred(&cluster());
    let hpas: Vec<_> = all
        .iter()
        .filter(|r| r.api_resource.plural == "horizontalpodautoscalers")
        .collect();
    assert_eq!(hpas.len(), 1);
    assert_eq!(hpas[0].api_resource.version, "v2");
    assert_eq!(all[0].api_resource.group, "");
    assert_eq!(
        all.iter()
            .filter(|r| r.api_resource.plural == "events")
            .count(),
        2
    );
}

#[test]
fn discovery_fields_are_kept() {
    let resources = cluster();
    let pods = find_kind(&resources, "pods").unwrap();
    assert!(pods.namespaced);
    assert_eq!(pods.verbs, ["get", "list", "watch"]);
    assert_eq!(pods.short_names, ["po"]);
    assert_eq!(pods.singular, "pod");
    assert_eq!(pods.subresources, ["status", "log"]);
    assert_eq!(pods.api_resource.kind, "Pod");
}

#[test]
fn discovery_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>(_: &T) {}
    assert_send_sync::<Discovery>();
    // Type-checks that the futures can be spawned; never runs.
    let _ = |d: Discovery| {
        assert_send(&d.resolve("pods"));
        assert_send(&d.resolve_gvk("v1", "Pod"));
        assert_send(&d.all());
    };
}
