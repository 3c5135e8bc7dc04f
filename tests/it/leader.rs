//! Lease-based leader election against the local cluster: one leader among replicas, a
//! quick hand-over when the leader shuts down, and respect for another holder's live lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kite::{LeaderConfig, Validity, lead};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: &str = "kite-leader";

/// Timings short enough to keep the tests fast, within client-go's invariants.
fn fast(namespace: &str, identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        ..LeaderConfig::new(LEASE, namespace, identity)
    }
}

/// One elector running in the background, as a controller replica would run it.
struct Replica {
    identity: String,
    leading: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Replica {
    fn start(client: &kube::Client, config: LeaderConfig) -> Self {
        let (publish, leading) = watch::channel(false);
        let (stop, stopped) = oneshot::channel::<()>();
        let identity = config.identity.clone();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(lead(
            client.clone(),
            config,
            publish,
            Validity::new(),
            shutdown,
        ));
        Self {
            identity,
            leading,
            stop: Some(stop),
            task,
        }
    }

    fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Resolves the shutdown future and checks that the election ends, not leading.
    async fn shut_down(&mut self) {
        let _ = self.stop.take().expect("not shut down yet").send(());
        tokio::time::timeout(Duration::from_secs(15), &mut self.task)
            .await
            .expect("run returns soon after shutdown")
            .expect("run does not panic");
        assert!(
            !self.is_leading(),
            "{} still publishes leading",
            self.identity
        );
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Records whether the replicas ever lead at the same time.
fn watch_for_overlap(replicas: &[&Replica]) -> Arc<AtomicBool> {
    let overlap = Arc::new(AtomicBool::new(false));
    let flag = overlap.clone();
    let mut receivers: Vec<watch::Receiver<bool>> =
        replicas.iter().map(|r| r.leading.clone()).collect();
    tokio::spawn(async move {
        loop {
            let changes = receivers.iter_mut().map(|r| Box::pin(r.changed()));
            let (changed, _, _) = futures::future::select_all(changes).await;
            if changed.is_err() {
                return;
            }
            if receivers.iter().filter(|r| *r.borrow()).count() > 1 {
                flag.store(true, Ordering::SeqCst);
            }
        }
    });
    overlap
}

/// Asserts that `replica` does not lead at any point during `window`: an absence can
/// only be observed over a bounded time.
async fn assert_never_leads(replica: &Replica, window: Duration, why: &str) {
    let mut leading = replica.leading.clone();
    let led = tokio::time::timeout(window, leading.wait_for(|l| *l)).await;
    assert!(led.is_err(), "{} led: {why}", replica.identity);
}

async fn lease_spec(leases: &Api<Lease>) -> Option<LeaseSpec> {
    leases.get_opt(LEASE).await.ok().flatten()?.spec
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    lease_spec(leases).await?.holder_identity
}

/// Waits until exactly one of `replicas` leads and the Lease names it; returns its index.
async fn wait_for_single_leader(leases: &Api<Lease>, replicas: &[&Replica]) -> usize {
    let index = wait_for(
        "exactly one replica to lead",
        Duration::from_secs(15),
        || {
            let leaders: Vec<usize> = (0..replicas.len())
                .filter(|i| replicas[*i].is_leading())
                .collect();
            async move { (leaders.len() == 1).then(|| leaders[0]) }
        },
    )
    .await;
    let identity = replicas[index].identity.clone();
    wait_until(
        "the Lease's holderIdentity to name the leader",
        Duration::from_secs(10),
        || async { holder(leases).await.as_deref() == Some(identity.as_str()) },
    )
    .await;
    index
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_of_two_replicas_leads() {
    let ns = TestNamespace::new("leader-one").await;
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let a = Replica::start(&client, fast(&ns.name, "replica-a"));
    let b = Replica::start(&client, fast(&ns.name, "replica-b"));
    let overlap = watch_for_overlap(&[&a, &b]);

    let index = wait_for_single_leader(&leases, &[&a, &b]).await;
    let (leader, follower) = if index == 0 { (&a, &b) } else { (&b, &a) };
    let first = lease_spec(&leases).await.expect("the lease exists");
    assert_eq!(first.lease_duration_seconds, Some(3));
    assert_eq!(first.lease_transitions, Some(0));

    // Longer than a lease duration: without renewals the follower would take over.
    assert_never_leads(
        follower,
        Duration::from_secs(5),
        "while the leader renews, the follower must wait",
    )
    .await;
    assert!(leader.is_leading(), "the leader keeps leading");
    let later = lease_spec(&leases).await.expect("the lease exists");
    assert_eq!(
        later.holder_identity.as_deref(),
        Some(leader.identity.as_str())
    );
    assert!(
        later.renew_time > first.renew_time,
        "the leader renews the lease: {:?} then {:?}",
        first.renew_time,
        later.renew_time
    );
    assert_eq!(later.acquire_time, first.acquire_time);
    assert_eq!(later.lease_transitions, Some(0));
    assert!(!overlap.load(Ordering::SeqCst), "two replicas led at once");
}

#[tokio::test(flavor = "multi_thread")]
async fn shutting_down_the_leader_hands_over_within_seconds() {
    let ns = TestNamespace::new("leader-handover").await;
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    // A lease far longer than the 5 s bound: only a release explains a quick takeover.
    let config = |identity| LeaderConfig {
        lease_duration: Duration::from_secs(30),
        ..fast(&ns.name, identity)
    };
    let mut a = Replica::start(&client, config("replica-a"));
    let mut b = Replica::start(&client, config("replica-b"));

    let index = wait_for_single_leader(&leases, &[&a, &b]).await;
    let (leader, follower) = if index == 0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let before = lease_spec(&leases).await.expect("the lease exists");

    let stopped_at = Instant::now();
    leader.shut_down().await;
    let bound = Duration::from_secs(5).saturating_sub(stopped_at.elapsed());
    let mut leading = follower.leading.clone();
    tokio::time::timeout(bound, leading.wait_for(|l| *l))
        .await
        .expect("the standby leads within 5 s of the leader's shutdown")
        .expect("the standby's elector runs");

    let identity = follower.identity.clone();
    wait_until(
        "the Lease to name the new leader",
        Duration::from_secs(5),
        || async { holder(&leases).await.as_deref() == Some(identity.as_str()) },
    )
    .await;
    let after = lease_spec(&leases).await.expect("the lease exists");
    assert_eq!(after.lease_duration_seconds, Some(30));
    assert_eq!(
        after.lease_transitions,
        before.lease_transitions.map(|t| t + 1),
        "a hand-over is one transition"
    );
    assert!(after.acquire_time > before.acquire_time);
    follower.shut_down().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_lease_of_another_holder_is_taken_only_once_expired() {
    let ns = TestNamespace::new("leader-third").await;
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let now = MicroTime(Timestamp::now());
    let held = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("third".into()),
            lease_duration_seconds: Some(4),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(2),
            ..LeaseSpec::default()
        }),
    };
    leases
        .create(&PostParams::default(), &held)
        .await
        .expect("create the third holder's lease");

    let started = Instant::now();
    let mut a = Replica::start(&client, fast(&ns.name, "replica-a"));
    assert_never_leads(
        &a,
        Duration::from_millis(2500),
        "the third holder's lease has not expired",
    )
    .await;
    assert_eq!(holder(&leases).await.as_deref(), Some("third"));

    let mut leading = a.leading.clone();
    tokio::time::timeout(Duration::from_secs(15), leading.wait_for(|l| *l))
        .await
        .expect("the replica takes the expired lease")
        .expect("the elector runs");
    // The third holder's 4 s count from when the replica first saw the lease, which is
    // after `started`; the margin allows for a renewTime-based count.
    assert!(
        started.elapsed() >= Duration::from_millis(3500),
        "taken after {:?}, before the lease expired",
        started.elapsed()
    );
    wait_until(
        "the Lease to name the replica",
        Duration::from_secs(5),
        || async { holder(&leases).await.as_deref() == Some("replica-a") },
    )
    .await;
    let taken = lease_spec(&leases).await.expect("the lease exists");
    assert_eq!(taken.lease_transitions, Some(3));
    assert_eq!(taken.lease_duration_seconds, Some(3));
    a.shut_down().await;
}
