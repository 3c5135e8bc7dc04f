//! The compact, one-line diff `kite dev` prints under a reconcile for each write it made.

use serde_json::Value as Json;

/// A created object counts as new only if it is this recent; older ones were made by
/// someone else before kite first wrote them.
const CREATED_WITHIN_SECS: i64 = 10;

/// How many changes one line shows before summing up the rest.
const SHOWN_CHANGES: usize = 4;

/// How many characters of a value are shown.
const VALUE_WIDTH: usize = 48;

/// The line for one write: `+ kind ns/name (created)`, `~ kind ns/name  path: a → b`,
/// `- kind ns/name (deleting)` or `= kind ns/name (no change)`. `previous` is the state
/// an earlier write of the same object returned, if one was seen.
pub fn write_line(previous: Option<&Json>, new: &Json, now: jiff::Timestamp) -> String {
    let what = object_name(new);
    let deleting = new["metadata"]["deletionTimestamp"].is_string();
    let Some(previous) = previous else {
        return if deleting {
            format!("- {what} (deleting)")
        } else if created_by_this_write(new, now) {
            format!("+ {what} (created)")
        } else {
            format!("~ {what} (first write seen)")
        };
    };
    let changes = changes(previous, new);
    let sign = if deleting { '-' } else { '~' };
    if changes.is_empty() {
        return if deleting {
            format!("- {what} (deleting)")
        } else {
            format!("= {what} (no change)")
        };
    }
    let mut line = format!("{sign} {what}  ");
    line.push_str(&changes[..changes.len().min(SHOWN_CHANGES)].join(", "));
    if changes.len() > SHOWN_CHANGES {
        line.push_str(&format!(" (+{} more)", changes.len() - SHOWN_CHANGES));
    }
    line
}

/// `kind ns/name` in lower case, or `kind name` for a cluster-scoped object.
pub fn object_name(obj: &Json) -> String {
    let kind = obj["kind"].as_str().unwrap_or("object").to_lowercase();
    let name = obj["metadata"]["name"].as_str().unwrap_or("?");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// A recent object with a single field manager: nobody but this write has touched it.
fn created_by_this_write(obj: &Json, now: jiff::Timestamp) -> bool {
    let recent = obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .is_some_and(|t| t.duration_until(now).as_secs().abs() <= CREATED_WITHIN_SECS);
    let managers = obj["metadata"]["managedFields"]
        .as_array()
        .map_or(1, Vec::len);
    recent && managers <= 1
}

/// Every difference between two states of an object, as `path: old → new`,
/// `path: + new` or `path: - old`, leaving out what changes on every write.
pub fn changes(old: &Json, new: &Json) -> Vec<String> {
    let mut out = Vec::new();
    walk(&mut Vec::new(), old, new, &mut out);
    out
}

fn walk(path: &mut Vec<String>, old: &Json, new: &Json, out: &mut Vec<String>) {
    if ignored(path) || old == new {
        return;
    }
    match (old, new) {
        (Json::Object(a), Json::Object(b)) => {
            for (key, value) in a {
                path.push(key.clone());
                match b.get(key) {
                    Some(other) => walk(path, value, other, out),
                    None if !ignored(path) => {
                        out.push(format!("{}: - {}", render_path(path), render(value)));
                    }
                    None => {}
                }
                path.pop();
            }
            for (key, value) in b {
                if a.contains_key(key) {
                    continue;
                }
                path.push(key.clone());
                if !ignored(path) {
                    out.push(format!("{}: + {}", render_path(path), render(value)));
                }
                path.pop();
            }
        }
        (Json::Array(a), Json::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                path.push(format!("[{i}]"));
                walk(path, x, y, out);
                path.pop();
            }
        }
        _ => out.push(format!(
            "{}: {} → {}",
            render_path(path),
            render(old),
            render(new)
        )),
    }
}

/// Bookkeeping the API server changes on every write, and status timestamps.
fn ignored(path: &[String]) -> bool {
    match path {
        [m, field] if m == "metadata" => matches!(
            field.as_str(),
            "resourceVersion" | "managedFields" | "generation"
        ),
        [m, a, key] if m == "metadata" && a == "annotations" => {
            key == "kubectl.kubernetes.io/last-applied-configuration"
        }
        [s, .., last] if s == "status" => {
            last.ends_with("Time") || last.ends_with("Timestamp") || last == "observedGeneration"
        }
        _ => false,
    }
}

/// `spec.replicas`, `spec.containers[0].image`, `metadata.labels["app.kubernetes.io/name"]`.
fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if part.starts_with('[') {
            out.push_str(part);
        } else if !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        } else {
            out.push_str(&format!("[{}]", Json::String(part.clone())));
        }
    }
    out
}

/// A value as compact JSON, cut short when long.
fn render(value: &Json) -> String {
    let text = value.to_string();
    if text.chars().count() <= VALUE_WIDTH {
        return text;
    }
    let mut short: String = text.chars().take(VALUE_WIDTH - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2025-01-01T12:00:00Z".parse().unwrap()
    }

    fn deployment(replicas: u32, rv: &str) -> Json {
        json!({
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": rv,
                         "generation": 3, "managedFields": [{"manager": "a"}, {"manager": "b"}],
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"image": "nginx:1"}]}}},
        })
    }

    #[test]
    fn nested_changes_are_paths_and_bookkeeping_is_ignored() {
        let old = deployment(10, "1");
        let mut new = deployment(5, "2");
        new["metadata"]["generation"] = json!(4);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_eq!(
            write_line(Some(&old), &new, now()),
            "~ deployment default/web  spec.replicas: 10 → 5, spec.template.spec.containers[0].image: \"nginx:1\" → \"nginx:2\""
        );
    }

    #[test]
    fn added_and_removed_keys_and_odd_names() {
        let old = json!({"metadata": {"labels": {"a": "1", "app.kubernetes.io/name": "x"}}});
        let new = json!({"metadata": {"labels": {"b": "2"}}});
        assert_eq!(
            changes(&old, &new),
            [
                "metadata.labels.a: - \"1\"",
                "metadata.labels[\"app.kubernetes.io/name\"]: - \"x\"",
                "metadata.labels.b: + \"2\""
            ]
        );
    }

    #[test]
    fn lists_of_another_length_are_shown_whole() {
        let old = json!({"spec": {"ports": [80]}});
        let new = json!({"spec": {"ports": [80, 443]}});
        assert_eq!(changes(&old, &new), ["spec.ports: [80] → [80,443]"]);
    }

    #[test]
    fn status_timestamps_and_rewrites_without_change() {
        let old = json!({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n", "resourceVersion": "1"},
                         "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "a"}]}});
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!("2");
        new["status"]["conditions"][0]["lastTransitionTime"] = json!("b");
        assert_eq!(
            write_line(Some(&old), &new, now()),
            "= configmap n/x (no change)"
        );
    }

    #[test]
    fn first_sight_created_or_not_and_deletions() {
        let fresh = json!({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n",
            "creationTimestamp": "2025-01-01T11:59:58Z", "managedFields": [{"manager": "kite"}]}});
        assert_eq!(write_line(None, &fresh, now()), "+ configmap n/x (created)");
        let old = deployment(1, "1");
        assert_eq!(
            write_line(None, &old, now()),
            "~ deployment default/web (first write seen)"
        );
        let gone =
            json!({"kind": "Namespace", "metadata": {"name": "t", "deletionTimestamp": "x"}});
        assert_eq!(write_line(None, &gone, now()), "- namespace t (deleting)");
    }

    #[test]
    fn many_changes_are_summed_up_and_long_values_cut() {
        let old = json!({"data": {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1", "f": "1"}, "kind": "ConfigMap", "metadata": {"name": "x"}});
        let new = json!({"data": {"a": "2", "b": "2", "c": "2", "d": "2", "e": "2", "f": "2"}, "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert!(write_line(Some(&old), &new, now()).ends_with("(+2 more)"));
        let long = render(&json!("x".repeat(100)));
        assert_eq!(long.chars().count(), VALUE_WIDTH);
        assert!(long.ends_with('…'));
    }
}
