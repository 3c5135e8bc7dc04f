//! k8s.control() with leader election, end to end: one leads and a standby takes
//! over, a paused leader writes nothing after the takeover, and SIGTERM keeps the lease
//! until the workers stopped.

use std::time::Duration;

use crate::control::{T, create_cm};
use crate::support::{self, *};

#[tokio::test(flavor = "multi_thread")]
async fn leader_election_one_leads_and_a_standby_takes_over() {
    let ns = TestNamespace::new("leader").await;
    let var = format!("namespace={}", ns.name);
    let (pa, pb) = (free_port(), free_port());
    let mut a = Kite::spawn(&[
        "run",
        "tests/scripts/control/leader.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "me=a",
        "--var",
        &format!("port={pa}"),
    ]);
    let mut b = Kite::spawn(&[
        "run",
        "tests/scripts/control/leader.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "me=b",
        "--var",
        &format!("port={pb}"),
    ]);
    let ready = |port: u16| async move {
        let out = tokio::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("localhost:{port}/readyz"),
            ])
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let leader = wait_for("exactly one leader", T, || async {
        match (ready(pa).await.as_str(), ready(pb).await.as_str()) {
            ("200", "503") => Some("a"),
            ("503", "200") => Some("b"),
            _ => None,
        }
    })
    .await;
    create_cm(&ns.name, "x", "t: l", "a: b").await;
    let (lead, standby, standby_port) = if leader == "a" {
        (&mut a, &mut b, pb)
    } else {
        (&mut b, &mut a, pa)
    };
    lead.wait_stdout(&format!("RECONCILED-BY {leader} x"), T)
        .await;
    assert_eq!(
        count(&standby.stdout(), "RECONCILED-BY"),
        0,
        "the standby does not reconcile"
    );
    sigterm(lead.pid());
    let stopped = std::time::Instant::now();
    assert!(lead.wait(T).await.success());
    wait_until("the standby to lead", Duration::from_secs(5), || async {
        ready(standby_port).await == "200"
    })
    .await;
    println!("standby took over {:?} after SIGTERM", stopped.elapsed());
    standby.wait_stdout("RECONCILED-BY", T).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_leader_writes_nothing_after_the_standby_takes_over() {
    let ns = TestNamespace::new("paused").await;
    let var = format!("namespace={}", ns.name);
    let start = |me: &str, port: u16| {
        Kite::spawn(&[
            "run",
            "tests/scripts/control/stamper.star",
            "--allow-k8s",
            "--var",
            &var,
            "--var",
            &format!("me={me}"),
            "--var",
            &format!("port={port}"),
        ])
    };
    let (pa, pb) = (free_port(), free_port());
    let mut a = start("a", pa);
    let ready = |port: u16| async move {
        support::operator::curl(&format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_some()
    };
    wait_until("a leads", T, || ready(pa)).await;
    let mut b = start("b", pb);
    create_cm(&ns.name, "x", "t: stamp", "by: nobody").await;
    a.wait_stdout("STAMPING a", T).await;
    // Every version of the ConfigMap, in order.
    let versions = Versions::record("configmap", "x", &ns.name, "{.data.by}");
    // The leader freezes mid-handler; the standby takes over once the lease expires.
    signal(a.pid(), "-STOP");
    let paused = std::time::Instant::now();
    b.wait_stdout("STAMPING b", Duration::from_secs(40)).await;
    let took_over = paused.elapsed();
    let until = Duration::from_secs(25);
    if took_over < until {
        tokio::time::sleep(until - took_over).await;
    }
    signal(a.pid(), "-CONT");
    // An observation window (not a wait for a condition): the old leader gets every
    // chance to write.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let seen = versions.stop();
    let first_b = seen.iter().position(|v| v == "b").expect("b stamped");
    let late: Vec<&String> = seen[first_b..].iter().filter(|v| *v == "a").collect();
    assert!(
        late.is_empty(),
        "the old leader wrote {} times after the takeover ({took_over:?} after the pause): {seen:?}",
        late.len()
    );
    println!(
        "paused leader: takeover {took_over:?} after the pause; {} versions seen, none by the old leader after the takeover",
        seen.len()
    );
    assert!(
        took_over <= Duration::from_secs(20),
        "takeover took {took_over:?}"
    );
    let log = a.stderr().join("\n");
    assert!(
        log.contains("stopped leading") || log.contains("lost leadership"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_a_stuck_handler_keeps_the_lease_until_kite_exits() {
    let ns = TestNamespace::new("stuck").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/stuck.star",
        "--allow-k8s",
        "--var",
        &var,
        "--grace-period",
        "5s",
    ]);
    create_cm(&ns.name, "c", "t: stuck", "a: b").await;
    kite.wait_stdout("WAITING c", T).await;
    let lease = format!("kite-stuck-{}", ns.name);
    let holder = || async { jsonpath("lease", &lease, &ns.name, "{.spec.holderIdentity}").await };
    assert_eq!(holder().await, "stuck");
    sigterm(kite.pid());
    let asked = std::time::Instant::now();
    // Until kite's work has stopped (the handler cancelled, the workers joined), the
    // lease stays ours: nothing of it may still run when a standby could take over. The
    // process itself may outlive the release by its runtime's teardown, which writes
    // nothing.
    let exited = loop {
        if let Some(status) = kite.try_wait() {
            break status;
        }
        let h = holder().await;
        let log = kite.stderr().join("\n");
        if h != "stuck" {
            let cancelled = log.find("cancelling them");
            let stopped = log.find("workers stopped");
            assert!(
                cancelled.is_some() && stopped.is_some() && cancelled < stopped,
                "the lease was released ({h:?}) while kite's work still ran:\n{log}"
            );
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "kite still runs 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = asked.elapsed();
    println!("stuck handler: kite exited {took:?} after SIGTERM, the lease held until then");
    assert!(took <= Duration::from_secs(10), "exit took {took:?}");
    let _ = exited;
    // Released on the way out.
    assert_eq!(holder().await, "", "the lease was released on exit");
}
