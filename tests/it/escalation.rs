//! No author can escalate through `kite operator`: its admission webhook refuses a
//! StarlarkController or ClusterStarlarkController that would be granted anything its
//! author could not do, the operator runs only what its webhook approved, and the
//! audit log shows no request by a generated ServiceAccount that its author could not
//! have made. Authors are impersonated by the admin (`kubectl --as`), which the API
//! server reports to the webhook exactly as a user with a token.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

const T: Duration = Duration::from_secs(30);

/// Enough that only the author can be what refuses.
const WIDE_CEILING: &str = r#"[
  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["configmaps", "secrets", "nodes"], "verbs": ["get", "list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

/// `kubectl apply` of `obj` with the kite-unprivileged user's own token.
async fn apply_as_b(obj: &Json) -> std::process::Output {
    let kubeconfig = unprivileged_kubeconfig();
    let path = kubeconfig.to_string_lossy();
    kubectl_stdin(
        &["--kubeconfig", &path, "apply", "-f", "-"],
        &obj.to_string(),
    )
    .await
}

fn slc(ns: &str, name: &str, label: &str, spec: Json) -> Json {
    json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": name, "namespace": ns, "labels": {"starkite.io/test": label}},
        "spec": spec,
    })
}

fn cslc(name: &str, label: &str, spec: Json) -> Json {
    json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "ClusterStarlarkController",
        "metadata": {"name": name, "labels": {"starkite.io/test": label}},
        "spec": spec,
    })
}

#[tokio::test]
async fn an_author_cannot_make_the_operator_do_what_they_could_not() {
    install_starlarkcontroller_crd().await;
    let a = TestNamespace::new("esc-a").await;
    let b = TestNamespace::new("esc-b").await;
    let (ns_a, ns_b) = (a.name.as_str(), b.name.as_str());
    let label = ns_a;
    let author_a = format!("team-a-author-{ns_a}");
    // team-b's author is a real user with a token (the test cluster's
    // kite-unprivileged): the webhook sees them exactly as the impersonated ones.
    let author_b = "kite-unprivileged".to_owned();
    let cluster_author = format!("cluster-author-{ns_a}");
    // team-a's author may author controllers in team-a and edit Deployments there.
    grant(
        ns_a,
        &author_a,
        "author",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
        ]),
    )
    .await;
    // team-b's author may author controllers in team-b only.
    grant(
        ns_b,
        &author_b,
        "author",
        json!([{"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]}]),
    )
    .await;
    // Someone who may create ClusterStarlarkControllers, but holds little else.
    let cluster_role = unique_name("esc-cluster-author");
    let cr = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": cluster_role},
        "rules": [{"apiGroups": ["starkite.io"], "resources": ["clusterstarlarkcontrollers"], "verbs": ["*"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]});
    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": cluster_role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cluster_author}]});
    for obj in [&cr, &crb] {
        let out = kubectl_stdin(&["apply", "-f", "-"], &obj.to_string()).await;
        assert!(out.status.success());
    }
    // A powerful account in team-a that the author may not act as.
    kubectl_ok(&["create", "serviceaccount", "powerful", "-n", ns_a]).await;

    let ceiling = Ceiling::new(WIDE_CEILING).await;
    let selector = format!("starkite.io/test={label}");
    let op = Operator::start_with(
        ns_a,
        &ceiling,
        &["--selector", &selector, "--operator-namespace", ns_a],
    )
    .await;

    // Within their rights: approved, stamped with the author, and it works.
    let ok = slc(ns_a, "ok", label, max_replicas_spec(ns_a, "3"));
    let out = apply_as(&author_a, &ok).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let annotation = jsonpath(
        "slc",
        "ok",
        ns_a,
        "{.metadata.annotations.starkite\\.io/approval}",
    )
    .await;
    assert!(!annotation.is_empty(), "the webhook stamped its approval");
    wait_condition(ns_a, "ok", "Ready", "True", T).await;
    create_enforced_deployment(ns_a, "web", 5).await;
    replicas_become(ns_a, "web", "3").await;

    // A permission the author lacks in their own namespace: refused, naming rule and line.
    let secrets = "def reconcile(d):\n    k8s.list(\"secrets\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let out = apply_as(
        &author_a,
        &slc(ns_a, "secrets", label, json!({"script": secrets})),
    )
    .await;
    refused(
        &out,
        &[
            &author_a,
            &format!("may not list secrets in namespace {ns_a}"),
            "secrets.star:2:5",
        ],
    );

    // Outside the operator's --selector nothing is reviewed; labelling it into scope is.
    let mut sneak = slc(ns_a, "sneak", label, json!({"script": secrets}));
    sneak["metadata"]["labels"] = json!({});
    let out = apply_as(&author_a, &sneak).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(&[
        "label",
        "slc",
        "sneak",
        "-n",
        ns_a,
        &format!("starkite.io/test={label}"),
        "--as",
        &author_a,
        "--as-group",
        "kite:authors",
    ])
    .await;
    refused(
        &out,
        &[&format!("may not list secrets in namespace {ns_a}")],
    );

    // An existing, more privileged ServiceAccount: the author may not impersonate it.
    let spec = json!({"script": MAX_REPLICAS, "serviceAccountName": "powerful"});
    let out = apply_as(&author_a, &slc(ns_a, "borrowed", label, spec)).await;
    refused(
        &out,
        &[&format!(
            "may not impersonate serviceaccounts named powerful in namespace {ns_a}, which spec.serviceAccountName needs"
        )],
    );

    // Another namespace: team-b's author cannot place one in team-a (RBAC), and team-a's
    // script reaching into team-b is granted nothing.
    let out = apply_as_b(&slc(ns_a, "intruder", label, max_replicas_spec(ns_a, "3"))).await;
    refused(&out, &["forbidden"]);
    // The first report's exploit: watch and patch in kube-system from team-b.
    let exploit = "def reconcile(d):\n    k8s.patch(\"configmap\", \"victim\", {\"data\": {\"x\": \"1\"}}, namespace = \"kube-system\")\n\nk8s.control(\"deployments\", namespace = \"kube-system\", reconcile = reconcile)\n";
    let out = apply_as_b(&slc(ns_b, "exploit", label, json!({"script": exploit}))).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = wait_condition(ns_b, "exploit", "RBACReady", "False", T).await;
    assert_eq!(
        condition(&s, "RBACReady")["reason"],
        "OutsideNamespace",
        "{s}"
    );
    let uid = jsonpath("slc", "exploit", ns_b, "{.metadata.uid}").await;
    assert_eq!(generated_for(&uid).await, "", "nothing granted anywhere");
    // Within their namespace but beyond their rights: they may not touch Deployments.
    let out = apply_as_b(&slc(ns_b, "mine", label, max_replicas_spec(ns_b, "3"))).await;
    refused(
        &out,
        &[
            "kite-unprivileged may not ",
            &format!("in namespace {ns_b}, which mine.star:31:1"),
        ],
    );
    let escape = format!(
        "def reconcile(d):\n    k8s.patch(\"configmap\", \"victim\", {{\"data\": {{\"x\": \"1\"}}}}, namespace = \"{ns_b}\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n"
    );
    let out = apply_as(
        &author_a,
        &slc(ns_a, "escape", label, json!({"script": escape})),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = wait_condition(ns_a, "escape", "RBACReady", "False", T).await;
    assert_eq!(condition(&s, "RBACReady")["reason"], "OutsideNamespace");
    assert!(
        condition(&s, "RBACReady")["message"]
            .as_str()
            .is_some_and(|m| m.contains("escape.star:2:5")),
        "{s}"
    );

    // A computed kind: never run, since nobody can say what it would need.
    let computed = "def reconcile(d):\n    k8s.get(d.metadata.labels.kind, \"x\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let out = apply_as(
        &author_a,
        &slc(ns_a, "computed", label, json!({"script": computed})),
    )
    .await;
    assert!(out.status.success());
    let s = wait_condition(ns_a, "computed", "ScriptValid", "False", T).await;
    assert_eq!(condition(&s, "ScriptValid")["reason"], "NotInferable");

    // Cluster-wide: team-a's author may not create a ClusterStarlarkController at all;
    // one who may is still held to their own rights, for a cluster-wide watch and for
    // a cluster-scoped kind.
    let wide = cslc(
        &format!("{ns_a}-wide"),
        label,
        json!({"script": MAX_REPLICAS, "vars": {"max_replicas": "3"},
               "control": {"labels": format!("esc-test={ns_a}")}}),
    );
    refused(&apply_as(&author_a, &wide).await, &["forbidden"]);
    let out = apply_as(&cluster_author, &wide).await;
    refused(
        &out,
        &[
            &cluster_author,
            "deployments (apps) cluster-wide",
            &format!("{ns_a}-wide.star:"),
        ],
    );
    let nodes = cslc(
        &format!("{ns_a}-nodes"),
        label,
        json!({"script": "def reconcile(n):\n    pass\n\nk8s.control(\"nodes\", reconcile = reconcile)\n"}),
    );
    refused(
        &apply_as(&cluster_author, &nodes).await,
        &["may not list nodes cluster-wide", ".star:4:1"],
    );
    // The admin may: it runs.
    let out = kubectl_stdin(&["apply", "-f", "-"], &wide.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wide_name = format!("{ns_a}-wide");
    wait_until("the admin's ClusterStarlarkController Ready", T, || async {
        let out = kubectl(&["get", "cslc", &wide_name, "-o", "json"]).await;
        serde_json::from_slice::<Json>(&out.stdout)
            .map(|o| condition(&o["status"], "Ready")["status"] == "True")
            .unwrap_or(false)
    })
    .await;
    kubectl_ok(&["delete", "cslc", &wide_name, "--timeout=30s"]).await;

    // The audit log: every request the generated account made, its author could make.
    let sa = format!(
        "system:serviceaccount:{ns_a}:{}",
        generated_name(ns_a, "ok").await
    );
    let made = wait_for("the controller's requests in the audit log", T, || async {
        let made = requests_by(&sa);
        made.iter()
            .any(|r| r.starts_with("patch deployments.apps"))
            .then_some(made)
    })
    .await;
    for request in &made {
        let mut args: Vec<&str> = vec!["auth", "can-i"];
        args.extend(request.split(' '));
        args.extend(["--as", &author_a, "--as-group", "kite:authors"]);
        let out = kubectl(&args).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "yes",
            "{sa} made a request its author could not: {request}"
        );
    }
    drop(op);
    let _ = kubectl(&["delete", "clusterrole,clusterrolebinding", &cluster_role]).await;
}

/// The distinct requests `user` made (as impersonated by the operator), as
/// `kubectl auth can-i` arguments: `VERB RESOURCE[.GROUP][/NAME] [--subresource=SUB] -n NS`.
fn requests_by(user: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in audit_events(user) {
        let who = e["impersonatedUser"]["username"]
            .as_str()
            .or(e["user"]["username"].as_str());
        if who != Some(user) || e["stage"] != "ResponseComplete" {
            continue;
        }
        let o = &e["objectRef"];
        let Some(resource) = o["resource"].as_str() else {
            continue;
        };
        let verb = e["verb"].as_str().unwrap_or("");
        let mut what = resource.to_owned();
        if let Some(g) = o["apiGroup"].as_str().filter(|g| !g.is_empty()) {
            what += &format!(".{g}");
        }
        // A create is authorized without the name it will have.
        if let Some(name) = o["name"].as_str().filter(|_| verb != "create") {
            what += &format!("/{name}");
        }
        let mut line = format!("{verb} {what}");
        if let Some(sub) = o["subresource"].as_str() {
            line += &format!(" --subresource={sub}");
        }
        match o["namespace"].as_str() {
            Some(ns) => line += &format!(" -n {ns}"),
            None => line += " --all-namespaces",
        }
        out.insert(line);
    }
    out
}

#[tokio::test]
async fn only_what_the_webhook_approved_runs() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("esc-forged").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let mut op = Operator::start(ns, &ceiling).await;
    apply_slc(ns, "approved", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "approved", "Ready", "True", T).await;
    let stamp = jsonpath(
        "slc",
        "approved",
        ns,
        "{.metadata.annotations.starkite\\.io/approval}",
    )
    .await;
    assert!(!stamp.is_empty());

    // Without the operator and its webhook configuration, the API server takes anything:
    // an approval copied from another resource, or none at all.
    op.kite.kill();
    kubectl_ok(&["delete", "mutatingwebhookconfiguration", &op.webhook.0]).await;
    let forged = json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": "forged", "namespace": ns, "annotations": {"starkite.io/approval": stamp}},
        "spec": max_replicas_spec(ns, "3"),
    });
    let out = kubectl_stdin(&["apply", "-f", "-"], &forged.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    apply_slc(ns, "unreviewed", max_replicas_spec(ns, "3")).await;

    let _again = Operator::start(ns, &ceiling).await;
    for name in ["forged", "unreviewed"] {
        let s = wait_condition(ns, name, "RBACReady", "False", T).await;
        assert_eq!(condition(&s, "RBACReady")["reason"], "NotApproved", "{s}");
        assert_eq!(condition(&s, "Ready")["status"], "False");
    }
    let uid = jsonpath("slc", "forged", ns, "{.metadata.uid}").await;
    assert_eq!(
        generated_for(&uid).await,
        "",
        "nothing is granted to what was not approved"
    );
    // What was approved before still runs.
    let s = wait_condition(ns, "approved", "Ready", "True", T).await;
    assert_eq!(s["phase"], "Running");
    // Reviewed through the webhook now, the unreviewed one runs.
    kubectl_ok(&[
        "annotate",
        "slc",
        "unreviewed",
        "-n",
        ns,
        "starkite.io/approval=review",
        "--overwrite",
    ])
    .await;
    wait_condition(ns, "unreviewed", "Ready", "True", T).await;
}

#[tokio::test]
async fn with_the_webhook_unreachable_creates_are_refused_and_running_controllers_carry_on() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("esc-down").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    apply_slc(ns, "running", max_replicas_spec(ns, "3")).await;
    apply_slc(ns, "doomed", max_replicas_spec(ns, "4")).await;
    wait_condition(ns, "running", "Ready", "True", T).await;
    wait_condition(ns, "doomed", "Ready", "True", T).await;
    create_enforced_deployment(ns, "web", 5).await;
    // Two controllers' series, each metric's samples under its one header.
    let metrics = op.metrics().await;
    assert!(metrics.contains("/doomed\""), "{metrics}");
    assert_grouped_exposition(&metrics);

    let dead = format!("https://127.0.0.1:{}/approve", free_port());
    let url = || async {
        kubectl_ok(&[
            "get",
            "mutatingwebhookconfiguration",
            &op.webhook.0,
            "-o",
            "jsonpath={.webhooks[0].clientConfig.url}",
        ])
        .await
    };
    // The operator restores its configuration within its period; every step below
    // happens while it still points nowhere, or the round is tried again.
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(
            rounds <= 5,
            "the webhook never stayed unreachable long enough"
        );
        kubectl_ok(&[
            "patch",
            "mutatingwebhookconfiguration",
            &op.webhook.0,
            "--type=json",
            "-p",
            &format!(r#"[{{"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "{dead}"}}]"#),
        ])
        .await;
        let name = format!("new-{rounds}");
        let out = kubectl_stdin(
            &["apply", "-f", "-"],
            &json!({"apiVersion": "starkite.io/v1alpha1", "kind": "StarlarkController",
                "metadata": {"name": name, "namespace": ns}, "spec": max_replicas_spec(ns, "3")})
            .to_string(),
        )
        .await;
        if out.status.success() {
            continue; // restored before the create: try again
        }
        refused(&out, &["approval.starkite.io"]);
        // Running controllers correct drift; deleting one completes (its finalizer goes
        // without the webhook).
        drifted(ns, "web", "7").await;
        replicas_become(ns, "web", "3").await;
        kubectl_ok(&["delete", "slc", "doomed", "-n", ns, "--timeout=20s"]).await;
        if url().await == dead {
            break;
        }
        // Restored meanwhile: the steps above proved nothing; again.
        apply_slc(ns, "doomed", max_replicas_spec(ns, "4")).await;
        wait_condition(ns, "doomed", "Ready", "True", T).await;
    }
    // The operator puts its configuration back, and says so.
    wait_until("the configuration restored", T, || async {
        url().await != dead
    })
    .await;
    assert!(
        op.kite
            .stderr()
            .iter()
            .any(|l| l.contains("had changed; restored it")),
        "{:?}",
        op.kite.stderr()
    );
    apply_slc(ns, "after", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "after", "Ready", "True", T).await;
}
