//! The one vocabulary of changes the core takes in: what an orchestrator's watchers see.
//!
//! The same [`Input`] values feed the core
//! ([`Reconciler::handle`](crate::core::Reconciler::handle)), a running controller
//! ([`ControllerHandle::send`](crate::controller::ControllerHandle::send)) and the start-up
//! [`World`](crate::controller::World).

use rustc_hash::FxHashSet;

use crate::actual::NodeFacts;
use crate::domain::Domain;
use crate::reconciler::ReconcilerError;
use crate::volume::VolumeSpec;

/// The kinds of object an orchestrator lists and watches, each relisted on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Volumes: [`Input::SetVolume`] and [`Input::VolumeRemoved`].
    Volume,
    /// Nodes: [`Input::NodeUpdated`] and [`Input::NodeRemoved`].
    Node,
    /// Workloads: [`Input::WorkloadScheduled`] and [`Input::WorkloadRemoved`].
    Workload,
}

/// A change in the orchestrator the core must know about, as a watcher sees it.
///
/// Inputs may come in any order, and a removal may be replayed:
///
/// - A workload that names a node or a volume the core has not been told of yet (or one that
///   was removed) is accepted and *waits*: it contributes nothing to the desired state until
///   everything it names is known, and is then placed. What waits, and for what, is visible in
///   [`DesiredState::pending_workloads`](crate::core::DesiredState::pending_workloads); a workload
///   still waiting after [`Config::pending_workload_warning`](crate::config::Config) is named once
///   in an [`Event::WorkloadWaiting`](crate::core::Event::WorkloadWaiting); at most
///   [`Config::max_pending_workloads`](crate::config::Config) may wait for something never seen.
/// - A node or a volume removed while workloads use it is removed: those workloads wait for it
///   again, and the volumes are no longer desired there (so they are detached by the usual,
///   safe path: never from a node that still mounts them unless it is fenced).
/// - Removing something unknown is a no-op.
///
/// With kube-runtime's `watcher`, each stream maps one to one: `Event::Init` is
/// [`RelistStarted`](Input::RelistStarted), `Event::InitApply(obj)` and `Event::Apply(obj)` are
/// the upsert of the kind, `Event::Delete(obj)` its removal, `Event::InitDone` is
/// [`RelistDone`](Input::RelistDone).
#[derive(Clone, Debug, PartialEq)]
pub enum Input<D: Domain> {
    /// A volume exists (or changed) with this access mode and backend payload.
    ///
    /// Refused with [`ReconcilerError::AccessConflict`] when it would make a volume attached
    /// (or maybe attached, or being attached or detached) on several nodes single-node: the
    /// core could not honour the new mode without picking a node to detach from, which is the
    /// orchestrator's call. Registering a volume that was removed but is still being detached
    /// takes it back; workloads that waited for it are placed.
    SetVolume {
        /// The volume.
        volume: D::Volume,
        /// Its access mode and payload.
        spec: VolumeSpec<D::Payload>,
    },
    /// The volume is gone (its PV or claim was deleted).
    ///
    /// Workloads still using it wait for it again (a watcher may deliver the volume's deletion
    /// before its workloads'), and it is no longer desired anywhere: it is detached where still
    /// attached, as any volume no workload needs, then its spec (the payload the detach needs)
    /// is forgotten. A no-op for a volume not registered.
    VolumeRemoved {
        /// The volume.
        volume: D::Volume,
    },
    /// A node exists (or changed) with these facts. Workloads that waited for it are placed.
    NodeUpdated {
        /// The node.
        node: D::Node,
        /// Health, fencing, volumes in use.
        facts: NodeFacts<D::Volume>,
    },
    /// The node object was deleted.
    ///
    /// Workloads placed on it wait for it again (they are placed again if it comes back), and
    /// their volumes are no longer desired there; a volume still attached to the deleted node
    /// is detached as [`Config::deleted_node_is_fenced`](crate::config::Config) says. A no-op for a
    /// node not known.
    NodeRemoved {
        /// The node.
        node: D::Node,
    },
    /// A workload was placed on a node (or moved) and needs these volumes there.
    ///
    /// If the node or a volume is not known yet, the workload waits for it (see above);
    /// refused with [`DesiredError::TooManyPending`](crate::core::DesiredError::TooManyPending)
    /// when it would wait and [`Config::max_pending_workloads`](crate::config::Config) workloads
    /// wait already.
    WorkloadScheduled {
        /// The workload.
        workload: D::Workload,
        /// Where it runs.
        node: D::Node,
        /// The volumes it needs.
        volumes: Vec<D::Volume>,
    },
    /// The workload is gone. A no-op for a workload not known.
    WorkloadRemoved {
        /// The workload.
        workload: D::Workload,
    },
    /// An operator vouches that `volume` is no longer attached to `node`, whose detach is stuck
    /// (the backend keeps failing it, say because the machine is gone and its API cannot
    /// answer for it): the core forgets the attachment without a detach call once the backend
    /// agrees, and the volume may go elsewhere.
    ///
    /// Accepted only while the node is fenced (out-of-service): only then can it no longer
    /// write, whatever it last reported. Refused, with nothing changed, as
    /// [`ReconcilerError::ReleaseRefused`](crate::core::ReconcilerError::ReleaseRefused)
    /// saying why, when the node is not fenced, nothing is attached there, an attach there may
    /// still land (it ended without an answer, or a controller before a restart made it), a
    /// workload there still uses it, or an attach or detach of it runs (let the call's deadline
    /// end it, then release again).
    ///
    /// An accepted release is pending until a verify of the node that starts after it
    /// answers: forgetting an attachment is irreversible, and the operator's word may be older
    /// than the backend's state (an attach may have landed since they looked). No detach is
    /// planned meanwhile. The volume gone, the attachment is forgotten, with an
    /// [`Event::VolumeReleased`](crate::core::Event::VolumeReleased); still attached, the
    /// release is dropped, with an [`Event::ReleaseRefused`](crate::core::Event::ReleaseRefused)
    /// ([`BackendStillAttached`](crate::core::ReleaseRefusal::BackendStillAttached)), and the
    /// volume is detached as any (forced, while the node is fenced). A verify that fails or
    /// hangs decides nothing: the node is verified again after a backoff, and
    /// [`Reconciler::stuck_detaches`](crate::core::Reconciler::stuck_detaches) lists the
    /// release as pending meanwhile. So a release on a node the backend cannot reach is
    /// accepted but never completes: detach the volume by hand, and the release completes
    /// once the backend can answer for the node again. A release whose node is unfenced
    /// before then is dropped, and so is one whose volume a workload there wants again. A
    /// claim-only volume, which the backend knows nothing of, is released as a forced detach
    /// would release it: once the node's list is acknowledged without it and a fresh read
    /// shows the node still fenced.
    ReleaseVolume {
        /// The volume.
        volume: D::Volume,
        /// The node it is stuck on.
        node: D::Node,
    },
    /// The orchestrator is listing every object of `kind` afresh (a watcher's `Init`).
    ///
    /// Until the matching [`RelistDone`](Input::RelistDone), every upsert of that kind
    /// (`SetVolume`, `NodeUpdated` or `WorkloadScheduled`) is applied as usual and also recorded
    /// as seen, even one the core refuses: the object exists, whatever the core made of its
    /// content. A second `RelistStarted` of the same kind before the `RelistDone` starts the
    /// relist over (a watcher that lost its stream lists again). Objects of other kinds are
    /// unaffected.
    ///
    /// ```
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Input, Kind, NodeFacts, Reconciler};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// let mut core = Reconciler::<D>::new(Config::default());
    /// let node = |n| Input::NodeUpdated { node: n, facts: NodeFacts::default() };
    /// assert!(core.handle_all([node("a"), node("b"), node("c")]).is_empty());
    /// // The watcher restarts: it lists b and c again, and a was deleted meanwhile.
    /// core.handle(Input::RelistStarted { kind: Kind::Node }).unwrap();
    /// core.handle(node("b")).unwrap();
    /// core.handle(node("c")).unwrap();
    /// core.handle(Input::RelistDone { kind: Kind::Node }).unwrap();
    /// assert!(!core.desired().has_node(&"a"));
    /// assert!(core.desired().has_node(&"b") && core.desired().has_node(&"c"));
    /// assert_eq!(core.removed_nodes(), &["a"]);
    /// ```
    RelistStarted {
        /// The kind listed.
        kind: Kind,
    },
    /// The listing of `kind` is complete (a watcher's `InitDone`): every object of that kind
    /// not seen since the [`RelistStarted`](Input::RelistStarted) is removed, exactly as its
    /// removal input would (volumes: [`VolumeRemoved`](Input::VolumeRemoved), nodes:
    /// [`NodeRemoved`](Input::NodeRemoved), workloads, placed or waiting:
    /// [`WorkloadRemoved`](Input::WorkloadRemoved)), in id order.
    ///
    /// Refused with [`ReconcilerError::NoRelist`] if no relist of `kind` was started: nothing
    /// was seen, and removing every object of the kind on a stray message would be a disaster.
    ///
    /// ```
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Input, Kind, NodeFacts, Reconciler, ReconcilerError, VolumeSpec};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// let mut core = Reconciler::<D>::new(Config::default());
    /// let refused = core.handle_all([
    ///     Input::NodeUpdated { node: "n1", facts: NodeFacts::default() },
    ///     Input::SetVolume { volume: "v1", spec: VolumeSpec::single_node(()) },
    ///     Input::WorkloadScheduled { workload: "gone", node: "n1", volumes: vec!["v1"] },
    ///     Input::WorkloadScheduled { workload: "kept", node: "n1", volumes: vec![] },
    /// ]);
    /// assert!(refused.is_empty());
    /// assert_eq!(
    ///     core.handle(Input::RelistDone { kind: Kind::Workload }),
    ///     Err(ReconcilerError::NoRelist { kind: Kind::Workload })
    /// );
    /// let refused = core.handle_all([
    ///     Input::RelistStarted { kind: Kind::Workload },
    ///     Input::WorkloadScheduled { workload: "kept", node: "n1", volumes: vec![] },
    ///     Input::RelistDone { kind: Kind::Workload },
    /// ]);
    /// assert!(refused.is_empty());
    /// assert!(core.desired().placement(&"gone").is_none());
    /// assert!(core.desired().placement(&"kept").is_some());
    /// assert!(core.desired().is_empty(), "v1 is no longer desired on n1");
    /// ```
    RelistDone {
        /// The kind listed.
        kind: Kind,
    },
}

impl<D: Domain> Input<D> {
    /// The kind of object this input is about (a relist marker: the kind it lists).
    pub fn kind(&self) -> Kind {
        match self {
            Input::SetVolume { .. } | Input::VolumeRemoved { .. } | Input::ReleaseVolume { .. } => {
                Kind::Volume
            }
            Input::NodeUpdated { .. } | Input::NodeRemoved { .. } => Kind::Node,
            Input::WorkloadScheduled { .. } | Input::WorkloadRemoved { .. } => Kind::Workload,
            Input::RelistStarted { kind } | Input::RelistDone { kind } => *kind,
        }
    }
}

/// An input of a batch the core refused, with its place in the batch
/// ([`Reconciler::handle_all`](crate::core::Reconciler::handle_all),
/// [`ControllerHandle::send_all`](crate::controller::ControllerHandle::send_all)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection<D: Domain> {
    /// The input's index in the batch, from 0.
    pub index: usize,
    /// Why the core refused it; that input changed nothing.
    pub error: ReconcilerError<D>,
}

/// The relists under way: per kind, the objects seen since its `RelistStarted`.
#[derive(Debug)]
pub(crate) struct Relists<D: Domain> {
    pub(crate) volumes: Option<FxHashSet<D::Volume>>,
    pub(crate) nodes: Option<FxHashSet<D::Node>>,
    pub(crate) workloads: Option<FxHashSet<D::Workload>>,
}

impl<D: Domain> Default for Relists<D> {
    fn default() -> Self {
        Relists {
            volumes: None,
            nodes: None,
            workloads: None,
        }
    }
}

impl<D: Domain> Relists<D> {
    /// Starts (or starts over) the relist of `kind`.
    pub(crate) fn start(&mut self, kind: Kind) {
        match kind {
            Kind::Volume => self.volumes = Some(FxHashSet::default()),
            Kind::Node => self.nodes = Some(FxHashSet::default()),
            Kind::Workload => self.workloads = Some(FxHashSet::default()),
        }
    }

    /// Whether a relist of `kind` is under way.
    pub(crate) fn listing(&self, kind: Kind) -> bool {
        match kind {
            Kind::Volume => self.volumes.is_some(),
            Kind::Node => self.nodes.is_some(),
            Kind::Workload => self.workloads.is_some(),
        }
    }
}
