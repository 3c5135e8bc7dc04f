//! `kite test` end to end on the fixtures in `tests/scripts/tester` (no cluster needed):
//! the text report and exit codes, `-k`, `--json` and `--junit`.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const DIR: &str = "tests/scripts/tester";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn passing_and_skipped_files_exit_zero() {
    let passing = format!("{DIR}/passing_test.star");
    let skipped = format!("{DIR}/skipped_test.star");
    let out = kite_output(&["test", &passing, &skipped], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "PASS tests/scripts/tester/passing_test.star::test_addition\n\
         PASS tests/scripts/tester/passing_test.star::test_strings\n\
         SKIP tests/scripts/tester/skipped_test.star::test_later\n    not on this platform\n\
         PASS tests/scripts/tester/skipped_test.star::test_now\n\
         3 passed, 0 failed, 1 skipped\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_show_position_values_and_diff() {
    let out = kite_output(&["test", DIR], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let fail = "FAIL tests/scripts/tester/failing_test.star::test_config\n    \
                tests/scripts/tester/failing_test.star:8:5: assert_equal: values differ\n";
    assert!(stdout.contains(fail), "{stdout}");
    assert!(
        stdout.contains(r#"["replicas"]: 2 (actual) != 3 (expected)"#),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"only in expected: ["labels"]["tier"] = "front""#),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAIL tests/scripts/tester/broken_test.star::<load>"),
        "{stdout}"
    );
    assert!(stdout.contains("broken_test.star:3:"), "{stdout}");
    // Files in path order, whichever thread finished first.
    let order: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL") || l.starts_with("SKIP"))
        .map(|l| l.rsplit('/').next().unwrap_or_default())
        .collect();
    assert_eq!(
        order,
        [
            "broken_test.star::<load>",
            "failing_test.star::test_config",
            "failing_test.star::test_image",
            "passing_test.star::test_addition",
            "passing_test.star::test_strings",
            "skipped_test.star::test_later",
            "skipped_test.star::test_now",
        ]
    );
    assert!(
        stdout.ends_with("4 passed, 2 failed, 1 skipped\n"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn k_filters_by_name_and_nothing_found_is_a_usage_error() {
    let out = kite_output(&["test", DIR, "-k", "image"], T).await;
    let stdout = text(&out.stdout);
    // The broken file cannot be filtered: its tests are unknown.
    assert!(stdout.contains("failing_test.star::test_image"), "{stdout}");
    assert!(!stdout.contains("test_config"), "{stdout}");
    assert!(stdout.ends_with("1 passed, 1 failed\n"), "{stdout}");

    let out = kite_output(
        &["test", &format!("{DIR}/passing_test.star"), "-k", "nope"],
        T,
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("matching -k \"nope\""),
        "{}",
        text(&out.stderr)
    );

    let empty = std::env::temp_dir().join(format!("kite-it-tester-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = kite_output(&["test", empty.to_str().unwrap()], T).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("no test files (*_test.star) found in"),
        "{err}"
    );
    assert!(err.contains(empty.to_str().unwrap()), "{err}");
    let _ = std::fs::remove_dir_all(&empty);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_and_junit_reports() {
    let junit = std::env::temp_dir().join(format!("kite-it-junit-{}.xml", std::process::id()));
    let failing = format!("{DIR}/failing_test.star");
    let skipped = format!("{DIR}/skipped_test.star");
    let out = kite_output(
        &[
            "test",
            &failing,
            &skipped,
            "--json",
            "--junit",
            junit.to_str().unwrap(),
        ],
        T,
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(
        (
            doc["passed"].as_u64(),
            doc["failed"].as_u64(),
            doc["skipped"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    let tests = doc["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 4);
    assert_eq!(tests[0]["name"], "test_config");
    assert_eq!(tests[0]["file"], "tests/scripts/tester/failing_test.star");
    assert_eq!(tests[0]["status"], "failed");
    assert!(tests[0]["duration_ms"].is_u64());
    assert!(
        tests[0]["message"].as_str().unwrap().contains("diff:"),
        "{doc}"
    );
    assert_eq!(tests[2]["status"], "skipped");
    assert_eq!(tests[2]["message"], "not on this platform");

    let xml = std::fs::read_to_string(&junit).expect("the JUnit file");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains("<testsuites name=\"kite test\" tests=\"4\" failures=\"1\" skipped=\"1\""),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<testcase name=\"test_config\" classname=\"tests/scripts/tester/failing_test.star\""
        ),
        "{xml}"
    );
    assert!(xml.contains("<failure message=\"tests/scripts/tester/failing_test.star:8:5: assert_equal: values differ\">"), "{xml}");
    assert!(
        xml.contains("<skipped message=\"not on this platform\"/>"),
        "{xml}"
    );
    let _ = std::fs::remove_file(&junit);
}

/// The examples' own tests pass as shipped, and a deliberately broken example fails
/// them with the assertion's position and the values that differ.
#[tokio::test(flavor = "multi_thread")]
async fn examples_pass_and_a_broken_example_fails_with_a_diff() {
    let out = kite_output(&["test", "examples/"], T).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).ends_with(" passed, 0 failed\n"),
        "{}",
        text(&out.stdout)
    );

    let dir = std::env::temp_dir().join(unique_name("kite-broken-example"));
    std::fs::create_dir_all(&dir).unwrap();
    let root = repo_root().join("examples");
    let script = std::fs::read_to_string(root.join("max-replicas-controller.star")).unwrap();
    let broken = script.replace(
        r#""spec": {"replicas": max_replicas}"#,
        r#""spec": {"replicas": max_replicas + 1}"#,
    );
    assert_ne!(
        script, broken,
        "the example changed; update this test's break"
    );
    std::fs::write(dir.join("max-replicas-controller.star"), broken).unwrap();
    std::fs::copy(
        root.join("max-replicas-controller_test.star"),
        dir.join("max-replicas-controller_test.star"),
    )
    .unwrap();
    let out = kite_output(&["test", dir.to_str().unwrap()], T).await;
    let stdout = text(&out.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "max-replicas-controller_test.star::test_scales_a_deployment_down_to_the_limit\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("max-replicas-controller_test.star:27:5: assert_equal: values differ\n      actual:   6\n      expected: 5\n"),
        "{stdout}"
    );
}

/// `k8s.testing`'s own behaviour through a controller written for it: related objects,
/// retries after backoff, requeues on virtual time.
#[tokio::test(flavor = "multi_thread")]
async fn the_testing_controller_follows_related_objects_retries_and_requeues() {
    let out = kite_output(&["test", "tests/scripts/testing"], T).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with("3 passed, 0 failed\n"), "{stdout}");
}

/// Issue 26: events waiting for a busy controller hold their objects' versions only up
/// to the controller's bound; past it, an object rewritten fast collapses to a
/// reconcile of its current state (and a small backlog still delivers every update).
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_controllers_waiting_events_hold_a_bounded_number_of_versions() {
    let out = kite_output(&["test", "tests/scripts/testing_pending"], T).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with("2 passed, 0 failed\n"), "{stdout}");
}

/// Issue 26: a reconcile driven by `k8s.testing` gets the test's budget when that is
/// shorter than the handler's (60 s): a spinning one ends with the test.
#[tokio::test(flavor = "multi_thread")]
async fn a_testing_reconcile_ends_with_the_tests_budget() {
    let started = std::time::Instant::now();
    let out = kite_output(
        &["test", "--timeout", "2s", "tests/scripts/testing_budget"],
        T,
    )
    .await;
    let took = started.elapsed();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with("0 passed, 1 failed\n"), "{stdout}");
    assert!(
        took < std::time::Duration::from_secs(20),
        "the test took {took:?}: {stdout}"
    );
}
