//! The stream of finished operations (`ControllerHandle::outcomes`): exactly the operations of
//! a scenario, in order; a subscriber that never reads stalls nothing; one that lags is told
//! how much it missed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::sleep;

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::controller::{
    Controller, ControllerHandle, Ending, FailureKind, OUTCOME_BUFFER, OperationFinished, World,
};
use attach_detach::core::{NodeFacts, OpKind, VolumeSpec};
use attach_detach::memory::{BackendOp, MemoryBackend, MemoryStore};
use attach_detach::traits::BackendError;

type D = Ids<&'static str, &'static str, &'static str, ()>;

const A: &str = "node-a";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What `recv` answers within a second of virtual time (`None`: nothing), so that a stream
/// that never answers fails the test instead of hanging it.
async fn soon<T>(recv: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_secs(1), recv)
        .await
        .ok()
}

/// Everything received so far, without waiting.
fn drain(
    rx: &mut tokio::sync::broadcast::Receiver<OperationFinished<D>>,
) -> Vec<OperationFinished<D>> {
    let mut got = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(done) => got.push(done),
            Err(TryRecvError::Empty | TryRecvError::Closed) => return got,
            Err(e) => panic!("{e:?} after {got:?}"),
        }
    }
}

/// (kind, volume, node, outcome, failure, duration) of each.
type Row = (
    OpKind,
    Option<&'static str>,
    Option<&'static str>,
    Ending,
    Option<FailureKind>,
    Duration,
);

fn rows(outcomes: &[OperationFinished<D>]) -> Vec<Row> {
    outcomes
        .iter()
        .map(|o| (o.kind, o.volume, o.node, o.outcome, o.failure, o.duration))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_stream_reports_exactly_the_operations_of_a_scenario_in_order() {
    // Every backend call takes 100 ms; the first attach fails and is retried after backoff.
    let backend = MemoryBackend::<D>::new().with_latency(ms(100));
    backend.fail_next(
        BackendOp::Attach,
        "vol-1",
        A,
        1,
        BackendError::transient("503"),
    );
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default())
        .workload("w1", A, ["vol-1"]);
    let controller = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        world,
    )
    .unwrap();
    let handle = controller.handle();
    let mut outcomes = handle.outcomes();
    let (_, task) = controller.spawn();

    sleep(Duration::from_secs(5)).await;
    assert!(backend.is_attached(&"vol-1", &A));
    // The workload goes, the agent reports nothing in use: the volume leaves the status and
    // is detached.
    handle.workload_removed("w1").await.unwrap();
    handle
        .node_updated(
            A,
            NodeFacts {
                in_use: Some(vec![]),
                ..NodeFacts::default()
            },
        )
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    assert!(backend.attachments().is_empty());
    handle.shutdown(Duration::ZERO).await.unwrap();
    task.await.unwrap();

    let got = drain(&mut outcomes);
    let ok = Ending::Succeeded;
    assert_eq!(
        rows(&got),
        vec![
            (OpKind::ListStatuses, None, None, ok, None, ms(0)),
            (OpKind::List, None, None, ok, None, ms(100)),
            (
                OpKind::Attach,
                Some("vol-1"),
                Some(A),
                Ending::Failed,
                Some(FailureKind::Transient),
                ms(100)
            ),
            (OpKind::Attach, Some("vol-1"), Some(A), ok, None, ms(100)),
            (OpKind::WriteStatus, None, Some(A), ok, None, ms(0)),
            // The write that took the volume off the list read the node's facts with it
            // (the memory store does, atomically): the detach needs no read of its own.
            (OpKind::WriteStatus, None, Some(A), ok, None, ms(0)),
            (OpKind::Detach, Some("vol-1"), Some(A), ok, None, ms(100)),
        ]
    );
    // One after the other here, so in the order they were planned.
    let ids: Vec<u64> = got.iter().map(|o| o.id.0).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<_>>());
    // The metrics count the same operations.
    let m = handle.metrics();
    let total: u64 = OpKind::ALL.iter().map(|k| m.operations(*k).total()).sum();
    assert_eq!(total, got.len() as u64);
    // The controller stopped: the stream ends, and a late subscriber is told at once.
    assert_eq!(soon(outcomes.recv()).await, Some(Err(RecvError::Closed)));
    assert_eq!(
        soon(handle.outcomes().recv()).await,
        Some(Err(RecvError::Closed))
    );
}

/// A controller attaching `n` volumes to one node.
fn many(n: usize) -> (Controller<D>, MemoryBackend<D>) {
    let backend = MemoryBackend::<D>::new();
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let volumes: Vec<&'static str> = (0..n)
        .map(|i| &*Box::leak(format!("vol-{i}").into_boxed_str()))
        .collect();
    let mut world = World::new().node(A, NodeFacts::default());
    for v in &volumes {
        world = world.volume(*v, VolumeSpec::single_node(()));
    }
    let world = world.workload("w1", A, volumes);
    let controller = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store),
        world,
    )
    .unwrap();
    (controller, backend)
}

/// Operations ended, of every kind.
fn operations(handle: &ControllerHandle<D>) -> u64 {
    let m = handle.metrics();
    m.attach.total()
        + m.detach.total()
        + m.verify.total()
        + m.write_status.total()
        + m.read_status.total()
        + m.list_statuses.total()
        + m.list.total()
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_never_reads_stalls_nothing_and_a_lagging_one_is_told_what_it_missed() {
    let n = OUTCOME_BUFFER + 500;
    let (controller, backend) = many(n);
    let handle = controller.handle();
    // Subscribed before the controller runs, and never read until the end.
    let mut idle = handle.outcomes();
    let (_, _task) = controller.spawn();

    sleep(Duration::from_secs(1)).await;
    assert_eq!(backend.attachments().len(), n, "every attach ran");
    let ended = operations(&handle);
    assert!(ended > OUTCOME_BUFFER as u64 + 500, "{ended}");

    // The first read says how many were dropped, then the oldest kept follows.
    let missed = ended - OUTCOME_BUFFER as u64;
    assert_eq!(
        soon(idle.recv()).await,
        Some(Err(RecvError::Lagged(missed)))
    );
    let kept = drain(&mut idle);
    assert_eq!(kept.len(), OUTCOME_BUFFER);
    // The attaches it kept are the last ones (each of the `n` volumes once at most).
    let attached: Vec<_> = kept
        .iter()
        .filter(|o| o.kind == OpKind::Attach)
        .filter_map(|o| o.volume)
        .collect();
    let mut unique = attached.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), attached.len());
}

#[tokio::test(start_paused = true)]
async fn a_lagging_subscriber_costs_the_controller_no_time() {
    // The same work with a subscriber that never reads and without one: the same virtual
    // time to the last attach, the same number of operations.
    async fn time_to_attach_all(subscribe: bool) -> (Duration, u64) {
        let n = 2 * OUTCOME_BUFFER;
        let (controller, backend) = many(n);
        let handle = controller.handle();
        let _idle = subscribe.then(|| handle.outcomes());
        let start = tokio::time::Instant::now();
        let (_, _task) = controller.spawn();
        while backend.attachments().len() < n {
            sleep(ms(1)).await;
        }
        (start.elapsed(), operations(&handle))
    }
    assert_eq!(
        time_to_attach_all(true).await,
        time_to_attach_all(false).await
    );
}

#[tokio::test(start_paused = true)]
async fn an_operation_cut_off_by_a_shutdown_is_reported_abandoned() {
    let backend = MemoryBackend::<D>::new().with_latency(Duration::from_secs(10));
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default())
        .workload("w1", A, ["vol-1"]);
    let (handle, task) =
        Controller::new(Config::default(), Arc::new(backend), Arc::new(store), world)
            .unwrap()
            .spawn();
    let mut outcomes = handle.outcomes();
    // The backend's listing takes 10 s, then the attach starts; 3 s later the controller stops.
    sleep(Duration::from_secs(13)).await;
    let report = handle.shutdown(Duration::ZERO).await.unwrap();
    task.await.unwrap();
    assert_eq!(report.abandoned.len(), 1);
    assert_eq!(
        rows(&drain(&mut outcomes)),
        vec![
            (
                OpKind::ListStatuses,
                None,
                None,
                Ending::Succeeded,
                None,
                ms(0)
            ),
            (
                OpKind::List,
                None,
                None,
                Ending::Succeeded,
                None,
                ms(10_000)
            ),
            (
                OpKind::Attach,
                Some("vol-1"),
                Some(A),
                Ending::Abandoned,
                None,
                ms(3_000)
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_removed_volume_sends_its_workload_back_to_waiting_and_is_detached() {
    let backend = MemoryBackend::<D>::new();
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default())
        .workload("w1", A, ["vol-1"]);
    let (handle, _task) = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store),
        world,
    )
    .unwrap()
    .spawn();
    sleep(Duration::from_secs(1)).await;
    let m = handle.metrics();
    assert_eq!(
        (
            m.desired_attachments,
            m.actual_attachments,
            m.pending_workloads
        ),
        (1, 1, 0)
    );

    handle.volume_removed("vol-1").await.unwrap();
    sleep(Duration::from_secs(1)).await;
    let m = handle.metrics();
    assert_eq!(
        (
            m.desired_attachments,
            m.actual_attachments,
            m.pending_workloads
        ),
        (0, 0, 1),
        "w1 waits for its volume again; nothing in use, so the volume was detached"
    );
    assert!(backend.attachments().is_empty());
    assert_eq!(m.detach.succeeded, 1);
}
