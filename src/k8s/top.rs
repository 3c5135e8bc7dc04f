//! `k8s.top_nodes` and `k8s.top_pods`: upstream's capacity and request figures, plus
//! CPU and memory usage from the metrics API (`metrics.k8s.io`, served by
//! metrics-server) in kubectl top's units when it is there.

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::{Value as Json, json};

use super::ops::{self, Error, Result};
use super::session::Session;

const NOT_AVAILABLE: &str = "metrics API not available (is metrics-server installed?)";

fn metrics_api(
    session: &Session,
    plural: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match namespace {
        Some(ns) => Api::namespaced_with(session.client_here(), ns, &ar),
        None => Api::all_with(session.client_here(), &ar),
    }
}

/// How long metrics-server gets to answer: kube's client retries its 503s (registered
/// but not running) for much longer than a script should wait to learn that.
const METRICS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn list_metrics(api: Api<DynamicObject>) -> Result<Vec<Json>> {
    let Ok(answer) = tokio::time::timeout(METRICS_WAIT, api.list(&ListParams::default())).await
    else {
        return Err(Error::Invalid(format!(
            "{NOT_AVAILABLE}: no answer within {METRICS_WAIT:?}"
        )));
    };
    match answer {
        Ok(list) => list
            .items
            .iter()
            .map(|o| serde_json::to_value(o).map_err(Error::Encode))
            .collect(),
        // 404: no such API group; 503: registered but metrics-server is not answering.
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 503) => {
            Err(Error::Invalid(NOT_AVAILABLE.into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// A CPU quantity in millicores ("250m", "1", "123456789n").
pub fn cpu_millis(q: &str) -> Option<f64> {
    let (num, unit) = split_quantity(q)?;
    let scale = match unit {
        "n" => 1e-6,
        "u" => 1e-3,
        "m" => 1.0,
        "" => 1e3,
        "k" => 1e6,
        _ => return None,
    };
    Some(num * scale)
}

/// A memory quantity in bytes ("128Mi", "1G", "1024").
pub fn memory_bytes(q: &str) -> Option<f64> {
    let (num, unit) = split_quantity(q)?;
    let scale = match unit {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(num * scale)
}

fn split_quantity(q: &str) -> Option<(f64, &str)> {
    let q = q.trim();
    let at = q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len());
    let (num, unit) = q.split_at(at);
    // Exponent forms ("1e3") are legal quantities but nothing reports usage that way.
    Some((num.parse().ok()?, unit))
}

/// kubectl top's rendering: whole millicores and whole mebibytes.
#[expect(
    clippy::cast_possible_truncation,
    reason = "whole millicores and mebibytes, far below 2^63"
)]
fn usage_row(usage: &Json) -> (i64, i64) {
    let cpu = usage["cpu"].as_str().and_then(cpu_millis).unwrap_or(0.0);
    let mem = usage["memory"]
        .as_str()
        .and_then(memory_bytes)
        .unwrap_or(0.0);
    (cpu.round() as i64, mem.round() as i64)
}

fn mebi(bytes: i64) -> String {
    format!("{}Mi", bytes / (1024 * 1024))
}

#[expect(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    reason = "a percentage of a node's capacity, far below 2^52"
)]
fn percent(used: i64, of: Option<f64>) -> Json {
    match of {
        Some(total) if total > 0.0 => json!((used as f64 * 100.0 / total).round() as i64),
        _ => Json::Null,
    }
}

/// The metrics rows, or None when metrics-server is absent: the rows add usage to
/// what the API itself reports, so its absence is no error (upstream needs none).
async fn optional_metrics(api: Api<DynamicObject>) -> Result<Option<Vec<Json>>> {
    match list_metrics(api).await {
        Ok(rows) => Ok(Some(rows)),
        Err(Error::Invalid(m)) if m.starts_with(NOT_AVAILABLE) => {
            // Upstream's figures need no metrics-server; say why usage is missing.
            tracing::warn!("k8s.top: {m}; usage left out, capacity and requests only");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A dict of quantities with every value as a string, as upstream reports them.
fn quantity_strings(v: &Json) -> Json {
    match v.as_object() {
        Some(m) => m
            .iter()
            .map(|(k, v)| {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k.clone(), Json::String(text))
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
        None => json!({}),
    }
}

/// Per node, as upstream: name, capacity and allocatable (dicts of quantity strings);
/// with metrics-server also usage: cpu ("250m"), memory ("512Mi"), cpu_millicores,
/// memory_bytes and percentages of allocatable.
///
/// # Errors
/// The node list or the metrics API failing (other than being absent).
pub async fn nodes(session: &Session) -> Result<Vec<Json>> {
    let nodes = ops::list(session, "nodes", None, None, None).await?;
    let metrics = optional_metrics(metrics_api(session, "nodes", "NodeMetrics", None)).await?;
    let mut out = Vec::with_capacity(nodes.len());
    for n in &nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or("");
        let alloc = &n["status"]["allocatable"];
        let mut row = json!({
            "name": name,
            "capacity": quantity_strings(&n["status"]["capacity"]),
            "allocatable": quantity_strings(alloc),
        });
        let usage = metrics
            .iter()
            .flatten()
            .find(|m| m["metadata"]["name"] == name);
        if let (Some(m), Some(r)) = (usage, row.as_object_mut()) {
            let (cpu, mem) = usage_row(&m["usage"]);
            r.insert("cpu".into(), format!("{cpu}m").into());
            r.insert("memory".into(), mebi(mem).into());
            r.insert("cpu_millicores".into(), cpu.into());
            r.insert("memory_bytes".into(), mem.into());
            let of_cpu = alloc["cpu"].as_str().and_then(cpu_millis);
            let of_mem = alloc["memory"].as_str().and_then(memory_bytes);
            r.insert("cpu_percent".into(), percent(cpu, of_cpu));
            r.insert("memory_percent".into(), percent(mem, of_mem));
        }
        out.push(row);
    }
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(out)
}

/// A pod's total request of `resource` over its containers: the one container's own
/// text when only one asks (as upstream reports it), else the sum in kubectl's units.
#[expect(
    clippy::cast_possible_truncation,
    reason = "whole millicores and mebibytes, far below 2^63"
)]
fn request(pod: &Json, resource: &str) -> String {
    let asked: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["resources"]["requests"][resource].as_str())
        .collect();
    match asked.as_slice() {
        [] => String::new(),
        [one] => (*one).to_owned(),
        many if resource == "cpu" => {
            let m: f64 = many.iter().filter_map(|q| cpu_millis(q)).sum();
            format!("{}m", m.round() as i64)
        }
        many => mebi(many.iter().filter_map(|q| memory_bytes(q)).sum::<f64>() as i64),
    }
}

/// Per pod, as upstream: name, namespace, status (the phase), cpu_request and
/// memory_request; with metrics-server also usage summed over its containers (cpu,
/// memory, cpu_millicores, memory_bytes). `sort_by` "cpu" or "memory" puts the
/// largest first: by usage when known, else by request.
///
/// # Errors
/// As [`nodes`], and an unknown `sort_by`.
#[expect(
    clippy::cast_possible_truncation,
    reason = "whole millicores and mebibytes, far below 2^63"
)]
pub async fn pods(session: &Session, namespace: &str, sort_by: &str) -> Result<Vec<Json>> {
    if !matches!(sort_by, "" | "cpu" | "memory") {
        return Err(Error::Invalid(format!(
            "sort_by must be \"cpu\" or \"memory\", not {sort_by:?}"
        )));
    }
    let ns = (namespace != "*").then_some(namespace);
    let pods = ops::list(session, "pods", Some(namespace), None, None).await?;
    let metrics = optional_metrics(metrics_api(session, "pods", "PodMetrics", ns)).await?;
    let mut out: Vec<Json> = pods
        .iter()
        .map(|p| {
            let meta = &p["metadata"];
            let mut row = json!({
                "name": meta["name"],
                "namespace": meta["namespace"],
                "status": p["status"]["phase"].as_str().unwrap_or(""),
                "cpu_request": request(p, "cpu"),
                "memory_request": request(p, "memory"),
            });
            let usage = metrics.iter().flatten().find(|m| {
                m["metadata"]["name"] == meta["name"]
                    && m["metadata"]["namespace"] == meta["namespace"]
            });
            if let (Some(m), Some(r)) = (usage, row.as_object_mut()) {
                let (mut cpu, mut mem) = (0, 0);
                for c in m["containers"].as_array().into_iter().flatten() {
                    let (c_cpu, c_mem) = usage_row(&c["usage"]);
                    cpu += c_cpu;
                    mem += c_mem;
                }
                r.insert("cpu".into(), format!("{cpu}m").into());
                r.insert("memory".into(), mebi(mem).into());
                r.insert("cpu_millicores".into(), cpu.into());
                r.insert("memory_bytes".into(), mem.into());
            }
            row
        })
        .collect();
    let cpu = sort_by == "cpu";
    let weight = |p: &Json| -> i64 {
        let (used, asked) = if cpu {
            ("cpu_millicores", "cpu_request")
        } else {
            ("memory_bytes", "memory_request")
        };
        p[used].as_i64().unwrap_or_else(|| {
            let q = p[asked].as_str().unwrap_or("");
            let parsed = if cpu { cpu_millis(q) } else { memory_bytes(q) };
            parsed.unwrap_or(0.0).round() as i64
        })
    };
    if sort_by.is_empty() {
        out.sort_by(|a, b| {
            (a["namespace"].as_str(), a["name"].as_str())
                .cmp(&(b["namespace"].as_str(), b["name"].as_str()))
        });
    } else {
        out.sort_by_key(|p| std::cmp::Reverse(weight(p)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(cpu_millis("250m"), Some(250.0));
        assert_eq!(cpu_millis("2"), Some(2000.0));
        assert_eq!(cpu_millis("1500000n"), Some(1.5));
        assert_eq!(cpu_millis("0.5"), Some(500.0));
        assert_eq!(cpu_millis("x"), None);
        assert_eq!(memory_bytes("1Ki"), Some(1024.0));
        assert_eq!(memory_bytes("128Mi"), Some(134_217_728.0));
        assert_eq!(memory_bytes("1G"), Some(1e9));
        assert_eq!(memory_bytes("12Qi"), None);
    }

    #[test]
    fn requests_read_as_upstream_and_sum_over_containers() {
        let one = json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}, {}]}});
        assert_eq!(request(&one, "cpu"), "100m");
        assert_eq!(request(&one, "memory"), "64Mi");
        let two = json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            {"resources": {"requests": {"cpu": "0.5", "memory": "1Gi"}}}]}});
        assert_eq!(request(&two, "cpu"), "600m");
        assert_eq!(request(&two, "memory"), "1088Mi");
        assert_eq!(request(&json!({}), "cpu"), "");
        assert_eq!(
            quantity_strings(&json!({"cpu": "4", "pods": 110})),
            json!({"cpu": "4", "pods": "110"})
        );
    }

    #[test]
    fn rows_use_kubectl_units() {
        let (cpu, mem) = usage_row(&json!({"cpu": "12345678n", "memory": "20480Ki"}));
        assert_eq!((cpu, mebi(mem)), (12, "20Mi".to_owned()));
        assert_eq!(percent(500, Some(2000.0)), json!(25));
        assert_eq!(percent(1, None), Json::Null);
    }
}
