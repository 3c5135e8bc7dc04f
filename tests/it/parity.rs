//! The fake cluster answers as the real one does: each of the seed's walkthroughs runs
//! twice, under `kite run` against the local cluster and under `kite test` against
//! `k8s.fake` with `k8s.testing.controller`, and the objects they end with must match,
//! server-set fields ignored.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// Runs `body` (a test function's statements, `NS` and `OUT` predeclared) under
/// `kite test`, and returns the JSON it wrote to `OUT`.
async fn on_the_fake(name: &str, ns: &str, body: &str, fixtures: &[PathBuf]) -> Json {
    let dir = std::env::temp_dir().join(unique_name("kite-parity"));
    std::fs::create_dir_all(&dir).unwrap();
    for f in fixtures {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let out = dir.join("out.json");
    let root = repo_root();
    let test = format!(
        "NS = {ns:?}\nOUT = {out:?}\nEXAMPLES = {examples:?}\n\ndef test_{name}():\n{body}\n",
        out = out.display().to_string(),
        examples = root.join("examples").display().to_string(),
    );
    let file = dir.join(format!("{name}_test.star"));
    std::fs::write(&file, test).unwrap();
    let run = kite_output(
        &["test", file.to_str().unwrap(), "--allow-fs"],
        Duration::from_secs(120),
    )
    .await;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the fake side failed:\n{stdout}\n{stderr}"
    );
    let written = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&written).unwrap()
}

/// The indented statements that write `{"objects": [...], "events": [...]}` of the
/// given kinds in `NS` to `OUT`.
fn dump(kinds: &[&str]) -> String {
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{k:?}")).collect();
    format!(
        "    objects = []\n    for kind in [{}]:\n        objects.extend(fake.list(kind, namespace = NS))\n    events = fake.list(\"events\", namespace = NS)\n    fs.path(OUT).write_text(json.encode({{\"objects\": objects, \"events\": events}}))\n",
        kinds.join(", ")
    )
}

/// The objects of `kinds` and the events in `ns` of the real cluster, as `dump` writes them.
async fn on_the_real(ns: &str, kinds: &[&str]) -> Json {
    let mut objects = Vec::new();
    for kind in kinds {
        let out = kubectl_ok(&["get", kind, "-n", ns, "-o", "json"]).await;
        let list: Json = serde_json::from_str(&out).unwrap();
        objects.extend(list["items"].as_array().cloned().unwrap_or_default());
    }
    let out = kubectl_ok(&["get", "events", "-n", ns, "-o", "json"]).await;
    let events: Json = serde_json::from_str(&out).unwrap();
    json!({"objects": objects, "events": events["items"]})
}

/// Fields the server, not the controller, decides.
fn strip(obj: &mut Json) {
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(f);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Json::as_object_mut) {
            a.remove("deployment.kubernetes.io/revision");
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
        if let Some(refs) = meta.get_mut("ownerReferences").and_then(Json::as_array_mut) {
            for r in refs {
                if let Some(r) = r.as_object_mut() {
                    r.remove("uid");
                }
            }
        }
    }
    // Built-in kinds' status belongs to the cluster's own controllers.
    if matches!(
        kind.as_str(),
        "Deployment" | "Service" | "Pod" | "ReplicaSet"
    ) && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    if let Some(conds) = obj["status"]["conditions"].as_array_mut() {
        for c in conds {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
                c.remove("observedGeneration");
            }
        }
    }
}

/// Every leaf of `fake` must be in `real` with the same value (the real server adds
/// defaults the fake leaves out).
fn within(fake: &Json, real: &Json, path: &str, diffs: &mut Vec<String>) {
    match (fake, real) {
        (Json::Object(f), Json::Object(r)) => {
            for (k, v) in f {
                let p = format!("{path}.{k}");
                match r.get(k) {
                    Some(rv) => within(v, rv, &p, diffs),
                    None if v.is_null() => {}
                    None => diffs.push(format!("{p}: fake has {v}, real has nothing")),
                }
            }
        }
        (Json::Array(f), Json::Array(r)) if f.len() == r.len() => {
            for (i, (a, b)) in f.iter().zip(r).enumerate() {
                within(a, b, &format!("{path}[{i}]"), diffs);
            }
        }
        _ if fake == real => {}
        _ => diffs.push(format!("{path}: fake has {fake}, real has {real}")),
    }
}

fn pointer<'a>(v: &'a Json, p: &str) -> &'a Json {
    v.pointer(p).unwrap_or(&Json::Null)
}

/// The objects of both sides, keyed by kind/name, must be the same set, each fake one
/// within its real twin, and the fields a controller decides equal both ways.
fn assert_same(scenario: &str, fake: &Json, real: &Json) {
    let keyed = |side: &Json| -> std::collections::BTreeMap<String, Json> {
        side["objects"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                let mut o = o.clone();
                strip(&mut o);
                (
                    format!(
                        "{}/{}",
                        o["kind"].as_str().unwrap_or_default(),
                        o["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    o,
                )
            })
            .collect()
    };
    let (f, r) = (keyed(fake), keyed(real));
    assert_eq!(
        f.keys().collect::<Vec<_>>(),
        r.keys().collect::<Vec<_>>(),
        "{scenario}: the objects differ"
    );
    let mut diffs = Vec::new();
    for (key, fo) in &f {
        let ro = &r[key];
        within(fo, ro, key, &mut diffs);
        for p in [
            "/metadata/labels",
            "/metadata/finalizers",
            "/metadata/ownerReferences",
            "/spec/replicas",
            "/status/conditions",
        ] {
            if pointer(fo, p) != pointer(ro, p) {
                diffs.push(format!(
                    "{key}{p}: fake has {}, real has {}",
                    pointer(fo, p),
                    pointer(ro, p)
                ));
            }
        }
    }
    assert!(diffs.is_empty(), "{scenario}: {}", diffs.join("\n"));
    let events = |side: &Json| -> std::collections::BTreeSet<String> {
        side["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["reportingComponent"] == "starkite" || e["source"]["component"] == "starkite"
            })
            .map(|e| {
                format!(
                    "{} {}/{}: {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["involvedObject"]["kind"].as_str().unwrap_or_default(),
                    e["involvedObject"]["name"].as_str().unwrap_or_default(),
                    e["message"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    assert_eq!(events(fake), events(real), "{scenario}: the events differ");
}

fn example(path: &str) -> PathBuf {
    repo_root().join("examples").join(path)
}

/// The max-replicas walkthrough: one labelled deployment over the limit, one unlabelled,
/// then drift made after the controller settled.
async fn max_replicas() {
    let ns = TestNamespace::new("parity-max").await;
    let initial = format!(
        "{}---\n{}",
        deployment(&ns.name, "web", 10, true),
        deployment(&ns.name, "free", 10, false)
    );
    let body = format!(
        "    fake = k8s.fake(yaml = {initial:?})\n    ctl = k8s.testing.controller(EXAMPLES + \"/max-replicas-controller.star\", cluster = fake)\n    ctl.run_until_idle()\n    fake.scale(\"deployment\", \"web\", replicas = 7, namespace = NS)\n    ctl.run_until_idle()\n{}",
        dump(&["deployments"])
    );
    let fake = on_the_fake("max_replicas", &ns.name, &body, &[]).await;

    kubectl_stdin(&["apply", "-f", "-"], &initial).await;
    let script = example("max-replicas-controller.star");
    let mut kite = Kite::spawn(&["run", script.to_str().unwrap(), "--allow-all"]);
    let replicas = || jsonpath("deployment", "web", &ns.name, "{.spec.replicas}");
    wait_until("web scaled to 3", T, || async { replicas().await == "3" }).await;
    kubectl_ok(&["scale", "deployment/web", "--replicas=7", "-n", &ns.name]).await;
    wait_for_count(&ns.name, "DriftCorrected", 2).await;
    wait_until("web scaled to 3 again", T, || async {
        replicas().await == "3"
    })
    .await;
    kite.kill();
    let real = on_the_real(&ns.name, &["deployments"]).await;
    assert_same("max-replicas", &fake, &real);
}

/// The staticsite walkthrough: a site, its children, a spec change and drift.
async fn staticsite() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("parity-site").await;
    let site = format!(
        "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata: {{name: web, namespace: {}}}\nspec: {{replicas: 1}}\n",
        ns.name
    );
    let crd = example("staticsite/crd.yaml");
    let body = format!(
        "    fake = k8s.fake(files = [\"crd.yaml\"], yaml = {site:?})\n    ctl = k8s.testing.controller(EXAMPLES + \"/staticsite/staticsite-controller.star\", cluster = fake)\n    ctl.run_until_idle()\n    fake.patch(\"staticsite\", \"web\", {{\"spec\": {{\"replicas\": 3}}}}, namespace = NS)\n    ctl.run_until_idle()\n    k8s.testing.ready(fake, \"deployment\", \"web\", namespace = NS)\n    ctl.run_until_idle()\n    fake.delete(\"service\", \"web\", namespace = NS)\n    ctl.run_until_idle()\n{}",
        dump(&["staticsites", "deployments", "services"]),
    );
    let fake = on_the_fake("staticsite", &ns.name, &body, &[crd]).await;

    let script = example("staticsite/staticsite-controller.star");
    let mut kite = Kite::spawn(&["run", script.to_str().unwrap(), "--allow-all"]);
    kubectl_stdin(&["apply", "-f", "-"], &site).await;
    let ready = || {
        jsonpath(
            "staticsite",
            "web",
            &ns.name,
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
    };
    wait_until("the site Ready", T, || async { ready().await == "True" }).await;
    kubectl_ok(&[
        "patch",
        "staticsite/web",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ])
    .await;
    // Ready at 3 before the Service goes, as on the fake: whether the Deployment is
    // still rolling out when the Service is deleted decides whether one reconcile or
    // two report the two children, which is timing, not behaviour.
    wait_until("the deployment scaled to 3 and ready", T, || async {
        jsonpath(
            "deployment",
            "web",
            &ns.name,
            "{.spec.replicas}/{.status.readyReplicas}",
        )
        .await
            == "3/3"
    })
    .await;
    wait_until("the site Ready at 3", T, || async {
        ready().await == "True"
    })
    .await;
    kubectl_ok(&["delete", "service/web", "-n", &ns.name]).await;
    wait_until("the service restored", T, || async {
        kubectl(&["get", "service/web", "-n", &ns.name])
            .await
            .status
            .success()
    })
    .await;
    wait_until("the site Ready again", T, || async {
        ready().await == "True"
    })
    .await;
    kite.kill();
    let real = on_the_real(&ns.name, &["staticsites", "deployments", "services"]).await;
    assert_same("staticsite", &fake, &real);
    // The real site's finalizer must not hold the namespace's deletion.
    kubectl(&[
        "patch",
        "staticsite/web",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .await;
}

/// The pod logger walkthrough: a pod in `default` comes and goes; the logger writes
/// nothing and logs its events. The real pod lives through kwok's status updates, so
/// the kinds of events logged are compared, not their number.
async fn pod_logger() {
    let name = unique_name("parity-pod");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{containers: [{{name: c, image: nginx:alpine}}]}}\nstatus: {{phase: Pending}}\n"
    );
    let body = format!(
        "    fake = k8s.fake(yaml = {pod:?})\n    ctl = k8s.testing.controller(EXAMPLES + \"/pod-logger-controller.star\", cluster = fake)\n    lines = []\n    for r in ctl.run_until_idle():\n        lines.extend(r.output)\n    fake.delete(\"pod\", {name:?}, namespace = \"default\")\n    for r in ctl.run_until_idle():\n        lines.extend(r.output)\n    fs.path(OUT).write_text(json.encode({{\"lines\": lines, \"pods\": fake.list(\"pods\", namespace = \"default\")}}))\n"
    );
    let fake = on_the_fake("pod_logger", "default", &body, &[]).await;

    let script = example("pod-logger-controller.star");
    let mut kite = Kite::spawn(&["run", script.to_str().unwrap(), "--allow-all"]);
    kite.wait_stdout("Starting pod logger controller...", T)
        .await;
    let spec = pod.replace("status: {phase: Pending}\n", "");
    kubectl_stdin(&["apply", "-f", "-"], &spec).await;
    kite.wait_stdout(&format!("Event: ADDED | Pod Name: {name} |"), T)
        .await;
    kubectl_ok(&[
        "delete",
        "pod",
        &name,
        "-n",
        "default",
        "--grace-period=0",
        "--force",
    ])
    .await;
    kite.wait_stdout(&format!("Event: DELETED | Pod Name: {name} |"), T)
        .await;
    let real_lines = kite.stdout();
    kite.kill();

    let kinds = |lines: Vec<String>| -> std::collections::BTreeSet<String> {
        lines
            .iter()
            .filter(|l| l.contains(&format!("Pod Name: {name} |")))
            .filter_map(|l| l.strip_prefix("Event: "))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_owned)
            .collect()
    };
    let fake_lines: Vec<String> = fake["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        kinds(fake_lines.clone()),
        kinds(real_lines.clone()),
        "pod logger: fake logged {fake_lines:?}, real logged {real_lines:?}"
    );
    assert_eq!(fake["pods"], json!([]), "pod logger: the fake pod is gone");
    let gone = kubectl(&["get", "pod", &name, "-n", "default"]).await;
    assert!(!gone.status.success(), "pod logger: the real pod is gone");
}

fn deployment(ns: &str, name: &str, replicas: u32, enforced: bool) -> String {
    let label = if enforced {
        "\n    enforce-max-replicas: \"true\""
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: {name}{label}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: web, image: nginx:alpine}}]\n"
    )
}

/// Waits until `count` events with `reason` from kite exist in `ns` (counting repeats).
async fn wait_for_count(ns: &str, reason: &str, count: u64) {
    wait_until(&format!("{count} {reason} events"), T, || async {
        let out = kubectl(&["get", "events", "-n", ns, "-o", "json"]).await;
        let list: Json = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let seen: u64 = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["count"].as_u64().unwrap_or(1))
            .sum();
        seen >= count
    })
    .await;
}

/// One test: the examples watch every namespace and bind port 8081, so they hold the
/// cluster alone, one after the other.
#[tokio::test(flavor = "multi_thread")]
async fn the_fake_cluster_ends_where_the_real_one_does() {
    let _cluster = exclusive().await;
    max_replicas().await;
    staticsite().await;
    pod_logger().await;
}
