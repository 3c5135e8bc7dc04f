//! A script deployed from its generated artifacts, for the artifacts tests: applied
//! without its Deployment, with a token for its ServiceAccount, run locally as that
//! account.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value as Json;

use crate::support::*;

/// A generated deployment of one script, applied without its Deployment, with a token
/// for its ServiceAccount.
pub(super) struct Deployed {
    pub(super) ns: TestNamespace,
    pub(super) name: String,
    pub(super) objects: Vec<Json>,
    pub(super) token: String,
    pub(super) kubeconfig: PathBuf,
}

impl Deployed {
    /// Generates the artifacts for `script`, checks them with a server-side dry run,
    /// applies everything but the Deployment, and mints a token.
    /// `ns_var` names a script variable that is set to the test namespace.
    pub(super) async fn new(
        prefix: &str,
        script: &str,
        extra: &[&str],
        ns_var: Option<&str>,
    ) -> Self {
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
                // `can-i` reads `pods/exec` as the pod named exec: a subresource is a flag.
                let plural = first("resources");
                let (plural, sub) = plural.split_once('/').unwrap_or((&plural, ""));
                let subresource = format!("--subresource={sub}");
                let mut resource = match (plural, group.as_str()) {
                    (r, "") => r.to_owned(),
                    (r, g) => format!("{r}.{g}"),
                };
                let named = first("resourceNames");
                if !named.is_empty() {
                    resource = format!("{resource}/{named}");
                }
                let what = format!("{user} may {verb} {resource}");
                wait_until(&what, Duration::from_secs(10), || async {
                    kubectl(&[
                        "auth",
                        "can-i",
                        &verb,
                        &resource,
                        "-n",
                        scope,
                        "--as",
                        &user,
                        &subresource,
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
    pub(super) fn kinds(&self) -> Vec<&str> {
        self.objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect()
    }

    pub(super) fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.ns.name, self.name)
    }

    /// `kite run SCRIPT --allow-k8s` with the ServiceAccount's kubeconfig.
    pub(super) fn run(&self, script: &str, extra: &[&str]) -> Kite {
        let kc = self.kubeconfig.display().to_string();
        let mut args = vec!["run", script, "--allow-k8s", "--kubeconfig", &kc];
        args.extend_from_slice(extra);
        Kite::spawn(&args)
    }

    /// (verb, group, resource) for every verb the generated roles grant.
    pub(super) fn granted(&self) -> BTreeSet<(String, String, String)> {
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
    pub(super) fn used(&self) -> (BTreeSet<(String, String, String)>, Vec<Json>) {
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
    pub(super) async fn assert_minimal_and_sufficient(
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
    pub(super) async fn assert_refused(&self, args: &[&str]) {
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

pub(super) fn s(v: &Json) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// A kubeconfig for the local cluster that authenticates with `token`.
pub(super) fn token_kubeconfig(token: &str, namespace: &str) -> String {
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
