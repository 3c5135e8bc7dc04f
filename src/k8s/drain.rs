//! `k8s.drain`: cordon a node, then evict its pods as `kubectl drain` does (mirror pods
//! stay, DaemonSet pods stay or block, unmanaged pods need `force`), and wait for them
//! to go.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value as Json, json};
use tokio::time::Instant;

use super::ops::{self, Result};
use super::session::Session;
use super::{eviction, node};

/// How `drain` treats the pods it finds.
#[derive(Debug, Clone, Copy, Default)]
pub struct DrainOptions {
    /// Evict pods no controller would recreate.
    pub force: bool,
    /// Leave DaemonSet pods in place instead of refusing them.
    pub ignore_daemonsets: bool,
    /// The pods' grace period, instead of their own.
    pub grace_period: Option<u32>,
}

/// What happens to one pod on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Evict,
    /// Left in place, not an error (mirror pods, DaemonSet pods when ignored).
    Skip(&'static str),
    /// Left in place and reported: the options do not allow evicting it.
    Refuse(&'static str),
}

fn controller_kind(pod: &Json) -> Option<&str> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["kind"].as_str())
}

/// Decides what to do with `pod`, following kubectl's drain filters.
pub fn plan(pod: &Json, options: DrainOptions) -> Plan {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    // Finished pods hold nothing; kubectl deletes them whatever their owner.
    if matches!(phase, "Succeeded" | "Failed") {
        return Plan::Evict;
    }
    if pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        return Plan::Skip("mirror pod (managed by the kubelet)");
    }
    match controller_kind(pod) {
        Some("DaemonSet") if options.ignore_daemonsets => Plan::Skip("DaemonSet-managed"),
        Some("DaemonSet") => {
            Plan::Refuse("DaemonSet-managed pod (give ignore_daemonsets=True to leave it)")
        }
        Some(_) => Plan::Evict,
        None if options.force => Plan::Evict,
        None => Plan::Refuse("not managed by a controller (give force=True to delete it)"),
    }
}

fn pod_id(pod: &Json) -> String {
    format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Drains `node` within `timeout`. Per-pod problems are reported in the result's
/// `errors`, not raised, so a script sees everything that happened.
///
/// # Errors
/// The node cannot be cordoned (e.g. it does not exist) or its pods cannot be listed.
pub async fn drain(
    session: &Session,
    node_name: &str,
    options: DrainOptions,
    timeout: Duration,
) -> Result<Json> {
    let deadline = Instant::now() + timeout;
    node::set_unschedulable(session, node_name, true).await?;
    let field = format!("spec.nodeName={node_name}");
    let pods = ops::list(session, "pods", Some("*"), None, Some(&field)).await?;
    let (mut evicted, mut skipped, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    let mut to_evict = Vec::new();
    for pod in &pods {
        let id = pod_id(pod);
        match plan(pod, options) {
            Plan::Evict => to_evict.push(pod),
            Plan::Skip(why) => skipped.push(json!(format!("{id}: {why}"))),
            Plan::Refuse(why) => errors.push(json!(format!("{id}: {why}"))),
        }
    }
    let outcomes = join_all(to_evict.iter().map(|pod| {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        eviction::evict(session, ns, name, options.grace_period, deadline)
    }))
    .await;
    let mut going = Vec::new();
    for (pod, outcome) in to_evict.into_iter().zip(outcomes) {
        match outcome {
            Ok(()) => going.push(pod),
            Err(e) => errors.push(json!(e.to_string())),
        }
    }
    if !session.dry_run {
        for pod in wait_gone(session, &going, deadline).await {
            errors.push(json!(format!(
                "{}: still terminating when the timeout ran out",
                pod_id(pod)
            )));
        }
    }
    evicted.extend(going.iter().map(|p| json!(pod_id(p))));
    Ok(json!({"node": node_name, "evicted": evicted, "skipped": skipped, "errors": errors}))
}

/// Waits until the evicted pods are gone (or replaced: a new pod with the same name has
/// another uid); returns those still there at `deadline`.
async fn wait_gone<'p>(session: &Session, pods: &[&'p Json], deadline: Instant) -> Vec<&'p Json> {
    let Ok(target) = ops::Target::resolve(session, "pods", Some("*")).await else {
        return pods.to_vec();
    };
    let mut left: Vec<&Json> = pods.to_vec();
    let mut pause = Duration::from_millis(200);
    loop {
        let mut still = Vec::new();
        for pod in left {
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
            let name = pod["metadata"]["name"].as_str().unwrap_or("");
            let scoped = ops::Target {
                resource: target.resource.clone(),
                namespace: Some(ns.to_owned()),
            };
            match ops::get_of(session, &scoped, name).await {
                Ok(now) if now["metadata"]["uid"] == pod["metadata"]["uid"] => still.push(pod),
                // Gone, replaced, or unreadable: nothing more to wait for.
                _ => {}
            }
        }
        if still.is_empty() || Instant::now() + pause >= deadline {
            return still;
        }
        left = still;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner: Option<&str>, phase: &str) -> Json {
        let refs: Vec<Json> = owner
            .map(|k| json!({"kind": k, "name": "x", "controller": true}))
            .into_iter()
            .collect();
        json!({"metadata": {"name": "p", "namespace": "n", "ownerReferences": refs},
               "status": {"phase": phase}})
    }

    #[test]
    fn follows_kubectls_filters() {
        let o = DrainOptions::default();
        assert_eq!(plan(&pod(Some("ReplicaSet"), "Running"), o), Plan::Evict);
        assert!(matches!(plan(&pod(None, "Running"), o), Plan::Refuse(_)));
        assert!(matches!(
            plan(&pod(Some("DaemonSet"), "Running"), o),
            Plan::Refuse(_)
        ));
        // Finished pods go whatever their owner.
        assert_eq!(plan(&pod(None, "Succeeded"), o), Plan::Evict);
        let forced = DrainOptions {
            force: true,
            ignore_daemonsets: true,
            grace_period: None,
        };
        assert_eq!(plan(&pod(None, "Running"), forced), Plan::Evict);
        assert!(matches!(
            plan(&pod(Some("DaemonSet"), "Running"), forced),
            Plan::Skip(_)
        ));
        let mut mirror = pod(None, "Running");
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
        assert!(matches!(plan(&mirror, forced), Plan::Skip(_)));
    }
}
