//! The caller's side of a running controller: inputs in, typed rejections and reports out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use thiserror::Error;
use tokio::sync::{broadcast, mpsc, oneshot};

use super::metrics::{Metrics, MetricsSnapshot};
use super::outcomes::{self, OperationFinished};
use super::shutdown::ShutdownReport;
use crate::core::calls::volume::VolumeSpec;
use crate::core::explain::{VolumeExplanation, WorkloadExplanation};
use crate::core::input::ReconcilerError;
use crate::core::input::{Input, Rejection};
use crate::core::state::actual::NodeFacts;
use crate::domain::Domain;

/// Why a [`ControllerHandle`] call did not go through.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControllerError<D: Domain> {
    /// The core refused the input (see [`Reconciler::handle`](crate::core::Reconciler::handle));
    /// nothing changed.
    #[error(transparent)]
    Rejected(#[from] ReconcilerError<D>),
    /// The controller is shutting down or has stopped; the input was not applied.
    #[error("the controller has stopped")]
    Stopped,
    /// The controller's task panicked and is gone; the input was not applied (or, if the panic
    /// came while applying it, went nowhere). Start a new controller: it recovers from the
    /// store and the backend.
    #[error("the controller died: {message}")]
    Died {
        /// The panic's message.
        message: String,
    },
}

/// Where the controller's loop leaves the message of the panic that killed it, for every
/// handle to read.
pub(crate) type DeathNote = Arc<Mutex<Option<String>>>;

/// What the controller's task receives.
pub(crate) enum Command<D: Domain> {
    /// Inputs to apply in order, each as `Reconciler::handle` would; the answer lists those
    /// refused.
    Inputs(Vec<Input<D>>, oneshot::Sender<Vec<Rejection<D>>>),
    Shutdown(Duration, oneshot::Sender<ShutdownReport<D>>),
    /// Why a volume, or a workload, waits: answered between two passes.
    ExplainVolume(D::Volume, oneshot::Sender<VolumeExplanation<D>>),
    ExplainWorkload(D::Workload, oneshot::Sender<WorkloadExplanation<D>>),
}

/// A cloneable handle onto a running [`Controller`](crate::controller::Controller): feeds it
/// inputs, reads its metrics, shuts it down.
///
/// Inputs are applied in the order they are received; each call returns once the core has
/// applied (or refused) the input, or the batch. Dropping every handle stops the controller as
/// [`shutdown`](Self::shutdown) with no grace would.
pub struct ControllerHandle<D: Domain> {
    tx: mpsc::Sender<Command<D>>,
    metrics: Arc<Metrics>,
    outcomes: Weak<broadcast::Sender<OperationFinished<D>>>,
    death: DeathNote,
}

impl<D: Domain> Clone for ControllerHandle<D> {
    fn clone(&self) -> Self {
        ControllerHandle {
            tx: self.tx.clone(),
            metrics: Arc::clone(&self.metrics),
            outcomes: Weak::clone(&self.outcomes),
            death: Arc::clone(&self.death),
        }
    }
}

impl<D: Domain> std::fmt::Debug for ControllerHandle<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("stopped", &self.tx.is_closed())
            .finish_non_exhaustive()
    }
}

impl<D: Domain> ControllerHandle<D> {
    pub(crate) fn new(
        tx: mpsc::Sender<Command<D>>,
        metrics: Arc<Metrics>,
        outcomes: Weak<broadcast::Sender<OperationFinished<D>>>,
        death: DeathNote,
    ) -> Self {
        ControllerHandle {
            tx,
            metrics,
            outcomes,
            death,
        }
    }

    /// Why the controller no longer answers: it died of a panic, or it stopped.
    fn gone(&self) -> ControllerError<D> {
        match self.death.lock().clone() {
            Some(message) => ControllerError::Died { message },
            None => ControllerError::Stopped,
        }
    }

    /// Sends one input and waits until the core applied or refused it.
    ///
    /// Fails with [`ControllerError::Rejected`] when the core refuses it,
    /// [`ControllerError::Stopped`] when the controller has stopped, and
    /// [`ControllerError::Died`] when its task panicked.
    pub async fn send(&self, input: Input<D>) -> Result<(), ControllerError<D>> {
        match self.request(vec![input]).await?.pop() {
            Some(rejection) => Err(ControllerError::Rejected(rejection.error)),
            None => Ok(()),
        }
    }

    /// Sends a batch of inputs as one message and waits until the core applied every one, in
    /// order, as [`Reconciler::handle_all`](crate::core::Reconciler::handle_all) does: nothing else
    /// (no other sender's input, no reconcile pass) runs between them.
    ///
    /// Returns the inputs the core refused, each with its index in the batch (empty when every
    /// one was accepted); a refusal does not stop the batch. Fails only when the batch was not
    /// applied: [`ControllerError::Stopped`] or [`ControllerError::Died`] (a panic while
    /// applying it may have left it half applied; a new controller starts from a fresh world).
    /// A watcher's whole relist (`RelistStarted`, the upserts, `RelistDone`) fits in one batch.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::controller::{Controller, World};
    /// use attach_detach::core::{Input, Kind, NodeFacts, ReconcilerError};
    /// use attach_detach::memory::{MemoryBackend, MemoryStore};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// let world = World::new().node("node-a", NodeFacts::default()).node("node-b", NodeFacts::default());
    /// let store = Arc::new(MemoryStore::<D>::new());
    /// let (handle, task) =
    ///     Controller::new(Config::default(), Arc::new(MemoryBackend::new()), store, world)
    ///         .unwrap()
    ///         .spawn();
    /// // The node watcher relists: node-b was deleted while it was down.
    /// let refused = handle
    ///     .send_all([
    ///         Input::RelistDone { kind: Kind::Volume }, // a stray end: refused, the rest goes on
    ///         Input::RelistStarted { kind: Kind::Node },
    ///         Input::NodeUpdated { node: "node-a", facts: NodeFacts::default() },
    ///         Input::RelistDone { kind: Kind::Node },
    ///     ])
    ///     .await
    ///     .unwrap();
    /// assert_eq!(refused.len(), 1);
    /// assert_eq!((refused[0].index, &refused[0].error), (0, &ReconcilerError::NoRelist { kind: Kind::Volume }));
    /// handle.shutdown(std::time::Duration::ZERO).await.unwrap();
    /// task.await.unwrap();
    /// # });
    /// ```
    pub async fn send_all(
        &self,
        inputs: impl IntoIterator<Item = Input<D>>,
    ) -> Result<Vec<Rejection<D>>, ControllerError<D>> {
        self.request(inputs.into_iter().collect()).await
    }

    async fn request(
        &self,
        inputs: Vec<Input<D>>,
    ) -> Result<Vec<Rejection<D>>, ControllerError<D>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Inputs(inputs, reply))
            .await
            .map_err(|_| self.gone())?;
        answer.await.map_err(|_| self.gone())
    }

    /// Registers or updates a volume.
    pub async fn set_volume(
        &self,
        volume: D::Volume,
        spec: VolumeSpec<D::Payload>,
    ) -> Result<(), ControllerError<D>> {
        self.send(Input::SetVolume { volume, spec }).await
    }

    /// The volume is gone; see [`Input::VolumeRemoved`].
    pub async fn volume_removed(&self, volume: D::Volume) -> Result<(), ControllerError<D>> {
        self.send(Input::VolumeRemoved { volume }).await
    }

    /// A node exists (or changed).
    pub async fn node_updated(
        &self,
        node: D::Node,
        facts: NodeFacts<D::Volume>,
    ) -> Result<(), ControllerError<D>> {
        self.send(Input::NodeUpdated { node, facts }).await
    }

    /// The node object was deleted.
    pub async fn node_removed(&self, node: D::Node) -> Result<(), ControllerError<D>> {
        self.send(Input::NodeRemoved { node }).await
    }

    /// A workload was placed on `node` and needs `volumes` there.
    pub async fn workload_scheduled(
        &self,
        workload: D::Workload,
        node: D::Node,
        volumes: Vec<D::Volume>,
    ) -> Result<(), ControllerError<D>> {
        self.send(Input::WorkloadScheduled {
            workload,
            node,
            volumes,
        })
        .await
    }

    /// The workload is gone.
    pub async fn workload_removed(&self, workload: D::Workload) -> Result<(), ControllerError<D>> {
        self.send(Input::WorkloadRemoved { workload }).await
    }

    /// Stops taking inputs and planning, lets running calls finish for up to `grace`, abandons
    /// the rest, and reports which did what.
    ///
    /// Abandoned calls may still take effect in the backend; the next controller's recovery
    /// finds them. A `grace` too long to represent as a deadline ([`Duration::MAX`]) waits for
    /// every running call, each of which ends by its deadline. Fails with
    /// [`ControllerError::Stopped`] if the controller already stopped, [`ControllerError::Died`]
    /// if it died.
    pub async fn shutdown(&self, grace: Duration) -> Result<ShutdownReport<D>, ControllerError<D>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Shutdown(grace, reply))
            .await
            .map_err(|_| self.gone())?;
        answer.await.map_err(|_| self.gone())
    }

    /// Why `volume` is where it is: for each node where it is wanted or attached, what it
    /// waits for and what will end the wait
    /// ([`Reconciler::explain_volume`](crate::core::Reconciler::explain_volume)); its times are
    /// the core's (time since the controller started). Fails with
    /// [`ControllerError::Stopped`] or [`ControllerError::Died`] once the controller is gone.
    pub async fn explain_volume(
        &self,
        volume: D::Volume,
    ) -> Result<VolumeExplanation<D>, ControllerError<D>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::ExplainVolume(volume, reply))
            .await
            .map_err(|_| self.gone())?;
        answer.await.map_err(|_| self.gone())
    }

    /// Why `workload` waits, if it does
    /// ([`Reconciler::explain_workload`](crate::core::Reconciler::explain_workload)); fails as
    /// [`explain_volume`](Self::explain_volume) does.
    pub async fn explain_workload(
        &self,
        workload: D::Workload,
    ) -> Result<WorkloadExplanation<D>, ControllerError<D>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::ExplainWorkload(workload, reply))
            .await
            .map_err(|_| self.gone())?;
        answer.await.map_err(|_| self.gone())
    }

    /// The controller's counters now. Works after the controller stopped, too.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Every operation the controller finishes from now on, in the order it takes them in
    /// (the order their results reach the core): kind, volume and node, how it ended, why it
    /// failed, and how long it took on tokio's clock.
    ///
    /// The controller never waits for a subscriber. Each receiver has room for
    /// [`OUTCOME_BUFFER`](super::OUTCOME_BUFFER) outcomes; one that falls further behind (or
    /// never reads) loses the oldest, and its next `recv` returns
    /// [`RecvError::Lagged`](broadcast::error::RecvError::Lagged) with how many it missed,
    /// then carries on from the oldest still kept. A bounded channel that blocked the loop
    /// would let a slow embedder stall every attach and detach; an unbounded one would let it
    /// grow the controller's memory without end. With no subscriber the controller copies
    /// nothing. `recv` returns [`RecvError::Closed`](broadcast::error::RecvError::Closed) once
    /// the controller has stopped and everything sent is read (at once for a receiver taken
    /// after it stopped).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::controller::{Controller, Ending, World};
    /// use attach_detach::core::{NodeFacts, OpKind, VolumeSpec};
    /// use attach_detach::memory::{MemoryBackend, MemoryStore};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// let store = MemoryStore::<D>::new();
    /// store.add_node("node-a");
    /// let world = World::new()
    ///     .volume("pvc-1", VolumeSpec::single_node(()))
    ///     .node("node-a", NodeFacts::default())
    ///     .workload("pod-1", "node-a", ["pvc-1"]);
    /// let controller =
    ///     Controller::new(Config::default(), Arc::new(MemoryBackend::new()), Arc::new(store), world)
    ///         .unwrap();
    /// let handle = controller.handle();
    /// let mut outcomes = handle.outcomes(); // before it runs: nothing is missed
    /// let task = tokio::spawn(controller.run());
    /// loop {
    ///     let done = outcomes.recv().await.unwrap();
    ///     if done.kind == OpKind::Attach {
    ///         assert_eq!((done.volume, done.node), (Some("pvc-1"), Some("node-a")));
    ///         assert_eq!(done.outcome, Ending::Succeeded);
    ///         break;
    ///     }
    /// }
    /// handle.shutdown(std::time::Duration::ZERO).await.unwrap();
    /// task.await.unwrap();
    /// # });
    /// ```
    pub fn outcomes(&self) -> broadcast::Receiver<OperationFinished<D>> {
        outcomes::subscribe(&self.outcomes)
    }

    /// A Prometheus collector of this controller's metrics, to
    /// [`register`](super::PrometheusMetrics::register) into your registry (see
    /// [`PrometheusMetrics`](super::PrometheusMetrics) for the metrics and an example). It
    /// does not keep the controller alive. Only with the `prometheus` feature.
    #[cfg(feature = "prometheus")]
    pub fn prometheus_metrics(&self) -> super::PrometheusMetrics {
        let queue = self.tx.downgrade();
        super::PrometheusMetrics::new(
            Arc::clone(&self.metrics),
            Arc::new(move || {
                queue
                    .upgrade()
                    .map_or(0, |tx| tx.max_capacity() - tx.capacity())
            }),
        )
    }

    /// Registers this controller's metrics into `registry`:
    /// `self.prometheus_metrics().register(registry)`. Only with the `prometheus` feature.
    #[cfg(feature = "prometheus")]
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.prometheus_metrics().register(registry);
    }

    /// Whether the controller's task has stopped taking inputs.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }

    /// The message of the panic that killed the controller's loop, if it died; `None` while it
    /// runs and after a shutdown. A sync read (no call into the loop), for a liveness probe.
    pub fn died(&self) -> Option<String> {
        self.death.lock().clone()
    }
}
