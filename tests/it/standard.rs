//! A controller in upstream Starkite's style (the two-argument reconcile, `printf`,
//! `strings`, `health_port = 0`) runs unchanged against the local cluster.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn printf_scaler_caps_and_reports() {
    let ns = TestNamespace::new("printf").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/standard/printf_scaler.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    kite.wait_stdout(&format!("Capping \"{}\" at 2 replicas", ns.name), T)
        .await;
    create_enforced_deployment(&ns.name, "big", 5).await;
    create_enforced_deployment(&ns.name, "ok", 1).await;
    kite.wait_stdout("[SCALE DOWN] big from 5 to 2", T).await;
    kite.wait_stdout("[OK] ok     has 1 (max 2)", T).await;
    wait_until("big capped at 2", T, || async {
        jsonpath("deployment", "big", &ns.name, "{.spec.replicas}").await == "2"
    })
    .await;
    kubectl_ok(&["delete", "deployment", "ok", "-n", &ns.name]).await;
    kite.wait_stdout("[DELETED] ok", T).await;
    // health_port = 0: no health server, and nothing said about one.
    assert!(
        !kite.stderr().iter().any(|l| l.contains("serving /healthz")),
        "{:?}",
        kite.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn os_and_fs_run_under_an_upstream_profile() {
    let dir = std::env::temp_dir().join(unique_name("kite-os-fs"));
    let var = format!("dir={}", dir.display());
    let out = kite_output(
        &[
            "run",
            "tests/scripts/standard/os_fs.star",
            "--permissions",
            "allow-all",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "os.exit(3) ends the run\n{stderr}"
    );
    let real = dir.canonicalize().unwrap();
    assert_eq!(
        stdout,
        format!(
            "read: Summary|Details|\n\
             glob: [\"report.txt\"] [\"report.txt\"]\n\
             env: hello fallback\n\
             exec: hello from {}\n\
             try_exec: False 4 2\n\
             which: True\n\
             missing: False\n",
            real.display()
        )
    );
    assert!(stderr.is_empty(), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn permission_profiles_are_checked_and_widening_is_said() {
    let out = kite_output(
        &[
            "run",
            "tests/scripts/standard/os_fs.star",
            "--permissions",
            "allow-everything",
        ],
        T,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown permission profile \"allow-everything\""),
        "{stderr}"
    );
    // Without exec, the script stops at its first exec, naming the flag.
    let dir = std::env::temp_dir().join(unique_name("kite-os-fs"));
    let var = format!("dir={}", dir.display());
    let out = kite_output(
        &[
            "run",
            "tests/scripts/standard/os_fs.star",
            "--permissions=allow:fs.read,os.env",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("warning: --permissions allow:fs.read,os.env: rule allow:fs.read is widened to --allow-fs"),
        "{stderr}"
    );
    assert!(
        stderr.contains("permission denied: exec needs --allow-exec (or --allow-all)"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
