//! The pod_disruption_budget builder (alias pdb): a policy/v1 PodDisruptionBudget.

use anyhow::Result;
use serde_json::Value as Json;

use super::args::{Args, Builder, Obj, Put, manifest};

pub(super) const POD_DISRUPTION_BUDGET: Builder = Builder {
    name: "pod_disruption_budget",
    keywords: &[
        "name",
        "namespace",
        "min_available",
        "max_unavailable",
        "selector",
        "unhealthy_pod_eviction_policy",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: pod_disruption_budget,
};

pub(super) const PDB: Builder = Builder {
    name: "pdb",
    ..POD_DISRUPTION_BUDGET
};

/// `min_available` or `max_unavailable` (a count or a percentage string) over the pods
/// `selector` matches; `selector` defaults to `{"app": name}` like the workload
/// builders' labels.
fn pod_disruption_budget(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    let min = a.int_or_str("min_available")?;
    let max = a.int_or_str("max_unavailable")?;
    if min.is_some() && max.is_some() {
        return Err(a.fail("give min_available or max_unavailable, not both"));
    }
    s.put("minAvailable", min);
    s.put("maxUnavailable", max);
    let selector = if let Some(sel) = a.selector("selector")? {
        sel
    } else {
        let app = Obj::from_iter([("app".to_owned(), a.req_str("name")?.into())]);
        serde_json::json!({ "matchLabels": app })
    };
    s.insert("selector".into(), selector);
    let policy = a.str("unhealthy_pod_eviction_policy")?;
    if let Some(p) = &policy
        && p != "IfHealthyBudget"
        && p != "AlwaysAllow"
    {
        return Err(a.err(
            "unhealthy_pod_eviction_policy",
            "must be \"IfHealthyBudget\" or \"AlwaysAllow\"",
        ));
    }
    s.put("unhealthyPodEvictionPolicy", policy);
    let mut m = manifest("policy/v1", "PodDisruptionBudget", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}
