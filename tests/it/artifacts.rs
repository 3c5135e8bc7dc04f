//! `kite kube gen-controller-artifacts` against the local cluster: the stream is valid,
//! and the inferred role is sufficient (the example's scenario runs under it with no 403),
//! minimal (every granted verb is used) and nothing more (other requests are refused).

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;
use serde_json::Value as Json;

/// A generated deployment of one script, applied without its Deployment, with a token
/// for its ServiceAccount.
struct Deployed {
    ns: TestNamespace,
    name: String,
    objects: Vec<Json>,
    token: String,
    kubeconfig: PathBuf,
}

impl Deployed {
    /// Generates the artifacts for `script`, checks them with a server-side dry run,
    /// applies everything but the Deployment, and mints a token.
    /// `ns_var` names a script variable that is set to the test namespace.
    async fn new(prefix: &str, script: &str, extra: &[&str], ns_var: Option<&str>) -> Self {
        let ns = TestNamespace::new(prefix).await;
        let name = unique_name(prefix);
        let var = ns_var.map(|v| format!("{v}={}", ns.name));
        let mut args = vec![
            "kube",
            "gen-controller-artifacts",
            "--controller",
            script,
            "--image",
            "registry.example/kite-test:v1",
            "--namespace",
            &ns.name,
            "--name",
            &name,
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        if let Some(v) = &var {
            args.extend(["--var", v.as_str()]);
        }
        let out = kite_output(&args, Duration::from_secs(60)).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "gen-controller-artifacts failed: {stderr}"
        );
        assert!(!stderr.contains("warning"), "unexpected warnings: {stderr}");
        let list: Json = serde_json::from_slice(&out.stdout).expect("a JSON List");
        let objects = list["items"].as_array().expect("items").clone();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"Namespace"), "{kinds:?}");
        assert_eq!(kinds.get(1), Some(&"ServiceAccount"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"Deployment"), "{kinds:?}");

        // 1. The whole stream passes the API server's validation and admission.
        let text = serde_json::to_string(&list).unwrap();
        let dry = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &text).await;
        assert!(
            dry.status.success(),
            "dry run: {}",
            String::from_utf8_lossy(&dry.stderr)
        );

        // 2. Everything but the Deployment; kite then runs here, as the ServiceAccount.
        let without: Vec<&Json> = objects
            .iter()
            .filter(|o| o["kind"] != "Deployment")
            .collect();
        let text = serde_json::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": without}),
        )
        .unwrap();
        let applied = kubectl_stdin(&["apply", "-f", "-"], &text).await;
        assert!(
            applied.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        // The API server's authorizer learns of new roles a moment later: wait until it
        // grants each rule, so that kite's first requests are not refused.
        let user = format!("system:serviceaccount:{}:{name}", ns.name);
        for role in objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        {
            let scope = role["metadata"]["namespace"].as_str().unwrap_or(&ns.name);
            for rule in role["rules"].as_array().into_iter().flatten() {
                let first = |field: &str| rule[field][0].as_str().unwrap_or_default().to_owned();
                let (verb, group) = (first("verbs"), first("apiGroups"));
                let mut resource = match (first("resources"), group.as_str()) {
                    (r, "") => r,
                    (r, g) => format!("{r}.{g}"),
                };
                let named = first("resourceNames");
                if !named.is_empty() {
                    resource = format!("{resource}/{named}");
                }
                let what = format!("{user} may {verb} {resource}");
                wait_until(&what, Duration::from_secs(10), || async {
                    kubectl(&[
                        "auth", "can-i", &verb, &resource, "-n", scope, "--as", &user,
                    ])
                    .await
                    .status
                    .success()
                })
                .await;
            }
        }
        let token =
            kubectl_ok(&["create", "token", &name, "-n", &ns.name, "--duration", "1h"]).await;
        let token = token.trim().to_owned();
        let kubeconfig = std::env::temp_dir().join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, token_kubeconfig(&token, &ns.name)).unwrap();
        Deployed {
            ns,
            name,
            objects,
            token,
            kubeconfig,
        }
    }

    /// The kinds of the generated objects, in stream order.
    fn kinds(&self) -> Vec<&str> {
        self.objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect()
    }

    fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.ns.name, self.name)
    }

    /// `kite run SCRIPT --allow-k8s` with the ServiceAccount's kubeconfig.
    fn run(&self, script: &str, extra: &[&str]) -> Kite {
        let kc = self.kubeconfig.display().to_string();
        let mut args = vec!["run", script, "--allow-k8s", "--kubeconfig", &kc];
        args.extend_from_slice(extra);
        Kite::spawn(&args)
    }

    /// (verb, group, resource) for every verb the generated roles grant.
    fn granted(&self) -> BTreeSet<(String, String, String)> {
        let mut out = BTreeSet::new();
        for o in self
            .objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        {
            for rule in o["rules"].as_array().unwrap() {
                for field in ["apiGroups", "resources", "verbs"] {
                    let values = rule[field].as_array().unwrap();
                    assert!(values.iter().all(|v| v != "*"), "a wildcard in {rule}");
                }
                for g in rule["apiGroups"].as_array().unwrap() {
                    for r in rule["resources"].as_array().unwrap() {
                        for v in rule["verbs"].as_array().unwrap() {
                            out.insert((s(v), s(g), s(r)));
                        }
                    }
                }
            }
        }
        out
    }

    /// (verb, group, resource) of the requests the API server allowed for this user.
    /// Server-side apply that creates an object is audited as a patch answered 201; the
    /// API server checked create for it too.
    fn used(&self) -> (BTreeSet<(String, String, String)>, Vec<Json>) {
        let user = self.user();
        let mut used = BTreeSet::new();
        let mut denied = Vec::new();
        for e in audit_events(&format!("\"{user}\"")) {
            if e["user"]["username"] != user.as_str() {
                continue;
            }
            let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
            // Refused by RBAC; a 403 that the authorizer allowed came from admission
            // (e.g. an Event into another test's terminating namespace).
            if e["annotations"]["authorization.k8s.io/decision"] == "forbid" {
                denied.push(e.clone());
                continue;
            }
            if code == 403 {
                continue;
            }
            let o = &e["objectRef"];
            let mut resource = s(&o["resource"]);
            if let Some(sub) = o["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            let verb = s(&e["verb"]);
            let group = s(&o["apiGroup"]);
            if verb == "patch" && code == 201 {
                used.insert(("create".to_owned(), group.clone(), resource.clone()));
            }
            used.insert((verb, group, resource));
        }
        (used, denied)
    }

    /// Asserts no request was refused, and that every granted verb was used except
    /// those in `unused`, each with the reason a short run cannot use it.
    /// `unused`: granted verbs this run cannot use, each with the reason. `maybe`: ones
    /// it uses only sometimes (e.g. after a conflict), with the reason.
    async fn assert_minimal_and_sufficient(
        &self,
        kite: &Kite,
        unused: &[(&str, &str, &str, &str)],
        maybe: &[(&str, &str, &str, &str)],
    ) {
        let granted = self.granted();
        let triples = |list: &[(&str, &str, &str, &str)]| -> BTreeSet<(String, String, String)> {
            list.iter()
                .map(|(v, g, r, _why)| ((*v).to_owned(), (*g).to_owned(), (*r).to_owned()))
                .collect()
        };
        let (strictly_unused, maybe) = (triples(unused), triples(maybe));
        for u in strictly_unused.iter().chain(&maybe) {
            assert!(
                granted.contains(u),
                "{u:?} is listed as unused but is not granted: {granted:?}"
            );
        }
        let expected_unused: BTreeSet<_> = strictly_unused.union(&maybe).cloned().collect();
        // The audit log is written asynchronously: wait until everything shows up.
        let missing = || {
            let (used, _) = self.used();
            granted
                .iter()
                .filter(|g| !used.contains(*g) && !expected_unused.contains(*g))
                .cloned()
                .collect::<Vec<_>>()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !missing().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let missing = missing();
        assert!(missing.is_empty(), "granted but never used: {missing:?}");
        let (used, denied) = self.used();
        assert!(denied.is_empty(), "requests refused with 403: {denied:#?}");
        for u in &strictly_unused {
            assert!(
                !used.contains(u),
                "{u:?} is listed as unused but was used: drop it from the list"
            );
        }
        // kite writes API errors as `<message> (<code>)`; a bare "403" could be a
        // duration or a timestamp.
        let log = [kite.stdout(), kite.stderr()].concat().join("\n");
        let denials: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("(403)") || l.to_lowercase().contains("forbidden"))
            .collect();
        assert!(
            denials.is_empty(),
            "kite's log shows a denial:\n{}",
            denials.join("\n")
        );
    }

    /// 4. A request the script does not contain is refused.
    async fn assert_refused(&self, args: &[&str]) {
        let mut with_token = vec!["--token", self.token.as_str()];
        with_token.extend_from_slice(args);
        let out = kubectl(&with_token).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("forbidden"),
            "{args:?} was not refused: {stderr}"
        );
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        // Cluster-scoped roles and Roles in other namespaces outlive the test namespace.
        for o in &self.objects {
            let kind = o["kind"].as_str().unwrap_or_default();
            let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
            let cluster = matches!(kind, "ClusterRole" | "ClusterRoleBinding");
            let elsewhere = matches!(kind, "Role" | "RoleBinding") && ns != self.ns.name;
            if cluster || elsewhere {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                let mut cmd = std::process::Command::new("kubectl");
                cmd.args([
                    "delete",
                    &kind.to_lowercase(),
                    name,
                    "--ignore-not-found",
                    "--wait=false",
                ]);
                if elsewhere {
                    cmd.args(["-n", ns]);
                }
                let _ = cmd
                    .env("KUBECONFIG", kubeconfig())
                    .stdout(std::process::Stdio::null())
                    .status();
            }
        }
    }
}

fn s(v: &Json) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// A kubeconfig for the local cluster that authenticates with `token`.
fn token_kubeconfig(token: &str, namespace: &str) -> String {
    let admin = std::fs::read_to_string(kubeconfig()).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap();
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority: "))
        .unwrap();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
         users:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: sa\n  context: {{cluster: local, user: sa, namespace: {namespace}}}\ncurrent-context: sa\n"
    )
}

#[tokio::test]
async fn max_replicas_runs_under_its_inferred_role() {
    // The example binds port 8081 and watches every namespace.
    let _cluster = exclusive().await;
    let d = Deployed::new(
        "art-maxrep",
        "examples/max-replicas-controller.star",
        &[],
        None,
    )
    .await;
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
    let mut kite = d.run("examples/max-replicas-controller.star", &[]);
    kite.wait_stdout("Starting max-replicas controller", Duration::from_secs(30))
        .await;
    let ns = &d.ns.name;
    create_enforced_deployment(ns, "web", 5).await;
    let replicas = || async { jsonpath("deployment", "web", ns, "{.spec.replicas}").await == "3" };
    wait_until("the drift corrected", Duration::from_secs(20), replicas).await;
    // A second identical drift: the event is aggregated (read, then its count patched).
    kubectl_ok(&["scale", "deployment", "web", "-n", ns, "--replicas=5"]).await;
    wait_until(
        "the count of the aggregated event is 2",
        Duration::from_secs(20),
        || async {
            let out = kubectl_ok(&[
                "get",
                "events",
                "-n",
                ns,
                "--field-selector",
                "reason=DriftCorrected",
                "-o",
                "jsonpath={.items[*].count}",
            ])
            .await;
            out.trim() == "2"
        },
    )
    .await;
    wait_until(
        "the drift corrected again",
        Duration::from_secs(20),
        replicas,
    )
    .await;
    d.assert_minimal_and_sufficient(&kite, &[], &[]).await;
    d.assert_refused(&["get", "secrets", "-n", ns]).await;
    d.assert_refused(&["delete", "deployment", "web", "-n", ns])
        .await;
    d.assert_refused(&["get", "deployment", "web", "-n", ns])
        .await;
}

#[tokio::test]
async fn pod_logger_runs_under_a_role_in_default() {
    let d = Deployed::new(
        "art-podlog",
        "examples/pod-logger-controller.star",
        &[],
        None,
    )
    .await;
    let roles: Vec<(&str, &str)> = d
        .objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().contains("Role"))
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [("Role", "default"), ("RoleBinding", "default")],
        "only a Role, in the namespace the script watches"
    );
    let mut kite = d.run("examples/pod-logger-controller.star", &[]);
    kite.wait_stdout("Starting pod logger controller", Duration::from_secs(30))
        .await;
    let pod = unique_name("art-pod");
    kubectl_ok(&[
        "run",
        &pod,
        "-n",
        "default",
        "--image=nginx",
        "--restart=Never",
    ])
    .await;
    kite.wait_stdout(&format!("Pod Name: {pod}"), Duration::from_secs(20))
        .await;
    kubectl_ok(&["delete", "pod", &pod, "-n", "default", "--wait=false"]).await;
    kite.wait_stdout(
        &format!("Event: DELETED | Pod Name: {pod}"),
        Duration::from_secs(60),
    )
    .await;
    let why = "the runtime's ReconcileFailed warning: this handler cannot fail";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["get", "pods", "-n", &d.ns.name]).await;
    d.assert_refused(&["delete", "pod", "anything", "-n", "default"])
        .await;
}

#[tokio::test]
async fn staticsite_operator_runs_under_its_inferred_role() {
    // The example binds port 8081 and watches StaticSites in every namespace.
    let _cluster = exclusive().await;
    install_staticsite_crd().await;
    let script = "examples/staticsite/staticsite-controller.star";
    let d = Deployed::new(
        "art-site",
        script,
        &["--crd", "examples/staticsite/crd.yaml"],
        None,
    )
    .await;
    let mut kite = d.run(script, &[]);
    let ns = &d.ns.name;
    let site = "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata:\n  name: blog\nspec:\n  replicas: 2\n";
    let out = kubectl_stdin(&["apply", "-n", ns, "-f", "-"], site).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the site Ready", Duration::from_secs(60), || async {
        jsonpath(
            "staticsite",
            "blog",
            ns,
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
        .await
            == "True"
    })
    .await;
    assert_eq!(
        jsonpath("service", "blog", ns, "{.metadata.name}").await,
        "blog"
    );
    // The children are watched where the Role lets them be: drift on a child is undone
    // at once (no poll), and the probe passes.
    wait_until("/readyz", Duration::from_secs(30), || async {
        support::operator::curl("http://127.0.0.1:8081/readyz")
            .await
            .is_some()
    })
    .await;
    // Twice: each correction records the same event ("applied Deployment/blog"), so the
    // second is aggregated into the first (get, patch).
    for _ in 0..2 {
        kubectl_ok(&["scale", "deployment", "blog", "-n", ns, "--replicas=5"]).await;
        wait_until("the child restored", Duration::from_secs(10), || async {
            jsonpath("deployment", "blog", ns, "{.spec.replicas}").await == "2"
        })
        .await;
    }
    kubectl_ok(&["delete", "staticsite", "blog", "-n", ns, "--timeout=60s"]).await;
    kite.wait_stdout(
        "Performing pre-deletion cleanup for blog",
        Duration::from_secs(5),
    )
    .await;
    let prune = "pruning: the seed's script always returns both children, so nothing is pruned";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("delete", "apps", "deployments", prune),
            ("delete", "", "services", prune),
        ],
        &[(
            "get",
            "tutorial.starkite.io",
            "staticsites",
            "re-reading the parent: only after a Ready write conflicts with another writer",
        )],
    )
    .await;
    d.assert_refused(&["get", "secrets", "-n", ns]).await;
    d.assert_refused(&["create", "configmap", "x", "-n", ns])
        .await;
}

#[tokio::test]
async fn leader_elected_controller_runs_under_its_inferred_role() {
    let script = "tests/scripts/artifacts/leader-labeller.star";
    // The namespace is chosen with --var, so the whole role is a Role there.
    let d = Deployed::new("art-leader", script, &[], Some("ns")).await;
    let ns = d.ns.name.clone();
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    let var = format!("ns={ns}");
    let mut kite = d.run(script, &["--var", &var]);
    kubectl_ok(&["create", "configmap", "c1", "-n", &ns]).await;
    kubectl_ok(&[
        "label",
        "configmap",
        "c1",
        "-n",
        &ns,
        "kite.test/leader=true",
    ])
    .await;
    kite.wait_stdout("annotated c1", Duration::from_secs(30))
        .await;
    // The leader renews its lease (an update) every retry period.
    wait_until("the lease renewed", Duration::from_secs(30), || async {
        let (used, _) = d.used();
        used.contains(&(
            "update".to_owned(),
            "coordination.k8s.io".to_owned(),
            "leases".to_owned(),
        ))
    })
    .await;
    let holder = jsonpath(
        "lease",
        "kite-leader-labeller-configmaps",
        &ns,
        "{.spec.holderIdentity}",
    )
    .await;
    assert!(!holder.is_empty(), "the lease has a holder");
    let why = "the runtime's events: this handler does not fail and returns no children";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["get", "lease", "other-lease", "-n", &ns])
        .await;
    d.assert_refused(&["get", "configmaps", "-n", "default"])
        .await;
}

#[tokio::test]
async fn namespaced_children_run_under_the_generated_role() {
    // The cluster-wide StaticSite operator of another test would reconcile this site too.
    let _cluster = exclusive().await;
    install_staticsite_crd().await;
    // The site operator scoped to one namespace: a Role there is all it gets, so its
    // children must be watched there, not across the cluster. With a health port: its
    // /readyz passes only once the children's caches synced.
    let port = free_port();
    let text = std::fs::read_to_string("tests/scripts/operator/prune.star").unwrap();
    let probed = text.replace(
        "poll = var_str(\"poll\", \"10m\"))",
        &format!("poll = var_str(\"poll\", \"10m\"), health_port = {port})"),
    );
    assert_ne!(probed, text, "prune.star's k8s.control() call changed");
    let path = std::env::temp_dir().join(format!("{}.star", unique_name("prune")));
    std::fs::write(&path, probed).unwrap();
    let script = path.to_str().unwrap();
    let d = Deployed::new(
        "art-kids",
        script,
        &["--crd", "examples/staticsite/crd.yaml"],
        Some("namespace"),
    )
    .await;
    assert!(!d.kinds().contains(&"ClusterRole"), "{:?}", d.kinds());
    let ns = d.ns.name.clone();
    let var = format!("namespace={ns}");
    let kite = d.run(script, &["--var", &var]);
    let started = std::time::Instant::now();
    let site = "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata:\n  name: blog\nspec:\n  replicas: 2\n";
    let out = kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], site).await;
    assert!(out.status.success());
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("/readyz 200", Duration::from_secs(30), || async {
        support::operator::curl(&ready).await.is_some()
    })
    .await;
    let readied = started.elapsed();
    wait_until("the site Ready", Duration::from_secs(60), || async {
        jsonpath(
            "staticsite",
            "blog",
            &ns,
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
        .await
            == "True"
    })
    .await;
    // Drift on a child is undone from the children's watch (the script polls every 10
    // minutes).
    kubectl_ok(&["scale", "deployment", "blog", "-n", &ns, "--replicas=5"]).await;
    let scaled = std::time::Instant::now();
    wait_until("the child restored", Duration::from_secs(10), || async {
        jsonpath("deployment", "blog", &ns, "{.spec.replicas}").await == "2"
    })
    .await;
    println!(
        "under the generated Role: /readyz 200 after {readied:?}, a scaled child restored in {:?}",
        scaled.elapsed()
    );
    let (_, denied) = d.used();
    assert!(denied.is_empty(), "requests refused with 403: {denied:#?}");
    let log = [kite.stdout(), kite.stderr()].concat().join("\n");
    assert!(!log.contains("(403)"), "{log}");
}
