//! The local cluster: a client, `bench-*` namespaces that are always deleted, deployments.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::LABEL;

/// The admin kubeconfig `make cluster-up` writes.
pub fn kubeconfig() -> PathBuf {
    let dir = std::env::var_os("KITE_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cluster"));
    dir.join("kubeconfig")
}

pub async fn client() -> anyhow::Result<Client> {
    let path = kubeconfig();
    let kc = Kubeconfig::read_from(&path)
        .with_context(|| format!("{}: run `make cluster-up`", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The namespaces this run created. Dropping it deletes those still listed, so a
/// panic or an error never leaves 1000 deployments behind.
pub struct Namespaces {
    client: Client,
    prefix: String,
    names: Mutex<Vec<String>>,
}

impl Namespaces {
    pub fn new(client: Client) -> Self {
        // Unique per run, so concurrent runs (or a leftover of a killed one) never collide.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let prefix = format!("bench-{:x}{:x}", std::process::id() % 0xfff, nanos % 0xffff);
        Self {
            client,
            prefix,
            names: Mutex::default(),
        }
    }

    /// Creates `bench-<run>-<suffix>`, with a ResourceQuota of zero pods (see README).
    pub async fn create(&self, suffix: &str) -> anyhow::Result<String> {
        let name = format!("{}-{suffix}", self.prefix);
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kite.bench/owned": "true"}}
        }))?;
        self.names.lock().unwrap().push(name.clone());
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "no-pods"},
            "spec": {"hard": {"pods": "0"}},
        }))?;
        Api::<ResourceQuota>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &quota)
            .await?;
        Ok(name)
    }

    /// Deletes a namespace now (without waiting for its contents to go).
    pub async fn delete(&self, name: &str) {
        let api = Api::<Namespace>::all(self.client.clone());
        match tokio::time::timeout(
            Duration::from_secs(30),
            api.delete(name, &DeleteParams::background()),
        )
        .await
        {
            Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))) => {
                self.names.lock().unwrap().retain(|n| n != name)
            }
            Ok(Err(e)) => eprintln!("warning: deleting namespace {name}: {e}"),
            Err(_) => eprintln!("warning: deleting namespace {name} timed out"),
        }
    }

    /// Deletes every namespace still listed.
    pub async fn delete_all(&self) {
        let names = self.names.lock().unwrap().clone();
        for name in names {
            self.delete(&name).await;
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Drop cannot be async and may run on a dead runtime: kubectl, synchronously.
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        for name in names {
            eprintln!("cleanup: deleting namespace {name}");
            let _ = std::process::Command::new("kubectl")
                .args([
                    "delete",
                    "namespace",
                    &name,
                    "--wait=false",
                    "--ignore-not-found",
                ])
                .env("KUBECONFIG", kubeconfig())
                .stdout(std::process::Stdio::null())
                .status();
        }
    }
}

/// The name of deployment `i`.
pub fn deployment_name(i: usize) -> String {
    format!("d-{i:04}")
}

/// Creates deployments `d-0000..` labelled for the controller, 16 at a time.
///
/// They are created paused: a paused deployment whose ReplicaSet never existed gets
/// none, so the controller-manager creates no ReplicaSets and tries to create no pods
/// (the namespace's pod quota of 0 is a second guard). The controllers under test only
/// read and write `spec.replicas`, so their logic is unaffected.
pub async fn create_deployments(
    client: &Client,
    ns: &str,
    count: usize,
    replicas: i32,
) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let label = LABEL.split_once('=').expect("key=value");
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = deployment_name(i);
                let d: Deployment = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {label.0: label.1}},
                    "spec": {
                        "replicas": replicas,
                        "paused": true,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": {"app": name}},
                            "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]},
                        },
                    },
                }))?;
                api.create(&PostParams::default(), &d)
                    .await
                    .with_context(|| format!("creating deployment {ns}/{name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Waits until the deployment controller has processed every deployment
/// (observedGeneration == generation), so its status writes do not overlap the
/// measurement.
pub async fn wait_settled(
    client: &Client,
    ns: &str,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + timeout;
    loop {
        let list = api.list(&ListParams::default()).await?;
        let settled = list
            .items
            .iter()
            .filter(|d| {
                d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
            })
            .count();
        if list.items.len() == count && settled == count {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{settled}/{count} deployments in {ns} settled after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// ReplicaSets and pods in `ns`: both must stay 0 for the cluster to stay light.
pub async fn replicasets_and_pods(client: &Client, ns: &str) -> anyhow::Result<(usize, usize)> {
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?;
    Ok((rs.items.len(), pods.items.len()))
}

/// DriftCorrected events in `ns`, counting aggregated repeats (`count`).
pub async fn drift_events(client: &Client, ns: &str) -> anyhow::Result<i64> {
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields("reason=DriftCorrected"))
        .await?;
    Ok(events
        .items
        .iter()
        .map(|e| i64::from(e.count.unwrap_or(1)))
        .sum())
}
