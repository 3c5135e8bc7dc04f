//! `kite run` end to end: exit codes, auto-main, loads, vars, permissions, errors, and
//! the k8s module against the local cluster.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_main_runs_once_after_the_module() {
    let out = kite_output(&["run", "tests/scripts/auto_main.star"], T).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "module runs first\nmain ran\n");
    let out = kite_output(&["run", "tests/scripts/calls_main.star"], T).await;
    assert_eq!(
        text(&out.stdout),
        "main ran\n",
        "main() called by the script runs once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_errors_show_location_snippet_and_traceback() {
    let out = kite_output(&["run", "tests/scripts/runtime_error.star"], T).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("Traceback"), "{err}");
    assert!(
        err.contains("tests/scripts/runtime_error.star:2:12"),
        "{err}"
    );
    assert!(err.contains("return x[\"missing\"]"), "{err}");
    assert!(
        err.contains("tests/scripts/runtime_error.star:5, in main"),
        "{err}"
    );
    assert!(err.contains("Key `\"missing\"` was not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn syntax_errors_exit_1_and_missing_files_exit_2() {
    let dir = std::env::temp_dir().join(unique_name("kite-syntax"));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.star");
    std::fs::write(&bad, "x = (1,\n").unwrap();
    let out = kite_output(&["run", bad.to_str().unwrap()], T).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.star:1:1") && err.contains("expected symbol ')'"),
        "{err}"
    );
    let out = kite_output(&["run", "does/not/exist.star"], T).await;
    assert_eq!(out.status.code(), Some(2));
    let out = kite_output(&["run"], T).await;
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[tokio::test(flavor = "multi_thread")]
async fn load_cycles_are_reported() {
    let out = kite_output(&["run", "tests/scripts/load_cycle_a.star"], T).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("load cycle"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_var_values_name_the_variable_value_and_call_site() {
    let out = kite_output(
        &[
            "run",
            "examples/max-replicas-controller.star",
            "--allow-all",
            "--var",
            "max_replicas=abc",
        ],
        T,
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("var_int(\"max_replicas\") at examples/max-replicas-controller.star:4:16: \"abc\" is not an integer"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unread_vars_get_a_warning() {
    let out = kite_output(
        &["run", "tests/scripts/auto_main.star", "--var", "nobody=1"],
        T,
    )
    .await;
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("--var nobody is never read"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_calls_are_denied_without_a_flag() {
    let out = kite_output(&["run", "examples/crud.star"], T).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("permission denied: k8s.create needs --allow-k8s (or --allow-all)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn builders_example_needs_no_flags() {
    let out = kite_output(&["run", "examples/builders.star"], T).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("kind: Deployment"), "{stdout}");
    assert!(stdout.contains("kind: Service"), "{stdout}");
    assert!(stdout.contains("selector: {\"app\": \"web\"}"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn crud_example_walks_through_a_configmap() {
    let ns = TestNamespace::new("run-crud").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_output(
        &["run", "examples/crud.star", "--allow-k8s", "--var", &var],
        T,
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("created kite-crud-demo in {}", ns.name)),
        "{stdout}"
    );
    assert!(stdout.contains("greeting: hello"), "{stdout}");
    assert!(stdout.contains("labels: {\"demo\": \"crud\"}"), "{stdout}");
    assert!(stdout.contains("listed: [\"kite-crud-demo\"]"), "{stdout}");
    assert!(
        stdout.contains("deleted: True | k8s.get: configmaps \"kite-crud-demo\" not found (404)"),
        "{stdout}"
    );
    let left = kubectl_ok(&["get", "configmaps", "-n", &ns.name, "-o", "name"]).await;
    assert!(!left.contains("kite-crud-demo"), "{left}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_leaves_the_cluster_unchanged() {
    let ns = TestNamespace::new("run-dry").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_output(
        &[
            "run",
            "tests/scripts/apply_cm.star",
            "--allow-k8s",
            "--dry-run",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("configmap/dry serverside-applied (server dry run)"),
        "{}",
        text(&out.stdout)
    );
    let out = kubectl(&["get", "configmap", "dry", "-n", &ns.name]).await;
    assert!(
        !out.status.success(),
        "the ConfigMap must not exist after --dry-run"
    );
    // The same script without --dry-run does create it, so the check above can fail.
    let out = kite_output(
        &[
            "run",
            "tests/scripts/apply_cm.star",
            "--allow-k8s",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    kubectl_ok(&["get", "configmap", "dry", "-n", &ns.name]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn api_errors_carry_message_and_code() {
    let ns = TestNamespace::new("run-err").await;
    let dir = std::env::temp_dir().join(unique_name("kite-err"));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("get.star");
    std::fs::write(
        &script,
        format!("k8s.get('deploy', 'nope', namespace='{}')\n", ns.name),
    )
    .unwrap();
    let out = kite_output(&["run", script.to_str().unwrap(), "--allow-k8s"], T).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("k8s.get: deployments.apps \"nope\" not found (404)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_k8s_function_succeeds_and_fails_cleanly() {
    let ns = TestNamespace::new("run-fns").await;
    let var = format!("namespace={}", ns.name);
    let release = format!(
        "release={}",
        std::env::var("KUBE_VERSION").unwrap_or_else(|_| "1.37.2".into())
    );
    let out = kite_output(
        &[
            "run",
            "tests/scripts/k8s_functions.star",
            "--allow-k8s",
            "--var",
            &var,
            "--var",
            &release,
        ],
        T,
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("all k8s functions checked"), "{stdout}");
    // What the script says it did is in the cluster.
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "reason=Tested",
        "-o",
        "jsonpath={.items[*].count}",
    ])
    .await;
    assert_eq!(events, "2", "one aggregated event with count 2");
}

#[tokio::test(flavor = "multi_thread")]
async fn crd_install_example_resolves_the_new_kind() {
    let ns = TestNamespace::new("run-crd").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_output(
        &[
            "run",
            "examples/crd-install.star",
            "--allow-k8s",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("established: widgets.demo.starkite.io"),
        "{stdout}"
    );
    assert!(
        stdout.contains("widget blue size 1"),
        "the CRD default applies: {stdout}"
    );
    assert!(stdout.contains("phase: Painted"), "{stdout}");
    let phase = kubectl_ok(&[
        "get",
        "widgets.demo.starkite.io",
        "blue",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.status.phase}",
    ])
    .await;
    assert_eq!(phase, "Painted");
}

/// Every example that does not start a controller runs to success; new examples are
/// picked up without editing this test.
#[tokio::test(flavor = "multi_thread")]
async fn every_non_controller_example_runs() {
    let ns = TestNamespace::new("run-examples").await;
    let var = format!("namespace={}", ns.name);
    let mut ran = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        // Test files are `kite test`'s (see `tester::examples_pass...`).
        if path.extension().is_none_or(|e| e != "star")
            || path.to_string_lossy().ends_with("_test.star")
        {
            continue;
        }
        if std::fs::read_to_string(&path)
            .unwrap()
            .contains("k8s.control(")
        {
            continue;
        }
        let rel = path
            .strip_prefix(repo_root())
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let out = kite_output(&["run", &rel, "--allow-k8s", "--var", &var], T).await;
        assert!(out.status.success(), "{rel}: {}", text(&out.stderr));
        ran.push(rel);
    }
    assert!(ran.len() >= 3, "examples ran: {ran:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_that_try_to_take_the_process_down_fail_with_their_line() {
    let cases = [
        (
            "list_cycle",
            "list_cycle.star:3:7",
            "nested deeper than 100 levels",
        ),
        (
            "dict_cycle",
            "dict_cycle.star:3:7",
            "nested deeper than 200 levels",
        ),
        ("deep_recursion", "deep_recursion.star:2:12", "call stack"),
        (
            "string_doubling",
            "string_doubling.star",
            "memory limit of 64 MiB",
        ),
        ("huge_list", "huge_list.star", "limit"),
        // A dict's table lives outside Starlark's heap: counted all the same.
        ("dict_growth", "dict_growth.star", "memory limit of 64 MiB"),
    ];
    for (script, at, says) in cases {
        let path = format!("tests/scripts/bombs/{script}.star");
        let out = kite_output(&["run", &path, "--script-memory", "64"], T).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{script}: {err}");
        assert!(err.contains(at) && err.contains(says), "{script}: {err}");
        for crash in [
            "panicked",
            "has overflowed its stack",
            "fatal runtime error",
        ] {
            assert!(!err.contains(crash), "{script}: {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn standard_modules_need_no_flag() {
    let out = kite_output(&["run", "tests/scripts/standard/modules.star"], T).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let want = [
        "cut: host 8080 True",
        "padded: [kite..] [**k**]",
        r#"quoted: "a \"b\"" equal: true"#,
        r#"003.1|ff|{"a": 1}"#,
        "try: False strings.unquote: \"not quoted\": not a quoted string",
        "hash: 2cf24dba5fb0 36",
        "yaml: ConfigMap v",
        "regexp: 1 27 a#b#",
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, want, "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn script_logs_go_through_kites_logger() {
    let out = kite_output(
        // -v: kite's own filter passes debug lines too (the script's level is its own).
        &[
            "run",
            "tests/scripts/standard/log.star",
            "--log-format",
            "json",
            "-v",
        ],
        T,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| l["target"] == "script")
        .collect();
    let seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap(),
                l["fields"]["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("INFO", "server started"),
            ("DEBUG", "shown after set_level"),
            ("ERROR", "connection failed")
        ],
        "{lines:?}"
    );
    assert_eq!(lines[0]["fields"]["attrs"], r#"{"port":8080,"env":"test"}"#);
    assert_eq!(
        lines[0]["fields"]["at"],
        "tests/scripts/standard/log.star:1:1"
    );
}
