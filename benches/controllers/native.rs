//! The max-replicas controller in plain kube-rs, the baseline kite is compared with.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::{LABEL, MAX_REPLICAS, WORKERS};

const REASON: &str = "DriftCorrected";
const COMPONENT: &str = "native-bench";

struct Ctx {
    client: Client,
    hostname: String,
}

/// Runs the controller on `namespace` until SIGTERM/SIGINT (or the parent kills it).
pub async fn run(namespace: &str) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "native".into());
    let ctx = Arc::new(Ctx { client, hostname });
    println!("Starting native max-replicas controller. Max allowed: {MAX_REPLICAS}");
    // kite skips status-only updates (generation_changed=True); kube's Controller
    // reconciles on every event. Filtering needs Controller::for_stream, which is behind
    // kube's unstable-runtime feature; the extra reconciles make no API calls, so plain
    // Controller::new is kept.
    Controller::new(deployments, watcher::Config::default().labels(LABEL))
        .with_config(controller::Config::default().concurrency(WORKERS as u16))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                eprintln!("reconcile failed: {e}");
            }
        })
        .await;
    Ok(())
}

/// The script's `reconcile`, line for line: patch down and record an event, or log.
async fn reconcile(deploy: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let start = std::time::Instant::now();
    let result = correct(&deploy, &ctx).await;
    // One timestamped line per reconcile on stderr, as kite logs: equal logging cost, and
    // the timeline to read when a latency looks odd.
    eprintln!(
        "{:.6} reconciled {}/{} duration_ms={} ok={}",
        Timestamp::now(),
        deploy.namespace().unwrap_or_default(),
        deploy.name_any(),
        start.elapsed().as_millis(),
        result.is_ok()
    );
    result?;
    // The script's poll="30s", the kube-rs way: look at every object again after 30 s.
    Ok(Action::requeue(Duration::from_secs(30)))
}

async fn correct(deploy: &Deployment, ctx: &Ctx) -> Result<(), kube::Error> {
    let name = deploy.name_any();
    let ns = deploy.namespace().unwrap_or_default();
    let replicas = deploy.spec.replicas.unwrap_or(1);
    if replicas > MAX_REPLICAS {
        println!("[DRIFT DETECTED] {ns}/{name} replicas={replicas} exceeds max={MAX_REPLICAS}");
        let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = json!({"spec": {"replicas": MAX_REPLICAS}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        let message = format!("Scaled down replicas from {replicas} to {MAX_REPLICAS}");
        record_event(ctx, deploy, &message).await?;
    } else {
        println!("[IN POLICY] {ns}/{name} replicas={replicas} within limit (<= {MAX_REPLICAS})");
    }
    Ok(())
}

fn error_policy(_: Arc<Deployment>, _: &kube::Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// A core/v1 Event aggregated the way kite's `k8s.event` does it (and client-go's
/// correlator): a name derived from the content, so a repeat bumps `count` instead of
/// creating a new object. Same API calls as kite: a create, or on 409 a get and a patch.
async fn record_event(ctx: &Ctx, deploy: &Deployment, message: &str) -> Result<(), kube::Error> {
    let name = deploy.name_any();
    let ns = deploy.namespace().unwrap_or_default();
    let uid = deploy.uid().unwrap_or_default();
    let event_name = event_name(&name, &uid, message);
    let now = format!("{:.0}", Timestamp::now());
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": event_name, "namespace": ns},
        "involvedObject": {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": ns,
            "uid": uid, "resourceVersion": deploy.resource_version(),
        },
        "reason": REASON,
        "message": message,
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": ctx.hostname,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }))
    .expect("a valid Event");
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => bump(&api, &event_name, &now).await,
        Err(e) => Err(e),
    }
}

/// Counts an existing event once more; the resourceVersion precondition keeps two
/// workers from losing a count.
async fn bump(api: &Api<Event>, name: &str, now: &str) -> Result<(), kube::Error> {
    let mut attempt = 0;
    loop {
        let existing = api.get(name).await?;
        let patch = json!({
            "metadata": {"resourceVersion": existing.metadata.resource_version},
            "count": existing.count.unwrap_or(1) + 1,
            "lastTimestamp": now,
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 3 => attempt += 1,
            other => return other.map(drop),
        }
    }
}

/// `<object>.<FNV-1a of the event's identity>`, stable across processes.
fn event_name(obj_name: &str, uid: &str, message: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [uid, obj_name, REASON, message, "Normal"] {
        for b in part.bytes().chain([0xff]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{obj_name}.{h:016x}")
}
