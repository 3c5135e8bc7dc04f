//! What one reconcile did, as a test sees it: the key, its trigger, the requeue or the
//! error, the writes it made to the fake cluster and the events it recorded.

use serde_json::{Value as Json, json};

use crate::control::manual::Step;
use crate::fake_cluster::Write;

/// The report of `step`, given the writes the fake cluster took and the lines the
/// script printed while it ran.
pub fn report(step: &Step, writes: &[Write], output: Vec<String>) -> Json {
    let (events, others): (Vec<&Write>, Vec<&Write>) =
        writes.iter().partition(|w| w.kind == "Event");
    let writes: Vec<Json> = others
        .iter()
        .map(|w| {
            json!({
                "verb": w.verb,
                "kind": w.kind,
                "namespace": w.namespace,
                "name": w.name,
                "object": w.after.clone().unwrap_or(Json::Null),
            })
        })
        .collect();
    let events: Vec<Json> = events
        .iter()
        .filter_map(|w| w.after.as_ref())
        .map(event)
        .collect();
    json!({
        "key": step.key,
        "related": step.related,
        "duration_ms": u64::try_from(step.elapsed.as_millis()).unwrap_or(u64::MAX),
        "trigger": step.trigger,
        "requeue_after": step.requeue_after.map(crate::duration::format),
        "error": step.error.as_deref().map(short_error),
        "traceback": step.error,
        "retry_in": step.retry_in.map(crate::duration::format),
        "writes": writes,
        "events": events,
        "output": output,
    })
}

/// An Event as `{type, reason, message, object}` (core/v1 and events.k8s.io alike).
fn event(e: &Json) -> Json {
    let involved = if e["involvedObject"].is_object() {
        &e["involvedObject"]
    } else {
        &e["regarding"]
    };
    let message = e["message"].as_str().or_else(|| e["note"].as_str());
    json!({
        "type": e["type"],
        "reason": e["reason"],
        "message": message,
        "object": format!(
            "{}/{}",
            involved["kind"].as_str().unwrap_or_default(),
            involved["name"].as_str().unwrap_or_default()
        ),
    })
}

/// The error's own line, without the traceback (the whole text is in `traceback`).
fn short_error(rendered: &str) -> String {
    rendered
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| rendered.lines().next().unwrap_or_default())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_report_separates_events_and_shortens_the_error() {
        let step = Step {
            key: "default/web".into(),
            related: false,
            ran: true,
            trigger: "test".into(),
            requeue_after: Some(Duration::from_secs(30)),
            error: Some("Traceback:\n  x.star:3\nerror: boom\n --> x.star:3:5".into()),
            retry_in: None,
            elapsed: Duration::from_millis(3),
        };
        let write = |kind: &str, after: Json| Write {
            seq: 1,
            verb: "create",
            kind: kind.into(),
            namespace: "default".into(),
            name: "n".into(),
            manager: None,
            after: Some(after),
        };
        let writes = vec![
            write("ConfigMap", json!({"data": {"a": "1"}})),
            write(
                "Event",
                json!({"type": "Normal", "reason": "Reconciled", "message": "applied x",
                       "involvedObject": {"kind": "Deployment", "name": "web"}}),
            ),
        ];
        let r = report(&step, &writes, vec!["hi".into()]);
        assert_eq!(r["requeue_after"], "30s");
        assert_eq!(r["error"], "boom");
        assert_eq!(r["writes"][0]["kind"], "ConfigMap");
        assert_eq!(r["writes"].as_array().map(Vec::len), Some(1));
        assert_eq!(r["events"][0]["object"], "Deployment/web");
        assert_eq!(r["events"][0]["reason"], "Reconciled");
        assert_eq!(r["output"][0], "hi");
    }
}
