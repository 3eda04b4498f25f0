//! Driver paths against mockall mocks of the backend and the store, on tokio's paused clock.
//!
//! Each test ends with [`Harness::finish`], which shuts the controller down and awaits its task:
//! the mocks are dropped inside that task, so an unmet `times(..)` fails the test there.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mockall::Sequence;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

use super::*;
use crate::config::{BackoffConfig, CallKind, CallTimeouts};
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::volume::VolumeSpec;
use crate::core::event::Event;
use crate::core::input::{Kind, Rejection};
use crate::core::operation::ForceReason;
use crate::core::operation::OpKind;
use crate::core::state::actual::NodeFacts;
use crate::core::state::desired::{DesiredError, Missing};
use crate::domain::Ids;
use crate::traits::backend::MockAttachBackend;
use crate::traits::store::MockNodeStatusStore;
use crate::traits::{AttachInfo, BackendAttachment, BackendError};
use crate::traits::{NodeStatus, Revision, StoreError};

type D = Ids<&'static str, &'static str, &'static str, u32>;

const A: &str = "node-a";
const B: &str = "node-b";
const V1: &str = "vol-1";
const V2: &str = "vol-2";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn device(v: &str) -> Option<String> {
    Some(format!("/dev/{v}"))
}

fn rv(v: &'static str) -> ReportedVolume<D> {
    ReportedVolume {
        volume: v,
        device: device(v).map(Into::into),
    }
}

fn facts(in_use: &[&'static str]) -> NodeFacts<&'static str> {
    NodeFacts {
        in_use: Some(in_use.to_vec()),
        ..NodeFacts::default()
    }
}

fn transient() -> BackendError<&'static str> {
    BackendError::transient("503")
}

fn uncertain() -> BackendError<&'static str> {
    BackendError::uncertain("timeout")
}

/// vol-1 and vol-2 (single-node), node-a and node-b (healthy, nothing mounted), `w1` on node-a
/// using vol-1.
fn world() -> World<D> {
    World::new()
        .volume(V1, VolumeSpec::single_node(1))
        .volume(V2, VolumeSpec::single_node(2))
        .node(A, facts(&[]))
        .node(B, facts(&[]))
        .workload("w1", A, [V1])
}

/// A time-stamped log the mocks append to.
#[derive(Clone)]
struct Log<T>(Arc<Mutex<Vec<(Duration, T)>>>);

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log(Arc::default())
    }
}

impl<T: Clone> Log<T> {
    fn push(&self, epoch: Instant, item: T) {
        self.0.lock().push((Instant::now() - epoch, item));
    }
    fn items(&self) -> Vec<T> {
        self.0.lock().iter().map(|(_, x)| x.clone()).collect()
    }
    fn times(&self) -> Vec<Duration> {
        self.0.lock().iter().map(|(t, _)| *t).collect()
    }
}

/// One attach or detach call: volume, node.
type Call = (&'static str, &'static str);

/// One store write as the mock saw it: node, volumes, expected revision.
type Write = (&'static str, Vec<&'static str>, Revision);

fn volumes(list: &ReportedVolumes<D>) -> Vec<&'static str> {
    list.volumes().to_vec()
}

/// A store listing `nodes`, each at revision 1 with nothing attached.
fn store(nodes: &'static [&'static str]) -> MockNodeStatusStore<D> {
    let mut store = MockNodeStatusStore::<D>::new();
    store
        .expect_list()
        .returning(move || Ok(nodes.iter().map(|n| (*n, empty_status(1))).collect()));
    store
}

/// A node status listing nothing, with a healthy, unfenced agent that uses nothing, at
/// `revision`.
fn empty_status(revision: u64) -> NodeStatus<D> {
    NodeStatus {
        attached: vec![],
        in_use: Some(vec![]),
        fenced: Some(false),
        healthy: Some(true),
        revision: Revision::from(revision),
    }
}

/// Answers the fresh read taken before each detach (verify-safe-to-detach): the node's agent
/// uses nothing, so every detach may go ahead. Add it after a test's own reads.
fn nothing_in_use(store: &mut MockNodeStatusStore<D>) {
    store.expect_read().returning(|_| Ok(empty_status(0)));
}

/// Accepts every further write (new revision: expected + 1) and logs it.
fn accept_writes(store: &mut MockNodeStatusStore<D>, epoch: Instant) -> Log<Write> {
    let log = Log::default();
    let l = log.clone();
    store.expect_write().returning(move |n, list, r| {
        let next = r.plus(1);
        l.push(epoch, (*n, volumes(list), r));
        Ok(next)
    });
    log
}

/// A backend that lists nothing and confirms every verified attachment.
fn backend() -> MockAttachBackend<D> {
    let mut backend = MockAttachBackend::<D>::new();
    backend.expect_list().returning(|| Ok(vec![]));
    backend
}

fn verify_all(backend: &mut MockAttachBackend<D>) {
    backend
        .expect_verify()
        .returning(|_, vols| Ok(vols.iter().map(|(v, _)| *v).collect()));
}

/// Logs attach calls and succeeds.
fn accept_attaches(backend: &mut MockAttachBackend<D>, epoch: Instant) -> Log<Call> {
    let log = Log::default();
    let l = log.clone();
    backend.expect_attach().returning(move |v, n, _| {
        l.push(epoch, (*v, *n));
        Ok(AttachInfo { device: device(v) })
    });
    log
}

fn accept_detaches(backend: &mut MockAttachBackend<D>, epoch: Instant) -> Log<Call> {
    let log = Log::default();
    let l = log.clone();
    backend.expect_detach().returning(move |v, n, _| {
        l.push(epoch, (*v, *n));
        Ok(())
    });
    log
}

struct Harness {
    handle: ControllerHandle<D>,
    task: JoinHandle<ShutdownReport<D>>,
    events: MemoryRecorder<D>,
}

impl Harness {
    fn start(
        config: Config,
        backend: impl AttachBackend<D> + 'static,
        store: impl NodeStatusStore<D> + 'static,
        world: World<D>,
    ) -> Self {
        let events = MemoryRecorder::new();
        let (handle, task) = Controller::new(config, Arc::new(backend), Arc::new(store), world)
            .expect("valid world")
            .with_recorder(Arc::new(events.clone()))
            .spawn();
        Harness {
            handle,
            task,
            events,
        }
    }

    fn new(backend: MockAttachBackend<D>, store: MockNodeStatusStore<D>) -> Self {
        Self::start(Config::default(), backend, store, world())
    }

    async fn finish(self) -> ShutdownReport<D> {
        let report = self.handle.shutdown(secs(1)).await.expect("running");
        let from_task = self
            .task
            .await
            .expect("controller task (mock expectations)");
        assert_eq!(report, from_task);
        report
    }
}

// ---- backend paths ----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn attaches_reports_then_unreports_and_detaches() {
    let epoch = Instant::now();
    let mut seq = Sequence::new();
    let mut backend = backend();
    backend
        .expect_attach()
        .withf(|v, n, p| *v == V1 && *n == A && *p == 1)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|v, _, _| Ok(AttachInfo { device: device(v) }));
    let mut store = store(&[A, B]);
    store
        .expect_write()
        .withf(|n, l, r| *n == A && l.to_vec() == [rv(V1)] && *r == Revision::from(1))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(Revision::from(2)));
    store
        .expect_write()
        .withf(|n, l, r| *n == A && l.is_empty() && *r == Revision::from(2))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(Revision::from(3)));
    // The detach comes only after the store acknowledged the volume's removal.
    let detaches = Log::default();
    let d = detaches.clone();
    backend
        .expect_detach()
        .withf(|v, n, _| *v == V1 && *n == A)
        .times(1)
        .in_sequence(&mut seq)
        .returning(move |v, n, _| {
            d.push(epoch, (*v, *n));
            Ok(())
        });
    nothing_in_use(&mut store);
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(1)).await;
    assert_eq!(detaches.items(), vec![(V1, A)]);
    assert_eq!(
        h.events.reasons(),
        vec!["SuccessfulAttachVolume", "SuccessfulDetachVolume"]
    );
    let m = h.handle.metrics();
    assert_eq!(m.attach.succeeded, 1);
    assert_eq!(m.detach.succeeded, 1);
    assert_eq!(m.write_status.succeeded, 2);
    assert_eq!(m.store_writes, 2);
    assert_eq!(m.in_flight, 0);
    let report = h.finish().await;
    assert!(report.finished.is_empty() && report.abandoned.is_empty());
}

#[tokio::test(start_paused = true)]
async fn attach_transient_error_is_retried_after_backoff_and_reported_once() {
    let epoch = Instant::now();
    let mut backend = backend();
    let failed = Log::default();
    let f = failed.clone();
    backend.expect_attach().times(1).returning(move |v, n, _| {
        f.push(epoch, (*v, *n));
        Err(transient())
    });
    let attached = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(2)).await;
    let (first, second) = (failed.times()[0], attached.times()[0]);
    assert!(
        second - first >= ms(500) && second - first < ms(700),
        "retried after {:?}",
        second - first
    );
    // Nothing was reported before the attach succeeded, and it was reported once.
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    assert!(writes.times()[0] > second);
    assert_eq!(
        h.events.reasons(),
        vec!["FailedAttachVolume", "SuccessfulAttachVolume"]
    );
    assert_eq!(h.handle.metrics().attach.failed, 1);
    h.finish().await;
}

/// The handle answers "why does it wait?" from the running core: the failed attach's backoff
/// and error, then nothing once attached; and a typed error once the controller is gone.
#[tokio::test(start_paused = true)]
async fn the_handle_explains_a_workloads_wait_from_the_running_core() {
    use crate::core::explain::{Wait, WaitKind};
    let mut backend = backend();
    backend
        .expect_attach()
        .times(1)
        .returning(|_, _, _| Err(transient()));
    accept_attaches(&mut backend, Instant::now());
    let mut store = store(&[A, B]);
    accept_writes(&mut store, Instant::now());
    let h = Harness::new(backend, store);

    sleep(ms(150)).await;
    let explained = h.handle.explain_workload("w1").await.unwrap();
    let waits: Vec<WaitKind> = explained.waits().map(|p| p.wait.kind()).collect();
    assert_eq!(waits, vec![WaitKind::Backoff], "{explained}");
    let text = explained.to_string();
    assert!(
        text.contains("waiting to retry a failed Attach") && text.contains("503"),
        "{text}"
    );
    sleep(secs(2)).await;
    let volume = h.handle.explain_volume(V1).await.unwrap();
    assert_eq!(volume.pairs.len(), 1);
    assert_eq!(volume.pairs[0].wait, Wait::Settled, "{volume}");
    assert!(h.handle.explain_workload("w1").await.unwrap().is_settled());
    let handle = h.handle.clone();
    h.finish().await;
    assert_eq!(
        handle.explain_volume(V1).await.unwrap_err(),
        ControllerError::Stopped
    );
}

#[tokio::test(start_paused = true)]
async fn attach_uncertain_error_is_not_reported_until_an_attach_succeeds() {
    let epoch = Instant::now();
    let mut backend = backend();
    backend
        .expect_attach()
        .times(1)
        .returning(|_, _, _| Err(uncertain()));
    let attached = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(ms(300)).await;
    assert!(writes.items().is_empty(), "maybe-attached is not reported");
    sleep(secs(2)).await;
    assert_eq!(attached.items(), vec![(V1, A)]);
    assert!(attached.times()[0] >= ms(500), "after the backoff");
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    assert_eq!(
        h.events.reasons(),
        vec!["FailedAttachVolume", "SuccessfulAttachVolume"]
    );
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn attached_elsewhere_is_detached_there_before_attaching_here() {
    let mut seq = Sequence::new();
    let mut backend = backend();
    backend
        .expect_attach()
        .withf(|v, n, _| *v == V1 && *n == A)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Err(BackendError::attached_elsewhere(B, "in use")));
    backend
        .expect_detach()
        .withf(|v, n, _| *v == V1 && *n == B)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(()));
    backend
        .expect_attach()
        .withf(|v, n, _| *v == V1 && *n == A)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|v, _, _| Ok(AttachInfo { device: device(v) }));
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, Instant::now());
    nothing_in_use(&mut store);
    let h = Harness::new(backend, store);

    sleep(secs(3)).await;
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    let reasons = h.events.reasons();
    assert_eq!(reasons.first(), Some(&"FailedAttachVolume"));
    assert_eq!(
        &reasons[reasons.len() - 2..],
        ["SuccessfulDetachVolume", "SuccessfulAttachVolume"]
    );
    h.finish().await;
}

/// Attaches vol-1 to node-a, then removes `w1` and returns once the first detach was tried.
async fn attach_then_remove(
    first_detach: BackendError<&'static str>,
) -> (Harness, Log<Write>, Log<Call>) {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    backend
        .expect_detach()
        .times(1)
        .returning(move |_, _, _| Err(first_detach.clone()));
    let detached = accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    nothing_in_use(&mut store);
    let h = Harness::new(backend, store);
    sleep(secs(1)).await;
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(3)).await;
    (h, writes, detached)
}

#[tokio::test(start_paused = true)]
async fn detach_transient_error_reports_the_volume_again_then_retries() {
    let (h, writes, detached) = attach_then_remove(transient()).await;
    assert_eq!(detached.items(), vec![(V1, A)]);
    // C1 (104526): between the failed detach and its retry, the node is told again that the
    // volume is attached, so a workload coming back can mount it.
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![], vec![V1], vec![]]);
    assert_eq!(
        h.events.reasons(),
        vec![
            "SuccessfulAttachVolume",
            "FailedDetachVolume",
            "SuccessfulDetachVolume"
        ]
    );
    let m = h.handle.metrics();
    assert_eq!((m.detach.failed, m.detach.succeeded), (1, 1));
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn detach_uncertain_error_retries_without_reporting_again() {
    let (h, writes, detached) = attach_then_remove(uncertain()).await;
    assert_eq!(detached.items(), vec![(V1, A)]);
    // Maybe detached: not reported (an agent must not mount it), detached again.
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![]]);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn detach_attached_elsewhere_error_is_retried() {
    let elsewhere = BackendError::attached_elsewhere(B, "confused backend");
    let (h, writes, detached) = attach_then_remove(elsewhere).await;
    assert_eq!(detached.items(), vec![(V1, A)]);
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![], vec![V1], vec![]]);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn verify_notices_a_vanished_attachment_and_it_is_attached_again() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    backend
        .expect_verify()
        .withf(|n, vols| *n == A && *vols == [(V1, 1)])
        .times(1)
        .returning(|_, _| Ok(vec![]));
    verify_all(&mut backend);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(61)).await;
    assert_eq!(attaches.items(), vec![(V1, A), (V1, A)]);
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![], vec![V1]]);
    assert_eq!(h.handle.metrics().verify.succeeded, 1);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_backend_call_counts_as_uncertain() {
    let epoch = Instant::now();
    let mut backend = backend();
    backend
        .expect_attach()
        .times(1)
        .returning(|_, _, _| panic!("backend bug"));
    let attaches = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(2)).await;
    assert_eq!(attaches.items(), vec![(V1, A)]);
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    let events = h.events.events();
    assert!(
        matches!(&events[0], Event::AttachFailed { message, .. } if message.contains("panicked")),
        "{events:?}"
    );
    assert_eq!(h.handle.metrics().attach.failed, 1);
    h.finish().await;
}

/// A backend whose attach of some volumes takes a while, or panics, before reaching the mock
/// (a mock that panics itself is poisoned for the calls after).
struct Slow {
    inner: MockAttachBackend<D>,
    attach_latency: Vec<(&'static str, Duration)>,
    panics_on: Option<&'static str>,
}

#[async_trait]
impl AttachBackend<D> for Slow {
    async fn attach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &u32,
    ) -> Result<AttachInfo, BackendError<&'static str>> {
        if let Some((_, latency)) = self.attach_latency.iter().find(|(v, _)| v == volume) {
            sleep(*latency).await;
        }
        assert_ne!(Some(*volume), self.panics_on, "backend bug");
        self.inner.attach(volume, node, payload).await
    }

    async fn detach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &u32,
    ) -> Result<(), BackendError<&'static str>> {
        self.inner.detach(volume, node, payload).await
    }

    async fn verify(
        &self,
        node: &&'static str,
        volumes: &[(&'static str, u32)],
    ) -> Result<Vec<&'static str>, BackendError<&'static str>> {
        self.inner.verify(node, volumes).await
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<&'static str>> {
        self.inner.list().await
    }
}

/// A controller attaching vol-1 and vol-2 to node-a in its first pass, through `Slow` with
/// these quirks; with the log of attaches and of status writes.
fn two_attaches_on_a(
    attach_latency: Vec<(&'static str, Duration)>,
    panics_on: Option<&'static str>,
) -> (Harness, Log<Call>, Log<Write>) {
    let epoch = Instant::now();
    let mut inner = backend();
    let attaches = accept_attaches(&mut inner, epoch);
    verify_all(&mut inner);
    let backend = Slow {
        inner,
        attach_latency,
        panics_on,
    };
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::start(
        Config::default(),
        backend,
        store,
        world().workload("w2", A, [V2]),
    );
    (h, attaches, writes)
}

#[tokio::test(start_paused = true)]
async fn a_slow_attach_holds_up_no_other_volume() {
    let (h, attaches, writes) = two_attaches_on_a(vec![(V1, secs(30))], None);

    sleep(secs(1)).await;
    assert_eq!(attaches.items(), vec![(V2, A)]);
    assert_eq!(writes.items(), vec![(A, vec![V2], Revision::from(1))]);
    assert_eq!(h.handle.metrics().in_flight, 1, "vol-1 still attaching");
    sleep(secs(30)).await;
    assert_eq!(attaches.items(), vec![(V2, A), (V1, A)]);
    assert!(attaches.times()[1] >= secs(30));
    assert_eq!(writes.items()[1], (A, vec![V1, V2], Revision::from(2)));
    h.finish().await;
}

/// The operations of a pass share a task (`batch.rs`): a call that panics fails its own
/// operation, and the others of its pass go on as if it had run alone.
#[tokio::test(start_paused = true)]
async fn a_panicking_call_fails_only_its_own_operation() {
    let (h, attaches, writes) = two_attaches_on_a(Vec::new(), Some(V1));
    let mut outcomes = h.handle.outcomes();

    sleep(ms(50)).await;
    // One pass planned both attaches: vol-1's panicked, vol-2's landed.
    assert_eq!(attaches.items(), vec![(V2, A)]);
    let mut ended = Vec::new();
    while let Ok(finished) = outcomes.try_recv() {
        if finished.kind == OpKind::Attach {
            ended.push((finished.kind, finished.volume, finished.failure));
        }
    }
    ended.sort_by_key(|(_, volume, _)| *volume);
    assert_eq!(
        ended,
        vec![
            (OpKind::Attach, Some(V1), Some(FailureKind::Panicked)),
            (OpKind::Attach, Some(V2), None),
        ]
    );
    let m = h.handle.metrics();
    assert_eq!((m.attach.succeeded, m.attach.failed), (1, 1));
    sleep(secs(1)).await;
    assert_eq!(writes.items()[0], (A, vec![V2], Revision::from(1)));
    h.finish().await;
}

// ---- store paths ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn status_conflict_reads_fresh_and_retries_on_the_new_revision() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let mut seq = Sequence::new();
    let mut store = store(&[A, B]);
    store
        .expect_write()
        .withf(|_, _, r| *r == Revision::from(1))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Err(StoreError::conflict(Revision::from(7))));
    store
        .expect_read()
        .withf(|n| *n == A)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(empty_status(7)));
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(7))]);
    let m = h.handle.metrics();
    assert_eq!((m.store_writes, m.store_write_conflicts), (2, 1));
    // Each write is one operation: the one that lost the race failed, the next one landed.
    assert_eq!(m.write_status.succeeded, 1);
    assert_eq!(m.write_status.failed, 1);
    assert_eq!(m.read_status.succeeded, 1);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn status_conflict_with_the_list_already_stored_is_success() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    store
        .expect_write()
        .times(1)
        .returning(|_, _, _| Err(StoreError::conflict(Revision::from(7))));
    store.expect_read().times(1).returning(|_| {
        Ok(NodeStatus {
            attached: vec![rv(V1)],
            in_use: None,
            fenced: None,
            healthy: None,
            revision: Revision::from(7),
        })
    });
    let writes = accept_writes(&mut store, epoch);
    nothing_in_use(&mut store);
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    assert!(writes.items().is_empty(), "nothing left to write");
    // The revision read is the one the next write is conditional on.
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(1)).await;
    assert_eq!(writes.items(), vec![(A, vec![], Revision::from(7))]);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn status_conflicts_without_end_fail_the_write_and_the_core_backs_off() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let losing = Log::default();
    let l = losing.clone();
    store.expect_write().times(3).returning(move |n, list, r| {
        let current = r.plus(10);
        l.push(epoch, (*n, volumes(list), r));
        Err(StoreError::conflict(current))
    });
    let mut reads = 0;
    store.expect_read().returning(move |_| {
        reads += 1;
        Ok(empty_status(1 + 10 * reads))
    });
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(2)).await;
    let revisions: Vec<_> = losing.items().into_iter().map(|(_, _, r)| r).collect();
    assert_eq!(
        revisions,
        vec![Revision::from(1), Revision::from(11), Revision::from(21)]
    );
    // The failed write left the revision unknown: the retry, after the backoff, reads first.
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(31))]);
    assert!(writes.times()[0] - losing.times()[2] >= ms(500));
    let m = h.handle.metrics();
    assert_eq!((m.write_status.failed, m.write_status.succeeded), (3, 1));
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn status_transient_error_is_retried_after_backoff_on_the_same_revision() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let failed = Log::default();
    let f = failed.clone();
    store.expect_write().times(1).returning(move |n, list, r| {
        f.push(epoch, (*n, volumes(list), r));
        Err(StoreError::transient("etcd leader lost"))
    });
    store.expect_read().never();
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(2)).await;
    assert_eq!(failed.items(), vec![(A, vec![V1], Revision::from(1))]);
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    let wait = writes.times()[0] - failed.times()[0];
    assert!(wait >= ms(500) && wait < ms(700), "retried after {wait:?}");
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn status_not_found_stops_writes_until_the_node_reappears() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    let mut seq = Sequence::new();
    let mut store = store(&[A, B]);
    store
        .expect_write()
        .withf(|n, _, r| *n == A && *r == Revision::from(1))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Err(StoreError::not_found()));
    // The node object is recreated: its new status is read fresh, never written against the
    // forgotten revision.
    store
        .expect_read()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(empty_status(40)));
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    // A second volume attaches meanwhile; nothing is written to a node the store lacks.
    h.handle
        .workload_scheduled("w2", A, vec![V2])
        .await
        .unwrap();
    sleep(secs(5)).await;
    assert_eq!(attaches.items(), vec![(V1, A), (V2, A)]);
    assert!(writes.items().is_empty());
    assert_eq!(h.handle.metrics().store_writes, 1);

    // The orchestrator sees the node again (its workloads stayed, as they do after a quick
    // re-registration).
    h.handle.node_updated(A, facts(&[])).await.unwrap();
    sleep(secs(1)).await;
    assert_eq!(writes.items(), vec![(A, vec![V1, V2], Revision::from(40))]);
    h.finish().await;
}

// ---- inputs, recovery, shutdown, idling, events -------------------------------------------------

#[tokio::test(start_paused = true)]
async fn inputs_in_any_order_are_taken_and_misuse_comes_back_typed() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    let config = Config {
        max_pending_workloads: 2,
        ..Config::default()
    };
    let h = Harness::start(config, backend, store, world());

    // A workload on a node or a volume not seen yet waits; a replayed deletion is a no-op.
    h.handle
        .workload_scheduled("w9", "node-z", vec![V1])
        .await
        .unwrap();
    h.handle
        .workload_scheduled("w8", B, vec!["vol-z"])
        .await
        .unwrap();
    h.handle.workload_removed("w7").await.unwrap();
    h.handle.node_removed("node-y").await.unwrap();
    h.handle.volume_removed("vol-y").await.unwrap();
    // Misuse: more waiting workloads than allowed, a relist that never started.
    assert_eq!(
        h.handle.workload_scheduled("w6", "node-z", vec![]).await,
        Err(ControllerError::Rejected(
            DesiredError::TooManyPending {
                workload: "w6",
                missing: vec![Missing::Node("node-z")],
                limit: 2
            }
            .into()
        ))
    );
    assert_eq!(
        h.handle.send(Input::RelistDone { kind: Kind::Node }).await,
        Err(ControllerError::Rejected(ReconcilerError::NoRelist {
            kind: Kind::Node
        }))
    );
    // The controller carries on; what w8 waited for arrives.
    h.handle
        .set_volume("vol-z", VolumeSpec::single_node(3))
        .await
        .unwrap();
    sleep(secs(1)).await;
    let mut calls = attaches.items();
    calls.sort();
    assert_eq!(calls, vec![(V1, A), ("vol-z", B)]);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_applied_in_order_and_names_what_was_refused() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    nothing_in_use(&mut store);
    accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    let refused = h
        .handle
        .send_all([
            // Waits for node-c, which comes two inputs later.
            Input::WorkloadScheduled {
                workload: "w2",
                node: "node-c",
                volumes: vec![V2],
            },
            Input::RelistDone { kind: Kind::Volume },
            Input::NodeUpdated {
                node: "node-c",
                facts: facts(&[]),
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        refused,
        vec![Rejection {
            index: 1,
            error: ReconcilerError::NoRelist { kind: Kind::Volume }
        }]
    );
    assert!(h.handle.send_all([]).await.unwrap().is_empty());
    sleep(secs(1)).await;
    let mut calls = attaches.items();
    calls.sort();
    assert_eq!(calls, vec![(V1, A), (V2, "node-c")]);
    h.finish().await;
}

#[test]
fn a_world_in_any_order_is_taken_and_one_over_the_bound_refused() {
    let any_order = World::<D>::new()
        .workload("w1", A, [V1])
        .node(A, facts(&[]))
        .volume(V1, VolumeSpec::single_node(1));
    assert!(
        Controller::new(
            Config::default(),
            Arc::new(MockAttachBackend::<D>::new()),
            Arc::new(MockNodeStatusStore::<D>::new()),
            any_order,
        )
        .is_ok()
    );
    let crowded = World::<D>::new()
        .workload("w1", A, [V1])
        .workload("w2", A, [V1]);
    let refused = Controller::new(
        Config {
            max_pending_workloads: 1,
            ..Config::default()
        },
        Arc::new(MockAttachBackend::<D>::new()),
        Arc::new(MockNodeStatusStore::<D>::new()),
        crowded,
    );
    assert_eq!(
        refused.err(),
        Some(BuildError::World(
            DesiredError::TooManyPending {
                workload: "w2",
                missing: vec![Missing::Node(A), Missing::Volume(V1)],
                limit: 1
            }
            .into()
        ))
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_retries_failed_lists_with_backoff_and_plans_nothing_before() {
    let epoch = Instant::now();
    let lists = Log::default();
    let mut backend = MockAttachBackend::<D>::new();
    let l = lists.clone();
    backend.expect_list().times(1).returning(move || {
        l.push(epoch, "backend");
        Err(transient())
    });
    let l = lists.clone();
    backend.expect_list().returning(move || {
        l.push(epoch, "backend");
        Ok(vec![])
    });
    let attaches = accept_attaches(&mut backend, epoch);
    let mut store = MockNodeStatusStore::<D>::new();
    let l = lists.clone();
    store.expect_list().times(3).returning(move || {
        l.push(epoch, "store");
        Err(StoreError::transient("apiserver down"))
    });
    let l = lists.clone();
    store.expect_list().times(1).returning(move || {
        l.push(epoch, "store");
        Ok(vec![])
    });
    store.expect_read().returning(|_| Ok(empty_status(1)));
    accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    // Inputs are taken while recovering.
    h.handle
        .workload_scheduled("w2", B, vec![V2])
        .await
        .unwrap();
    sleep(secs(5)).await;
    let store_times: Vec<_> = lists
        .0
        .lock()
        .iter()
        .filter(|(_, s)| *s == "store")
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(store_times, vec![ms(0), ms(500), ms(1500), ms(3500)]);
    assert_eq!(lists.items().iter().filter(|s| **s == "backend").count(), 2);
    assert_eq!(attaches.items(), vec![(V1, A), (V2, B)]);
    assert!(
        attaches.times()[0] >= ms(3500),
        "nothing planned before both lists loaded"
    );
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_works_while_recovery_keeps_failing() {
    let mut backend = MockAttachBackend::<D>::new();
    backend.expect_list().returning(|| Err(transient()));
    backend.expect_attach().never();
    let mut store = MockNodeStatusStore::<D>::new();
    store.expect_list().returning(|| Ok(vec![]));
    let h = Harness::new(backend, store);

    sleep(secs(600)).await;
    let before = Instant::now();
    let report = h.finish().await;
    assert_eq!(Instant::now(), before, "nothing to wait for");
    assert_eq!(report, ShutdownReport::default());
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_calls_finish_within_the_grace_and_abandons_the_rest() {
    let epoch = Instant::now();
    let mut inner = backend();
    accept_attaches(&mut inner, epoch);
    let backend = Slow {
        inner,
        attach_latency: vec![(V1, secs(5)), (V2, secs(60))],
        panics_on: None,
    };
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    let h = Harness::start(
        Config::default(),
        backend,
        store,
        world().workload("w2", B, [V2]),
    );

    sleep(secs(1)).await;
    let started = Instant::now();
    let report = h.handle.shutdown(secs(10)).await.unwrap();
    assert_eq!(Instant::now() - started, secs(10));
    assert_eq!(
        report.finished,
        vec![OperationSummary {
            id: report.finished[0].id,
            kind: OpKind::Attach,
            volume: Some(V1),
            node: Some(A),
            outcome: Ending::Succeeded,
        }]
    );
    assert_eq!(report.abandoned.len(), 1);
    let abandoned = &report.abandoned[0];
    assert_eq!(
        (abandoned.kind, abandoned.volume, abandoned.node),
        (OpKind::Attach, Some(V2), Some(B))
    );
    assert_eq!(abandoned.outcome, Ending::Abandoned);
    // It stopped planning: the attach of vol-1 was not followed by a status write.
    let m = h.handle.metrics();
    assert_eq!(m.write_status.total(), 0);
    assert_eq!((m.attach.succeeded, m.attach.abandoned), (1, 1));
    assert_eq!(m.in_flight, 0);
    // And it takes no more inputs.
    assert_eq!(
        h.handle.workload_removed("w1").await,
        Err(ControllerError::Stopped)
    );
    assert_eq!(
        h.handle.shutdown(secs(1)).await,
        Err(ControllerError::Stopped)
    );
    assert!(h.handle.is_stopped());
    assert_eq!(h.task.await.unwrap(), report);
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_stops_the_controller() {
    let mut backend = backend();
    backend.expect_attach().never();
    let h = Harness::start(
        Config::default(),
        backend,
        store(&[]),
        World::new().node(A, facts(&[])),
    );
    drop(h.handle);
    let report = tokio::time::timeout(secs(1), h.task)
        .await
        .unwrap()
        .unwrap();
    // Nothing but the recovery listings had started; they are cut off with the rest.
    let kinds: Vec<_> = report.abandoned.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, vec![OpKind::ListStatuses, OpKind::List]);
    assert!(report.finished.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_idle_controller_sleeps_instead_of_polling() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    verify_all(&mut backend);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    let h = Harness::new(backend, store);

    sleep(secs(3600)).await;
    let m = h.handle.metrics();
    // A handful of passes to attach and report, then one per sync period to verify.
    assert!(
        (60..=65).contains(&m.reconcile_passes),
        "{} passes in an hour",
        m.reconcile_passes
    );
    assert!(
        (59..=60).contains(&m.verify.succeeded),
        "{} verifies",
        m.verify.succeeded
    );
    h.finish().await;
}

/// An idle controller wakes only to list the backend every resync period (and with the
/// listing turned off, not at all).
#[tokio::test(start_paused = true)]
async fn an_empty_controller_only_wakes_to_list_the_backend() {
    let h = Harness::start(
        Config::default(),
        backend(),
        store(&[A]),
        World::new().node(A, facts(&[])),
    );
    sleep(secs(3600)).await;
    let m = h.handle.metrics();
    assert_eq!(
        m.list.succeeded, 12,
        "the recovery listing, then one every 5 minutes, at 5 to 55"
    );
    assert!(m.reconcile_passes <= 13, "{}", m.reconcile_passes);
    h.finish().await;

    let h = Harness::start(
        Config {
            resync_period: None,
            ..Config::default()
        },
        backend(),
        store(&[A]),
        World::new().node(A, facts(&[])),
    );
    sleep(secs(3600)).await;
    assert!(
        h.handle.metrics().reconcile_passes <= 2,
        "the recovery pass, and one for the node"
    );
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_fenced_node_is_force_detached_and_counted() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    // The fresh read before the forced detach confirms the fence.
    store.expect_read().returning(|_| {
        Ok(NodeStatus {
            fenced: Some(true),
            healthy: Some(false),
            in_use: Some(vec![V1]),
            ..empty_status(0)
        })
    });
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    h.handle.node_updated(A, facts(&[V1])).await.unwrap();
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(600)).await;
    assert!(detaches.items().is_empty(), "mounted on a healthy node");

    let fenced = NodeFacts {
        healthy: false,
        fenced: true,
        in_use: Some(vec![V1]),
        attach_limit: None,
        driver_limits: Vec::new(),
    };
    h.handle.node_updated(A, fenced).await.unwrap();
    sleep(secs(1)).await;
    assert_eq!(detaches.items(), vec![(V1, A)]);
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![]]);
    let m = h.handle.metrics();
    assert_eq!(m.forced_detaches(ForceReason::OutOfService), 1);
    assert_eq!(m.forced_detaches(ForceReason::Timeout), 0);
    assert_eq!(
        h.events.events().last(),
        Some(&Event::DetachSucceeded {
            volume: V1,
            node: A,
            force: Some(ForceReason::OutOfService)
        })
    );
    assert_eq!(h.events.reasons().last(), Some(&"ForcedDetachVolume"));
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn multi_attach_is_recorded_once_and_the_volume_moves_when_freed() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    nothing_in_use(&mut store);
    let h = Harness::new(backend, store);

    sleep(secs(1)).await;
    h.handle
        .workload_scheduled("w2", B, vec![V1])
        .await
        .unwrap();
    sleep(secs(10)).await;
    let events = h.events.take();
    assert_eq!(
        events.iter().map(Event::reason).collect::<Vec<_>>(),
        vec!["SuccessfulAttachVolume", "MultiAttachVolume"]
    );
    assert!(
        events[1]
            .to_string()
            .contains("already used by workload(s) [\"w1\"]"),
        "{}",
        events[1]
    );
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(2)).await;
    assert_eq!(attaches.items(), vec![(V1, A), (V1, B)]);
    assert_eq!(
        h.events.reasons(),
        vec!["SuccessfulDetachVolume", "SuccessfulAttachVolume"]
    );
    h.finish().await;
}

/// Nodes A and B, settled, and a store whose one read answers an empty status at revision 50;
/// returns the harness and the log of status writes.
async fn two_nodes_whose_store_reads_revision_50() -> (Harness, Log<Write>) {
    let epoch = Instant::now();
    let mut store = store(&[A, B]);
    store
        .expect_read()
        .times(1)
        .returning(|_| Ok(empty_status(50)));
    let writes = accept_writes(&mut store, epoch);
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let h = Harness::start(
        Config::default(),
        backend,
        store,
        World::new()
            .volume(V1, VolumeSpec::single_node(1))
            .node(A, facts(&[]))
            .node(B, facts(&[])),
    );
    sleep(secs(1)).await;
    (h, writes)
}

#[tokio::test(start_paused = true)]
async fn a_removed_node_is_read_afresh_when_it_comes_back() {
    let (h, writes) = two_nodes_whose_store_reads_revision_50().await;
    h.handle.node_removed(B).await.unwrap();
    h.handle.node_updated(B, facts(&[])).await.unwrap();
    h.handle
        .workload_scheduled("w1", B, vec![V1])
        .await
        .unwrap();
    sleep(secs(1)).await;
    // Not against revision 1, which belonged to the node object that was removed.
    assert_eq!(writes.items(), vec![(B, vec![V1], Revision::from(50))]);
    h.finish().await;
}

/// The same when the node is dropped by a relist of nodes rather than a removal: the driver
/// forgets what it wrote to it.
#[tokio::test(start_paused = true)]
async fn a_node_dropped_by_a_relist_is_read_afresh_when_it_comes_back() {
    let (h, writes) = two_nodes_whose_store_reads_revision_50().await;
    let refused = h
        .handle
        .send_all([
            Input::RelistStarted { kind: Kind::Node },
            Input::NodeUpdated {
                node: A,
                facts: facts(&[]),
            },
            Input::RelistDone { kind: Kind::Node },
        ])
        .await
        .unwrap();
    assert!(refused.is_empty());
    h.handle.node_updated(B, facts(&[])).await.unwrap();
    h.handle
        .workload_scheduled("w1", B, vec![V1])
        .await
        .unwrap();
    sleep(secs(1)).await;
    assert_eq!(writes.items(), vec![(B, vec![V1], Revision::from(50))]);
    h.finish().await;
}

/// The core's view of the node says "not in use", but a fresh read says otherwise (a mount that
/// started before the volume left the node's status): the detach is held back. That is no
/// failure: no failure event, no status write, one "waiting for unmount" event, and re-reads
/// at the re-check period.
#[tokio::test(start_paused = true)]
async fn a_fresh_in_use_report_stops_a_detach() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let detached = accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    store.expect_read().returning(|_| {
        Ok(NodeStatus {
            attached: vec![],
            in_use: Some(vec![V1]),
            fenced: Some(false),
            healthy: Some(true),
            revision: Revision::from(0),
        })
    });
    let h = Harness::new(backend, store);
    sleep(secs(1)).await;
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(10)).await;
    assert!(detached.items().is_empty(), "{:?}", detached.items());
    let reasons = h.events.reasons();
    assert!(!reasons.contains(&"FailedDetachVolume"), "{reasons:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == "WaitingForUnmount")
            .count(),
        1,
        "{reasons:?}"
    );
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(
        lists,
        vec![vec![V1], vec![]],
        "no status write for a hold-back"
    );
    let m = h.handle.metrics();
    assert_eq!(m.detach.total(), 0, "no backend call was made");
    assert!(
        m.read_status.succeeded >= 2,
        "re-read on the re-check timer"
    );
    h.finish().await;
}

// ---- deadlines ----------------------------------------------------------------------------------

/// Which calls hang: each entry makes one call of its kind never answer (it never reaches the
/// mock behind), in order. Every other call goes to the mock.
struct Hangs(Mutex<Vec<CallKind>>);

impl Hangs {
    fn new(hangs: &[CallKind]) -> Self {
        Hangs(Mutex::new(hangs.to_vec()))
    }

    /// Whether this call of kind `call` must hang (the entry is used up).
    fn hangs(&self, call: CallKind) -> bool {
        let mut hangs = self.0.lock();
        let at = hangs.iter().position(|h| *h == call);
        at.map(|i| hangs.remove(i)).is_some()
    }
}

/// A backend whose calls hang as [`Hangs`] says.
struct HangingBackend {
    inner: MockAttachBackend<D>,
    hangs: Hangs,
}

impl HangingBackend {
    fn new(inner: MockAttachBackend<D>, hangs: &[CallKind]) -> Self {
        HangingBackend {
            inner,
            hangs: Hangs::new(hangs),
        }
    }
}

/// A store whose calls hang as [`Hangs`] says.
struct HangingStore {
    inner: MockNodeStatusStore<D>,
    hangs: Hangs,
}

impl HangingStore {
    fn new(inner: MockNodeStatusStore<D>, hangs: &[CallKind]) -> Self {
        HangingStore {
            inner,
            hangs: Hangs::new(hangs),
        }
    }
}

#[async_trait]
impl AttachBackend<D> for HangingBackend {
    async fn attach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &u32,
    ) -> Result<AttachInfo, BackendError<&'static str>> {
        if self.hangs.hangs(CallKind::Attach) {
            std::future::pending::<()>().await;
        }
        self.inner.attach(volume, node, payload).await
    }

    async fn detach(
        &self,
        volume: &&'static str,
        node: &&'static str,
        payload: &u32,
    ) -> Result<(), BackendError<&'static str>> {
        if self.hangs.hangs(CallKind::Detach) {
            std::future::pending::<()>().await;
        }
        self.inner.detach(volume, node, payload).await
    }

    async fn verify(
        &self,
        node: &&'static str,
        volumes: &[(&'static str, u32)],
    ) -> Result<Vec<&'static str>, BackendError<&'static str>> {
        if self.hangs.hangs(CallKind::Verify) {
            std::future::pending::<()>().await;
        }
        self.inner.verify(node, volumes).await
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<&'static str>> {
        if self.hangs.hangs(CallKind::BackendList) {
            std::future::pending::<()>().await;
        }
        self.inner.list().await
    }

    async fn machine_state(
        &self,
        node: &&'static str,
    ) -> Result<crate::core::calls::backend::MachineState, BackendError<&'static str>> {
        if self.hangs.hangs(CallKind::MachineState) {
            std::future::pending::<()>().await;
        }
        self.inner.machine_state(node).await
    }
}

#[async_trait]
impl NodeStatusStore<D> for HangingStore {
    async fn read(&self, node: &&'static str) -> Result<NodeStatus<D>, StoreError> {
        if self.hangs.hangs(CallKind::StatusRead) {
            std::future::pending::<()>().await;
        }
        self.inner.read(node).await
    }

    async fn write(
        &self,
        node: &&'static str,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        if self.hangs.hangs(CallKind::StatusWrite) {
            std::future::pending::<()>().await;
        }
        self.inner.write(node, attached, expected).await
    }

    async fn list(&self) -> Result<Vec<(&'static str, NodeStatus<D>)>, StoreError> {
        if self.hangs.hangs(CallKind::StoreList) {
            std::future::pending::<()>().await;
        }
        self.inner.list().await
    }
}

fn timed_out(
    call: CallKind,
    node: Option<&'static str>,
    volume: Option<&'static str>,
    after: Duration,
) -> Event<D> {
    Event::CallTimedOut {
        call,
        node,
        volume,
        after,
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_attach_becomes_uncertain_at_its_deadline_and_is_retried() {
    let epoch = Instant::now();
    let mut inner = backend();
    let attaches = accept_attaches(&mut inner, epoch);
    let backend = HangingBackend::new(inner, &[CallKind::Attach]);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let h = Harness::start(Config::default(), backend, store, world());

    sleep(secs(119)).await;
    assert!(attaches.items().is_empty(), "still hanging");
    let m = h.handle.metrics();
    assert_eq!(m.in_flight, 1);
    assert_eq!(
        m.oldest_running,
        Some(secs(119)),
        "the age of the hung attach"
    );
    assert_eq!(m.timeouts.total(), 0);

    // Given up at 2 minutes, retried after the 500 ms backoff.
    sleep(secs(2)).await;
    assert_eq!(attaches.items(), vec![(V1, A)]);
    assert_eq!(attaches.times(), vec![secs(120) + ms(500)]);
    // Maybe attached is not reported; attached is, once.
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    let events = h.events.events();
    assert_eq!(
        events[0],
        timed_out(CallKind::Attach, Some(A), Some(V1), secs(120))
    );
    assert!(
        matches!(&events[1], Event::AttachFailed { message, .. }
            if message == "backend call may have taken effect: no answer within 120s"),
        "{events:?}"
    );
    assert_eq!(
        h.events.reasons(),
        vec![
            "CallTimedOut",
            "FailedAttachVolume",
            "SuccessfulAttachVolume"
        ]
    );
    assert!(events[0].is_warning());
    let m = h.handle.metrics();
    assert_eq!(m.timeouts.attach, 1);
    assert_eq!(m.timeouts.total(), 1);
    assert_eq!((m.attach.failed, m.attach.succeeded), (1, 1));
    assert_eq!(m.oldest_running, None);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_detach_becomes_uncertain_at_its_deadline_and_is_retried() {
    let epoch = Instant::now();
    let mut inner = backend();
    accept_attaches(&mut inner, epoch);
    let detaches = accept_detaches(&mut inner, epoch);
    let backend = HangingBackend::new(inner, &[CallKind::Detach]);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    nothing_in_use(&mut store);
    let h = Harness::start(Config::default(), backend, store, world());

    sleep(secs(1)).await;
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(119)).await;
    assert!(detaches.items().is_empty(), "still hanging");
    sleep(secs(2)).await;
    assert_eq!(detaches.items(), vec![(V1, A)]);
    // Maybe detached: never reported again (an agent must not mount it), detached again.
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![]]);
    let events = h.events.events();
    assert_eq!(
        events[1],
        timed_out(CallKind::Detach, Some(A), Some(V1), secs(120))
    );
    assert!(
        matches!(&events[2], Event::DetachFailed { message, .. } if message.contains("may have taken effect")),
        "{events:?}"
    );
    assert_eq!(h.handle.metrics().timeouts.detach, 1);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn hung_recovery_listings_are_retried_and_the_controller_then_plans() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    let backend = HangingBackend::new(backend, &[CallKind::BackendList]);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    let store = HangingStore::new(store, &[CallKind::StoreList]);
    let h = Harness::start(Config::default(), backend, store, world());

    sleep(secs(119)).await;
    let m = h.handle.metrics();
    assert_eq!(
        m.reconcile_passes, 1,
        "nothing planned but the listings before both load"
    );
    assert_eq!(m.oldest_running, Some(secs(119)));
    assert!(attaches.items().is_empty());

    // Both lists are given up at 2 minutes and retried after the recovery backoff.
    sleep(secs(2)).await;
    assert_eq!(attaches.items(), vec![(V1, A)]);
    assert_eq!(attaches.times(), vec![secs(120) + ms(500)]);
    let m = h.handle.metrics();
    assert!(m.reconcile_passes >= 1);
    assert_eq!((m.timeouts.store_list, m.timeouts.backend_list), (1, 1));
    let events = h.events.events();
    for call in [CallKind::StoreList, CallKind::BackendList] {
        assert!(
            events[..2].contains(&timed_out(call, None, None, secs(120))),
            "{events:?}"
        );
    }
    h.finish().await;
}

/// The first operation of `kind` the stream reported so far.
fn first_of(
    outcomes: &mut tokio::sync::broadcast::Receiver<OperationFinished<D>>,
    kind: OpKind,
) -> OperationFinished<D> {
    while let Ok(done) = outcomes.try_recv() {
        if done.kind == kind {
            return done;
        }
    }
    panic!("no {kind:?} finished");
}

#[tokio::test(start_paused = true)]
async fn a_hung_status_write_times_out_and_is_retried_on_the_same_revision() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    store.expect_read().never();
    let writes = accept_writes(&mut store, epoch);
    let store = HangingStore::new(store, &[CallKind::StatusWrite]);
    let h = Harness::start(Config::default(), backend, store, world());
    let mut outcomes = h.handle.outcomes();

    sleep(secs(29)).await;
    assert!(writes.items().is_empty(), "still hanging");
    assert_eq!(h.handle.metrics().write_status.total(), 0);
    sleep(secs(2)).await;
    assert_eq!(writes.items(), vec![(A, vec![V1], Revision::from(1))]);
    let retried = writes.times()[0];
    assert!(
        retried >= secs(30) + ms(500) && retried < secs(31),
        "retried at {retried:?}"
    );
    assert_eq!(
        h.events.events()[1],
        timed_out(CallKind::StatusWrite, Some(A), None, secs(30))
    );
    let m = h.handle.metrics();
    assert_eq!(m.timeouts.status_write, 1);
    assert_eq!((m.write_status.failed, m.write_status.succeeded), (1, 1));
    // A write with no answer may have landed: uncertain, not transient.
    let first = first_of(&mut outcomes, OpKind::WriteStatus);
    assert_eq!(
        (first.outcome, first.failure, first.duration),
        (Ending::Failed, Some(FailureKind::Uncertain), secs(30))
    );
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_read_before_a_detach_times_out_and_the_detach_is_retried() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    nothing_in_use(&mut store);
    let store = HangingStore::new(store, &[CallKind::StatusRead]);
    let h = Harness::start(Config::default(), backend, store, world());
    let mut outcomes = h.handle.outcomes();

    sleep(secs(1)).await;
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(29)).await;
    assert!(detaches.items().is_empty(), "not detached unchecked");
    sleep(secs(5)).await;
    assert_eq!(detaches.items(), vec![(V1, A)]);
    // The read failed and decided nothing: it is retried after a backoff, and the detach was
    // never a failure, so nothing is reported again in between.
    let lists: Vec<_> = writes.items().into_iter().map(|(_, l, _)| l).collect();
    assert_eq!(lists, vec![vec![V1], vec![]]);
    let events = h.events.events();
    assert_eq!(
        events[1],
        timed_out(CallKind::StatusRead, Some(A), None, secs(30))
    );
    assert!(
        matches!(&events[2], Event::DetachSucceeded { force: None, .. }),
        "a failed read is no failed detach: {events:?}"
    );
    assert_eq!(h.handle.metrics().timeouts.status_read, 1);
    // A read with no answer changed nothing: transient.
    let first = first_of(&mut outcomes, OpKind::ReadStatus);
    assert_eq!(
        (first.outcome, first.failure, first.duration),
        (Ending::Failed, Some(FailureKind::Transient), secs(30))
    );
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn call_timeouts_come_from_the_config() {
    let epoch = Instant::now();
    let mut inner = backend();
    let attaches = accept_attaches(&mut inner, epoch);
    let backend = HangingBackend::new(inner, &[CallKind::Attach]);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    let config = Config {
        call_timeouts: CallTimeouts {
            attach: secs(5),
            ..Default::default()
        },
        ..Config::default()
    };
    let h = Harness::start(config, backend, store, world());
    sleep(secs(6)).await;
    assert_eq!(attaches.times(), vec![secs(5) + ms(500)]);
    assert_eq!(
        h.events.events()[0],
        timed_out(CallKind::Attach, Some(A), Some(V1), secs(5))
    );
    h.finish().await;
}

#[test]
fn start_times_know_the_oldest_running_call() {
    let t0 = Instant::now();
    let mut starts = StartTimes::default();
    starts.add(t0);
    starts.add(t0);
    starts.add(t0 + secs(1));
    starts.add(t0 + secs(2));
    starts.remove(t0 + secs(1));
    assert_eq!(starts.oldest(), Some(t0));
    starts.remove(t0);
    assert_eq!(
        starts.oldest(),
        Some(t0),
        "one call started then still runs"
    );
    starts.remove(t0);
    assert_eq!(starts.oldest(), Some(t0 + secs(2)));
    starts.add(t0 + secs(1));
    assert_eq!(starts.oldest(), Some(t0 + secs(1)), "kept in order");
    starts.remove(t0 + secs(1));
    starts.remove(t0 + secs(2));
    assert_eq!(starts.oldest(), None);
}

/// A start older than the newest (not with tokio's monotonic clock, but kept right all the
/// same) joins the count of an equal instant, or goes in its place.
#[test]
fn start_times_out_of_order_are_counted_in_place() {
    let t0 = Instant::now();
    let mut starts = StartTimes::default();
    starts.add(t0);
    starts.add(t0 + secs(2));
    starts.add(t0);
    starts.add(t0 + secs(1));
    starts.remove(t0);
    assert_eq!(
        starts.oldest(),
        Some(t0),
        "two started at t0, one still runs"
    );
    starts.remove(t0);
    assert_eq!(starts.oldest(), Some(t0 + secs(1)));
    starts.remove(t0 + secs(1));
    assert_eq!(starts.oldest(), Some(t0 + secs(2)));
    starts.remove(t0 + secs(2));
    assert_eq!(starts.oldest(), None);
}

// ---- durations too large to add -----------------------------------------------------------------

/// The core's deadlines at [`Duration::MAX`] (every period at `Duration::MAX`, which
/// [`Config::validate`] refuses, pushed through the driver anyway): the first pass attaches at
/// time zero, after which the core's next deadline is `Duration::MAX` from the start. The driver
/// takes that as "never" instead of overflowing `epoch + deadline`.
#[tokio::test(start_paused = true)]
async fn core_deadlines_too_far_to_represent_mean_never_not_a_panic() {
    let epoch = Instant::now();
    let mut backend = backend();
    let attaches = accept_attaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    let writes = accept_writes(&mut store, epoch);
    let config = Config {
        reconcile_period: Duration::MAX,
        sync_period: Duration::MAX,
        max_wait_for_unmount: Duration::MAX,
        ..Config::default()
    };
    assert!(config.validate().is_err());
    let (handle, task) =
        Controller::unvalidated(config, Arc::new(backend), Arc::new(store), world())
            .expect("valid world")
            .spawn();

    sleep(secs(3600)).await;
    assert_eq!(attaches.items(), vec![(V1, A)]);
    assert!(writes.items().is_empty(), "the next pass is never due");
    // The recovery pass, then the first pass proper.
    assert_eq!(handle.metrics().reconcile_passes, 2);
    // Inputs still go in; nothing becomes due.
    handle.workload_removed("w1").await.unwrap();
    sleep(secs(3600)).await;
    assert_eq!(handle.metrics().reconcile_passes, 2);
    let report = handle.shutdown(secs(1)).await.expect("still running");
    assert_eq!(task.await.unwrap(), report);
}

/// A recovery backoff too long to add to the clock: the failed listing is never retried (as the
/// configuration asks), rather than panicking the driver.
#[tokio::test(start_paused = true)]
async fn a_recovery_backoff_too_far_to_represent_means_never_not_a_panic() {
    let mut backend = MockAttachBackend::<D>::new();
    backend
        .expect_list()
        .times(1)
        .returning(|| Err(transient()));
    backend.expect_attach().never();
    let config = Config {
        backoff: BackoffConfig {
            initial: Duration::MAX,
            max: Duration::MAX,
        },
        ..Config::default()
    };
    let (handle, task) =
        Controller::unvalidated(config, Arc::new(backend), Arc::new(store(&[A, B])), world())
            .expect("valid world")
            .spawn();
    sleep(secs(3600)).await;
    assert_eq!(
        handle.metrics().reconcile_passes,
        1,
        "the recovery pass only"
    );
    assert_eq!(
        handle.shutdown(secs(1)).await,
        Ok(ShutdownReport::default())
    );
    task.await.expect("the mocks' expectations");
}

/// `shutdown(Duration::MAX)` is "wait for every running call": the hung attach ends at its own
/// deadline, and the report lists it as finished (failed).
#[tokio::test(start_paused = true)]
async fn shutdown_with_an_unbounded_grace_waits_for_every_call_to_end() {
    let epoch = Instant::now();
    let mut inner = backend();
    accept_attaches(&mut inner, epoch);
    let backend = HangingBackend::new(inner, &[CallKind::Attach]);
    let h = Harness::start(Config::default(), backend, store(&[A, B]), world());

    sleep(secs(20)).await;
    let report = tokio::time::timeout(secs(3600), h.handle.shutdown(Duration::MAX))
        .await
        .expect("the hung attach ends at its deadline")
        .expect("running");
    assert_eq!(Instant::now() - epoch, secs(120), "the attach's deadline");
    assert_eq!(report.abandoned, vec![]);
    assert_eq!(
        report.finished,
        vec![OperationSummary {
            id: report.finished[0].id,
            kind: OpKind::Attach,
            volume: Some(V1),
            node: Some(A),
            outcome: Ending::Failed,
        }]
    );
    assert_eq!(h.task.await.unwrap(), report);
}

/// Issue 9, bug 2: the core saw the node fenced, but the fence was lifted since and the node
/// mounts the volume again. The fresh read before the forced detach finds the fence gone and
/// the volume in use: nothing is detached.
#[tokio::test(start_paused = true)]
async fn a_lifted_fence_stops_a_forced_detach() {
    let epoch = Instant::now();
    let mut backend = backend();
    accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    store.expect_read().returning(|_| {
        Ok(NodeStatus {
            fenced: Some(false),
            in_use: Some(vec![V1]),
            ..empty_status(0)
        })
    });
    let h = Harness::new(backend, store);
    sleep(secs(1)).await;
    let stale_fence = NodeFacts {
        healthy: false,
        fenced: true,
        in_use: Some(vec![V1]),
        attach_limit: None,
        driver_limits: Vec::new(),
    };
    h.handle.node_updated(A, stale_fence).await.unwrap();
    h.handle.workload_removed("w1").await.unwrap();
    sleep(secs(30)).await;
    assert!(detaches.items().is_empty(), "{:?}", detaches.items());
    let reasons = h.events.reasons();
    assert!(reasons.contains(&"WaitingForUnmount"), "{reasons:?}");
    assert!(!reasons.contains(&"FailedDetachVolume"), "{reasons:?}");
    h.finish().await;
}

/// Issue 9, bug 7: the README's embedding example. The node is registered with
/// `NodeFacts::default()` (not heard from) and never reported on again; the store's fresh
/// in-use read says nothing is in use, so the removed pod's volume is detached.
#[tokio::test(start_paused = true)]
async fn a_node_never_heard_from_still_gets_its_volume_detached() {
    use crate::memory::{MemoryBackend, MemoryStore};
    let backend = MemoryBackend::<D>::new();
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume(V1, VolumeSpec::single_node(0))
        .node(A, NodeFacts::default())
        .workload("w1", A, [V1]);
    let (handle, task) = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        world,
    )
    .unwrap()
    .spawn();
    sleep(secs(1)).await;
    assert!(backend.is_attached(&V1, &A));
    handle.workload_removed("w1").await.unwrap();
    sleep(secs(1)).await;
    assert!(backend.attachments().is_empty(), "the volume leaked");
    // The same, with a store that holds no in-use report: nothing can confirm the node does
    // not use the volume, so it stays attached (and reported).
    store.set_in_use_unknown(&A);
    handle.workload_scheduled("w2", A, vec![V1]).await.unwrap();
    sleep(secs(1)).await;
    handle.workload_removed("w2").await.unwrap();
    sleep(secs(10)).await;
    assert!(backend.is_attached(&V1, &A));
    handle.shutdown(Duration::ZERO).await.unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_controller_and_its_handle_debug_what_they_hold() {
    let controller = Controller::new(
        Config::default(),
        Arc::new(backend()),
        Arc::new(store(&[])),
        World::new(),
    )
    .unwrap();
    let debug = format!("{controller:?}");
    assert!(
        debug.starts_with("Controller { core: Reconciler {"),
        "{debug}"
    );
    assert!(debug.ends_with(", .. }"), "{debug}");
    let handle = controller.handle();
    assert_eq!(
        format!("{handle:?}"),
        "ControllerHandle { stopped: false, .. }"
    );
    assert!(!handle.is_stopped());
    drop(controller);
    assert_eq!(
        format!("{handle:?}"),
        "ControllerHandle { stopped: true, .. }"
    );
    assert!(handle.is_stopped());
}

// Fencing without a human, through the driver.
mod machine;
