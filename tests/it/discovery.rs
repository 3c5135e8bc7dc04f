//! Resolves kind names against the local cluster, including those of a CRD created after
//! the discovery cache was filled.

use std::time::{Duration, Instant};

use crate::support::*;
use kite::{Discovery, DiscoveryError as Error};

#[tokio::test(flavor = "multi_thread")]
async fn resolves_built_in_kinds_as_kubectl_does() {
    let discovery = Discovery::new(client().await);
    for (name, api_version, plural, namespaced) in [
        ("deploy", "apps/v1", "deployments", true),
        ("po", "v1", "pods", true),
        ("svc", "v1", "services", true),
        ("cm", "v1", "configmaps", true),
        ("deployments.apps", "apps/v1", "deployments", true),
        ("Deployment", "apps/v1", "deployments", true),
        ("deployments.app", "apps/v1", "deployments", true),
        (
            "hpa.autoscal",
            "autoscaling/v2",
            "horizontalpodautoscalers",
            true,
        ),
        ("events", "v1", "events", true),
        ("events.events.k8s.io", "events.k8s.io/v1", "events", true),
        ("ns", "v1", "namespaces", false),
    ] {
        let r = discovery
            .resolve(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.api_resource.api_version, api_version, "{name}");
        assert_eq!(r.api_resource.plural, plural, "{name}");
        assert_eq!(r.namespaced, namespaced, "{name}");
    }

    let deployments = discovery.resolve("deploy").await.unwrap();
    assert_eq!(deployments.api_resource.kind, "Deployment");
    assert_eq!(deployments.singular, "deployment");
    assert!(deployments.short_names.contains(&"deploy".to_owned()));
    assert!(deployments.verbs.contains(&"watch".to_owned()));
    for sub in ["status", "scale"] {
        assert!(
            deployments.subresources.contains(&sub.to_owned()),
            "{:?}",
            deployments.subresources
        );
    }

    let hpa = discovery
        .resolve_gvk("autoscaling/v1", "HorizontalPodAutoscaler")
        .await
        .unwrap();
    assert_eq!(
        hpa.api_resource.version, "v1",
        "non-preferred versions resolve too"
    );
    let cm = discovery.resolve_gvk("v1", "ConfigMap").await.unwrap();
    assert_eq!(cm.api_resource.plural, "configmaps");

    match discovery.resolve("deploymnt").await {
        Err(e @ Error::UnknownKind { .. }) => {
            assert!(e.to_string().contains("deployments.apps"), "{e}")
        }
        other => panic!("expected UnknownKind, got {other:?}"),
    }
    match discovery.resolve("deployments/status").await {
        Err(Error::UnknownKind { .. }) => {}
        other => panic!("subresources are not kinds, got {other:?}"),
    }

    let all = discovery.all().await.unwrap();
    let count = |plural: &str| {
        all.iter()
            .filter(|r| r.api_resource.plural == plural && r.api_resource.group == "apps")
            .count()
    };
    assert_eq!(count("deployments"), 1);
    assert_eq!(all[0].api_resource.group, "", "core resources come first");
}

/// Deletes a CRD when the test ends, passed or failed.
struct CrdGuard(String);

impl Drop for CrdGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "crd",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resolves_a_crd_created_after_discovery() {
    let ns = TestNamespace::new("discovery-crd").await;
    let group = format!("{}.kite.test", ns.name);
    // Unique names too, so that unqualified lookups cannot meet a CRD of a parallel run.
    let suffix = ns.name.rsplit('-').next().unwrap_or("x").to_owned();
    let plural = format!("gizmo{suffix}s");
    let singular = format!("gizmo{suffix}");
    let kind = format!("Gizmo{suffix}");
    let short = format!("gz{suffix}");

    let discovery = Discovery::new(client().await);
    // Fills the cache before the CRD exists, so that only a refresh can find it.
    discovery.resolve("deploy").await.unwrap();
    match discovery.resolve(&plural).await {
        Err(Error::UnknownKind { .. }) => {}
        other => panic!("expected UnknownKind before the CRD exists, got {other:?}"),
    }

    let crd_name = format!("{plural}.{group}");
    let crd = format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {crd_name}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, shortNames: [{short}]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#
    );
    let _crd = CrdGuard(crd_name.clone());
    let out = kubectl_stdin(&["apply", "-f", "-"], &crd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{crd_name}"),
        "--timeout=30s",
    ])
    .await;
    // Discovery can lag Established by a moment; wait (through kubectl, not the cache
    // under test) until the API server lists the group and serves its resources.
    wait_until(
        "the API server to serve the new group in discovery",
        Duration::from_secs(30),
        || async {
            let groups = kubectl(&["get", "--raw", "/apis"]).await;
            let resources = kubectl(&["get", "--raw", &format!("/apis/{group}/v1")]).await;
            String::from_utf8_lossy(&groups.stdout).contains(&format!("\"{group}\""))
                && resources.status.success()
                && String::from_utf8_lossy(&resources.stdout).contains(&plural)
        },
    )
    .await;

    // The very first lookup must succeed: the miss refreshes the cache.
    let names = [
        plural.clone(),
        singular.clone(),
        kind.clone(),
        short.clone(),
        kind.to_uppercase(),
        format!("{plural}.{group}"),
        format!("{kind}.{group}"),
    ];
    for name in &names {
        let r = discovery
            .resolve(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.api_resource.group, group, "{name}");
        assert_eq!(r.api_resource.version, "v1", "{name}");
        assert_eq!(r.api_resource.kind, kind, "{name}");
        assert_eq!(r.api_resource.plural, plural, "{name}");
        assert_eq!(r.singular, singular, "{name}");
        assert_eq!(r.short_names, std::slice::from_ref(&short), "{name}");
        assert_eq!(r.subresources, ["status"], "{name}");
        assert!(r.namespaced, "{name}");
    }
    let r = discovery
        .resolve_gvk(&format!("{group}/v1"), &kind)
        .await
        .unwrap();
    assert_eq!(r.api_resource.plural, plural);
}

#[tokio::test(flavor = "multi_thread")]
async fn misses_are_rate_limited_and_share_one_refresh() {
    let discovery = Discovery::new(client().await);
    // The first miss comes from a fresh discovery, so it fails at once.
    let start = Instant::now();
    assert!(discovery.resolve("nosuchkind").await.is_err());
    let loaded = start.elapsed();

    // The second one refreshes, but not sooner than 2 s after the first discovery.
    let start = Instant::now();
    assert!(discovery.resolve("nosuchkind").await.is_err());
    assert!(
        start.elapsed() + loaded >= Duration::from_secs(2),
        "refreshed after {:?}",
        start.elapsed() + loaded
    );

    // Concurrent misses wait for one refresh together, rather than 2 s each in turn.
    let start = Instant::now();
    let misses = (0..10).map(|i| {
        let d = discovery.clone();
        tokio::spawn(async move { d.resolve(&format!("nosuchkind{i}")).await })
    });
    for miss in futures::future::join_all(misses).await {
        assert!(matches!(miss.unwrap(), Err(Error::UnknownKind { .. })));
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "10 concurrent misses took {:?}",
        start.elapsed()
    );
}
