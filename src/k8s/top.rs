//! `k8s.top_nodes` and `k8s.top_pods`: CPU and memory usage from the metrics API
//! (`metrics.k8s.io`, served by metrics-server), in kubectl top's units.

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
        Some(ns) => Api::namespaced_with(session.client.clone(), ns, &ar),
        None => Api::all_with(session.client.clone(), &ar),
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
#[allow(clippy::cast_possible_truncation)]
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

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
fn percent(used: i64, of: Option<f64>) -> Json {
    match of {
        Some(total) if total > 0.0 => json!((used as f64 * 100.0 / total).round() as i64),
        _ => Json::Null,
    }
}

/// Usage per node: name, cpu ("250m"), memory ("512Mi"), the same as numbers
/// (cpu_millicores, memory_bytes) and as percentages of the node's allocatable.
///
/// # Errors
/// "metrics API not available (is metrics-server installed?)" when it is absent.
pub async fn nodes(session: &Session) -> Result<Vec<Json>> {
    let metrics = list_metrics(metrics_api(session, "nodes", "NodeMetrics", None)).await?;
    let nodes = ops::list(session, "nodes", None, None, None).await?;
    let allocatable = |name: &str| {
        nodes
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .map(|n| n["status"]["allocatable"].clone())
    };
    let mut out = Vec::with_capacity(metrics.len());
    for m in &metrics {
        let name = m["metadata"]["name"].as_str().unwrap_or("");
        let (cpu, mem) = usage_row(&m["usage"]);
        let alloc = allocatable(name).unwrap_or(Json::Null);
        out.push(json!({
            "name": name,
            "cpu": format!("{cpu}m"),
            "memory": mebi(mem),
            "cpu_millicores": cpu,
            "memory_bytes": mem,
            "cpu_percent": percent(cpu, alloc["cpu"].as_str().and_then(cpu_millis)),
            "memory_percent": percent(mem, alloc["memory"].as_str().and_then(memory_bytes)),
        }));
    }
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(out)
}

/// Usage per pod (summed over its containers): name, namespace, cpu, memory,
/// cpu_millicores, memory_bytes; `sort_by` "cpu" or "memory" puts the largest first.
///
/// # Errors
/// As [`nodes`], and an unknown `sort_by`.
pub async fn pods(session: &Session, namespace: &str, sort_by: &str) -> Result<Vec<Json>> {
    let key = match sort_by {
        "" => None,
        "cpu" => Some("cpu_millicores"),
        "memory" => Some("memory_bytes"),
        other => {
            return Err(Error::Invalid(format!(
                "sort_by must be \"cpu\" or \"memory\", not {other:?}"
            )));
        }
    };
    let ns = (namespace != "*").then_some(namespace);
    let metrics = list_metrics(metrics_api(session, "pods", "PodMetrics", ns)).await?;
    let mut out: Vec<Json> = metrics
        .iter()
        .map(|m| {
            let (mut cpu, mut mem) = (0, 0);
            for c in m["containers"].as_array().into_iter().flatten() {
                let (c_cpu, c_mem) = usage_row(&c["usage"]);
                cpu += c_cpu;
                mem += c_mem;
            }
            json!({
                "name": m["metadata"]["name"],
                "namespace": m["metadata"]["namespace"],
                "cpu": format!("{cpu}m"),
                "memory": mebi(mem),
                "cpu_millicores": cpu,
                "memory_bytes": mem,
            })
        })
        .collect();
    match key {
        Some(k) => out.sort_by_key(|p| std::cmp::Reverse(p[k].as_i64().unwrap_or(0))),
        None => out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str())),
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
    fn rows_use_kubectl_units() {
        let (cpu, mem) = usage_row(&json!({"cpu": "12345678n", "memory": "20480Ki"}));
        assert_eq!((cpu, mebi(mem)), (12, "20Mi".to_owned()));
        assert_eq!(percent(500, Some(2000.0)), json!(25));
        assert_eq!(percent(1, None), Json::Null);
    }
}
