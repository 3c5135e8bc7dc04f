//! The adversarial suite of issue 26: a namespace author (a user who may create
//! StarlarkControllers in one namespace and little else) attacks `kite operator` the
//! way a tenant would. Each test asserts the refusal and that nothing leaked: not into
//! the status, not into events.

use std::time::{Duration, Instant};

use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

const T: Duration = Duration::from_secs(30);

pub(crate) const CEILING: &str = r#"[
  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

pub(crate) fn slc(ns: &str, name: &str, spec: Json) -> Json {
    json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// A tenant: may manage StarlarkControllers in `ns` and read Deployments there.
pub(crate) async fn tenant(ns: &str) -> String {
    let user = format!("tenant-{ns}");
    grant(
        ns,
        &user,
        "tenant",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch", "list"]},
        ]),
    )
    .await;
    user
}

/// `kubectl create` of `obj` as the tenant `user` (create, not apply: apply would copy
/// a large script into the last-applied annotation, which the API server caps).
async fn create_as(user: &str, obj: &Json) -> std::process::Output {
    author_sends("create", user, obj).await
}

/// The status and every event of `name`, as text: where a leak would show.
async fn visible(ns: &str, name: &str) -> String {
    let status = status(ns, name).await;
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ])
    .await;
    format!("{status}\n{events}")
}

/// Waits until condition `type_` of `name` has `reason`; the status and its message.
pub(crate) async fn reason_becomes(
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> (Json, String) {
    let s = wait_for(&format!("{name}: {type_} {reason}"), T, || async {
        let s = status(ns, name).await;
        (condition(&s, type_)["reason"] == reason).then_some(s)
    })
    .await;
    let m = condition(&s, type_)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (s, m)
}

/// The secret a tenant is after: the admin's token, first line of the cluster's
/// token file (group system:masters).
fn admin_token() -> String {
    let tokens = std::fs::read_to_string(cluster_dir().join("tokens.csv")).unwrap();
    let first = tokens.lines().next().unwrap_or_default();
    first.split(',').next().unwrap_or_default().to_owned()
}

/// Class 1: the file-reading builtins, and ways to hide them, do not exist for a hosted
/// script; the message names the line, and no file's content reaches the tenant.
#[tokio::test]
async fn a_hosted_script_reads_no_file_of_the_operator() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-files").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;
    let token = admin_token();
    assert!(token.len() > 10);

    // The attack as reported, and its variants: other file readers, other ways to
    // name them.
    let attacks = [
        (
            "testing",
            "def grab():\n    k8s.testing.controller(\".cluster/tokens.csv\", cluster = k8s.fake())\n\ndef reconcile(d):\n    r = retry.do(grab, max_attempts = 1)\n    fail(str(r))\n\nk8s.control(\"deployments\", reconcile = reconcile)\n",
            "testing.star:2:5: k8s.testing is not available in kite operator",
        ),
        (
            "fixtures",
            "def reconcile(d):\n    k8s.fake(files = [\".cluster/tokens.csv\"])\n\nk8s.control(\"deployments\", reconcile = reconcile)\n",
            "fixtures.star:2:5: k8s.fake is not available in kite operator",
        ),
        (
            "yamlfile",
            "def reconcile(d):\n    fail(str(yaml.file(\"/var/run/secrets/kubernetes.io/serviceaccount/token\").decode()))\n\nk8s.control(\"deployments\", reconcile = reconcile)\n",
            "yamlfile.star:2:14: yaml.file is not available in kite operator",
        ),
        (
            "fsread",
            "def reconcile(d):\n    fail(read_text(\".cluster/tokens.csv\"))\n\nk8s.control(\"deployments\", reconcile = reconcile)\n",
            "fsread.star:2:10: read_text is not available in kite operator",
        ),
        (
            "getattr",
            "def reconcile(d):\n    t = getattr(k8s, \"test\" + \"ing\")\n    t.controller(\".cluster/tokens.csv\", cluster = None)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n",
            "getattr.star:2:17: k8s is used as a value",
        ),
    ];
    for (name, script, why) in attacks {
        let out = apply_as(&user, &slc(ns, name, json!({"script": script}))).await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = wait_for(&format!("{name} refused"), T, || async {
            let s = status(ns, name).await;
            (condition(&s, "Ready")["status"] == "False").then_some(s)
        })
        .await;
        let valid = condition(&s, "ScriptValid");
        assert_eq!(valid["status"], "False", "{name}: {s}");
        assert!(
            valid["message"].as_str().unwrap_or_default().contains(why),
            "{name}: {why:?} not in {s}"
        );
        let shown = visible(ns, name).await;
        assert!(!shown.contains(&token), "{name}: the admin's token leaked");
        let uid = jsonpath("slc", name, ns, "{.metadata.uid}").await;
        assert_eq!(generated_for(&uid).await, "", "{name}: nothing granted");
    }
}

/// Class 2: a name chosen to collide with another resource's generated identity gets
/// its own; and an identity object that another resource owns is never written over.
#[tokio::test]
async fn generated_identities_cannot_be_taken_over() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-names").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;

    let long = format!("victim-{}", "x".repeat(60));
    apply_slc(ns, &long, max_replicas_spec(ns, "3")).await;
    let s = wait_condition(ns, &long, "Ready", "True", T).await;
    let victim_sa = s["serviceAccount"].as_str().unwrap().to_owned();
    assert!(victim_sa.len() <= 63, "{victim_sa}");
    let victim_rules = jsonpath("role", &victim_sa, ns, "{.rules}").await;

    // The attacker names theirs after the victim's generated name.
    let imitation = victim_sa.trim_start_matches("starkite-").to_owned();
    let script =
        "def reconcile(d):\n    pass\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let out = apply_as(&user, &slc(ns, &imitation, json!({"script": script}))).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = wait_condition(ns, &imitation, "Ready", "True", T).await;
    let own = s["serviceAccount"].as_str().unwrap();
    assert_ne!(own, victim_sa, "the imitation got its own identity");
    assert_eq!(
        jsonpath("role", &victim_sa, ns, "{.rules}").await,
        victim_rules,
        "the victim's Role is untouched"
    );
    let victim_uid = jsonpath("slc", &long, ns, "{.metadata.uid}").await;
    assert_eq!(
        jsonpath(
            "role",
            &victim_sa,
            ns,
            "{.metadata.labels.starkite\\.io/owner-uid}"
        )
        .await,
        victim_uid
    );

    // An object already holds a resource's generated name (planted by a tenant who may
    // create ServiceAccounts, or left over): the operator refuses to write over it and
    // says so. The resource is suspended until the name is known.
    let mut spec = json!({"script": script, "suspend": true});
    let out = apply_as(&user, &slc(ns, "planted", spec.clone())).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(ns, "planted", "Ready", "False", T).await;
    let name = generated_name(ns, "planted").await;
    kubectl_ok(&["create", "serviceaccount", &name, "-n", ns]).await;
    spec["suspend"] = json!(false);
    let out = apply_as(&user, &slc(ns, "planted", spec)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (s, m) = reason_becomes(ns, "planted", "RBACReady", "IdentityConflict").await;
    assert!(
        m.contains(&format!(
            "ServiceAccount {name} already exists and belongs to nothing kite generated"
        )),
        "{m}"
    );
    assert_eq!(condition(&s, "Ready")["status"], "False");
    let planted = kubectl_ok(&["get", "serviceaccount", &name, "-n", ns, "-o", "json"]).await;
    assert!(
        !planted.contains("starkite.io/owner-uid") && !planted.contains("ownerReferences"),
        "written over: {planted}"
    );
    let victim = status(ns, &long).await;
    assert_eq!(
        condition(&victim, "Ready")["status"],
        "True",
        "the victim runs on"
    );
}

/// Class 3: huge scripts are refused at admission with their size, and while an author
/// sends the largest accepted ones, the probes answer and a neighbour is admitted.
#[tokio::test]
async fn huge_scripts_stall_nothing() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-huge").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let op = Operator::start(ns, &ceiling).await;

    let calls = |bytes: usize| {
        let mut s = String::from("def reconcile(d):\n");
        let mut i = 0;
        while s.len() < bytes {
            s.push_str(&format!("    k8s.get(x{}, \"n\")\n", i % 50));
            i += 1;
        }
        s + "k8s.control(\"deployments\", reconcile = reconcile)\n"
    };
    let over = calls(300 << 10);
    let out = create_as(&user, &slc(ns, "over", json!({"script": over}))).await;
    refused(
        &out,
        &[
            &format!("the script is {} bytes", over.len()),
            "at most 262144 bytes",
        ],
    );

    // Four of the largest scripts the operator hosts, all at once.
    let big = calls(250 << 10);
    let mut senders = Vec::new();
    for i in 0..4 {
        let obj = slc(ns, &format!("big-{i}"), json!({"script": big}));
        let user = user.clone();
        senders.push(tokio::spawn(async move { create_as(&user, &obj).await }));
    }
    let healthz = format!("http://127.0.0.1:{}/healthz", op.port);
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    let neighbour = tokio::spawn({
        let obj = slc(ns, "neighbour", max_replicas_spec(ns, "3"));
        async move {
            let t = Instant::now();
            let out = kubectl_stdin(&["create", "-f", "-"], &obj.to_string()).await;
            (out, t.elapsed())
        }
    });
    while !senders.iter().all(tokio::task::JoinHandle::is_finished) {
        let t = Instant::now();
        let ok = curl(&healthz).await.is_some();
        slowest = slowest.max(t.elapsed());
        assert!(ok, "/healthz did not answer");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the sends never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (out, took) = neighbour.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("healthz slowest {slowest:?}; neighbour admitted in {took:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the neighbour waited {took:?}"
    );
    for s in senders {
        let out = s.await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wait_condition(ns, "neighbour", "Ready", "True", T).await;
}

/// Classes 4 and 7: a script from a ConfigMap the author may not read is refused
/// whatever it holds (and nothing of it is quoted); an approved ConfigMap's content is
/// pinned, so a later edit runs only once re-approved; a relabel by someone whose rights
/// do not cover the controller keeps the author.
#[tokio::test]
async fn scripts_from_configmaps_run_only_as_approved() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-from").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    // The tenant may read and edit one ConfigMap, "mine".
    grant(
        ns,
        &user,
        "mine",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get", "update", "patch"]}]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;

    // Not theirs: refused, and its content is not quoted.
    kubectl_ok(&[
        "create",
        "configmap",
        "theirs",
        "-n",
        ns,
        "--from-literal=ctrl.star=TOPSECRET not a script",
    ])
    .await;
    let from =
        |cm: &str| json!({"scriptFrom": {"configMapKeyRef": {"name": cm, "key": "ctrl.star"}}});
    let out = apply_as(&user, &slc(ns, "peek", from("theirs"))).await;
    let err = refused(&out, &["may not get configmaps"]);
    assert!(!err.contains("TOPSECRET"), "{err}");
    // Nor when it holds a script that would run: the refusal names the ConfigMap, not
    // what its script calls.
    let hidden = "def reconcile(d):\n    k8s.get(\"secret\", \"db-TOPSECRET\", namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "theirs-script", "namespace": ns}, "data": {"ctrl.star": hidden}});
    let out = kubectl_stdin(&["apply", "-f", "-"], &cm.to_string()).await;
    assert!(out.status.success());
    let out = apply_as(&user, &slc(ns, "peek2", from("theirs-script"))).await;
    let err = refused(&out, &["may not get configmaps named theirs-script"]);
    assert!(
        !err.contains("TOPSECRET") && !err.contains("secrets") && !err.contains(".star:"),
        "{err}"
    );

    // Theirs to read: runs, signed by them.
    let reader = "def reconcile(d):\n    k8s.get(\"deployment\", d.metadata.name, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "mine", "namespace": ns}, "data": {"ctrl.star": reader}});
    let out = kubectl_stdin(&["apply", "-f", "-"], &cm.to_string()).await;
    assert!(out.status.success());
    let out = apply_as(&user, &slc(ns, "pinned", from("mine"))).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(ns, "pinned", "Ready", "True", T).await;
    let approval = || {
        jsonpath(
            "slc",
            "pinned",
            ns,
            "{.metadata.annotations.starkite\\.io/approval}",
        )
    };
    let signed = approval().await;

    // Someone who may only patch StarlarkControllers relabels it: the author stays.
    let relabeller = format!("relabeller-{ns}");
    grant(
        ns,
        &relabeller,
        "relabel",
        json!([{"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["get", "patch"]}]),
    )
    .await;
    let out = kubectl(&[
        "label",
        "slc",
        "pinned",
        "-n",
        ns,
        "team=x",
        "--as",
        &relabeller,
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        approval().await,
        signed,
        "the relabel kept the tenant's approval"
    );

    // The tenant swaps the ConfigMap's content for a script that needs more: it does
    // not run until someone whose rights cover it approves it again.
    let writer = "def reconcile(d):\n    k8s.patch(\"deployment\", d.metadata.name, {\"spec\": {\"replicas\": 0}}, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let patch = json!({"data": {"ctrl.star": writer}}).to_string();
    let out = kubectl(&[
        "patch",
        "configmap",
        "mine",
        "-n",
        ns,
        "--type=merge",
        "-p",
        &patch,
        "--as",
        &user,
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (s, m) = reason_becomes(ns, "pinned", "RBACReady", "NotApproved").await;
    assert_eq!(condition(&s, "Ready")["reason"], "RBACDenied");
    assert!(
        m.contains(&format!(
            "ConfigMap {ns}/mine changed since it was approved"
        )),
        "{m}"
    );
    assert!(
        m.contains("kubectl annotate starlarkcontroller pinned"),
        "{m}"
    );
    // The tenant's own re-review is refused: the new script needs what they lack.
    let out = kubectl(&[
        "annotate",
        "slc",
        "pinned",
        "-n",
        ns,
        "starkite.io/approval=review",
        "--overwrite",
        "--as",
        &user,
    ])
    .await;
    assert!(
        out.status.success(),
        "the annotate is let through unchanged"
    );
    assert_eq!(
        approval().await,
        signed,
        "the tenant's review did not re-sign it"
    );
    let s = status(ns, "pinned").await;
    assert_eq!(condition(&s, "RBACReady")["reason"], "NotApproved", "{s}");
    // Nothing runs it: what runs nothing holds no permissions.
    let uid = jsonpath("slc", "pinned", ns, "{.metadata.uid}").await;
    wait_until("the identity removed", T, || async {
        generated_for(&uid).await.is_empty()
    })
    .await;
    // The administrator reviews it: it runs again, now with their approval.
    kubectl_ok(&[
        "annotate",
        "slc",
        "pinned",
        "-n",
        ns,
        "starkite.io/approval=review",
        "--overwrite",
    ])
    .await;
    wait_condition(ns, "pinned", "Ready", "True", T).await;
    assert_ne!(approval().await, signed);
}

/// `curl` of `url` with `token` (if any): the status code and the body.
async fn scrape(url: &str, token: Option<&str>) -> (String, String) {
    let mut args: Vec<String> = ["-s", "-m", "5", "-w", "\n%{http_code}", url]
        .map(str::to_owned)
        .to_vec();
    if let Some(t) = token {
        args.extend(["-H".to_owned(), format!("Authorization: Bearer {t}")]);
    }
    let out = tokio::process::Command::new("curl")
        .args(&args)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

/// Class 8: /metrics (which names every tenant's controllers) answers only a token the
/// API server authenticates and allows to get /metrics; the probes stay open.
#[tokio::test]
async fn metrics_need_an_authorised_token() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-metrics").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(CEILING).await;
    let op = Operator::start_with(ns, &ceiling, &["--namespace", ns, "--secure-metrics"]).await;
    let url = format!("http://127.0.0.1:{}/metrics", op.port);
    let (code, body) = scrape(&url, None).await;
    assert_eq!(code, "401", "{body}");
    assert!(!body.contains("kite_"), "{body}");
    let kc = std::fs::read_to_string(unprivileged_kubeconfig()).unwrap();
    let unprivileged = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .to_owned();
    let (code, body) = scrape(&url, Some(&unprivileged)).await;
    assert_eq!(code, "403", "{body}");
    assert!(
        body.contains("kite-unprivileged may not get /metrics"),
        "{body}"
    );
    let (code, body) = scrape(&url, Some("not-a-token")).await;
    assert_eq!(code, "401", "{body}");
    let (code, body) = scrape(&url, Some(&admin_token())).await;
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("kite_operator_controllers"), "{body}");
    let (code, _) = scrape(&format!("http://127.0.0.1:{}/healthz", op.port), None).await;
    assert_eq!(code, "200", "probes stay open");
}

/// Class 8: the webhook port answers only on its secret path, which only the API server
/// (and whoever may read the webhook configuration) knows: a forged review asking about
/// another namespace's ConfigMap, claiming to be an administrator, learns nothing.
#[tokio::test]
async fn an_unauthenticated_peer_learns_nothing_from_the_webhook() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-hook").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(CEILING).await;
    let mut op = Operator::start(ns, &ceiling).await;
    let line = op
        .kite
        .wait_stderr_line("serving the admission webhook", T)
        .await;
    let port = line
        .split("bound=")
        .nth(1)
        .and_then(|b| b.split_whitespace().next())
        .and_then(|b| b.rsplit(':').next())
        .map(|p| p.trim_matches(|c: char| !c.is_ascii_digit()).to_owned())
        .unwrap_or_else(|| panic!("no bound address in {line}"));
    let forged = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "1", "kind": {"group": "starkite.io", "version": "v1alpha1", "kind": "StarlarkController"},
            "resource": {"group": "starkite.io", "version": "v1alpha1", "resource": "starlarkcontrollers"},
            "namespace": "kube-system", "operation": "CREATE",
            "userInfo": {"username": "kite-admin", "groups": ["system:masters"]},
            "object": {"apiVersion": "starkite.io/v1alpha1", "kind": "StarlarkController",
                "metadata": {"name": "x", "namespace": "kube-system"},
                "spec": {"scriptFrom": {"configMapKeyRef": {"name": "kube-proxy", "key": "config.conf"}}}},
        },
    });
    let path = std::env::temp_dir().join(format!("{ns}-forged.json"));
    std::fs::write(&path, forged.to_string()).unwrap();
    for url_path in ["/approve", "/approve/00000000000000000000000000000000"] {
        let out = tokio::process::Command::new("curl")
            .args([
                "-s",
                "-k",
                "-m",
                "5",
                "-w",
                "\n%{http_code}",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &format!("@{}", path.display()),
                &format!("https://127.0.0.1:{port}{url_path}"),
            ])
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.ends_with("\n404"), "{url_path}: {text}");
        assert!(
            !text.contains("approval") && !text.contains("patch"),
            "{text}"
        );
    }
    let _ = std::fs::remove_file(path);
    // The API server knows the path: reviews go on.
    apply_slc(ns, "fine", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "fine", "Ready", "True", T).await;
}

/// Class 8: an author that is a ServiceAccount, deleted since it approved a controller,
/// no longer vouches for it: the next decision (here, after a restart; while running,
/// the 5-minute recheck) stops it and removes its grants. RBAC alone would still say
/// "yes": the author's RoleBinding outlives the account.
#[tokio::test]
async fn a_deleted_serviceaccount_author_stops_its_controller() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-gone").await;
    let ns = ns.name.as_str();
    kubectl_ok(&["create", "serviceaccount", "deployer", "-n", ns]).await;
    let author = format!("system:serviceaccount:{ns}:deployer");
    grant(
        ns,
        &author,
        "deployer",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
        ]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let mut first = Operator::start(ns, &ceiling).await;
    let obj = slc(ns, "deployed", max_replicas_spec(ns, "3"));
    let out = kubectl_stdin(&["apply", "--as", &author, "-f", "-"], &obj.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(ns, "deployed", "Ready", "True", T).await;
    kubectl_ok(&["delete", "serviceaccount", "deployer", "-n", ns]).await;
    first.kite.kill();
    let _second = Operator::start(ns, &ceiling).await;
    let (_, m) = reason_becomes(ns, "deployed", "RBACReady", "AuthorGone").await;
    assert!(
        m.contains(&format!(
            "the author, ServiceAccount {ns}/deployer, no longer exists"
        )),
        "{m}"
    );
    let uid = jsonpath("slc", "deployed", ns, "{.metadata.uid}").await;
    wait_until("its grants removed", T, || async {
        generated_for(&uid).await.is_empty()
    })
    .await;
}
