//! The caller's side of a running controller: inputs in, typed rejections and reports out.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use super::metrics::{Metrics, MetricsSnapshot};
use super::shutdown::ShutdownReport;
use crate::actual::NodeFacts;
use crate::domain::Domain;
use crate::reconciler::{Reconciler, ReconcilerError};
use crate::volume::VolumeSpec;

/// A change in the orchestrator the controller must know about.
///
/// The same values describe the initial [`World`](crate::World), and
/// [`apply_to`](Input::apply_to) feeds one straight into a [`Reconciler`] for users who drive the
/// core themselves.
#[derive(Clone, Debug, PartialEq)]
pub enum Input<D: Domain> {
    /// A volume exists (or changed) with this access mode and backend payload.
    SetVolume {
        /// The volume.
        volume: D::Volume,
        /// Its access mode and payload.
        spec: VolumeSpec<D::Payload>,
    },
    /// The volume is gone (its PV or claim was deleted). Refused while workloads use it; it
    /// is detached where still attached, then forgotten.
    VolumeRemoved {
        /// The volume.
        volume: D::Volume,
    },
    /// A node exists (or changed) with these facts.
    NodeUpdated {
        /// The node.
        node: D::Node,
        /// Health, fencing, volumes in use.
        facts: NodeFacts<D::Volume>,
    },
    /// The node object was deleted. Refused while workloads are still placed on it.
    NodeRemoved {
        /// The node.
        node: D::Node,
    },
    /// A workload was placed on a node (or moved) and needs these volumes there.
    WorkloadScheduled {
        /// The workload.
        workload: D::Workload,
        /// Where it runs.
        node: D::Node,
        /// The volumes it needs.
        volumes: Vec<D::Volume>,
    },
    /// The workload is gone.
    WorkloadRemoved {
        /// The workload.
        workload: D::Workload,
    },
}

impl<D: Domain> Input<D> {
    /// Applies this change to `core`; the core's state is unchanged when it refuses.
    ///
    /// ```
    /// use attach_detach::{Config, Input, Ids, NodeFacts, Reconciler, ReconcilerError, DesiredError};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// let mut core = Reconciler::<D>::new(Config::default());
    /// let misplaced = Input::WorkloadScheduled { workload: "w", node: "nowhere", volumes: vec![] };
    /// assert_eq!(
    ///     misplaced.apply_to(&mut core),
    ///     Err(ReconcilerError::Desired(DesiredError::UnknownNode { node: "nowhere" }))
    /// );
    /// Input::NodeUpdated { node: "node-a", facts: NodeFacts::default() }.apply_to(&mut core).unwrap();
    /// ```
    pub fn apply_to(self, core: &mut Reconciler<D>) -> Result<(), ReconcilerError<D>> {
        match self {
            Input::SetVolume { volume, spec } => core.set_volume(volume, spec),
            Input::VolumeRemoved { volume } => core.remove_volume(&volume),
            Input::NodeUpdated { node, facts } => {
                core.node_updated(node, facts);
                Ok(())
            }
            Input::NodeRemoved { node } => core.node_removed(&node),
            Input::WorkloadScheduled {
                workload,
                node,
                volumes,
            } => core.add_workload(workload, node, &volumes),
            Input::WorkloadRemoved { workload } => core.remove_workload(&workload),
        }
    }
}

/// Why a [`ControllerHandle`] call did not go through.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControllerError<D: Domain> {
    /// The core refused the input (unknown node, unknown volume, ...); nothing changed.
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
    Input(Input<D>, oneshot::Sender<Result<(), ReconcilerError<D>>>),
    Shutdown(Duration, oneshot::Sender<ShutdownReport<D>>),
}

/// A cloneable handle onto a running [`Controller`](crate::Controller): feeds it inputs, reads
/// its metrics, shuts it down.
///
/// Inputs are applied in the order they are received; each call returns once the core has
/// applied (or refused) the input. Dropping every handle stops the controller as
/// [`shutdown`](Self::shutdown) with no grace would.
pub struct ControllerHandle<D: Domain> {
    tx: mpsc::Sender<Command<D>>,
    metrics: Arc<Metrics>,
    death: DeathNote,
}

impl<D: Domain> Clone for ControllerHandle<D> {
    fn clone(&self) -> Self {
        ControllerHandle {
            tx: self.tx.clone(),
            metrics: Arc::clone(&self.metrics),
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
        death: DeathNote,
    ) -> Self {
        ControllerHandle { tx, metrics, death }
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
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Input(input, reply))
            .await
            .map_err(|_| self.gone())?;
        answer.await.map_err(|_| self.gone())??;
        Ok(())
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

    /// The controller's counters now. Works after the controller stopped, too.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Whether the controller's task has stopped taking inputs.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }
}
