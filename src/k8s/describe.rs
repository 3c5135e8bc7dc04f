//! `k8s.describe`: one object with its conditions and the events recorded about it, as
//! upstream returns them, plus a kubectl-describe-like text of it all.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value as Json;

use super::ops::{self, Result, Target};
use super::session::Session;

/// Fetches `kind/name` and its events: `{"resource", "conditions", "events", "text"}`.
/// Conditions and events have string values (upstream's shape: events carry type,
/// reason, message and count); `text` is the kubectl-describe-like rendering.
///
/// # Errors
/// The kind is unknown or the object is missing. Events that cannot be listed are left
/// out rather than failing the call.
pub async fn describe(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    let obj = ops::get_of(session, &target, name).await?;
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("");
    let fields = format!("involvedObject.name={name},involvedObject.uid={uid}");
    // Events about cluster-scoped objects live in whatever namespace their reporter chose.
    let events_ns = target.namespace.as_deref().unwrap_or("*");
    let events = ops::list(session, "events", Some(events_ns), None, Some(&fields))
        .await
        .ok();
    let text = render(&obj, events.as_deref(), Timestamp::now());
    Ok(described(obj, events.as_deref(), text))
}

/// The value text: a JSON scalar as it reads, a string without quotes.
fn text_of(v: &Json) -> Json {
    Json::String(v.as_str().map_or_else(|| v.to_string(), str::to_owned))
}

fn described(obj: Json, events: Option<&[Json]>, text: String) -> Json {
    let conditions: Vec<Json> = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Json::as_object)
        .map(|c| {
            c.iter()
                .map(|(k, v)| (k.clone(), text_of(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        })
        .collect();
    let events: Vec<Json> = events
        .unwrap_or_default()
        .iter()
        .map(|e| {
            serde_json::json!({
                "type": text_of(&e["type"]), "reason": text_of(&e["reason"]),
                "message": text_of(&e["message"]), "count": text_of(&e["count"]),
            })
        })
        .collect();
    serde_json::json!({
        "resource": obj, "conditions": conditions, "events": events, "text": text,
    })
}

fn pairs(v: &Json) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(&v.to_string())))
            .collect::<Vec<_>>()
            .join("\n              "),
        _ => "<none>".into(),
    }
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<14}{value}", format!("{label}:"));
}

/// A short age as kubectl prints it: 45s, 12m, 3h, 5d.
pub fn age(then: Option<&str>, now: Timestamp) -> String {
    let Some(t) = then.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = now.as_second().saturating_sub(t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn containers(out: &mut String, spec: &Json, status: &Json) {
    let Some(list) = spec["containers"].as_array() else {
        return;
    };
    out.push_str("Containers:\n");
    for c in list {
        let name = c["name"].as_str().unwrap_or("?");
        let _ = writeln!(out, "  {name}:");
        let _ = writeln!(out, "    Image:      {}", c["image"].as_str().unwrap_or(""));
        if let Some(ports) = c["ports"].as_array() {
            let p: Vec<String> = ports
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p["containerPort"],
                        p["protocol"].as_str().unwrap_or("TCP")
                    )
                })
                .collect();
            let _ = writeln!(out, "    Ports:      {}", p.join(", "));
        }
        let st = status["containerStatuses"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name));
        if let Some(st) = st {
            let state = st["state"]
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap_or_default();
            let _ = writeln!(out, "    State:      {state}");
            let _ = writeln!(out, "    Ready:      {}", st["ready"]);
            let _ = writeln!(out, "    Restarts:   {}", st["restartCount"]);
        }
    }
}

/// The text for `obj` and its `events` (None: they could not be read).
pub fn render(obj: &Json, events: Option<&[Json]>, now: Timestamp) -> String {
    let meta = &obj["metadata"];
    let (spec, status) = (&obj["spec"], &obj["status"]);
    let kind = obj["kind"].as_str().unwrap_or("");
    let mut out = String::new();
    line(&mut out, "Name", meta["name"].as_str().unwrap_or(""));
    if let Some(ns) = meta["namespace"].as_str() {
        line(&mut out, "Namespace", ns);
    }
    line(
        &mut out,
        "Kind",
        format!("{kind} ({})", obj["apiVersion"].as_str().unwrap_or("")),
    );
    line(&mut out, "Labels", pairs(&meta["labels"]));
    line(&mut out, "Annotations", pairs(&meta["annotations"]));
    line(
        &mut out,
        "Created",
        meta["creationTimestamp"].as_str().unwrap_or("<unknown>"),
    );
    specifics(&mut out, kind, spec, status);
    if let Some(conds) = status["conditions"].as_array().filter(|c| !c.is_empty()) {
        out.push_str("Conditions:\n  Type                Status  Reason\n");
        for c in conds {
            let _ = writeln!(
                out,
                "  {:<20}{:<8}{}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            );
        }
    }
    events_of(&mut out, events, now);
    out
}

/// The lines only objects of `kind` have (a Pod's node and containers, a workload's
/// replicas, a Node's taints, a Service's type and IP).
fn specifics(out: &mut String, kind: &str, spec: &Json, status: &Json) {
    match kind {
        "Pod" => {
            line(out, "Node", spec["nodeName"].as_str().unwrap_or("<none>"));
            line(out, "Status", status["phase"].as_str().unwrap_or("Unknown"));
            line(out, "IP", status["podIP"].as_str().unwrap_or("<none>"));
            containers(out, spec, status);
        }
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" => {
            let n = |f: &str| status[f].as_i64().unwrap_or(0);
            line(
                out,
                "Selector",
                pairs(&spec["selector"]["matchLabels"]).replace("\n              ", ","),
            );
            line(
                out,
                "Replicas",
                format!(
                    "{} desired | {} updated | {} total | {} available | {} unavailable",
                    spec["replicas"]
                        .as_i64()
                        .unwrap_or(n("desiredNumberScheduled")),
                    n("updatedReplicas"),
                    n("replicas"),
                    n("availableReplicas"),
                    n("unavailableReplicas")
                ),
            );
            containers(out, &spec["template"]["spec"], &Json::Null);
        }
        "Node" => {
            line(
                out,
                "Unschedulable",
                spec["unschedulable"].as_bool().unwrap_or(false),
            );
            let taints: Vec<String> = spec["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    let value = t["value"]
                        .as_str()
                        .map(|v| format!("={v}"))
                        .unwrap_or_default();
                    format!(
                        "{}{value}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect();
            line(
                out,
                "Taints",
                if taints.is_empty() {
                    "<none>".into()
                } else {
                    taints.join(", ")
                },
            );
        }
        "Service" => {
            line(out, "Type", spec["type"].as_str().unwrap_or("ClusterIP"));
            line(
                out,
                "Selector",
                pairs(&spec["selector"]).replace("\n              ", ","),
            );
            line(out, "IP", spec["clusterIP"].as_str().unwrap_or("<none>"));
        }
        _ => {}
    }
}

/// The events section: `events`, or that they could not be read.
fn events_of(out: &mut String, events: Option<&[Json]>, now: Timestamp) {
    match events {
        None => out.push_str("Events:       <unavailable>\n"),
        Some([]) => out.push_str("Events:       <none>\n"),
        Some(list) => {
            out.push_str(
                "Events:\n  Type     Reason              Age    From                Message\n",
            );
            for e in list {
                let when = e["lastTimestamp"]
                    .as_str()
                    .or_else(|| e["eventTime"].as_str());
                let from = e["source"]["component"]
                    .as_str()
                    .or_else(|| e["reportingComponent"].as_str())
                    .unwrap_or("");
                let _ = writeln!(
                    out,
                    "  {:<9}{:<20}{:<7}{:<20}{}",
                    e["type"].as_str().unwrap_or(""),
                    e["reason"].as_str().unwrap_or(""),
                    age(when, now),
                    from,
                    e["message"].as_str().unwrap_or("").trim()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_value_has_upstreams_shape() {
        let obj = json!({"kind": "Pod", "metadata": {"name": "p"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}});
        let ev = [json!({"type": "Normal", "reason": "Pulled", "message": "ok", "count": 3})];
        let v = described(obj.clone(), Some(&ev), "Name: p".into());
        assert_eq!(v["resource"], obj);
        assert_eq!(
            v["conditions"],
            json!([{"type": "Ready", "status": "True", "observedGeneration": "2"}])
        );
        assert_eq!(
            v["events"],
            json!([{"type": "Normal", "reason": "Pulled", "message": "ok", "count": "3"}])
        );
        assert_eq!(v["text"], "Name: p");
        assert_eq!(described(obj, None, String::new())["events"], json!([]));
    }

    #[test]
    fn renders_metadata_kind_details_and_events() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let obj = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"a": "b"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
        let ev = [
            json!({"type": "Normal", "reason": "Cordoned", "message": "done",
            "lastTimestamp": "2026-01-01T00:09:00Z", "source": {"component": "kite"}}),
        ];
        let text = render(&obj, Some(&ev), now);
        assert!(text.contains("Name:         n1"), "{text}");
        assert!(text.contains("Labels:       a=b"), "{text}");
        assert!(text.contains("Taints:       k=v:NoSchedule"), "{text}");
        assert!(
            text.contains("Ready               True    KubeletReady"),
            "{text}"
        );
        assert!(text.contains("Cordoned") && text.contains("60s"), "{text}");
        assert!(render(&obj, Some(&[]), now).contains("Events:       <none>"));
    }

    #[test]
    fn ages() {
        let now: Timestamp = "2026-01-03T00:00:00Z".parse().unwrap();
        assert_eq!(age(Some("2026-01-02T23:59:30Z"), now), "30s");
        assert_eq!(age(Some("2026-01-02T23:00:00Z"), now), "60m");
        assert_eq!(age(Some("2026-01-01T00:00:00Z"), now), "2d");
        assert_eq!(age(None, now), "<unknown>");
    }
}
