//! The adversarial suite of issue 26, the webhook's part: what one namespace's author
//! can do to the admission webhook that every namespace's controllers pass through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::security::{CEILING, tenant};
use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

/// A labelled StarlarkController, which an operator started with `--selector` takes.
fn labelled(ns: &str, name: &str, label: &str, spec: Json) -> Json {
    json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": name, "namespace": ns, "labels": {"starkite.io/test": label}},
        "spec": spec,
    })
}

/// A script of about `bytes` bytes whose analysis takes a while.
fn slow_to_review(bytes: usize) -> String {
    let mut s = String::from("def reconcile(d):\n");
    let mut i = 0;
    while s.len() < bytes {
        s.push_str(&format!("    k8s.get(x{}, \"n\")\n", i % 50));
        i += 1;
    }
    s + "k8s.control(\"deployments\", reconcile = reconcile)\n"
}

/// Class 5: an author who sends dry-run creates in a loop (no quota, nothing created)
/// holds at most its namespace's share of the reviews under way, so the API server's
/// connections to the webhook (32 from one address) stay open to others: a neighbour
/// namespace's controller is admitted meanwhile, and the flood's surplus is told to
/// try again at once.
#[tokio::test]
async fn a_flood_of_reviews_from_one_namespace_leaves_the_webhook_to_the_others() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-flood").await;
    let other = TestNamespace::new("sec-flood-n").await;
    let (ns, other) = (ns.name.as_str(), other.name.as_str());
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let label = ns.to_owned();
    let selector = format!("starkite.io/test={label}");
    let _op = Operator::start_with(ns, &ceiling, &["--selector", &selector]).await;

    let flood = labelled(
        ns,
        "flood",
        &label,
        json!({"script": slow_to_review(250 << 10)}),
    )
    .to_string();
    let (stop, busy, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    // More senders than the API server may hold connections to one webhook address.
    let mut senders = Vec::new();
    for _ in 0..36 {
        let (stop, busy, sent, flood, user) = (
            stop.clone(),
            busy.clone(),
            sent.clone(),
            flood.clone(),
            user.clone(),
        );
        senders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let out = kubectl_stdin(
                    &[
                        "create",
                        "--dry-run=server",
                        "--as",
                        &user,
                        "--as-group",
                        "kite:authors",
                        "-f",
                        "-",
                    ],
                    &flood,
                )
                .await;
                sent.fetch_add(1, Ordering::Relaxed);
                if String::from_utf8_lossy(&out.stderr).contains("are under way") {
                    busy.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    wait_until("the flood under way", Duration::from_secs(60), || async {
        busy.load(Ordering::Relaxed) > 0
    })
    .await;
    let neighbour = labelled(other, "neighbour", &label, max_replicas_spec(other, "3"));
    let t = Instant::now();
    let out = kubectl_stdin(&["create", "-f", "-"], &neighbour.to_string()).await;
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.await.unwrap();
    }
    // Before the operator goes: its finalizer would keep the namespace.
    let _ = kubectl(&["delete", "slc", "neighbour", "-n", other, "--timeout=20s"]).await;
    println!(
        "neighbour admitted in {took:?}; flood sent {}, {} told to try again",
        sent.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed)
    );
    assert!(
        out.status.success(),
        "the neighbour was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(10),
        "the neighbour waited {took:?}"
    );
}
