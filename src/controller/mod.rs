//! The tokio driver: runs the core's operations through the backend and the store, feeds their
//! results back, and sleeps until the core's next deadline. It makes no decision of its own.
//!
//! You need it unless you drive the [`Reconciler`] yourself: build a [`Controller`] from a
//! [`Config`], your backend and store and the [`World`] the orchestrator shows at start-up,
//! [`spawn`](Controller::spawn) it, and send it [`Input`]s through its [`ControllerHandle`]. Its
//! [`Metrics`], the stream of every operation it finishes ([`OperationFinished`], from
//! [`ControllerHandle::outcomes`]), where its [`Event`]s go ([`EventRecorder`]) and what it hands
//! back when it stops ([`ShutdownReport`]) are here too; with the feature `prometheus`, so is
//! `PrometheusMetrics`, which exports the metrics to a `prometheus-client` registry.
//!
//! Above the core, the traits and the in-memory doubles (its tests use them); below the
//! conformance kit and the simulator, which it never imports.

mod batch;
mod deadline;
mod handle;
mod metrics;
mod outcomes;
#[cfg(feature = "prometheus")]
mod prometheus;
mod recorder;
mod runner;
mod shutdown;
mod world;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustc_hash::FxHashMap;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{self, JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};
use tracing::{error, info, warn};

pub use handle::{ControllerError, ControllerHandle};
pub use metrics::{Ending, EndingCounts, Metrics, MetricsSnapshot, TimeoutCounts};
pub use outcomes::{FailureKind, OUTCOME_BUFFER, OperationFinished};
#[cfg(feature = "prometheus")]
pub use prometheus::PrometheusMetrics;
pub use recorder::{EventRecorder, MemoryRecorder};
pub use shutdown::{OperationSummary, ShutdownReport};
pub use world::World;

use batch::{Finished, panic_message};
use deadline::Deadlines;
use handle::{Command, DeathNote};
use metrics::StateSizes;
use outcomes::OutcomeSender;
use runner::Parts;

use crate::config::{Config, ConfigError};
use crate::core::event::Event;
use crate::core::input::ReconcilerError;
use crate::core::input::{Input, Rejection};
use crate::core::operation::{OpId, Operation};
use crate::core::outcome::Outcome;
use crate::core::reconciler::Reconciler;
use crate::core::tables::op_id_map::{self, OpIdMap};
use crate::domain::Domain;
use crate::traits::AttachBackend;
use crate::traits::NodeStatusStore;

/// Inputs that may wait for the controller's loop before senders are made to wait.
const INPUT_QUEUE: usize = 1024;

/// Why [`Controller::new`] refused to build a controller.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use attach_detach::Ids;
/// use attach_detach::config::{Config, ConfigError};
/// use attach_detach::controller::{BuildError, Controller, World};
/// use attach_detach::memory::{MemoryBackend, MemoryStore};
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// let never = Config { sync_period: Duration::MAX, ..Config::default() };
/// let refused = Controller::new(
///     never,
///     Arc::new(MemoryBackend::<D>::new()),
///     Arc::new(MemoryStore::<D>::new()),
///     World::new(),
/// );
/// assert!(matches!(
///     refused,
///     Err(BuildError::Config(ConfigError::TooLarge { field: "sync_period", .. }))
/// ));
/// ```
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError<D: Domain> {
    /// [`Config::validate`] refused the configuration.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The core refused an entry of the initial [`World`] (e.g. one workload more waiting for
    /// a node or volume than [`Config::max_pending_workloads`] allows).
    #[error("invalid initial world: {0}")]
    World(#[from] ReconcilerError<D>),
}

/// The attach/detach controller: a [`Reconciler`] driven on tokio.
///
/// It only executes what the core plans: the core's first operations are the recovery
/// listings ([`NodeStatusStore::list`], [`AttachBackend::list`]), and every later decision
/// (the fresh read before a detach, the compare-and-set status protocol) is the core's too.
/// The driver sleeps until the core's next deadline or the next input, runs the operations a
/// pass plans a few dozen to a task (each call within its deadline, a panic contained to its
/// own operation), and feeds every result back as it arrives, so a slow volume holds up no
/// other.
/// Time handed to the core is [`tokio::time::Instant`] since the controller started, so tests on
/// tokio's paused clock are deterministic; every `select!` is biased for the same reason.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use attach_detach::Ids;
/// use attach_detach::config::Config;
/// use attach_detach::controller::{Controller, World};
/// use attach_detach::core::{NodeFacts, VolumeSpec};
/// use attach_detach::memory::{MemoryBackend, MemoryStore};
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let backend = MemoryBackend::<D>::new();
/// let store = MemoryStore::<D>::new();
/// store.add_node("node-a");
/// let world = World::new()
///     .volume("pvc-1", VolumeSpec::single_node(()))
///     .node("node-a", NodeFacts::default())
///     .workload("pod-1", "node-a", ["pvc-1"]);
/// let controller =
///     Controller::new(Config::default(), Arc::new(backend.clone()), Arc::new(store.clone()), world)
///         .unwrap();
/// let (handle, task) = controller.spawn();
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// assert!(backend.is_attached(&"pvc-1", &"node-a"));
/// assert_eq!(store.status(&"node-a").unwrap().attached[0].volume, "pvc-1");
///
/// // The node is told before the pod goes: the volume leaves its status, then it is detached.
/// handle.workload_removed("pod-1").await.unwrap();
/// handle.node_updated("node-a", NodeFacts { in_use: Some(vec![]), ..NodeFacts::default() })
///     .await.unwrap();
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// assert!(backend.attachments().is_empty());
/// assert!(store.status(&"node-a").unwrap().attached.is_empty());
///
/// let report = handle.shutdown(Duration::from_secs(5)).await.unwrap();
/// assert!(report.abandoned.is_empty());
/// assert_eq!(task.await.unwrap(), report);
/// # });
/// ```
pub struct Controller<D: Domain> {
    core: Reconciler<D>,
    backend: Arc<dyn AttachBackend<D>>,
    store: Arc<dyn NodeStatusStore<D>>,
    #[cfg(feature = "upstream-bugs")]
    diff_source: Option<Arc<dyn NodeStatusStore<D>>>,
    recorder: Option<Arc<dyn EventRecorder<D>>>,
    metrics: Arc<Metrics>,
    outcomes: OutcomeSender<D>,
    death: DeathNote,
    tx: mpsc::Sender<Command<D>>,
    rx: mpsc::Receiver<Command<D>>,
}

impl<D: Domain> std::fmt::Debug for Controller<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

impl<D: Domain> Controller<D> {
    /// A controller that will start from `world` (the orchestrator's current volumes, nodes and
    /// placements); the actual state is recovered from `store` and `backend` when it runs.
    ///
    /// Fails with [`BuildError::Config`] if [`Config::validate`] refuses `config`, and with
    /// [`BuildError::World`] if the core refuses an entry of `world` (see
    /// [`Reconciler::handle`]; inputs in any order are not refused).
    pub fn new(
        config: Config,
        backend: Arc<dyn AttachBackend<D>>,
        store: Arc<dyn NodeStatusStore<D>>,
        world: World<D>,
    ) -> Result<Self, BuildError<D>> {
        config.validate()?;
        Ok(Self::unvalidated(config, backend, store, world)?)
    }

    /// [`new`](Self::new) without the configuration check: the tests push what `validate`
    /// refuses through the driver with it, to show the driver survives it anyway.
    fn unvalidated(
        config: Config,
        backend: Arc<dyn AttachBackend<D>>,
        store: Arc<dyn NodeStatusStore<D>>,
        world: World<D>,
    ) -> Result<Self, ReconcilerError<D>> {
        let mut core = Reconciler::new(config);
        world.apply_to(&mut core)?;
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        Ok(Controller {
            core,
            backend,
            store,
            #[cfg(feature = "upstream-bugs")]
            diff_source: None,
            recorder: None,
            metrics: Arc::default(),
            outcomes: outcomes::channel(),
            death: DeathNote::default(),
            tx,
            rx,
        })
    }

    /// Sends every event (the core's, and the driver's [`Event::CallTimedOut`]) to `recorder` as
    /// well as to the log. A recorder that panics loses that event and nothing else: the panic
    /// is logged and counted ([`MetricsSnapshot::recorder_panics`]), the controller carries on.
    pub fn with_recorder(mut self, recorder: Arc<dyn EventRecorder<D>>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Where reads `from_cache` go when `config.upstream_bugs.c6_diff_against_stale_read` is
    /// on (upstream's informer cache); ignored otherwise. Without it the switch reads the store
    /// itself, which is never stale. Only with the `upstream-bugs` feature.
    #[cfg(feature = "upstream-bugs")]
    pub fn with_status_diff_source(mut self, source: Arc<dyn NodeStatusStore<D>>) -> Self {
        self.diff_source = Some(source);
        self
    }

    /// A handle to feed the controller once it runs. Inputs sent before it runs wait in a queue.
    pub fn handle(&self) -> ControllerHandle<D> {
        ControllerHandle::new(
            self.tx.clone(),
            Arc::clone(&self.metrics),
            Arc::downgrade(&self.outcomes),
            Arc::clone(&self.death),
        )
    }

    /// Runs the controller in a new tokio task; the task ends with the shutdown report.
    pub fn spawn(self) -> (ControllerHandle<D>, JoinHandle<ShutdownReport<D>>) {
        let handle = self.handle();
        (handle, tokio::spawn(self.run()))
    }

    /// Runs the controller until [`ControllerHandle::shutdown`] or until every handle is dropped.
    ///
    /// Dropping this future (or aborting its task) stops everything at once, like a crash:
    /// running calls are cancelled wherever they are, and the next controller recovers.
    ///
    /// Should the loop itself panic (a bug, or a panicking `Hash`, `Ord` or `Clone` of an
    /// identifier type), the panic goes on as before, ending the task, but first its message is
    /// left for the handles: their calls then fail with [`ControllerError::Died`].
    pub async fn run(self) -> ShutdownReport<D> {
        let Controller {
            core,
            backend,
            store,
            #[cfg(feature = "upstream-bugs")]
            diff_source,
            recorder,
            metrics,
            outcomes,
            death,
            tx,
            rx,
        } = self;
        // Only outside handles keep the controller alive.
        drop(tx);
        let (timed_out, timeouts) = mpsc::unbounded_channel();
        let mut deadlines = Deadlines::new(core.config().call_timeouts);
        deadlines.set_metrics(Arc::clone(&metrics));
        deadlines.set_events(timed_out);
        let (finish, finished) = mpsc::unbounded_channel();
        let epoch = Instant::now();
        let driver = Driver {
            core,
            parts: Arc::new(Parts {
                backend,
                store,
                #[cfg(feature = "upstream-bugs")]
                cache: diff_source,
                deadlines,
                metrics: Arc::clone(&metrics),
            }),
            timeouts,
            events: Vec::new(),
            recorder,
            metrics,
            outcomes,
            epoch,
            tasks: JoinSet::new(),
            batches: FxHashMap::default(),
            finished,
            finish,
            running: op_id_map::new(),
            starts: StartTimes::default(),
            published: None,
        };
        NotePanic {
            inner: Box::pin(driver.run(rx)),
            note: death,
        }
        .await
    }
}

/// Polls `inner`; if that panics, writes the panic's message to `note` and lets the panic go on.
///
/// The note is written before the panic leaves the poll, so before the loop's future (and with
/// it the input channel) is dropped: a handle that sees the channel closed finds the note.
struct NotePanic<F> {
    inner: Pin<Box<F>>,
    note: DeathNote,
}

impl<F: Future> Future for NotePanic<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        match catch_unwind(AssertUnwindSafe(|| this.inner.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                let message = panic_message(&*payload);
                error!(panic = %message, "the controller's loop panicked; the controller is gone");
                *this.note.lock() = Some(message);
                resume_unwind(payload)
            }
        }
    }
}

/// When the calls the driver waits for started, oldest first: each instant with the number of
/// calls started then. A pass starts all its operations at one instant, so this stays short.
#[derive(Default)]
struct StartTimes(VecDeque<(Instant, usize)>);

impl StartTimes {
    fn add(&mut self, at: Instant) {
        match self.0.back_mut() {
            Some((last, count)) if *last == at => *count += 1,
            Some((last, _)) if *last > at => {
                // Not with a monotonic clock; kept in order all the same.
                match self.0.binary_search_by_key(&at, |(t, _)| *t) {
                    Ok(i) => self.0[i].1 += 1,
                    Err(i) => self.0.insert(i, (at, 1)),
                }
            }
            _ => self.0.push_back((at, 1)),
        }
    }

    fn remove(&mut self, at: Instant) {
        if let Ok(i) = self.0.binary_search_by_key(&at, |(t, _)| *t) {
            self.0[i].1 = self.0[i].1.saturating_sub(1);
        }
        while self.0.front().is_some_and(|(_, count)| *count == 0) {
            self.0.pop_front();
        }
    }

    fn oldest(&self) -> Option<Instant> {
        self.0.front().map(|(at, _)| *at)
    }
}

/// Waits until `deadline`, or forever when there is none.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How an operation ended.
enum Joined<D: Domain> {
    /// Its call returned, or missed its deadline.
    Done(Outcome<D>),
    /// Its call, or the task running it, panicked.
    Panicked,
    /// Its task was aborted (at shutdown) before it ended.
    Cancelled,
}

struct Driver<D: Domain> {
    core: Reconciler<D>,
    /// The backend, the store and the deadline of every call, shared by the tasks.
    parts: Arc<Parts<D>>,
    /// The calls that missed their deadline, as events, sent by the tasks.
    timeouts: mpsc::UnboundedReceiver<Event<D>>,
    /// The core's events on their way to the recorder: kept, so that a flush allocates nothing.
    events: Vec<Event<D>>,
    recorder: Option<Arc<dyn EventRecorder<D>>>,
    metrics: Arc<Metrics>,
    /// Where finished operations go, for [`ControllerHandle::outcomes`].
    outcomes: OutcomeSender<D>,
    /// Time zero of the core.
    epoch: Instant,
    /// The tasks running the operations, a batch of them each ([`batch`]).
    tasks: JoinSet<()>,
    /// Each task's operations, in the order they were planned, until the task ends.
    batches: FxHashMap<task::Id, Vec<OpId>>,
    /// Where the tasks send each operation's end, and the sender they are given a copy of.
    /// The loop keeps one, so the channel never closes under it.
    finished: mpsc::UnboundedReceiver<Finished<D>>,
    finish: mpsc::UnboundedSender<Finished<D>>,
    /// Each running operation, with when it started. Only looked up, never iterated, so its
    /// order cannot leak into behaviour. Laid out in id order ([`OpIdMap`]): the keys are the
    /// core's own numbers, and a pass's operations end in about the order they were planned.
    running: OpIdMap<OpId, (OperationSummary<D>, Instant)>,
    /// The start instants in `running`, oldest first.
    starts: StartTimes,
    /// The oldest start last published to the metrics.
    published: Option<Instant>,
}

impl<D: Domain> Driver<D> {
    fn core_time(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.epoch)
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command<D>>) -> ShutdownReport<D> {
        // One timer for the life of the loop, moved only when the deadline moves: registering
        // a fresh one per input or finished call cost more than the work it paced.
        let timer = sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        loop {
            self.start_due(Instant::now());
            self.publish();
            // A deadline too far away to add to the epoch is never. Only a configuration that
            // `Config::validate` refuses gets there.
            let wake = self
                .core
                .next_deadline()
                .and_then(|at| self.epoch.checked_add(at));
            if let Some(at) = wake {
                if armed != Some(at) {
                    timer.as_mut().reset(at);
                    armed = Some(at);
                }
            }
            tokio::select! {
                biased;
                Some((id, ended)) = self.finished.recv() => {
                    // Take in every other finished call too before the next pass: one wake-up,
                    // one clock read and one flush of events per burst, not one per call.
                    let now = Instant::now();
                    self.end(id, ended, now);
                    while let Ok((id, ended)) = self.finished.try_recv() {
                        self.end(id, ended, now);
                    }
                    self.flush_events();
                    // And the tasks that are done: under a steady stream of answers this
                    // branch always wins the biased select, and the finished tasks would wait.
                    while let Some(joined) = self.tasks.try_join_next_with_id() {
                        self.batch_ended(joined);
                    }
                }
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.batch_ended(joined);
                }
                command = rx.recv() => {
                    let mut command = command;
                    // Apply what else is queued too, in order, before the next pass.
                    loop {
                        match command {
                            Some(Command::Inputs(inputs, reply)) => {
                                let result = self.apply(inputs);
                                // The caller may have given up waiting; the input stands anyway.
                                let _ = reply.send(result);
                            }
                            Some(Command::Shutdown(grace, reply)) => {
                                return self.shutdown(grace, rx, vec![reply]).await;
                            }
                            Some(Command::ExplainVolume(volume, reply)) => {
                                let now = self.core_time(Instant::now());
                                let _ = reply.send(self.core.explain_volume(&volume, now));
                            }
                            Some(Command::ExplainWorkload(workload, reply)) => {
                                let now = self.core_time(Instant::now());
                                let _ = reply.send(self.core.explain_workload(&workload, now));
                            }
                            None => return self.shutdown(Duration::ZERO, rx, Vec::new()).await,
                        }
                        match rx.try_recv() {
                            Ok(next) => command = Some(next),
                            Err(_) => break,
                        }
                    }
                }
                () = &mut timer, if wake.is_some() => {
                    armed = None;
                }
            }
        }
    }

    fn apply(&mut self, inputs: Vec<Input<D>>) -> Vec<Rejection<D>> {
        let refused = self.core.handle_all(inputs);
        if !refused.is_empty() {
            self.metrics.inputs_refused(refused.len());
        }
        refused
    }

    /// Runs a reconcile pass if one is due at `now`, and starts what it plans.
    fn start_due(&mut self, now: Instant) {
        let core_now = self.core_time(now);
        if self.core.next_deadline().is_some_and(|due| due <= core_now) {
            self.metrics.reconcile_pass();
            let ops = self.core.poll(core_now);
            if ops.len() <= batch::OPS_PER_TASK {
                // One task's worth (most passes): the list itself goes to the task.
                if !ops.is_empty() {
                    self.start_batch(ops, now);
                }
            } else {
                let mut ops = ops.into_iter().peekable();
                while ops.peek().is_some() {
                    let batch: Vec<_> = ops.by_ref().take(batch::OPS_PER_TASK).collect();
                    self.start_batch(batch, now);
                }
            }
            self.flush_events();
        }
    }

    /// Publishes the size of the core's state, and when the oldest running call started if
    /// that changed. A few relaxed stores per wake-up of the loop, not per operation.
    fn publish(&mut self) {
        self.metrics.set_state(StateSizes {
            desired: self.core.desired().len(),
            actual: self.core.actual().len(),
            pending: self.core.desired().pending_len(),
            waiting_for_room: self.core.waiting_for_room(),
            stuck_detaches: self.core.stuck_detaches_named(),
            recovering: self.core.is_recovering(),
        });
        let now = Instant::now();
        self.metrics
            .set_backend_queue(self.core.backend_queue(self.core_time(now)), now);
        let oldest = self.starts.oldest();
        if oldest != self.published {
            self.published = oldest;
            self.metrics.set_oldest_start(oldest);
        }
    }

    /// Starts `ops`, planned by one pass, in one task.
    fn start_batch(&mut self, ops: Vec<Operation<D>>, now: Instant) {
        let mut ids = Vec::with_capacity(ops.len());
        for op in &ops {
            if let Operation::Detach {
                force: Some(reason),
                ..
            } = op
            {
                self.metrics.forced_detach(*reason);
            }
            ids.push(op.id());
            self.starts.add(now);
            self.running
                .insert(op.id(), (OperationSummary::of(op), now));
            self.metrics.operation_started();
        }
        let task = self.tasks.spawn(batch::run(
            ops,
            Arc::clone(&self.parts),
            self.finish.clone(),
        ));
        self.batches.insert(task.id(), ids);
    }

    /// Takes in a task that ended. Every operation it ran sent its end before the task
    /// returned, so those are taken in first; any left ended with the task: abandoned if it
    /// was aborted, panicked if it panicked. Returns the summaries of the operations ended here.
    fn batch_ended(
        &mut self,
        joined: Result<(task::Id, ()), JoinError>,
    ) -> Vec<OperationSummary<D>> {
        let mut summaries = Vec::new();
        let now = Instant::now();
        while let Ok((id, ended)) = self.finished.try_recv() {
            summaries.extend(self.end(id, ended, now));
        }
        // An operation left unanswered was cut off by an abort, or may have done anything.
        let (task, aborted) = match joined {
            Ok((task, ())) => (task, false),
            Err(e) if e.is_cancelled() => (e.id(), true),
            Err(e) => {
                error!(error = %e, "a controller task panicked");
                (e.id(), false)
            }
        };
        for id in self.batches.remove(&task).unwrap_or_default() {
            if !self.running.contains_key(&id) {
                continue;
            }
            let how = if aborted {
                Joined::Cancelled
            } else {
                // A panic outside any call, or a return (not by this module's code: every
                // operation answers before its task returns): the call may have done anything.
                error!(%id, "an operation's task ended without its answer");
                Joined::Panicked
            };
            summaries.extend(self.end(id, how, now));
        }
        self.flush_events();
        summaries
    }

    /// Takes in the end of the operation `id` and logs the events it caused; returns its
    /// summary, if it was running.
    fn ended(&mut self, id: OpId, how: Joined<D>) -> Option<OperationSummary<D>> {
        let summary = self.end(id, how, Instant::now());
        self.flush_events();
        summary
    }

    /// Takes in the end of the operation `id`, seen at `now`, leaving the events it caused
    /// for the caller to flush; returns its summary, if it was running.
    fn end(&mut self, id: OpId, how: Joined<D>, now: Instant) -> Option<OperationSummary<D>> {
        let (mut summary, started) = self.running.remove(&id)?;
        self.starts.remove(started);
        self.metrics.operation_ended();
        let took = now.saturating_duration_since(started);
        let (result, failure) = match how {
            Joined::Done(result) => {
                let failure = runner::failure(&result);
                (result, failure)
            }
            Joined::Panicked => (Outcome::panicked(summary.kind), Some(FailureKind::Panicked)),
            Joined::Cancelled => {
                self.metrics
                    .operation_finished(summary.kind, Ending::Abandoned);
                self.announce(&summary, None, took);
                return Some(summary);
            }
        };
        summary.outcome = runner::ending(&result);
        self.metrics
            .operation_finished(summary.kind, summary.outcome);
        #[cfg(feature = "prometheus")]
        self.metrics
            .observe_duration(summary.kind, failure.is_none(), took);
        let core_now = self.core_time(now);
        if let Err(e) = self.core.finish(core_now, summary.id, result) {
            // Only this driver's own operations are fed back, so this is a bug.
            error!(error = %e, id = %summary.id, "the core refused an operation's result");
        }
        self.announce(&summary, failure, took);
        Some(summary)
    }

    /// Sends a finished operation to the subscribers of [`ControllerHandle::outcomes`], if
    /// there are any: without one this copies nothing. A full buffer never waits: the
    /// subscriber that is furthest behind loses its oldest outcome and is told so.
    fn announce(
        &self,
        summary: &OperationSummary<D>,
        failure: Option<FailureKind>,
        duration: Duration,
    ) {
        if self.outcomes.receiver_count() == 0 {
            return;
        }
        // Every receiver may drop between the count and the send: then nobody missed it.
        let _ = self.outcomes.send(OperationFinished {
            id: summary.id,
            kind: summary.kind,
            volume: summary.volume.clone(),
            node: summary.node.clone(),
            outcome: summary.outcome,
            failure,
            duration,
        });
    }

    /// Logs and records the calls that timed out, then the core's events (which may be the
    /// failures those timeouts caused).
    fn flush_events(&mut self) {
        while let Ok(event) = self.timeouts.try_recv() {
            self.emit(&event);
        }
        let mut events = std::mem::take(&mut self.events);
        self.core.drain_events_into(&mut events);
        for event in events.drain(..) {
            self.emit(&event);
        }
        // Not a burst's room for good (a start-up emits an event per attach).
        if events.capacity() <= crate::core::reconciler::KEPT_EVENTS {
            self.events = events;
        }
    }

    fn emit(&self, event: &Event<D>) {
        if event.is_warning() {
            warn!(reason = event.reason(), "{event}");
        } else {
            info!(reason = event.reason(), "{event}");
        }
        if let Some(recorder) = &self.recorder {
            // The recorder is the user's code: its panic costs this event, not the controller.
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| recorder.record(event))) {
                self.metrics.recorder_panicked();
                error!(
                    reason = event.reason(),
                    panic = %panic_message(&*payload),
                    "the event recorder panicked; the event is lost, the controller carries on"
                );
            }
        }
    }

    async fn shutdown(
        mut self,
        grace: Duration,
        mut rx: mpsc::Receiver<Command<D>>,
        mut waiting: Vec<oneshot::Sender<ShutdownReport<D>>>,
    ) -> ShutdownReport<D> {
        rx.close();
        // Queued inputs are dropped unapplied (their senders see `Stopped`); queued shutdowns
        // get the report too.
        while let Ok(command) = rx.try_recv() {
            if let Command::Shutdown(_, reply) = command {
                waiting.push(reply);
            }
        }
        info!(running = self.running.len(), ?grace, "shutting down");
        // A grace too long to represent waits for every call; each ends by its own deadline.
        let deadline = Instant::now().checked_add(grace);
        let mut ended = Vec::new();
        while !self.running.is_empty() {
            tokio::select! {
                biased;
                Some((id, how)) = self.finished.recv() => ended.extend(self.ended(id, how)),
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    ended.extend(self.batch_ended(joined));
                }
                () = until(deadline) => break,
            }
        }
        self.tasks.abort_all();
        while let Some(joined) = self.tasks.join_next_with_id().await {
            ended.extend(self.batch_ended(joined));
        }
        let mut report = ShutdownReport::default();
        for summary in ended {
            match summary.outcome {
                Ending::Abandoned => report.abandoned.push(summary),
                _ => report.finished.push(summary),
            }
        }
        report.abandoned.sort_by_key(|s| s.id);
        self.publish();
        for reply in waiting {
            let _ = reply.send(report.clone());
        }
        report
    }
}
