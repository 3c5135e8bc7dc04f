//! The adversarial suite of issue 26, continued: what a tenant's running controllers
//! may keep (memory between reconciles) and how soon a revoked author's controller
//! stops, without an operator restart.

use std::time::Duration;

use crate::security::{CEILING, reason_becomes, slc, tenant};
use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// A controller that reads the Deployments it watches: what a tenant who may read
/// Deployments may author.
const READER: &str = "def reconcile(d):\n    k8s.get(\"deployment\", d.metadata.name, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";

/// The status reason of `name`'s Ready condition ("" while it has none).
async fn ready_reason(ns: &str, name: &str) -> String {
    let s = status(ns, name).await;
    condition(&s, "Ready")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Class 3 (memory): what one namespace's controllers keep between reconciles (the
/// values their top levels left) is bounded by `--namespace-memory`. The controller
/// over it is refused with the figures, keeps nothing, and runs once another goes.
#[tokio::test]
async fn a_namespace_keeps_no_more_memory_than_its_limit() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-quota").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start_with(
        ns,
        &ceiling,
        &["--namespace", ns, "--namespace-memory", "24"],
    )
    .await;
    // A 10 MB string each, kept for as long as the controller runs (in a heap chunk of
    // 16 MiB): one fits, two do not.
    let hoard = format!("BIG = \"x\" * 10000000\n\n{READER}");
    for name in ["first", "second"] {
        let out = apply_as(&user, &slc(ns, name, json!({"script": hoard}))).await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (running, refused) = wait_for("one running, one over the limit", T, || async {
        let (a, b) = (
            ready_reason(ns, "first").await,
            ready_reason(ns, "second").await,
        );
        match (a.as_str(), b.as_str()) {
            ("Running", "MemoryQuota") => Some(("first", "second")),
            ("MemoryQuota", "Running") => Some(("second", "first")),
            _ => None,
        }
    })
    .await;
    let s = status(ns, refused).await;
    let m = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        m.contains("over the operator's limit of 24.0 MiB per namespace (--namespace-memory)"),
        "{m}"
    );
    // What the other keeps: its string's heap chunk and little else.
    let kept: f64 = m
        .split(&format!("namespace {ns}'s other controllers keep "))
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {m}"));
    assert!((10.0..20.0).contains(&kept), "{m}");
    // Room again once the other goes.
    kubectl_ok(&["delete", "slc", running, "-n", ns]).await;
    wait_condition(ns, refused, "Ready", "True", Duration::from_secs(60)).await;
}

/// Class 9: the re-check sees revocation while the controller runs, with no restart:
/// a user whom a SubjectAccessReview now refuses, and a ServiceAccount author deleted,
/// each stop their controller within the re-check period.
#[tokio::test]
async fn revoked_authors_controllers_stop_within_the_recheck_period() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-recheck").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    kubectl_ok(&["create", "serviceaccount", "deployer", "-n", ns]).await;
    let robot = format!("system:serviceaccount:{ns}:deployer");
    grant(
        ns,
        &robot,
        "deployer",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
        ]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let op =
        Operator::start_with(ns, &ceiling, &["--namespace", ns, "--recheck-period", "3s"]).await;
    let by_user = apply_as(&user, &slc(ns, "by-user", json!({"script": READER}))).await;
    assert!(by_user.status.success());
    let by_robot = kubectl_stdin(
        &["apply", "--as", &robot, "-f", "-"],
        &slc(ns, "by-robot", json!({"script": READER})).to_string(),
    )
    .await;
    assert!(
        by_robot.status.success(),
        "{}",
        String::from_utf8_lossy(&by_robot.stderr)
    );
    for name in ["by-user", "by-robot"] {
        wait_condition(ns, name, "Ready", "True", T).await;
    }
    wait_until("two controllers running", T, || async {
        op.metrics().await.contains("kite_operator_controllers 2")
    })
    .await;

    // The user loses the right to read Deployments; the robot is deleted.
    kubectl_ok(&["delete", "rolebinding", "tenant", "-n", ns]).await;
    kubectl_ok(&["delete", "serviceaccount", "deployer", "-n", ns]).await;
    let (_, m) = reason_becomes(ns, "by-user", "RBACReady", "AuthorForbidden").await;
    assert!(
        m.contains(&format!("tenant-{ns}")) && m.contains("deployments"),
        "{m}"
    );
    let (_, m) = reason_becomes(ns, "by-robot", "RBACReady", "AuthorGone").await;
    assert!(
        m.contains(&format!(
            "the author, ServiceAccount {ns}/deployer, no longer exists"
        )),
        "{m}"
    );
    for name in ["by-user", "by-robot"] {
        assert_ne!(ready_reason(ns, name).await, "Running", "{name}");
    }
    wait_until("both controllers stopped", T, || async {
        op.metrics().await.contains("kite_operator_controllers 0")
    })
    .await;
}

/// Class 3 (threads): a handler that asks for more memory at once than its whole
/// budget parks its pool thread for good. The controller says so and runs no more
/// handlers; once the namespace has lost two threads, its other controllers are held
/// too, and say why. The operator stays up and keeps answering its probes.
#[tokio::test]
async fn parked_handlers_hold_their_namespace_and_the_operator_goes_on() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-parked").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let op =
        Operator::start_with(ns, &ceiling, &["--namespace", ns, "--script-memory", "16"]).await;
    // A bystander first, running before the others lose their threads.
    let bystander = apply_as(&user, &slc(ns, "bystander", json!({"script": READER}))).await;
    assert!(bystander.status.success());
    wait_condition(ns, "bystander", "Ready", "True", T).await;
    // 70 MB in one string (the Deployment's name has 7 letters): one block larger than
    // the 16 MiB budget.
    let hog = "def reconcile(d):\n    s = \"x\" * len(d.metadata.name) * 10000000\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    for name in ["hog-a", "hog-b"] {
        let out = apply_as(&user, &slc(ns, name, json!({"script": hog}))).await;
        assert!(out.status.success(), "{name}");
        wait_condition(ns, name, "Ready", "True", T).await;
    }
    kubectl_ok(&["create", "deployment", "trigger", "--image=nginx", "-n", ns]).await;

    let last_error = |name: &'static str| async move {
        status(ns, name).await["lastError"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for name in ["hog-a", "hog-b"] {
        let m = wait_for(&format!("{name} parked"), T, || async {
            let m = last_error(name).await;
            m.contains("asked for more memory than its limit allows")
                .then_some(m)
        })
        .await;
        assert!(m.contains("runs no more handlers"), "{name}: {m}");
    }
    let m = wait_for("the bystander held with its namespace", T, || async {
        let m = last_error("bystander").await;
        m.contains("handlers of this namespace's controllers were parked")
            .then_some(m)
    })
    .await;
    assert!(m.contains("2 times"), "{m}");
    // The operator is up: its probes answer, and its metrics count the lost threads.
    // A top level that does the same (Starlark computes a constant's product as it
    // compiles) is told apart at once, not at the end of its budget.
    let top = format!("S = \"x\" * 100000000\n\n{READER}");
    let started = std::time::Instant::now();
    let out = apply_as(&user, &slc(ns, "hog-top", json!({"script": top}))).await;
    assert!(out.status.success());
    let (_, m) = reason_becomes(ns, "hog-top", "Ready", "ScriptError").await;
    assert!(
        m.contains("the script's top level asked for more memory than its limit allows (16 MiB"),
        "{m}"
    );
    // Not at the end of its 30 s budget.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let healthz = curl(&format!("http://127.0.0.1:{}/healthz", op.port)).await;
    assert_eq!(healthz.as_deref().map(str::trim), Some("ok"));
    assert!(
        op.metrics().await.contains("kite_script_threads_parked 3"),
        "{}",
        op.metrics().await
    );
    // A controller created now is held from the start: it says why, and never
    // reconciles the Deployment that is there.
    let late = apply_as(&user, &slc(ns, "late", json!({"script": READER}))).await;
    assert!(late.status.success());
    wait_for("the new controller held", T, || async {
        last_error("late")
            .await
            .contains("no controller of this namespace runs handlers")
            .then_some(())
    })
    .await;
    let s = status(ns, "late").await;
    assert!(
        s["recentReconciles"].as_array().is_none_or(Vec::is_empty),
        "{s}"
    );
}

/// Class 2 (acting outside): a hosted controller's `watch_related` map naming an
/// object of another namespace does not get it reconciled. The operator drops the name
/// and says so in its own log; nothing of the other namespace reaches the tenant.
#[tokio::test]
async fn a_related_map_reaches_no_other_namespace() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-related").await;
    let ns = ns.name.as_str();
    let victim = TestNamespace::new("sec-victim").await;
    let victim = victim.name.as_str();
    kubectl_ok(&[
        "create",
        "deployment",
        "secret-app",
        "--image=nginx",
        "-n",
        victim,
    ])
    .await;
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let mut op = Operator::start_with(ns, &ceiling, &["--namespace", ns]).await;
    let script = format!(
        "def reconcile(d):\n    pass\n\ndef related(d):\n    return [\"{victim}/secret-app\", d.metadata.namespace + \"/source\"]\n\n\
         k8s.control(\"deployments\", reconcile = reconcile, watch_related = [(\"deployments\", related)])\n"
    );
    let out = apply_as(&user, &slc(ns, "mapper", json!({"script": script}))).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(ns, "mapper", "Ready", "True", T).await;
    kubectl_ok(&["create", "deployment", "source", "--image=nginx", "-n", ns]).await;
    // The map ran and its outside name was dropped before anything was queued.
    let line = op
        .kite
        .wait_stderr_line("outside the controller's namespace", T)
        .await;
    assert!(
        line.contains(&format!("first {victim}/secret-app")),
        "{line}"
    );
    // Its own name was reconciled, the other never.
    let recent = wait_for("the related reconcile of source", T, || async {
        let s = status(ns, "mapper").await;
        let recent = s["recentReconciles"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        recent
            .iter()
            .any(|r| r["object"] == format!("{ns}/source"))
            .then_some(s)
    })
    .await;
    let events = kubectl_ok(&["get", "events", "-n", ns, "-o", "json"]).await;
    for text in [recent.to_string(), events] {
        assert!(!text.contains(victim), "{text}");
    }
}

/// Class 9: a resource that leaves the operator's watch without a last reconcile
/// (relabelled out of `--selector`) does not go on running with its grants: within the
/// re-check period its controller stops and its generated identity goes.
#[tokio::test]
async fn a_resource_that_leaves_the_watch_stops_its_controller() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-leaves").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(CEILING).await;
    let label = format!("kite-test={ns}");
    let op = Operator::start_with(
        ns,
        &ceiling,
        &["--selector", &label, "--recheck-period", "3s"],
    )
    .await;
    let mut obj = slc(ns, "leaver", json!({"script": READER}));
    obj["metadata"]["labels"] = json!({"kite-test": ns});
    let out = kubectl_stdin(&["apply", "-f", "-"], &obj.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(ns, "leaver", "Ready", "True", T).await;
    let sa = status(ns, "leaver").await["serviceAccount"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!sa.is_empty());
    wait_until("the controller running", T, || async {
        op.metrics().await.contains("kite_operator_controllers 1")
    })
    .await;
    kubectl_ok(&[
        "label",
        "slc",
        "leaver",
        "-n",
        ns,
        "kite-test=elsewhere",
        "--overwrite",
    ])
    .await;
    wait_until("the controller stopped", T, || async {
        op.metrics().await.contains("kite_operator_controllers 0")
    })
    .await;
    wait_until("its ServiceAccount gone", T, || async {
        !kubectl(&["get", "serviceaccount", &sa, "-n", ns])
            .await
            .status
            .success()
    })
    .await;
}

/// Class 3 (memory), the shared informers' part: each distinct selector is a copy of
/// the objects it matches in the operator's memory, charged to the namespace of the
/// controllers that watch through it. A tenant's controllers that each watch its large
/// ConfigMaps through a selector of their own keep no more than `--namespace-memory`:
/// the ones past it are stopped, with the caches named, and stay refused.
#[tokio::test]
async fn the_caches_of_a_namespaces_watches_count_against_its_limit() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-caches").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    grant(
        ns,
        &user,
        "configmap-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    // Five ConfigMaps of 900 kB: about 4.3 MiB per copy.
    for i in 0..5 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{i}"), "namespace": ns},
            "data": {"blob": "x".repeat(900_000)}});
        let out = kubectl_stdin(&["create", "-f", "-"], &cm.to_string()).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start_with(
        ns,
        &ceiling,
        &["--namespace", ns, "--namespace-memory", "20"],
    )
    .await;
    // Six controllers, six selectors that all match every ConfigMap: six copies, about
    // 27.5 MiB with kite's share (4.6 MiB each), over 20: four fit, five do not.
    let names: Vec<String> = (0..6).map(|i| format!("copy-{i}")).collect();
    for name in &names {
        let script = format!(
            "def reconcile(cm):\n    pass\n\nk8s.control(\"configmaps\", reconcile = reconcile, labels = \"copy notin ({name})\")\n"
        );
        let out = apply_as(&user, &slc(ns, name, json!({"script": script}))).await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let reasons = |names: Vec<String>| async move {
        let mut reasons = Vec::new();
        for name in &names {
            reasons.push(ready_reason(ns, name).await);
        }
        reasons
    };
    // Some are stopped once their caches fill; the rest fit the limit.
    let (running, refused) = wait_for(
        "the controllers past the limit stopped",
        Duration::from_secs(60),
        || async {
            let reasons = reasons(names.clone()).await;
            let running = reasons.iter().filter(|r| *r == "Running").count();
            let refused = reasons.iter().filter(|r| *r == "MemoryQuota").count();
            (running + refused == names.len() && refused >= 2).then_some((running, refused))
        },
    )
    .await;
    assert!(
        (1..=4).contains(&running),
        "{running} running, {refused} refused: each keeps a copy of about 4.3 MiB, so at most four fit 20 MiB"
    );
    let refused_name = {
        let mut found = None;
        for name in &names {
            if ready_reason(ns, name).await == "MemoryQuota" {
                found = Some(name.clone());
            }
        }
        found.unwrap_or_default()
    };
    // The stop named the caches, in an event; the refusal that follows keeps the charge.
    let events = kubectl_ok(&["get", "events", "-n", ns, "-o", "json"]).await;
    assert!(
        events.contains("over the operator's limit of 20.0 MiB per namespace (--namespace-memory)"),
        "{events}"
    );
    // It is refused from the start now, charged what its caches held (a start without
    // that would be charged about 0.3 MiB, fit, and fill its caches again).
    let s = status(ns, &refused_name).await;
    let m = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kept: f64 = m
        .split("the controller keeps ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {m}"));
    assert!(
        (4.0..6.0).contains(&kept) && m.contains("the caches of what it watches"),
        "{m}"
    );
}

/// Class 3 (the API server's watches): each distinct selector is a watch the operator
/// keeps open on the API server, and a cache. A namespace's controllers start no more
/// than `--namespace-watches` of them; the one past it is refused (`WatchQuota`, the
/// flag named) and starts once another goes.
#[tokio::test]
async fn a_namespace_starts_no_more_watches_than_its_limit() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-watches").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    grant(
        ns,
        &user,
        "configmap-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start_with(
        ns,
        &ceiling,
        &["--namespace", ns, "--namespace-watches", "2"],
    )
    .await;
    let names = ["sel-a", "sel-b", "sel-c"];
    for name in names {
        let script = format!(
            "def reconcile(cm):\n    pass\n\nk8s.control(\"configmaps\", reconcile = reconcile, labels = \"copy notin ({name})\")\n"
        );
        let out = apply_as(&user, &slc(ns, name, json!({"script": script}))).await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let refused = wait_for("two running, one over the limit", T * 2, || async {
        let mut reasons = Vec::new();
        for name in names {
            reasons.push((name, ready_reason(ns, name).await));
        }
        let running = reasons.iter().filter(|(_, r)| r == "Running").count();
        let refused: Vec<&str> = reasons
            .iter()
            .filter(|(_, r)| r == "WatchQuota")
            .map(|(n, _)| *n)
            .collect();
        (running == 2 && refused.len() == 1).then(|| refused[0])
    })
    .await;
    let s = status(ns, refused).await;
    let m = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        m.contains(&format!(
            "{ns}'s controllers already watch 2 distinct (kind, namespace, selectors)"
        )) && m.contains("(--namespace-watches)")
            && m.contains(&format!(
                "configmaps in {ns} with labels copy notin ({refused})"
            )),
        "{m}"
    );
    // A running one goes: its watch is given back, and the refused one starts.
    let gone = names
        .iter()
        .find(|n| **n != refused)
        .copied()
        .unwrap_or_default();
    kubectl_ok(&[
        "delete",
        "starlarkcontroller",
        gone,
        "-n",
        ns,
        "--wait=true",
    ])
    .await;
    // Retried every 20 s.
    wait_for("the refused one running", T * 2, || async {
        (ready_reason(ns, refused).await == "Running").then_some(())
    })
    .await;
}

/// Class 3 (the API server's load): a tenant's cheap write that makes the operator
/// decide again, here a ConfigMap its controller's script comes from rewritten in a
/// loop (never re-approved), costs a read of the script, not a cluster-wide search of
/// the objects generated for the controller each time: those are removed once, when
/// the controller stops.
#[tokio::test]
async fn a_controller_refused_again_and_again_does_not_search_the_cluster_each_time() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-refused").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    grant(
        ns,
        &user,
        "script",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["script"], "verbs": ["get", "patch"]}]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "script", "namespace": ns}, "data": {"ctrl.star": READER}});
    let out = kubectl_stdin(&["apply", "-f", "-"], &cm.to_string()).await;
    assert!(out.status.success());
    let from = json!({"scriptFrom": {"configMapKeyRef": {"name": "script", "key": "ctrl.star"}}});
    let out = apply_as(&user, &slc(ns, "pinned", from)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("running", T, || async {
        (ready_reason(ns, "pinned").await == "Running").then_some(())
    })
    .await;
    let uid = jsonpath("slc", "pinned", ns, "{.metadata.uid}").await;
    // The operator's reads of the script, one per decision.
    let reads = || {
        audit_events(&format!("/namespaces/{ns}/configmaps/script"))
            .iter()
            .filter(|e| e["verb"] == "get" && e["stage"] == "ResponseComplete")
            .count()
    };
    for i in 0..8 {
        let before = reads();
        let patch = json!({"data": {"ctrl.star": format!("{READER}# {i}\n")}}).to_string();
        kubectl_ok(&[
            "patch",
            "configmap",
            "script",
            "-n",
            ns,
            "--as",
            &user,
            "-p",
            &patch,
        ])
        .await;
        wait_for("the operator decided again", T, || async {
            (reads() > before).then_some(())
        })
        .await;
    }
    let s = status(ns, "pinned").await;
    assert_eq!(condition(&s, "RBACReady")["reason"], "NotApproved", "{s}");
    // The searches for what was generated for it (by its uid, within its namespace:
    // a StarlarkController is never granted anything outside it): one when it was
    // granted, one when it stopped; none for the refusals after, and none cluster-wide.
    let searches = |resource: &str| {
        audit_events(&uid)
            .iter()
            .filter(|e| {
                e["verb"] == "list"
                    && e["objectRef"]["resource"] == resource
                    && e["stage"] == "ResponseComplete"
            })
            .count()
    };
    let within = searches("rolebindings");
    assert!(
        (1..=2).contains(&within),
        "{within} searches in {ns} for the objects of {uid}"
    );
    assert_eq!(
        searches("clusterrolebindings"),
        0,
        "a StarlarkController's objects are searched for only in its namespace"
    );
}
