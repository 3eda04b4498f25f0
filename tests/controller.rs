//! The controller against the in-memory backend and store: the seed-002 timeline (upstream
//! 122413), restarts at every point of the attach and detach sequences (C7), and what a user
//! can get wrong (a bad configuration, a panicking recorder, identifier types that panic).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::sleep;

use attach_detach::Ids;
#[cfg(feature = "upstream-bugs")]
use attach_detach::config::UpstreamBugs;
use attach_detach::config::{BackoffConfig, Config, ConfigError};
use attach_detach::controller::{
    BuildError, Controller, ControllerError, ControllerHandle, EventRecorder, MemoryRecorder,
    ShutdownReport, World,
};
use attach_detach::core::{Event, NodeFacts, VolumeSpec};
use attach_detach::memory::{BackendOp, MemoryBackend, MemoryStore};
use attach_detach::traits::{
    AttachBackend, AttachInfo, BackendAttachment, BackendError, NodeStatus, NodeStatusStore,
    ReportedVolumes, Revision, StoreError,
};

type D = Ids<&'static str, &'static str, &'static str, ()>;

const A: &str = "node-a";
const B: &str = "node-b";
const V1: &str = "vol-1";
const V2: &str = "vol-2";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn in_use(volumes: &[&'static str]) -> NodeFacts<&'static str> {
    NodeFacts {
        in_use: Some(volumes.to_vec()),
        ..NodeFacts::default()
    }
}

fn listed(store: &MemoryStore<D>, node: &'static str) -> Vec<&'static str> {
    store
        .status(&node)
        .map(|s| s.attached.iter().map(|r| r.volume).collect())
        .unwrap_or_default()
}

// ---- seed 002 -----------------------------------------------------------------------------------

/// Seed 002 (upstream 122413) on the real driver: a workload is deleted, its volume removed from
/// the node's status and detached; the workload returns to the same node within the informer's
/// lag and the volume is attached again. Returns what the store lists for the node at the end,
/// with the backend and the controller's metrics.
async fn seed_002(stale_diff: bool) -> (Vec<&'static str>, MemoryBackend<D>, ControllerHandle<D>) {
    let backend = MemoryBackend::<D>::new();
    let store = MemoryStore::<D>::new();
    let informer = store.cached(secs(5));
    store.add_node(A);
    #[cfg(feature = "upstream-bugs")]
    let config = Config {
        upstream_bugs: UpstreamBugs {
            c6_diff_against_stale_read: stale_diff,
            ..UpstreamBugs::default()
        },
        ..Config::default()
    };
    #[cfg(not(feature = "upstream-bugs"))]
    let config = {
        assert!(!stale_diff, "needs the upstream-bugs feature");
        Config::default()
    };
    let world = World::new()
        .volume(V1, VolumeSpec::single_node(()))
        .node(A, in_use(&[V1]))
        .workload("pod-1", A, [V1]);
    let events = MemoryRecorder::new();
    let controller = Controller::new(
        config,
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        world,
    )
    .unwrap()
    .with_recorder(Arc::new(events.clone()));
    // Upstream's status updater diffs against the informer's copy of the node.
    #[cfg(feature = "upstream-bugs")]
    let controller = controller.with_status_diff_source(Arc::new(informer));
    #[cfg(not(feature = "upstream-bugs"))]
    drop(informer);
    let (handle, _task) = controller.spawn();

    sleep(secs(10)).await;
    assert!(backend.is_attached(&V1, &A));
    assert_eq!(
        listed(&store, A),
        vec![V1],
        "reported; the informer has caught up"
    );

    // 1-3. The pod is deleted, the agent unmounts: the volume leaves the status, then detaches.
    handle.workload_removed("pod-1").await.unwrap();
    handle.node_updated(A, in_use(&[])).await.unwrap();
    sleep(secs(1)).await;
    assert!(listed(&store, A).is_empty(), "3.2: removed from the status");
    assert!(!backend.is_attached(&V1, &A), "3.3: detached");

    // 4-5. Recreated and scheduled back on the same node, well within the informer's lag.
    handle
        .workload_scheduled("pod-1", A, vec![V1])
        .await
        .unwrap();
    handle.node_updated(A, in_use(&[V1])).await.unwrap();
    sleep(secs(1)).await;
    assert!(backend.is_attached(&V1, &A), "3.4: attached again");

    // Long past the lag and a verify: whatever the store says now, it says for good.
    sleep(secs(180)).await;
    assert_eq!(
        events.reasons(),
        vec![
            "SuccessfulAttachVolume",
            "SuccessfulDetachVolume",
            "SuccessfulAttachVolume"
        ]
    );
    (listed(&store, A), backend, handle)
}

#[tokio::test(start_paused = true)]
async fn seed_002_the_volume_is_reported_again_after_reattach() {
    let (listed, backend, _handle) = seed_002(false).await;
    assert_eq!(listed, vec![V1], "the node can mount it");
    assert_eq!(backend.attachments(), vec![(V1, A)]);
}

#[tokio::test(start_paused = true)]
#[cfg(feature = "upstream-bugs")]
async fn seed_002_with_upstream_c6_the_volume_is_never_reported_again() {
    let (listed, backend, _handle) = seed_002(true).await;
    // The bug bites: attached, but the node's status never lists it, so the pod never mounts.
    assert!(listed.is_empty(), "upstream 122413 reproduced: {listed:?}");
    assert_eq!(backend.attachments(), vec![(V1, A)]);
}

// ---- restarts -----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// The call never reaches the backend or store (still in flight when the controller dies).
    Before,
    /// The call takes effect, but the controller dies before it hears the answer.
    After,
}

/// A call that hangs forever, once: where controller A is caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hang {
    Backend(BackendOp, When),
    StoreWrite(When),
}

/// Arms one hang, and checks every detach against what the test says is mounted.
#[derive(Default)]
struct Trap {
    armed: Mutex<Option<Hang>>,
    sprung: AtomicBool,
    mounted: Mutex<BTreeSet<(&'static str, &'static str)>>,
    mounted_detaches: Mutex<Vec<(&'static str, &'static str)>>,
}

impl Trap {
    /// Whether this call must hang; disarms the trap if so.
    fn springs(&self, at: Hang) -> bool {
        let mut armed = self.armed.lock();
        if *armed == Some(at) {
            *armed = None;
            self.sprung.store(true, Ordering::SeqCst);
            true
        } else {
            false
        }
    }

    async fn maybe_hang(&self, at: Hang) {
        if self.springs(at) {
            std::future::pending::<()>().await;
        }
    }
}

struct TrappedBackend {
    inner: MemoryBackend<D>,
    trap: Arc<Trap>,
}

#[async_trait]
impl AttachBackend<D> for TrappedBackend {
    async fn attach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &(),
    ) -> Result<AttachInfo, BackendError<&'static str>> {
        let hang = |w| Hang::Backend(BackendOp::Attach, w);
        self.trap.maybe_hang(hang(When::Before)).await;
        let result = self.inner.attach(volume, node, payload).await;
        self.trap.maybe_hang(hang(When::After)).await;
        result
    }

    async fn detach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &(),
    ) -> Result<(), BackendError<&'static str>> {
        if self.trap.mounted.lock().contains(&(*volume, *node)) {
            self.trap.mounted_detaches.lock().push((*volume, *node));
        }
        let hang = |w| Hang::Backend(BackendOp::Detach, w);
        self.trap.maybe_hang(hang(When::Before)).await;
        let result = self.inner.detach(volume, node, payload).await;
        self.trap.maybe_hang(hang(When::After)).await;
        result
    }

    async fn verify(
        &self,
        node: &&'static str,
        volumes: &[(&'static str, ())],
    ) -> Result<Vec<&'static str>, BackendError<&'static str>> {
        self.inner.verify(node, volumes).await
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<&'static str>> {
        self.inner.list().await
    }
}

struct TrappedStore {
    inner: MemoryStore<D>,
    trap: Arc<Trap>,
}

#[async_trait]
impl NodeStatusStore<D> for TrappedStore {
    async fn read(&self, node: &&'static str) -> Result<NodeStatus<D>, StoreError> {
        self.inner.read(node).await
    }

    async fn write(
        &self,
        node: &&'static str,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.trap.maybe_hang(Hang::StoreWrite(When::Before)).await;
        let result = self.inner.write(node, attached, expected).await;
        self.trap.maybe_hang(Hang::StoreWrite(When::After)).await;
        result
    }

    async fn list(&self) -> Result<Vec<(&'static str, NodeStatus<D>)>, StoreError> {
        self.inner.list().await
    }
}

/// The orchestrator's side of a restart test: its world, and the backend, store and trap that
/// outlive controllers.
struct Cluster {
    backend: MemoryBackend<D>,
    store: MemoryStore<D>,
    trap: Arc<Trap>,
    /// Workloads now: name, node, volumes.
    workloads: Vec<(&'static str, &'static str, Vec<&'static str>)>,
    /// What node-a's agent reports in use now.
    in_use: Vec<&'static str>,
}

impl Cluster {
    fn new() -> Self {
        let store = MemoryStore::new();
        store.add_node(A);
        store.add_node(B);
        Cluster {
            backend: MemoryBackend::new(),
            store,
            trap: Arc::default(),
            workloads: Vec::new(),
            in_use: Vec::new(),
        }
    }

    fn world(&self) -> World<D> {
        let mut world = World::new()
            .volume(V1, VolumeSpec::single_node(()))
            .volume(V2, VolumeSpec::single_node(()))
            .node(A, in_use(&self.in_use))
            .node(B, in_use(&[]));
        for (w, n, vols) in &self.workloads {
            world = world.workload(*w, *n, vols.iter().copied());
        }
        world
    }

    fn start(
        &self,
    ) -> (
        ControllerHandle<D>,
        tokio::task::JoinHandle<ShutdownReport<D>>,
    ) {
        let backend = TrappedBackend {
            inner: self.backend.clone(),
            trap: Arc::clone(&self.trap),
        };
        let store = TrappedStore {
            inner: self.store.clone(),
            trap: Arc::clone(&self.trap),
        };
        Controller::new(
            Config::default(),
            Arc::new(backend),
            Arc::new(store),
            self.world(),
        )
        .unwrap()
        .spawn()
    }

    /// The agent on node-a reports `volumes` in use (mounted, or about to mount).
    async fn set_in_use(&mut self, handle: &ControllerHandle<D>, volumes: &[&'static str]) {
        self.in_use = volumes.to_vec();
        *self.trap.mounted.lock() = volumes.iter().map(|v| (*v, A)).collect();
        handle.node_updated(A, in_use(volumes)).await.unwrap();
    }

    async fn schedule(
        &mut self,
        handle: &ControllerHandle<D>,
        workload: &'static str,
        volume: &'static str,
    ) {
        self.workloads.push((workload, A, vec![volume]));
        handle
            .workload_scheduled(workload, A, vec![volume])
            .await
            .unwrap();
    }

    async fn remove(&mut self, handle: &ControllerHandle<D>, workload: &'static str) {
        self.workloads.retain(|(w, _, _)| *w != workload);
        handle.workload_removed(workload).await.unwrap();
    }

    /// Waits (on the paused clock) until `done` holds; panics after a simulated minute.
    async fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..6000 {
            if done(self) {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
        panic!("never reached: {what}");
    }

    /// Runs a controller to quiescence and checks the end state against the world.
    fn assert_converged(&self) {
        let mut wanted: Vec<(&str, &str)> = self
            .workloads
            .iter()
            .flat_map(|(_, n, vols)| vols.iter().map(move |v| (*v, *n)))
            .collect();
        wanted.sort();
        assert_eq!(
            self.backend.attachments(),
            wanted,
            "no leak, nothing missing"
        );
        for node in [A, B] {
            let attached: Vec<_> = wanted
                .iter()
                .filter(|(_, n)| *n == node)
                .map(|(v, _)| *v)
                .collect();
            assert_eq!(listed(&self.store, node), attached, "status of {node}");
        }
        assert_eq!(
            *self.trap.mounted_detaches.lock(),
            vec![],
            "nothing mounted was detached"
        );
    }
}

/// Where in a sequence controller A dies.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// When this call hangs.
    At(Hang),
    /// As soon as this holds (after the answer was taken in).
    Once(fn(&Cluster) -> bool),
}

/// Starts controller A, runs it until `stop` in the middle of attaching vol-1 to node-a (while
/// vol-2 is attached and mounted there), kills it, then runs controller B from the same backend,
/// store and world to quiescence.
async fn restart_during_attach(stop: Stop) {
    let mut cluster = Cluster::new();
    let (a, task) = cluster.start();
    cluster.schedule(&a, "w2", V2).await;
    cluster.set_in_use(&a, &[V2]).await;
    cluster
        .wait_for("vol-2 reported", |c| listed(&c.store, A) == [V2])
        .await;

    if let Stop::At(hang) = stop {
        *cluster.trap.armed.lock() = Some(hang);
    }
    cluster.schedule(&a, "w1", V1).await;
    // The agent marks the volume in use as soon as the pod is there, before it is attached.
    cluster.set_in_use(&a, &[V1, V2]).await;
    crash_then_recover(&mut cluster, stop, task).await;
}

/// Crashes controller `task` at `stop`, starts a new one on the same backend and store, and
/// checks that it converges without ever detaching vol-2, which node-a's agent uses throughout.
async fn crash_then_recover(
    cluster: &mut Cluster,
    stop: Stop,
    task: tokio::task::JoinHandle<ShutdownReport<D>>,
) {
    match stop {
        Stop::At(_) => {
            cluster
                .wait_for("the trap", |c| c.trap.sprung.load(Ordering::SeqCst))
                .await
        }
        Stop::Once(done) => cluster.wait_for("the stop point", done).await,
    }
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let (b, task) = cluster.start();
    sleep(secs(600)).await;
    cluster.assert_converged();
    assert_eq!(cluster.backend.calls(BackendOp::Detach, &V2, &A), 0);
    assert!(b.shutdown(secs(1)).await.unwrap().abandoned.is_empty());
    task.await.unwrap();
}

/// As [`restart_during_attach`], for detaching vol-1 from node-a once its workload is gone and
/// the agent unmounted it.
async fn restart_during_detach(stop: Stop) {
    let mut cluster = Cluster::new();
    let (a, task) = cluster.start();
    cluster.schedule(&a, "w1", V1).await;
    cluster.schedule(&a, "w2", V2).await;
    cluster.set_in_use(&a, &[V1, V2]).await;
    cluster
        .wait_for("both reported", |c| listed(&c.store, A) == [V1, V2])
        .await;

    if let Stop::At(hang) = stop {
        *cluster.trap.armed.lock() = Some(hang);
    }
    cluster.remove(&a, "w1").await;
    cluster.set_in_use(&a, &[V2]).await;
    crash_then_recover(&mut cluster, stop, task).await;
}

// Attach: the call is in flight and has not reached the backend.
#[tokio::test(start_paused = true)]
async fn restart_before_the_attach_call_reaches_the_backend() {
    restart_during_attach(Stop::At(Hang::Backend(BackendOp::Attach, When::Before))).await;
}

// Attach: the backend attached, the answer is lost (44858: nothing records it but the backend).
#[tokio::test(start_paused = true)]
async fn restart_after_the_attach_took_effect_before_its_answer() {
    restart_during_attach(Stop::At(Hang::Backend(BackendOp::Attach, When::After))).await;
}

// Attach answered; the status write that reports it has not reached the store.
#[tokio::test(start_paused = true)]
async fn restart_after_the_attach_before_the_status_write() {
    restart_during_attach(Stop::At(Hang::StoreWrite(When::Before))).await;
}

// The status write landed, its acknowledgement is lost.
#[tokio::test(start_paused = true)]
async fn restart_after_the_status_write_before_its_answer() {
    restart_during_attach(Stop::At(Hang::StoreWrite(When::After))).await;
}

// Everything acknowledged.
#[tokio::test(start_paused = true)]
async fn restart_after_the_attach_was_reported() {
    restart_during_attach(Stop::Once(|c| listed(&c.store, A) == [V1, V2])).await;
}

// Detach: the removal from the status landed, the detach never started (92145, 130516: the
// attachment is no longer in any node status and must not leak).
#[tokio::test(start_paused = true)]
async fn restart_after_the_status_removal_before_the_detach() {
    restart_during_detach(Stop::At(Hang::StoreWrite(When::After))).await;
}

// Detach: the call is in flight and has not reached the backend.
#[tokio::test(start_paused = true)]
async fn restart_during_the_detach_before_it_took_effect() {
    restart_during_detach(Stop::At(Hang::Backend(BackendOp::Detach, When::Before))).await;
}

// Detach: the backend detached, the answer is lost.
#[tokio::test(start_paused = true)]
async fn restart_during_the_detach_after_it_took_effect() {
    restart_during_detach(Stop::At(Hang::Backend(BackendOp::Detach, When::After))).await;
}

// Detach answered.
#[tokio::test(start_paused = true)]
async fn restart_after_the_detach() {
    restart_during_detach(Stop::Once(|c| c.backend.attachments() == [(V2, A)])).await;
}

// Before the removal from the status reached the store: the node still lists the volume.
#[tokio::test(start_paused = true)]
async fn restart_before_the_status_removal_landed() {
    restart_during_detach(Stop::At(Hang::StoreWrite(When::Before))).await;
}

/// The workload went while its volume is still mounted, and the controller restarts: the new
/// controller keeps it attached and reported until the agent unmounts it.
#[tokio::test(start_paused = true)]
async fn restart_while_a_removed_workloads_volume_is_still_mounted() {
    let mut cluster = Cluster::new();
    let (a, task) = cluster.start();
    cluster.schedule(&a, "w1", V1).await;
    cluster.set_in_use(&a, &[V1]).await;
    cluster
        .wait_for("reported", |c| listed(&c.store, A) == [V1])
        .await;
    cluster.remove(&a, "w1").await;
    sleep(secs(1)).await;
    task.abort();
    let _ = task.await;

    let (b, task) = cluster.start();
    sleep(secs(600)).await;
    assert_eq!(cluster.backend.attachments(), vec![(V1, A)]);
    assert_eq!(listed(&cluster.store, A), vec![V1]);
    assert_eq!(cluster.backend.calls(BackendOp::Detach, &V1, &A), 0);

    cluster.set_in_use(&b, &[]).await;
    sleep(secs(1)).await;
    cluster.assert_converged();
    b.shutdown(secs(1)).await.unwrap();
    task.await.unwrap();
}

// ---- misuse -------------------------------------------------------------------------------------

fn one_pod_world() -> World<D> {
    World::new()
        .volume(V1, VolumeSpec::single_node(()))
        .node(A, in_use(&[]))
        .workload("pod-1", A, [V1])
}

fn build(config: Config) -> Result<Controller<D>, BuildError<D>> {
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    Controller::new(
        config,
        Arc::new(MemoryBackend::new()),
        Arc::new(store),
        one_pod_world(),
    )
}

/// Durations the core cannot add to its clock come back as a typed error, not a panic later.
#[tokio::test(start_paused = true)]
async fn a_configuration_of_endless_periods_is_refused_by_name() {
    let endless = Config {
        reconcile_period: Duration::MAX,
        sync_period: Duration::MAX,
        max_wait_for_unmount: Duration::MAX,
        ..Config::default()
    };
    let refused = build(endless).err();
    assert_eq!(
        refused,
        Some(BuildError::Config(ConfigError::TooLarge {
            field: "reconcile_period",
            value: Duration::MAX
        }))
    );
    assert!(
        refused
            .unwrap()
            .to_string()
            .starts_with("invalid configuration: reconcile_period is ")
    );
}

#[test]
fn a_busy_retry_loop_is_refused() {
    let busy = Config {
        reconcile_period: Duration::ZERO,
        backoff: BackoffConfig {
            initial: Duration::ZERO,
            ..BackoffConfig::default()
        },
        ..Config::default()
    };
    assert_eq!(
        build(busy).err(),
        Some(BuildError::Config(ConfigError::BusyRetry))
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_the_longest_grace_returns_the_report() {
    let (handle, task) = build(Config::default()).unwrap().spawn();
    sleep(secs(1)).await;
    let report = handle.shutdown(Duration::MAX).await.expect("running");
    assert_eq!(report, ShutdownReport::default());
    assert_eq!(task.await.unwrap(), report);
}

/// A recorder with a bug: it panics on every event.
struct PanickingRecorder;

impl EventRecorder<D> for PanickingRecorder {
    fn record(&self, event: &Event<D>) {
        panic!("recorder bug on {}", event.reason());
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_recorder_does_not_stop_the_controller() {
    let backend = MemoryBackend::<D>::new();
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let (handle, task) = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        one_pod_world(),
    )
    .unwrap()
    .with_recorder(Arc::new(PanickingRecorder))
    .spawn();

    sleep(secs(1)).await;
    assert_eq!(backend.attachments(), vec![(V1, A)]);
    assert_eq!(listed(&store, A), vec![V1]);
    assert_eq!(handle.metrics().recorder_panics, 1);

    handle.workload_removed("pod-1").await.unwrap();
    sleep(secs(1)).await;
    assert_eq!(backend.attachments(), vec![]);
    assert!(listed(&store, A).is_empty());
    assert_eq!(handle.metrics().recorder_panics, 2, "attached, detached");
    handle.shutdown(secs(1)).await.expect("still running");
    task.await.unwrap();
}

/// A volume id whose `Hash` panics for one value: a user type with a bug, which the core hashes
/// inside the controller's loop.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Brittle(&'static str);

impl std::hash::Hash for Brittle {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        assert_ne!(self.0, "boom", "volume ids named boom explode when hashed");
        self.0.hash(state);
    }
}

type Fragile = Ids<&'static str, Brittle, &'static str, ()>;

#[tokio::test(start_paused = true)]
async fn a_controller_that_died_says_of_what() {
    let store = MemoryStore::<Fragile>::new();
    store.add_node(A);
    let world = World::new().node(
        A,
        NodeFacts {
            in_use: Some(vec![]),
            ..NodeFacts::default()
        },
    );
    let (handle, task) = Controller::new(
        Config::default(),
        Arc::new(MemoryBackend::new()),
        Arc::new(store),
        world,
    )
    .unwrap()
    .spawn();
    sleep(secs(1)).await;
    handle
        .set_volume(Brittle("fine"), VolumeSpec::single_node(()))
        .await
        .unwrap();
    assert_eq!(handle.died(), None, "alive");

    let died = handle
        .set_volume(Brittle("boom"), VolumeSpec::single_node(()))
        .await;
    let Err(ControllerError::Died { message }) = &died else {
        panic!("expected the controller to have died, got {died:?}");
    };
    assert!(
        message.contains("volume ids named boom explode when hashed"),
        "{message}"
    );
    assert!(
        died.unwrap_err()
            .to_string()
            .starts_with("the controller died: ")
    );
    // Every later call says the same, and the task ended with the panic.
    assert!(matches!(
        handle.shutdown(secs(1)).await,
        Err(ControllerError::Died { .. })
    ));
    assert!(handle.is_stopped());
    assert!(
        handle
            .died()
            .is_some_and(|m| m.contains("volume ids named boom explode when hashed")),
        "readable without a call"
    );
    assert!(task.await.unwrap_err().is_panic());
}
