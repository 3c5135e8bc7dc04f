//! The bench's objects: namespaces with deployments, a ceiling, the
//! StarlarkControllers and ClusterStarlarkControllers, and what is measured of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value as Json, json};

use crate::cluster::{self, Namespaces};

const MAX_REPLICAS: &str = include_str!("../../examples/max-replicas-controller.star");
/// What each ClusterStarlarkController runs: a watch of every Pod, and nothing else.
const PODS: &str = "def reconcile(pod):\n    pass\n\nk8s.control(\"pods\", namespace = \"*\", reconcile = reconcile)\n";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "starkite.io".into(),
        version: "v1alpha1".into(),
        api_version: "starkite.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Drift-correction latencies.
#[derive(Debug, Default)]
pub struct Drift {
    pub p50: Duration,
    pub p99: Duration,
}

pub struct Fleet {
    client: kube::Client,
    run: String,
    operator_ns: String,
    namespaces: Vec<String>,
    deployments: usize,
    size: usize,
    cluster: usize,
}

impl Fleet {
    pub fn new(client: kube::Client) -> Self {
        let run = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() % 0xff_ffff)
        );
        Self {
            client,
            run,
            operator_ns: String::new(),
            namespaces: Vec::new(),
            deployments: 0,
            size: 0,
            cluster: 0,
        }
    }

    pub fn ceiling(&self) -> String {
        format!("kite-bench-ceiling-{}", self.run)
    }

    pub fn webhook(&self) -> String {
        format!("kite-bench-{}", self.run)
    }

    pub fn selector(&self) -> String {
        format!("starkite.io/bench={}", self.run)
    }

    pub fn operator_namespace(&self) -> &str {
        &self.operator_ns
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Distinct (resource, scope, selector) triples: each namespace's Deployments, every
    /// Pod, and the operator's own watches of its two kinds, ConfigMaps, the ceiling,
    /// and the ServiceAccounts, Roles, RoleBindings, ClusterRoles and
    /// ClusterRoleBindings it generates.
    pub fn triples(&self) -> usize {
        self.namespaces.len() + usize::from(self.cluster > 0) + 9
    }

    /// Namespaces, their deployments (paused, 3 replicas) and the ceiling.
    pub async fn prepare(
        &mut self,
        namespaces: &Namespaces,
        count: usize,
        deployments: usize,
    ) -> anyhow::Result<()> {
        eprintln!("== preparing {count} namespaces with {deployments} deployments each");
        self.operator_ns = namespaces.create("op").await?;
        for i in 0..count {
            let ns = namespaces.create(&format!("t{i:02}")).await?;
            cluster::create_deployments(&self.client, &ns, deployments, 3).await?;
            self.namespaces.push(ns);
        }
        self.deployments = deployments;
        let ceiling: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": self.ceiling()},
            "rules": [
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
            ],
        }))?;
        Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(self.client.clone())
            .create(&PostParams::default(), &ceiling)
            .await
            .context("creating the ceiling")?;
        Ok(())
    }

    fn labels(&self) -> Json {
        json!({"starkite.io/bench": self.run})
    }

    /// Creates StarlarkControllers `c-NNNN` up to `size`, spread over the namespaces.
    pub async fn create_controllers(&mut self, size: usize) -> anyhow::Result<()> {
        let ar = resource("StarlarkController", "starlarkcontrollers");
        let objects: Vec<(String, Json)> = (self.size..size)
            .map(|i| {
                let ns = self.namespaces[i % self.namespaces.len()].clone();
                let obj = json!({
                    "apiVersion": "starkite.io/v1alpha1",
                    "kind": "StarlarkController",
                    "metadata": {"name": format!("c-{i:04}"), "namespace": ns, "labels": self.labels()},
                    "spec": {"script": MAX_REPLICAS, "vars": {"max_replicas": "3"}},
                });
                (ns, obj)
            })
            .collect();
        let client = self.client.clone();
        futures::stream::iter(objects)
            .map(|(ns, obj)| {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
                create(api, obj)
            })
            .buffer_unordered(16)
            .try_collect::<()>()
            .await?;
        self.size = size;
        Ok(())
    }

    /// Creates `n` ClusterStarlarkControllers watching every Pod.
    pub async fn create_cluster_controllers(&mut self, n: usize) -> anyhow::Result<()> {
        let ar = resource("ClusterStarlarkController", "clusterstarlarkcontrollers");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        for i in 0..n {
            let obj = json!({
                "apiVersion": "starkite.io/v1alpha1",
                "kind": "ClusterStarlarkController",
                "metadata": {"name": format!("kite-bench-{}-pods-{i:02}", self.run), "labels": self.labels()},
                "spec": {"script": PODS},
            });
            create(api.clone(), obj).await?;
        }
        self.cluster = n;
        Ok(())
    }

    /// Every controller resource of the run, as JSON.
    async fn all(&self) -> anyhow::Result<Vec<Json>> {
        let params = ListParams::default().labels(&self.selector());
        let mut out = Vec::new();
        for (kind, plural) in [
            ("StarlarkController", "starlarkcontrollers"),
            ("ClusterStarlarkController", "clusterstarlarkcontrollers"),
        ] {
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &resource(kind, plural));
            for o in api.list(&params).await?.items {
                out.push(serde_json::to_value(o)?);
            }
        }
        Ok(out)
    }

    /// Waits until every controller is Ready (and, with `since`, was started after it);
    /// returns how long that took.
    pub async fn wait_ready(
        &self,
        since: Option<Timestamp>,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        self.wait(timeout, |o| ready(o, since)).await
    }

    /// Waits until every controller runs on one of `replicas`, started after `since`.
    pub async fn wait_claimed(
        &self,
        replicas: &[String],
        since: Option<Timestamp>,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        self.wait(timeout, |o| {
            ready(o, since)
                && o["status"]["replica"]
                    .as_str()
                    .is_some_and(|r| replicas.iter().any(|x| x == r))
        })
        .await
    }

    /// Waits until none runs on `dead` any more: each of its controllers claimed by one
    /// of `live` and started after `since`.
    pub async fn wait_moved(
        &self,
        dead: &str,
        live: &[String],
        since: Timestamp,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let before = self.replicas().await?;
        let moving: Vec<(String, String)> = before
            .into_iter()
            .filter(|(_, r)| r == dead)
            .map(|(k, _)| k)
            .collect();
        self.wait(timeout, |o| {
            let key = key(o);
            !moving.contains(&key)
                || (ready(o, Some(since))
                    && o["status"]["replica"]
                        .as_str()
                        .is_some_and(|r| live.iter().any(|x| x == r)))
        })
        .await
        .map(drop)
    }

    async fn wait(
        &self,
        timeout: Duration,
        done: impl Fn(&Json) -> bool,
    ) -> anyhow::Result<Duration> {
        // Watched, not polled: a LIST of thousands of controllers (scripts included)
        // twice a second was a load on the API server the operator then competed with.
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let want = self.size + self.cluster;
        let config = watcher::Config::default().labels(&self.selector());
        let kinds = [
            ("StarlarkController", "starlarkcontrollers"),
            ("ClusterStarlarkController", "clusterstarlarkcontrollers"),
        ];
        let streams = kinds.map(|(kind, plural)| {
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &resource(kind, plural));
            watcher(api, config.clone())
                .default_backoff()
                .map(move |e| (kind, e))
                .boxed()
        });
        let mut events = futures::stream::select_all(streams);
        // Per kind, each object's key and whether it is done; `pending` while listing.
        let mut seen: HashMap<&str, HashMap<String, bool>> = HashMap::new();
        let mut pending: HashMap<&str, HashMap<String, bool>> = HashMap::new();
        loop {
            let total: usize = seen.values().map(HashMap::len).sum();
            let ok: usize = seen
                .values()
                .map(|m| m.values().filter(|d| **d).count())
                .sum();
            if total == want && ok == want {
                return Ok(started.elapsed());
            }
            let Ok(next) = tokio::time::timeout_at(deadline, events.next()).await else {
                bail!("{ok}/{want} after {timeout:?}");
            };
            let Some((kind, event)) = next else {
                bail!("the watch of {want} controllers ended");
            };
            let entry = |o: &DynamicObject| -> anyhow::Result<(String, bool)> {
                let json = serde_json::to_value(o)?;
                let (ns, name) = key(&json);
                Ok((format!("{ns}/{name}"), done(&json)))
            };
            match event {
                Ok(watcher::Event::Init) => {
                    pending.insert(kind, HashMap::new());
                }
                Ok(watcher::Event::InitApply(o)) => {
                    let (k, d) = entry(&o)?;
                    pending.entry(kind).or_default().insert(k, d);
                }
                Ok(watcher::Event::InitDone) => {
                    seen.insert(kind, pending.remove(kind).unwrap_or_default());
                }
                Ok(watcher::Event::Apply(o)) => {
                    let (k, d) = entry(&o)?;
                    seen.entry(kind).or_default().insert(k, d);
                }
                Ok(watcher::Event::Delete(o)) => {
                    let (k, _) = entry(&o)?;
                    seen.entry(kind).or_default().remove(&k);
                }
                Err(e) => eprintln!("   the watch of the controllers failed, retrying: {e}"),
            }
        }
    }

    /// (namespace, name) → `status.replica` of every controller.
    pub async fn replicas(&self) -> anyhow::Result<BTreeMap<(String, String), String>> {
        Ok(self
            .all()
            .await?
            .iter()
            .map(|o| {
                (
                    key(o),
                    o["status"]["replica"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect())
    }

    /// WATCH requests open on the API server now (its own metric).
    /// Waits (up to `within`) until something other than the operator watches each of
    /// `resources`: the controller-manager's garbage collector and quota controller
    /// start watching a new kind on their next rediscovery (every 30 s), and a
    /// baseline taken before that would count their watches as the operator's.
    pub async fn watched(&self, resources: &[&str], within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let request = hyper::Request::get("/metrics").body(Vec::new())?;
            let text = self.client.request_text(request).await?;
            let watched = |resource: &str| {
                text.lines().any(|l| {
                    l.starts_with("apiserver_longrunning_requests{")
                        && l.contains("verb=\"WATCH\"")
                        && l.contains(&format!("resource=\"{resource}\""))
                        && !l.ends_with(" 0")
                })
            };
            if resources.iter().all(|r| watched(r)) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                eprintln!(
                    "   (no watch of {resources:?} after {within:?}; the baseline may miss some)"
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub async fn watches(&self) -> anyhow::Result<i64> {
        let request = hyper::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(request).await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\"")
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .map(|v| v as i64)
            .sum())
    }

    /// Drifts one deployment after another (round robin) `rate` times a second for
    /// `duration`, and measures how long each takes to be set back to 3 replicas.
    pub async fn drift(&self, rate: u32, duration: Duration) -> anyhow::Result<Drift> {
        let targets: Vec<(String, String)> = self
            .namespaces
            .iter()
            .flat_map(|ns| {
                (0..self.deployments).map(move |i| (ns.clone(), cluster::deployment_name(i)))
            })
            .collect();
        let pending: Arc<Mutex<HashMap<(String, String), Pending>>> = Arc::default();
        let samples: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let watching = {
            let (pending, samples) = (pending.clone(), samples.clone());
            let api: Api<Deployment> = Api::all(self.client.clone());
            let config = watcher::Config::default().labels(crate::LABEL);
            tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher::watcher(api, config));
                while let Some(Ok(event)) = events.next().await {
                    let watcher::Event::Apply(d) = event else {
                        continue;
                    };
                    if d.spec.replicas != Some(3) {
                        continue;
                    }
                    let key = (
                        d.metadata.namespace.clone().unwrap_or_default(),
                        d.metadata.name.clone().unwrap_or_default(),
                    );
                    let rv = version(d.metadata.resource_version.as_deref());
                    let mut pending = pending.lock().unwrap();
                    let Some(p) = pending.get_mut(&key) else {
                        continue;
                    };
                    match p.patched {
                        Some(patched) if rv > patched => {
                            samples.lock().unwrap().push(p.at.elapsed());
                            pending.remove(&key);
                        }
                        Some(_) => {}
                        None => p.early = Some((rv, Instant::now())),
                    }
                }
            })
        };
        // Let the watch list first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let every = Duration::from_secs(1) / rate;
        let started = Instant::now();
        let mut sent = 0usize;
        while started.elapsed() < duration {
            let key = targets[sent % targets.len()].clone();
            sent += 1;
            let at = Instant::now();
            pending.lock().unwrap().insert(
                key.clone(),
                Pending {
                    at,
                    patched: None,
                    early: None,
                },
            );
            let api: Api<Deployment> = Api::namespaced(self.client.clone(), &key.0);
            let patched = api
                .patch(
                    &key.1,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 10}})),
                )
                .await?;
            let rv = version(patched.metadata.resource_version.as_deref());
            {
                let mut pending = pending.lock().unwrap();
                if let Some(p) = pending.get_mut(&key) {
                    match p.early {
                        // Corrected before the patch's answer came back.
                        Some((seen, when)) if seen > rv => {
                            samples.lock().unwrap().push(when - p.at);
                            pending.remove(&key);
                        }
                        _ => p.patched = Some(rv),
                    }
                }
            }
            tokio::time::sleep(every.saturating_sub(at.elapsed())).await;
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while !pending.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        watching.abort();
        let missed = pending.lock().unwrap().len();
        let mut samples = samples.lock().unwrap().clone();
        samples.sort();
        if samples.is_empty() {
            bail!("no drift was corrected ({missed} of {sent} still drifted)");
        }
        if missed > 0 {
            eprintln!("   warning: {missed} of {sent} drifts not corrected within 15 s");
        }
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Ok(Drift {
            p50: at(0.5),
            p99: at(0.99),
        })
    }

    /// Deletes every controller resource while an operator may still take finalizers
    /// off, then whatever is left, the ceiling and the webhook configuration.
    pub async fn clean_up(&self) {
        let kubectl = |args: &[&str]| {
            let _ = std::process::Command::new("kubectl")
                .args(args)
                .env("KUBECONFIG", cluster::kubeconfig())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        };
        // The webhook first: with no operator to answer it, it would refuse the patches
        // that take the finalizers off.
        kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            &self.webhook(),
            "--ignore-not-found",
        ]);
        let selector = self.selector();
        for kind in ["slc", "cslc"] {
            kubectl(&["delete", kind, "-A", "-l", &selector, "--wait=false"]);
            // No operator runs now: take the finalizers off, a few at a time (one
            // kubectl after another took half an hour for 5000).
            let Ok(out) = std::process::Command::new("kubectl")
                .args([
                    "get",
                    kind,
                    "-A",
                    "-l",
                    &selector,
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\n\"}{end}",
                ])
                .env("KUBECONFIG", cluster::kubeconfig())
                .output()
            else {
                continue;
            };
            let (resource_kind, plural) = if kind == "slc" {
                ("StarlarkController", "starlarkcontrollers")
            } else {
                ("ClusterStarlarkController", "clusterstarlarkcontrollers")
            };
            let ar = resource(resource_kind, plural);
            let names: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|line| {
                    let (ns, name) = line.split_once('/').unwrap_or(("", line));
                    (ns.to_owned(), name.to_owned())
                })
                .collect();
            let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
            futures::stream::iter(names)
                .for_each_concurrent(16, |(ns, name)| {
                    let api: Api<DynamicObject> = if ns.is_empty() {
                        Api::all_with(self.client.clone(), &ar)
                    } else {
                        Api::namespaced_with(self.client.clone(), &ns, &ar)
                    };
                    let patch = &patch;
                    async move {
                        let _ = api.patch(&name, &PatchParams::default(), patch).await;
                    }
                })
                .await;
        }
        kubectl(&[
            "delete",
            "clusterrole",
            &self.ceiling(),
            "--ignore-not-found",
        ]);
        kubectl(&[
            "delete",
            "clusterrole,clusterrolebinding",
            "-l",
            "starkite.io/owner-uid",
            "--ignore-not-found",
        ]);
    }
}

struct Pending {
    at: Instant,
    patched: Option<u64>,
    early: Option<(u64, Instant)>,
}

fn version(rv: Option<&str>) -> u64 {
    rv.and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn key(o: &Json) -> (String, String) {
    let m = &o["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_owned(),
        m["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Ready=True, and started after `since` when given.
fn ready(o: &Json, since: Option<Timestamp>) -> bool {
    let is_ready = o["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let fresh = since.is_none_or(|since| {
        o["status"]["startedAt"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .is_some_and(|t| t.as_second() >= since.as_second())
    });
    is_ready && fresh
}

/// Creates `obj`, retrying while the admission webhook is not reachable yet.
async fn create(api: Api<DynamicObject>, obj: Json) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(obj)?;
    let mut pause = Duration::from_millis(200);
    for attempt in 0.. {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) if attempt < 6 => {
                eprintln!("   retrying a create: {e}");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => return Err(e).context("creating a controller resource"),
        }
    }
    unreachable!()
}
