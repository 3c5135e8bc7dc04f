//! `kite dev` end to end: reloads on save, refused versions leave the previous one
//! running, reconcile lines with the diff of their writes, and a clean SIGTERM.

use std::path::Path;
use std::time::Duration;

use crate::control::create_cm;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn controller(ns: &str, version: &str) -> String {
    format!(
        "NS = \"{ns}\"\n\n\
         def reconcile(cm):\n    \
             k8s.patch(\"configmap\", cm.metadata.name, {{\"metadata\": {{\"labels\": {{\"version\": \"{version}\"}}}}}}, namespace = NS)\n\n\
         k8s.control(\"configmaps\", reconcile = reconcile, namespace = NS, labels = \"app=dev-test\")\n"
    )
}

/// Saves as editors do: a new file renamed over the old one.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("star.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn wait_label(ns: &str, name: &str, want: &str) {
    wait_until(&format!("{name} labelled version={want}"), T, || async {
        jsonpath("configmap", name, ns, "{.metadata.labels.version}").await == want
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_reloads_on_save_and_keeps_the_last_good_version() {
    let ns = TestNamespace::new("dev").await;
    let dir = std::env::temp_dir().join(unique_name("kite-dev"));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("ctrl.star");
    save(&script, &controller(&ns.name, "1"));
    let mut kite = Kite::spawn(&[
        "dev",
        script.to_str().unwrap(),
        "--allow-all",
        "--no-clear",
        "--grace-period",
        "5s",
    ]);
    kite.wait_stdout("(version 1)", T).await;

    create_cm(&ns.name, "a", "app: dev-test", "k: v").await;
    wait_label(&ns.name, "a", "1").await;
    let key = format!("  {}/a  ", ns.name);
    let line = kite.wait_stdout(&key, T).await;
    assert!(line.contains("ms  success"), "{line}");
    kite.wait_stdout(&format!("    ~ configmap {}/a", ns.name), T)
        .await;

    save(&script, &controller(&ns.name, "2"));
    kite.wait_stdout("reloading ", T).await;
    kite.wait_stdout("(version 2)", T).await;
    wait_label(&ns.name, "a", "2").await;
    kite.wait_stdout("metadata.labels.version: \"1\" → \"2\"", T)
        .await;

    save(&script, "def reconcile(cm:\n    pass\n");
    kite.wait_stdout("keeping the previous version running (version 2)", T)
        .await;
    assert!(
        kite.stdout()
            .iter()
            .any(|l| l.contains("ctrl.star:1:") || l.contains("ctrl.star:2:")),
        "the error names file:line:col: {:?}",
        kite.stdout()
    );
    create_cm(&ns.name, "b", "app: dev-test", "k: v").await;
    wait_label(&ns.name, "b", "2").await;

    save(&script, &controller(&ns.name, "3"));
    kite.wait_stdout("(version 3)", T).await;
    wait_label(&ns.name, "a", "3").await;
    wait_label(&ns.name, "b", "3").await;

    // A kind the cluster does not serve is refused before version 3 stops.
    save(
        &script,
        &controller(&ns.name, "4").replace("\"configmaps\"", "\"nosuchkinds\""),
    );
    wait_until("the unknown kind refused", T, || async {
        count(
            &kite.stdout(),
            "keeping the previous version running (version 3)",
        ) == 1
    })
    .await;
    assert!(
        kite.stdout().iter().any(|l| l.contains("nosuchkinds")),
        "{:?}",
        kite.stdout()
    );

    sigterm(kite.pid());
    let status = kite.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status:?}");
    let _ = std::fs::remove_dir_all(dir);
}
