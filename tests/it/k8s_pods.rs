//! `k8s.logs`, `logs_follow`, `exec`, `port_forward` and `cp` against the local cluster.
//! Its pods are kwok fakes: no kubelet answers (the API server's dial to the node fails),
//! so these check that each call reaches the API server and reports its answer, or a
//! selection error, naming the pod and the call; and that deadlines and permissions hold.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const SCRIPT: &str = "tests/scripts/k8s_pods/errors.star";

/// Held while a test relies on who answers at the kubelet port: refused dials in one
/// test, the stand-in kubelet in the other.
static KUBELET_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Creates `one` (one container, running), `two` (two containers) and `pending`
/// (unschedulable, so never running).
async fn pods(ns: &str) {
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: one, namespace: {ns}}}
spec:
  containers: [{{name: one, image: busybox}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: two, namespace: {ns}}}
spec:
  containers: [{{name: app, image: busybox}}, {{name: side, image: busybox}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: pending, namespace: {ns}}}
spec:
  nodeSelector: {{no-such-node: "true"}}
  containers: [{{name: app, image: busybox}}]
"#
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("pod one running", T, || async {
        jsonpath("pod", "one", ns, "{.status.phase}").await == "Running"
    })
    .await;
}

/// The script's `label: ...` line.
fn line<'a>(out: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}: ");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"))
}

fn expect(out: &str, label: &str, parts: &[&str]) {
    let l = line(out, label);
    for p in parts {
        assert!(l.contains(p), "{label}: expected {p:?} in {l:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_io_reports_the_api_servers_answer_per_pod_and_call() {
    let _port = KUBELET_PORT.lock().await;
    let ns = TestNamespace::new("podio").await;
    pods(&ns.name).await;
    let var = format!("namespace={}", ns.name);
    let out = kite_output(&["run", SCRIPT, "--allow-k8s", "--var", &var], T).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let n = &ns.name;
    // Selection: no pod, several containers and none named, a container that is not there.
    expect(
        &stdout,
        "logs-missing",
        &["k8s.logs:", &format!("{n}/missing"), "not found"],
    );
    expect(
        &stdout,
        "logs-two",
        &[
            "k8s.logs:",
            "pod two has 2 containers (app, side)",
            "container=",
        ],
    );
    expect(
        &stdout,
        "exec-nope",
        &[
            "k8s.exec:",
            r#"no container "nope" (containers: app, side)"#,
        ],
    );
    expect(&stdout, "exec-deploy", &["only pods are supported"]);
    expect(
        &stdout,
        "exec-badcmd",
        &["command must be a string or a list"],
    );
    expect(&stdout, "pf-badport", &["port must be 1-65535"]);
    // The request reached the API server, whose dial to the (fake) kubelet failed.
    let refused = "127.0.0.1:10250";
    expect(
        &stdout,
        "logs-one",
        &[
            &format!("k8s.logs: reading the log of {n}/one[one]"),
            refused,
        ],
    );
    expect(
        &stdout,
        "logs-two-side",
        &[&format!("{n}/two[side]"), refused],
    );
    expect(
        &stdout,
        "exec-one",
        &[&format!("k8s.exec: exec in {n}/one[one]"), refused],
    );
    expect(&stdout, "exec-shell", &[&format!("exec in {n}/one[one]")]);
    // A forward listens on this machine: it needs --allow-net too (issue 26).
    expect(
        &stdout,
        "pf-one",
        &["permission denied: k8s.port_forward needs --allow-net"],
    );
    expect(
        &stdout,
        "follow-one",
        &[
            &format!("k8s.logs_follow: following the log of {n}/one[one]"),
            refused,
        ],
    );
    expect(&stdout, "follow-nohandler", &["handler is required"]);
    expect(&stdout, "client-logs", &[&format!("{n}/one[one]")]);
    // Copying to or from local files needs --allow-fs too.
    expect(
        &stdout,
        "cp-down",
        &["permission denied: k8s.cp needs --allow-fs"],
    );
    assert!(stdout.contains("\ndone"), "{stdout}");

    let out = kite_output(
        &["run", SCRIPT, "--allow-net", "--allow-fs", "--var", &var],
        T,
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    expect(
        &stdout,
        "cp-down",
        &[&format!("k8s.cp: exec in {n}/one[one]"), refused],
    );
    expect(
        &stdout,
        "pf-one",
        &[
            &format!("k8s.port_forward: port-forward to pod {n}/one port 80"),
            refused,
        ],
    );
    expect(&stdout, "pf-pending", &["not running", "Pending"]);
    assert!(!std::path::Path::new("/tmp/kite-cp-never").exists());
}

/// A kubelet that accepts and never answers: the call's own deadline ends the wait
/// (a refused dial answers too fast to test a deadline with).
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_kubelet_is_cut_off_at_the_calls_deadline() {
    let _port = KUBELET_PORT.lock().await;
    let listener = tokio::net::TcpListener::bind(KUBELET)
        .await
        .expect("port 10250 is free (nothing else plays the kubelet)");
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let ns = TestNamespace::new("poddeadline").await;
    pods(&ns.name).await;
    let var = format!("namespace={}", ns.name);
    let out = kite_output(
        &[
            "run",
            "tests/scripts/k8s_pods/deadline.star",
            "--allow-k8s",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    silent.abort();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    expect(&stdout, "exec-timeout", &["k8s.exec: timed out after 2s"]);
    expect(&stdout, "logs-timeout", &["k8s.logs: timed out after 2s"]);
}

/// The port the API server dials for the logs of a kwok node's pods (kwok nodes
/// advertise 127.0.0.1 and no kubelet port, so the API server's default applies).
const KUBELET: &str = "127.0.0.1:10250";

/// Serves `GET /containerLogs/{ns}/{pod}/{container}` as a kubelet would, over TLS (the
/// local API server does not verify kubelet certificates): each log names the pod and
/// container it is for; a followed log has timestamps and then ends, as when the
/// container stops.
async fn fake_kubelet(listener: tokio::net::TcpListener) {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let target = head.split(' ').nth(1).unwrap_or("");
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let mut stall = false;
            let body = match parts.as_slice() {
                // A quiet container: two lines, then silence past kite's read timeout;
                // the resumed stream repeats line 2's second before line 3.
                ["containerLogs", _ns, "two", "app"] if query.contains("sinceTime=") => {
                    "2026-01-01T00:00:02Z quiet 2\n2026-01-01T00:00:03Z quiet 3\n".to_owned()
                }
                ["containerLogs", _ns, "two", "app"] if query.contains("follow=true") => {
                    stall = true;
                    "2026-01-01T00:00:01.5Z quiet 1\n2026-01-01T00:00:02Z quiet 2\n".to_owned()
                }
                ["containerLogs", _ns, pod, container] if query.contains("follow=true") => {
                    format!(
                        "2026-01-01T00:00:01.5Z {pod}/{container} 1\n\
                         2026-01-01T00:00:02Z {pod}/{container} 2\n\
                         2026-01-01T00:00:03Z {pod}/{container} 3\n"
                    )
                }
                ["containerLogs", _ns, pod, container] => {
                    format!("{pod}/{container} a\n{pod}/{container} b\nquery {query}\n")
                }
                _ => {
                    let _ = tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                    return;
                }
            };
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n{body}"
            );
            let _ = tls.write_all(reply.as_bytes()).await;
            let _ = tls.flush().await;
            if stall {
                tokio::time::sleep(Duration::from_secs(40)).await;
            }
            let _ = tls.shutdown().await;
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_come_through_the_api_server_from_the_kubelet() {
    let _port = KUBELET_PORT.lock().await;
    let ns = TestNamespace::new("podlogs").await;
    pods(&ns.name).await;
    let listener = tokio::net::TcpListener::bind(KUBELET)
        .await
        .expect("port 10250 is free (nothing else plays the kubelet)");
    let kubelet = tokio::spawn(fake_kubelet(listener));
    let var = format!("namespace={}", ns.name);
    let out = kite_output(
        &[
            "run",
            "tests/scripts/k8s_pods/logs.star",
            "--allow-k8s",
            "--var",
            &var,
        ],
        T,
    )
    .await;
    kubelet.abort();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // The named container's log, with tail= and the size cap passed on.
    let logs = line(&stdout, "logs");
    assert!(logs.contains("two/side a\\ntwo/side b\\n"), "{logs}");
    assert!(
        logs.contains("tailLines=2") && logs.contains("limitBytes="),
        "{logs}"
    );
    // Followed lines lose their timestamps; a False from the handler stops the stream.
    assert_eq!(
        line(&stdout, "follow"),
        r#"follow: ["one/one 1", "one/one 2"]"#
    );
    assert_eq!(
        line(&stdout, "follow-all"),
        r#"follow-all: ["one/one 1", "one/one 2", "one/one 3"]"#
    );
    // A quiet stream idles out (kite's client read timeout) and resumes from the last
    // line without repeating it.
    assert_eq!(
        line(&stdout, "follow-quiet"),
        r#"follow-quiet: ["quiet 1", "quiet 2", "quiet 3"]"#
    );
    assert!(stdout.contains("\ndone"), "{stdout}");
}
