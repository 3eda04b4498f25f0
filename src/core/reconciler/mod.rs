//! The reconciler: a pure, synchronous planner that turns changes into operations.
//!
//! [`Reconciler`] takes [`Input`]s and the results of the operations it planned, keeps the
//! state, and asks the rules whether each step may happen now. Beside it: `admission_pass.rs`
//! (the pass that admits queued attaches and detaches under `Config::backend_load`),
//! `machine.rs` (planning machine checks and taking their answers), and its tests
//! (`tests.rs` with `tests/`, `payload_tests.rs`, `store_protocol_tests.rs`).
//!
//! The top floor of the core: may import anything in `core` below it, `crate::config` and
//! `crate::domain`; nothing from the driver, the doubles, the conformance kit or the simulator.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use hashbrown::Equivalent;
use rustc_hash::FxHashSet;
use smallvec::SmallVec;
use tracing::{debug, info, warn};

use crate::config::{Config, UpstreamBugs};
use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError};
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::core::calls::reported_volumes::{ListSpares, ReportedVolumes};
use crate::core::calls::store::{NodeStatus, Revision, StoreError, WriteReceipt};
use crate::core::calls::volume::{Access, VolumeSpec};
use crate::core::event::{Event, Holder};
use crate::core::input::{Input, Kind, ReconcilerError, Rejection, ReleaseRefusal, Relists};
use crate::core::operation::{ForceReason, InFlight, OpId, OpKind, Operation};
use crate::core::outcome::Outcome;
use crate::core::plan::detaches::DetachIndex;
use crate::core::plan::in_flight::InFlightTable;
use crate::core::plan::recovery::{Load, Recovery, SettledVolumes, Statuses, StoreListed};
use crate::core::plan::schedule::Schedule;
use crate::core::rules::admission::{Admission, Class};
use crate::core::rules::capacity::NodeCapacity;
use crate::core::rules::decision::{
    Attach, AttachFacts, Detach, DetachFacts, Step, decide_attach, decide_detach,
};
use crate::core::rules::fresh_read::{Fresh, WrittenFacts, judge_detach};
use crate::core::rules::gate::{OperationGate, earliest};
use crate::core::rules::machine::MachineWatch;
use crate::core::state::actual::{ActualState, AttachState, Attachment, NodeFacts};
use crate::core::state::desired::{DesiredState, WantedOn};
use crate::core::state::progress::{DetachProgress, DetachStage, Release, Told};
use crate::core::state::status::StatusBook;
use crate::core::tables::dense_table::WARM_BATCH;
use crate::core::tables::id_warm;
use crate::core::tables::trim::trim_set;
use crate::domain::{Domain, Id};

/// A detach wanted for longer than [`Config::stuck_after`]; see
/// [`Reconciler::stuck_detaches`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckDetach<D: Domain> {
    /// The volume.
    pub volume: D::Volume,
    /// The node it stays attached to.
    pub node: D::Node,
    /// How long its detach has been wanted.
    pub waited: Duration,
    /// An operator's release of it was accepted and waits for a verify of the node that
    /// starts after it (see [`Input::ReleaseVolume`]): none has answered yet, because the
    /// backend cannot reach the node, say.
    pub release_pending: bool,
}

/// What must not run twice at once.
#[derive(Clone, Debug, PartialEq, Eq)]
enum GateKey<D: Domain> {
    /// Any attach or detach of a single-node volume.
    Volume(D::Volume),
    /// An attach or detach of a multi-node volume on one node.
    Attachment(D::Volume, D::Node),
    /// A status write of a node.
    Status(D::Node),
    /// A verify of a node.
    Verify(D::Node),
    /// The listing of every attachment.
    List,
    /// The listing of every node's status, at recovery.
    StoreList,
    /// Attaches to a node the backend said is full: never running, only backing off.
    NodeCapacity(D::Node),
}

/// A gate key, borrowed: what a look asks the gate, and what an operation's end frees. An
/// owned key cloned its ids on every look, whether or not an operation was planned (a cold
/// reference count per volume with `Name` ids, and a restart's first pass looks at a
/// million; an allocation each with `String` ids), and again at every operation's end.
enum GateKeyRef<'a, D: Domain> {
    Volume(&'a D::Volume),
    Attachment(&'a D::Volume, &'a D::Node),
    Status(&'a D::Node),
    Verify(&'a D::Node),
    List,
    StoreList,
    NodeCapacity(&'a D::Node),
}

fn gate_key_ref<'a, D: Domain>(
    access: Access,
    volume: &'a D::Volume,
    node: &'a D::Node,
) -> GateKeyRef<'a, D> {
    match access {
        Access::SingleNode => GateKeyRef::Volume(volume),
        Access::MultiNode => GateKeyRef::Attachment(volume, node),
    }
}

impl<D: Domain> GateKeyRef<'_, D> {
    fn to_owned(&self) -> GateKey<D> {
        match *self {
            GateKeyRef::Volume(volume) => GateKey::Volume(volume.clone()),
            GateKeyRef::Attachment(volume, node) => {
                GateKey::Attachment(volume.clone(), node.clone())
            }
            GateKeyRef::Status(node) => GateKey::Status(node.clone()),
            GateKeyRef::Verify(node) => GateKey::Verify(node.clone()),
            GateKeyRef::List => GateKey::List,
            GateKeyRef::StoreList => GateKey::StoreList,
            GateKeyRef::NodeCapacity(node) => GateKey::NodeCapacity(node.clone()),
        }
    }
}

impl<D: Domain> GateKey<D> {
    #[inline]
    fn as_ref(&self) -> GateKeyRef<'_, D> {
        match self {
            GateKey::Volume(volume) => GateKeyRef::Volume(volume),
            GateKey::Attachment(volume, node) => GateKeyRef::Attachment(volume, node),
            GateKey::Status(node) => GateKeyRef::Status(node),
            GateKey::Verify(node) => GateKeyRef::Verify(node),
            GateKey::List => GateKeyRef::List,
            GateKey::StoreList => GateKeyRef::StoreList,
            GateKey::NodeCapacity(node) => GateKeyRef::NodeCapacity(node),
        }
    }
}

/// A borrowed key must hash as its owned key does, so both hash through here: a tag per
/// variant, then the ids.
impl<D: Domain> Hash for GateKeyRef<'_, D> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            GateKeyRef::Volume(volume) => {
                state.write_u8(0);
                volume.hash(state);
            }
            GateKeyRef::Attachment(volume, node) => {
                state.write_u8(1);
                volume.hash(state);
                node.hash(state);
            }
            GateKeyRef::Status(node) => {
                state.write_u8(2);
                node.hash(state);
            }
            GateKeyRef::Verify(node) => {
                state.write_u8(3);
                node.hash(state);
            }
            GateKeyRef::List => state.write_u8(4),
            GateKeyRef::StoreList => state.write_u8(5),
            GateKeyRef::NodeCapacity(node) => {
                state.write_u8(6);
                node.hash(state);
            }
        }
    }
}

impl<D: Domain> Hash for GateKey<D> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

impl<D: Domain> Equivalent<GateKey<D>> for GateKeyRef<'_, D> {
    #[inline]
    fn equivalent(&self, key: &GateKey<D>) -> bool {
        match (self, key) {
            (GateKeyRef::Volume(v), GateKey::Volume(w)) => *v == w,
            (GateKeyRef::Attachment(v, n), GateKey::Attachment(w, m)) => *v == w && *n == m,
            (GateKeyRef::Status(n), GateKey::Status(m))
            | (GateKeyRef::Verify(n), GateKey::Verify(m))
            | (GateKeyRef::NodeCapacity(n), GateKey::NodeCapacity(m)) => *n == m,
            (GateKeyRef::List, GateKey::List) | (GateKeyRef::StoreList, GateKey::StoreList) => true,
            _ => false,
        }
    }
}

/// Debug builds check the detach indexes against every record after each pass of a world
/// this small (the check scans every record).
#[cfg(debug_assertions)]
const DEBUG_CHECK_UP_TO: usize = 512;

/// Why a detach of a volume with no spec is blocked.
const UNREGISTERED: &str = "the volume is not registered, so the controller has no payload to \
                            detach it with; register it with set_volume";

/// The most events the core's own list keeps room for between drains
/// ([`Reconciler::drain_events_into`]): a pass emits a few, and a start-up burst's list (an
/// event per attach) would otherwise stay allocated for good.
pub(crate) const KEPT_EVENTS: usize = 256;

/// Passes with at least this many volumes are taken in warmed batches.
#[cfg(not(fuzzing))]
const WARM_FROM: usize = 64;
/// The fuzzers' worlds hold a few volumes: their builds batch from two on, so that they run
/// the batched path (with partial batches) too.
#[cfg(fuzzing)]
const WARM_FROM: usize = 2;

/// From this many attachments on, a short pass reads ahead the records of even one volume,
/// and of the nodes it reaches ([`Reconciler::warm_nodes_of`]), and a status write the names
/// it copies and drops ([`ActualState::report_with`]). Below it the state (about
/// 160 bytes an attachment) fits the 2 MiB second-level cache of the machines measured,
/// nothing misses, and the reads are only work.
#[cfg(not(any(fuzzing, test)))]
const WARM_STATE_FROM: usize = 50_000;
/// The fuzzers' and the unit tests' worlds are small: they read ahead from one attachment
/// on, so that they run it too (on unknown nodes, empty lists, waiting workloads).
#[cfg(any(fuzzing, test))]
const WARM_STATE_FROM: usize = 1;

/// A fresh read's clearance of a detach is meant for the very next pass, which comes at most
/// `reconcile_period` after it in a driver that polls when told; it is dropped at the end of
/// that pass if unused, and not used at all once older than `reconcile_period` plus this slack
/// (a driver that polls late): the node is read again instead.
const CLEARANCE_SLACK: Duration = Duration::from_secs(1);

/// Status writes in a row that may lose a compare-and-set race before the node's writes back
/// off: conflicts are normally another writer's one-off, answered by a fresh read at once.
const CONFLICTS_BEFORE_BACKOFF: u8 = 3;

/// A pass trims the tables a burst grew ([`Reconciler::trim`]) once in this many. Checking a
/// score of tables at every pass and at every quiet end of a status write was about a
/// sixteenth of a workload move. A burst of
/// operations still gives its room back as it ends: a quiet end trims when the table of
/// running operations has room to give back, which a move one at a time never leaves. Room
/// that inputs alone grew (say, a hundred waiting workloads removed before they were
/// attached) goes back within this many passes, not at the next.
const TRIM_EVERY_PASSES: u32 = 16;

/// The closest two slices of the periodic verify may be. A slice is one pass of the driver,
/// woken for it at the core's deadline, not at its reconcile tick: 100 wake-ups a second at
/// most are noise beside the verify's own work, which the slicing does not change (a round
/// is every attachment whatever its slices). What a slice decides is the longest pause one
/// pass makes, so slices keep to `verify_batch` unless even this gap cannot fit them.
const MIN_VERIFY_SLICE_GAP: Duration = Duration::from_millis(10);

/// The attach/detach state machine, free of IO and clocks.
///
/// Feed it changes ([`handle`](Self::handle) an [`Input`]), call [`poll`](Self::poll)
/// with the current time when [`next_deadline`](Self::next_deadline) is due, run the
/// [`Operation`]s it returns, and hand each result back ([`finish`](Self::finish) an
/// [`Outcome`]); [`take_events`](Self::take_events) tells what a human may want to see. Work per pass is
/// proportional to what changed: changes mark volumes and nodes dirty, and timers wake what waits
/// (backoff, unmount timeout), so an idle pass touches nothing.
///
/// See the crate documentation for a walk-through.
#[derive(Debug)]
pub struct Reconciler<D: Domain> {
    config: Config,
    desired: DesiredState<D>,
    actual: ActualState<D>,
    status: StatusBook<D>,
    /// The per-node indexes of the detaches under way, derived from the records' states.
    detaches: DetachIndex<D>,
    /// The operations under way and what may start next.
    calls: Calls<D>,
    /// The dirty volumes, the timers and the pacing of passes.
    schedule: Schedule<D>,
    /// Recovery, relists, the periodic listing and verify.
    listings: Listings<D>,
    /// Whose turn it is on a node's store calls.
    status_turns: StatusTurns<D>,
    /// Volumes removed by the orchestrator whose spec is kept until they are detached.
    retiring: BTreeSet<D::Volume>,
    events: Vec<Event<D>>,
    /// Room kept between calls, so that a move allocates nothing.
    scratch: Scratch<D>,
}

/// The operations under way, and what decides whether another may start.
#[derive(Debug)]
struct Calls<D: Domain> {
    /// One operation per key at a time, and each key's backoff.
    gate: OperationGate<GateKey<D>>,
    in_flight: InFlightTable<D>,
    /// The last operation id handed out.
    next_id: u64,
    /// Backend load: slots per class, the token bucket, the queues (`Config::backend_load`).
    admission: Admission<D>,
    /// Per-node attach limits: attaches under way, and volumes waiting for room.
    capacity: NodeCapacity<D>,
    /// Fencing without a human: the machine checks of unhealthy nodes
    /// (`Config::machine_fencing`; see `machine.rs`).
    machine: MachineWatch<D>,
}

/// What the core lists whole, and what it keeps while a listing runs.
#[derive(Debug)]
struct Listings<D: Domain> {
    /// `Some` until both recovery listings are handed back: nothing else is planned before.
    recovery: Option<Recovery<D>>,
    /// The relists under way.
    relists: Relists<D>,
    /// While a listing runs: the attachments whose state an operation's result changed since
    /// it started, whose listed state is older than the core's.
    changed_while_listing: Option<BTreeSet<(D::Volume, D::Node)>>,
    /// The nodes the last input call removed, for [`removed_nodes`](Reconciler::removed_nodes).
    removed_nodes: Vec<D::Node>,
    /// The periodic verify's round under way, spread over the sync period in slices.
    verify_round: Option<VerifyRound>,
}

/// Whose turn it is on a node's store calls.
#[derive(Debug)]
struct StatusTurns<D: Domain> {
    /// Nodes whose last store call was a read: a write wanted too goes next.
    read_last: FxHashSet<D::Node>,
    /// Upstream's bug C6 only: nodes whose cached copy was read for the write now due.
    cache_consulted: BTreeSet<D::Node>,
}

/// Room kept between calls.
#[derive(Debug)]
struct Scratch<D: Domain> {
    /// For the nodes `reconcile_volume` looks at.
    node_lists: NodeLists<D>,
    /// Status lists the store and the core have done with, for the next writes to fill.
    list_spares: ListSpares<D>,
    /// For the volumes a workload's input changes, on their way to the marks, so that a move
    /// allocates no list for them.
    changed_volumes: Vec<D::Volume>,
    /// Passes since the last trim ([`TRIM_EVERY_PASSES`]).
    passes_since_trim: u32,
}

/// What deciding on a volume's attachments needs of its spec, copied out of the state so that
/// each can be decided on while the state changes. The payload is not among it: it is copied
/// only into a call the core plans (a Kubernetes CSI payload is three strings, and copying the
/// whole spec on each of a move's five looks at the volume cost 15 allocations a move).
#[derive(Clone, Copy, Debug)]
struct SpecFacts {
    access: Access,
    attach_required: bool,
    /// Where the volume's entry sits in the desired state: the payload of a call planned is
    /// read from there ([`DesiredState::spec_at`](crate::core::state::desired::DesiredState::spec_at)).
    at: usize,
}

/// The nodes a volume is wanted on and attached to, copied out of the state so that each
/// can be decided on while the state changes.
#[derive(Debug)]
struct NodeLists<D: Domain> {
    wanted: Vec<D::Node>,
    attached: Vec<D::Node>,
}

impl<D: Domain> Default for NodeLists<D> {
    fn default() -> Self {
        NodeLists {
            wanted: Vec::new(),
            attached: Vec::new(),
        }
    }
}

impl<D: Domain> NodeLists<D> {
    /// Empties both, and drops the room a volume wanted on many nodes left.
    fn clear(&mut self) {
        for list in [&mut self.wanted, &mut self.attached] {
            if list.capacity() > KEPT_NODES {
                *list = Vec::new();
            } else if !list.is_empty() {
                // Emptied by the look as a rule: with ids that own something, even an empty
                // clear is a call.
                list.clear();
            }
        }
    }
}

/// The nodes [`NodeLists`] keeps room for between calls.
const KEPT_NODES: usize = 16;

/// A round of the periodic verify that has nodes left: when it began, how far apart its
/// slices are, how many attachments each takes, and how many were planned.
#[derive(Clone, Copy, Debug)]
struct VerifyRound {
    start: Duration,
    interval: Duration,
    per_slice: usize,
    slices_done: u32,
}

impl VerifyRound {
    /// A round starting at `start` over `attachments`: slices of about `verify_batch`, spread
    /// evenly over the sync period, at least [`MIN_VERIFY_SLICE_GAP`] apart.
    fn paced(start: Duration, attachments: usize, config: &Config) -> Self {
        let total = attachments.max(1);
        let fit = (config.sync_period.as_nanos() / MIN_VERIFY_SLICE_GAP.as_nanos()).max(1);
        let slices = (total.div_ceil(config.verify_batch) as u128).clamp(1, fit);
        let per_slice = usize::try_from((total as u128).div_ceil(slices)).unwrap_or(usize::MAX);
        let interval = Duration::from_nanos(
            u64::try_from(config.sync_period.as_nanos() / slices).unwrap_or(u64::MAX),
        );
        VerifyRound {
            start,
            interval,
            per_slice,
            slices_done: 0,
        }
    }

    /// When the next slice is due: counted from the round's start, not from the last slice,
    /// so that a late pass does not push every later slice back.
    fn next_at(&self) -> Duration {
        let offset = self.interval.as_nanos() * u128::from(self.slices_done);
        self.start.saturating_add(Duration::from_nanos(
            u64::try_from(offset).unwrap_or(u64::MAX),
        ))
    }
}

impl<D: Domain> Reconciler<D> {
    /// A reconciler that starts by recovering: its first pass plans the store's and the
    /// backend's listings ([`Operation::ListStatuses`], [`Operation::ListAttachments`]) and
    /// nothing else is planned until both are handed back (correction C7). Inputs are taken
    /// meanwhile. A brand-new cluster recovers from two empty lists.
    pub fn new(config: Config) -> Self {
        Reconciler {
            calls: Calls {
                gate: OperationGate::new(config.backoff),
                in_flight: InFlightTable::default(),
                next_id: 0,
                admission: Admission::new(
                    config.backend_load,
                    {
                        #[cfg(feature = "upstream-bugs")]
                        let shared = config.upstream_bugs.l2_shared_backend_queue;
                        #[cfg(not(feature = "upstream-bugs"))]
                        let shared = false;
                        shared
                    },
                    [config.call_timeouts.attach, config.call_timeouts.detach],
                ),
                capacity: NodeCapacity::default(),
                machine: MachineWatch::default(),
            },
            listings: Listings {
                recovery: Some(Recovery::default()),
                relists: Relists::default(),
                changed_while_listing: None,
                removed_nodes: Vec::new(),
                verify_round: None,
            },
            status_turns: StatusTurns {
                read_last: FxHashSet::default(),
                cache_consulted: BTreeSet::new(),
            },
            desired: DesiredState::new(&config),
            config,
            actual: ActualState::default(),
            status: StatusBook::default(),
            // Until recovery ends, which marks what it cannot show settled.
            schedule: Schedule::holding_marks(),
            detaches: DetachIndex::default(),
            events: Vec::new(),
            retiring: BTreeSet::new(),
            scratch: Scratch {
                node_lists: NodeLists::default(),
                list_spares: ListSpares::default(),
                changed_volumes: Vec::new(),
                passes_since_trim: 0,
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The desired state of world.
    pub fn desired(&self) -> &DesiredState<D> {
        &self.desired
    }

    /// The actual state of world.
    pub fn actual(&self) -> &ActualState<D> {
        &self.actual
    }

    /// What the controller knows the node-status store holds.
    pub fn status(&self) -> &StatusBook<D> {
        &self.status
    }

    /// Whether the core still waits for its recovery listings.
    pub fn is_recovering(&self) -> bool {
        self.listings.recovery.is_some()
    }

    /// Number of operations planned and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.calls.in_flight.len()
    }

    /// How many detaches were named in an [`Event::DetachStuck`] and have not ended since:
    /// a count kept as they are named, for metrics, where
    /// [`stuck_detaches`](Self::stuck_detaches) would scan every pending detach.
    pub fn stuck_detaches_named(&self) -> usize {
        self.detaches.stuck()
    }

    /// How many attaches wait for room on a node at its attach limit (or that the backend said
    /// is full), over all nodes: each was named in an [`Event::NodeFull`].
    pub fn waiting_for_room(&self) -> usize {
        self.calls.capacity.waiting_len()
    }

    /// Spends every node's record generations, as years of moves on each would: its next
    /// draw renumbers its records. Returns how many nodes had some left, so that a benchmark
    /// can count the nodes its moves renumbered.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn spend_generations(&mut self) -> usize {
        self.actual.spend_generations()
    }

    /// Whether an operation of `kind` on (`volume`, `node`) would be held back at `now`: another
    /// operation on the same key is running, or `kind` is in backoff there. Upstream's
    /// `IsOperationPending` check, exposed so the benchmarks can replay upstream's full scan on
    /// this crate's structures; the reconciler itself never scans.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn operation_blocked(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        kind: OpKind,
        now: Duration,
    ) -> bool {
        let key = gate_key_ref::<D>(self.access(volume), volume, node);
        self.may_start(&key, kind, now).is_err()
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// Applies one change the orchestrator saw: the core's only input from the orchestrator.
    ///
    /// Inputs may come in any order, and a removal may be replayed (see [`Input`] for what each
    /// does): a workload naming a node or a volume not known yet waits until they are, a node or
    /// volume removed under its workloads sends them back to waiting, and removing something
    /// unknown does nothing. Only real misuse is refused, and then nothing changed (except that
    /// an upsert during a [relist](Input::RelistStarted) still counts its object as seen):
    /// [`ReconcilerError::AccessConflict`], [`DesiredError::TooManyPending`](crate::core::DesiredError::TooManyPending),
    /// [`ReconcilerError::NoRelist`].
    ///
    /// ```
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Input, Missing, NodeFacts, Operation, Outcome, Reconciler, VolumeSpec};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// let mut core = Reconciler::<D>::new(Config::default());
    /// # for op in core.poll(std::time::Duration::ZERO) {
    /// #     match op {
    /// #         Operation::ListStatuses { id } => core.finish(Default::default(), id, Outcome::ListStatuses(Ok(vec![]))),
    /// #         op => core.finish(Default::default(), op.id(), Outcome::List(Ok(vec![]))),
    /// #     }.unwrap();
    /// # }
    /// // The pod is seen before its node and its volume: it waits, and nothing is planned.
    /// core.handle(Input::WorkloadScheduled { workload: "pod-1", node: "node-a", volumes: vec!["pvc-1"] })
    ///     .unwrap();
    /// assert_eq!(core.desired().pending_len(), 1);
    /// core.handle(Input::NodeUpdated { node: "node-a", facts: NodeFacts::default() }).unwrap();
    /// core.handle(Input::SetVolume { volume: "pvc-1", spec: VolumeSpec::single_node(()) })
    ///     .unwrap();
    /// // Now it is placed, and the next pass attaches its volume.
    /// assert_eq!(core.desired().pending_len(), 0);
    /// let ops = core.poll(core.next_deadline().unwrap());
    /// assert!(ops.iter().any(|op| matches!(op, Operation::Attach { volume: "pvc-1", .. })));
    /// // A watcher replaying a deletion is no error.
    /// core.handle(Input::WorkloadRemoved { workload: "pod-1" }).unwrap();
    /// core.handle(Input::WorkloadRemoved { workload: "pod-1" }).unwrap();
    /// ```
    pub fn handle(&mut self, input: Input<D>) -> Result<(), ReconcilerError<D>> {
        self.listings.removed_nodes.clear();
        self.apply(input)
    }

    /// Applies `inputs` in order, each as [`handle`](Self::handle) would, and returns those
    /// refused with their index in the batch (empty when every one was accepted). A refusal
    /// does not stop the batch: inputs are independent facts, and a relist's `RelistDone` must
    /// still come after one of its upserts was refused.
    ///
    /// ```
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Input, Kind, Reconciler, ReconcilerError};
    /// type D = Ids<&'static str, &'static str, &'static str, ()>;
    /// let mut core = Reconciler::<D>::new(Config::default());
    /// let refused = core.handle_all([
    ///     Input::RelistDone { kind: Kind::Node },
    ///     Input::WorkloadRemoved { workload: "never-seen" },
    /// ]);
    /// assert_eq!(refused.len(), 1);
    /// assert_eq!(refused[0].index, 0);
    /// assert_eq!(refused[0].error, ReconcilerError::NoRelist { kind: Kind::Node });
    /// ```
    #[must_use = "the inputs the core refused"]
    pub fn handle_all(&mut self, inputs: impl IntoIterator<Item = Input<D>>) -> Vec<Rejection<D>> {
        self.listings.removed_nodes.clear();
        let mut refused = Vec::new();
        for (index, input) in inputs.into_iter().enumerate() {
            if let Err(error) = self.apply(input) {
                refused.push(Rejection { index, error });
            }
        }
        refused
    }

    /// The nodes the last [`handle`](Self::handle) or [`handle_all`](Self::handle_all) call
    /// removed, by [`Input::NodeRemoved`] or by a node [relist](Input::RelistDone), in order:
    /// a driver that keeps per-node state of its own drops it for these, since a node object
    /// of the same name later is a new object.
    pub fn removed_nodes(&self) -> &[D::Node] {
        &self.listings.removed_nodes
    }

    fn apply(&mut self, input: Input<D>) -> Result<(), ReconcilerError<D>> {
        match input {
            Input::SetVolume { volume, spec } => {
                if let Some(seen) = &mut self.listings.relists.volumes {
                    seen.insert(volume.clone());
                }
                self.set_volume(volume, spec)
            }
            Input::VolumeRemoved { volume } => {
                self.remove_volume(&volume);
                Ok(())
            }
            Input::NodeUpdated { node, facts } => {
                if let Some(seen) = &mut self.listings.relists.nodes {
                    seen.insert(node.clone());
                }
                self.node_updated(node, facts);
                Ok(())
            }
            Input::NodeRemoved { node } => {
                self.node_removed(&node);
                Ok(())
            }
            Input::WorkloadScheduled {
                workload,
                node,
                volumes,
            } => {
                if let Some(seen) = &mut self.listings.relists.workloads {
                    seen.insert(workload.clone());
                }
                self.add_workload(workload, node, &volumes)
            }
            Input::WorkloadRemoved { workload } => {
                self.remove_workload(&workload);
                Ok(())
            }
            Input::RelistStarted { kind } => {
                self.listings.relists.start(kind);
                Ok(())
            }
            Input::RelistDone { kind } => self.relist_done(kind),
            Input::ReleaseVolume { volume, node } => self.release(volume, node),
        }
    }

    /// Removes every object of `kind` not seen since its relist started, in id order.
    fn relist_done(&mut self, kind: Kind) -> Result<(), ReconcilerError<D>> {
        if !self.listings.relists.listing(kind) {
            return Err(ReconcilerError::NoRelist { kind });
        }
        match kind {
            Kind::Volume => {
                let seen = self.listings.relists.volumes.take().unwrap_or_default();
                let gone = unseen(self.desired.registered_volumes(), &seen);
                for volume in gone {
                    self.remove_volume(&volume);
                }
            }
            Kind::Node => {
                let seen = self.listings.relists.nodes.take().unwrap_or_default();
                let gone = unseen(self.desired.nodes(), &seen);
                for node in gone {
                    self.node_removed(&node);
                }
            }
            Kind::Workload => {
                let seen = self.listings.relists.workloads.take().unwrap_or_default();
                let gone = unseen(self.desired.workloads(), &seen);
                for workload in gone {
                    self.remove_workload(&workload);
                }
            }
        }
        Ok(())
    }

    /// An operator's release of `volume` from `node`; see [`Input::ReleaseVolume`].
    fn release(&mut self, volume: D::Volume, node: D::Node) -> Result<(), ReconcilerError<D>> {
        let refusal = if self.actual.get(&volume, &node).is_none() {
            Some(ReleaseRefusal::NotAttached)
        } else if !self.actual.get(&volume, &node).is_some_and(|a| a.landed) {
            Some(ReleaseRefusal::AttachMayLand)
        } else if !self.actual.node(&node).is_some_and(|n| n.fenced) {
            Some(ReleaseRefusal::NotFenced)
        } else if let Some(w) = self
            .desired
            .wanted_on(&volume)
            .iter()
            .find(|w| w.node == node)
        {
            Some(ReleaseRefusal::StillWanted {
                workloads: w.workloads.to_vec(),
            })
        } else if self.busy(&volume, &node) {
            Some(ReleaseRefusal::OperationRunning)
        } else {
            None
        };
        if let Some(reason) = refusal {
            return Err(ReconcilerError::ReleaseRefused {
                volume,
                node,
                reason,
            });
        }
        info!(volume = ?volume, node = ?node, "an operator released the volume from its fenced node; a verify decides it");
        // A release of a pair whose release is pending already changes nothing: the verify
        // that decides the first decides it too.
        if self
            .actual
            .get(&volume, &node)
            .is_some_and(|a| a.detach.release == Release::None)
        {
            // A verify running now was planned before the operator's word: the next decides.
            let release = if self.calls.gate.is_running(&GateKeyRef::<D>::Verify(&node)) {
                Release::BehindVerify
            } else {
                Release::Pending
            };
            self.set_release(&volume, &node, release);
        }
        self.schedule.mark(volume);
        Ok(())
    }

    /// Registers or updates a volume's access mode and payload; see [`Input::SetVolume`].
    pub(crate) fn set_volume(
        &mut self,
        volume: D::Volume,
        spec: VolumeSpec<D::Payload>,
    ) -> Result<(), ReconcilerError<D>> {
        if self
            .desired
            .spec(&volume)
            .is_some_and(|old| old.attach_required != spec.attach_required)
        {
            let (nodes, _) = self.holders(&volume);
            if !nodes.is_empty() {
                return Err(ReconcilerError::AttachModeConflict { volume, nodes });
            }
        }
        if spec.access == Access::SingleNode && self.access(&volume) == Access::MultiNode {
            // Narrowing is refused while the volume is on several nodes, or while any attach
            // or detach of it runs (its gate key is per node, and would no longer keep a
            // second attach elsewhere from starting).
            let (nodes, running) = self.holders(&volume);
            if nodes.len() > 1 || running {
                return Err(ReconcilerError::AccessConflict { volume, nodes });
            }
        }
        self.retiring.remove(&volume);
        let changed = self.desired.set_volume(volume, spec);
        self.schedule.mark_all(changed);
        Ok(())
    }

    /// The nodes `volume` is attached to (or maybe attached, or claimed by) or has an attach or
    /// detach running on, sorted, and whether any such operation runs: what a change of its
    /// spec must not pull the rug from under.
    fn holders(&self, volume: &D::Volume) -> (Vec<D::Node>, bool) {
        let mut nodes: Vec<D::Node> = self
            .actual
            .attachments(volume)
            .iter()
            .map(|a| a.node.clone())
            .collect();
        let mut running = false;
        for op in self.calls.in_flight.values() {
            if let InFlight::Attach {
                volume: v, node, ..
            }
            | InFlight::Detach {
                volume: v, node, ..
            } = op
            {
                if v == volume {
                    running = true;
                    nodes.push(node.clone());
                }
            }
        }
        nodes.sort();
        nodes.dedup();
        (nodes, running)
    }

    /// Unregisters a volume (its PV or claim was deleted), so that volume churn does not grow
    /// the core's state without bound; see [`Input::VolumeRemoved`].
    ///
    /// Workloads using it wait for it again. A volume still attached somewhere is detached
    /// first, as any volume no workload needs; its spec (the payload the detach needs) is
    /// forgotten once no attachment is left. A no-op unless registered.
    pub(crate) fn remove_volume(&mut self, volume: &D::Volume) {
        if !self.desired.is_registered(volume) {
            return;
        }
        self.retiring.insert(volume.clone());
        let changed = self.desired.unregister_volume(volume);
        self.schedule.mark_all(changed);
    }

    /// A node exists (new or updated) with these facts; it becomes managed, and workloads that
    /// waited for it are placed.
    pub(crate) fn node_updated(&mut self, node: D::Node, facts: NodeFacts<D::Volume>) {
        // A node the store said it lacks is shown again: write its status afresh (50721), even
        // if its workloads kept it in the core all along.
        let appeared = !self.actual.node_present(&node) || self.status.is_missing(&node);
        let old_limit = self.actual.node(&node).and_then(|n| n.attach_limit);
        if !facts.fenced && self.detaches.has_releases() {
            // A release was accepted for a fenced node only: unfenced, it is void.
            for volume in self.detaches.releases_on(&node).to_vec() {
                self.set_release(&volume, &node, Release::None);
            }
        }
        let new_limit = facts.attach_limit;
        if facts.healthy || facts.fenced {
            // A machine check's run of answers starts over (fencing without a human).
            self.calls.machine.reset(&node);
        }
        let placed = self.desired.add_node(node.clone());
        self.schedule.mark_all(placed);
        // Newly reported in use: an unchanged report was looked at when it came.
        let newly: Vec<D::Volume> = match (&facts.in_use, self.listings.recovery.is_none()) {
            (Some(list), true) => {
                let old = self.actual.node(&node).and_then(|n| n.in_use.as_deref());
                let old = old.unwrap_or(&[]);
                list.iter()
                    .filter(|v| old.binary_search(v).is_err())
                    .cloned()
                    .collect()
            }
            _ => Vec::new(),
        };
        let affected = self.actual.set_node(node.clone(), facts);
        self.schedule.mark_all(affected);
        // A claim its status may no longer list (see `adopt_claims_in_use`, which looks at
        // every node once recovery is done). Held nowhere, so its first asker takes it.
        if !newly.is_empty() {
            for volume in self.unheld_claims(newly.iter()) {
                self.adopt_claim(volume, node.clone());
            }
        }
        if old_limit != new_limit {
            // A raised (or lowered, or lifted) limit: the volumes waiting for room look again.
            self.room_freed(&node);
        }
        if appeared {
            if self.detaches.blocked() > 0 {
                // Whatever kept its detaches from a human's reach may have changed: told again.
                let volumes: Vec<D::Volume> = self.actual.volumes_on(&node).cloned().collect();
                for volume in volumes {
                    self.forget_told(&volume, &node, Told::BLOCKED);
                }
            }
            self.status.node_appeared(node);
        }
    }

    /// The node object is gone. Workloads placed on it wait for it again, and their volumes
    /// are no longer desired there.
    pub(crate) fn node_removed(&mut self, node: &D::Node) {
        self.listings.removed_nodes.push(node.clone());
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.removed.insert(node.clone());
        }
        let changed = self.desired.remove_node(node);
        self.schedule.mark_all(changed);
        let affected = self.actual.remove_node(node);
        self.schedule.mark_all(affected);
        self.status.node_gone(node);
        // Its volumes are looked at again anyway; no write will be acknowledged for it, and
        // their detaches ask for a read of their own.
        for volume in self.detaches.node_gone(node) {
            if let Some(a) = self.actual.get_mut(&volume, node) {
                a.detach.stage = DetachStage::Idle;
            }
        }
        self.status_turns.read_last.remove(node);
        self.status_turns.cache_consulted.remove(node);
        self.calls.capacity.forget_node(node);
        self.calls.machine.forget(node);
        self.calls.admission.forget_node(node);
        // Nor is any retry of its status write or verify due: a node of the same name later
        // is a new object.
        self.calls.gate.forget_where(|key| match key {
            GateKey::Status(n) | GateKey::Verify(n) | GateKey::NodeCapacity(n) => n == node,
            GateKey::Volume(_) | GateKey::Attachment(..) | GateKey::List | GateKey::StoreList => {
                false
            }
        });
    }

    /// Places `workload` on `node` using `volumes` (replacing an earlier placement), or makes
    /// it wait for what of them is not known.
    pub(crate) fn add_workload(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
    ) -> Result<(), ReconcilerError<D>> {
        let mut changed = std::mem::take(&mut self.scratch.changed_volumes);
        let added = self
            .desired
            .add_workload_into(workload, node, volumes, &mut changed);
        self.schedule.mark_all(changed.drain(..));
        self.scratch.changed_volumes = changed;
        Ok(added?)
    }

    /// The workload is gone (a no-op if unknown): its volumes are no longer needed on its node
    /// by it.
    pub(crate) fn remove_workload(&mut self, workload: &D::Workload) {
        let mut changed = std::mem::take(&mut self.scratch.changed_volumes);
        self.desired.remove_workload_into(workload, &mut changed);
        self.schedule.mark_all(changed.drain(..));
        self.scratch.changed_volumes = changed;
    }

    /// Stamps the waits of workloads that began since the last pass, and names in an event
    /// each that has waited [`Config::pending_workload_warning`].
    fn warn_pending(&mut self, now: Duration) {
        for p in self.desired.poll_pending(now) {
            let waited = now.saturating_sub(p.since.unwrap_or(now));
            warn!(workload = ?p.workload, node = ?p.node, missing = ?p.missing, ?waited, "a workload waits for a node or volumes the controller was not told of");
            self.events.push(Event::WorkloadWaiting {
                workload: p.workload,
                node: p.node,
                missing: p.missing,
                waited,
            });
        }
    }

    /// Restart recovery: the store, read fresh, lists `attached` for `node` at `revision`.
    /// Those volumes are Attached, and the list is what the store is known to hold. (Recovery
    /// takes a whole listing in at once, [`take_in_status`](Self::take_in_status); tests take
    /// in one node's.)
    #[cfg(test)]
    fn recover_status(
        &mut self,
        node: D::Node,
        attached: Vec<ReportedVolume<D>>,
        revision: Revision,
    ) {
        self.schedule
            .mark_all(attached.iter().map(|r| r.volume.clone()));
        self.take_in_status(node, attached, &revision);
    }

    /// What `recover_status` does but for marking the listed volumes: at recovery, the
    /// registered ones are marked already and the caller marks the others.
    fn take_in_status(
        &mut self,
        node: D::Node,
        attached: Vec<ReportedVolume<D>>,
        revision: &Revision,
    ) {
        self.actual.recover_reported(&node, &attached);
        self.status.read_owned(node.clone(), attached, revision);
        self.status.mark(node);
    }

    /// Restart recovery: the backend knows of this attachment. Unless the store already reported
    /// it, it becomes Uncertain (upstream 96617), so it is neither lost nor trusted.
    ///
    /// The backend's listing names a volume the store listed: noted in `store_listed`
    /// ([`StoreListed`]). One without a spec gets the backend's, and with it a place past the
    /// positions `settled` covers, so the end of recovery marks it with the unsettled ones;
    /// whether the entry leaves a volume with a spec settled is noted in `settled`
    /// ([`SettledVolumes`]).
    pub(crate) fn recover_attachment(
        &mut self,
        attachment: BackendAttachment<D>,
        store_listed: &mut StoreListed,
        settled: &mut SettledVolumes,
    ) {
        let BackendAttachment { volume, node, spec } = attachment;
        // One lookup in each table, whose entries the caller warmed in batches, answers all
        // of this entry's questions: the volume's spec and where it is wanted, its records.
        let desired = self.desired.registered_with_position(&volume);
        let entry = self.actual.volume_entry(&volume);
        let records = entry.map_or(&[][..], |(_, list)| list);
        let recorded = records.iter().any(|a| a.node == node);
        if let Some((at, _)) = entry {
            store_listed.name(at);
        }
        if let Some((at, registered)) = desired {
            // An entry the store did not list adds an Uncertain record below: not settled.
            let settled_here = recorded
                && registered.is_some_and(|(spec, wanted)| {
                    spec.attach_required && self.attached_as_wanted(&volume, records, wanted)
                });
            settled.note(at, settled_here);
        }
        if desired.is_none() {
            self.adopt_spec(&volume, spec);
        }
        if !recorded {
            // Not marked here: the record makes the volume unsettled (noted above, or
            // adopted after `settled` was sized), and the end of recovery marks every volume
            // not noted settled, in one list. A mark per entry was a million more marks to
            // sort when the store reported nothing.
            self.actual.set_uncertain(&volume, &node);
        }
    }

    /// Whether `volume`, whose records are `attached`, is attached exactly on the nodes it is
    /// `wanted` on, each attachment Attached and reported, and it is not being retired: a look
    /// at it would plan and change nothing once no call, backoff or wait is under way for it,
    /// as at a restart.
    fn attached_as_wanted(
        &self,
        volume: &D::Volume,
        attached: &[Attachment<D>],
        wanted: &[WantedOn<D>],
    ) -> bool {
        // Neither list names a node twice: as long as each other and one within the other,
        // they name the same nodes. (At a restart an Uncertain record comes only from an entry
        // the store did not list, whose volume is then not settled: this check is what keeps
        // it out, and the end of recovery marks it.)
        !attached.is_empty()
            && attached.len() == wanted.len()
            && attached.iter().all(|a| {
                a.state == AttachState::Attached
                    && !a.withheld
                    && wanted.iter().any(|w| w.node == a.node)
            })
            && (self.retiring.is_empty() || !self.retiring.contains(volume))
    }

    /// The single-node claim-only volumes `node` reports in use that no node holds on record.
    fn unrecorded_claims(&self, node: &D::Node) -> Vec<D::Volume> {
        match self.actual.node(node) {
            Some(n) => self.unheld_claims(n.in_use_unrecorded()),
            None => Vec::new(),
        }
    }

    /// Those of `volumes` that are single-node claim-only volumes no node holds on record: the
    /// only ones any evidence of a claim (a report, a placed workload) can adopt; a claim held
    /// on record outranks it (see [`adopt_claims_in_use`](Self::adopt_claims_in_use)).
    fn unheld_claims<'a>(&self, volumes: impl Iterator<Item = &'a D::Volume>) -> Vec<D::Volume>
    where
        D::Volume: 'a,
    {
        volumes
            .filter(|v| {
                self.actual.attachments(v).is_empty()
                    && self
                        .desired
                        .spec(v)
                        .is_some_and(|s| !s.attach_required && s.access == Access::SingleNode)
            })
            .cloned()
            .collect()
    }

    /// Holds `volume` as maybe claimed (Uncertain) on `node`, which may have it mounted: no
    /// other node is granted it, and it is released only as any claim is (the agent stops using
    /// it, the store settles, a fresh read agrees).
    fn adopt_claim(&mut self, volume: D::Volume, node: D::Node) {
        warn!(volume = ?volume, node = ?node, "a node may use a claim-only volume no status lists: holding it as maybe claimed there");
        self.actual.set_uncertain(&volume, &node);
        self.schedule.mark(volume);
    }

    /// Restart recovery, after both listings. A claim is recorded only in its node's status,
    /// and that status goes with a deleted node object (a node registered again starts with an
    /// empty one). So a single-node claim-only volume that no listing holds is adopted as maybe
    /// claimed on every node that may have it mounted:
    /// - each node that reports it in use;
    /// - each node with no in-use report on which a workload using it is placed;
    /// - each node the orchestrator does not list (its object is gone) on which a workload using
    ///   it is placed: the old controller kept such a claim until the node returned or was
    ///   fenced, and so does this one.
    ///
    /// One such node holds it (and is granted it if it wants it). Several wait for one another,
    /// named in a [`ClaimInDoubt`](Event::ClaimInDoubt) event, until all but one stop using it:
    /// an agent also reports what it is about to mount, so the core cannot tell which of them
    /// has it mounted.
    ///
    /// A claim that a node's status lists is a grant on record, and outranks a workload placed
    /// on a node whose object is gone: that workload is no evidence of a claim the core weighs
    /// against it, at recovery or once the grant ends (issue 66). A node without an object
    /// mounts nothing new (its agent cannot confirm its status, and no new workload reaches
    /// it), so a workload placed there since the grant stands for no mount; and a mount it
    /// might stand for predates the grant, which a controller made seeing no holder: the gap
    /// docs/design.md names under "Claims" ("What is not covered"), which this evidence cannot
    /// close.
    /// Counting it would unmount nothing: it would only keep the volume from every later
    /// holder, since a claim on a gone node is released only when the node returns or is
    /// fenced, for a workload that cannot run there. (The simulator excuses the mount such a
    /// gap leaves for as long as it lasts, across restarts.)
    fn adopt_claims_in_use(&mut self) {
        let mut holders: BTreeMap<D::Volume, Vec<D::Node>> = BTreeMap::new();
        let present: Vec<D::Node> = self
            .actual
            .nodes()
            .filter(|n| self.actual.node_present(n))
            .cloned()
            .collect();
        for node in present {
            let reports = self.actual.node(&node).is_some_and(|n| n.in_use.is_some());
            let claims = if reports {
                self.unrecorded_claims(&node)
            } else {
                // Nothing heard from its agent: what its workloads use is all there is to go by.
                self.unheld_claims(self.desired.volumes_placed_on(&node))
            };
            for volume in claims {
                holders.entry(volume).or_default().push(node.clone());
            }
        }
        let absent: Vec<(D::Node, Vec<D::Volume>)> = self
            .desired
            .placed_on_absent_nodes()
            .map(|(node, volumes)| (node.clone(), self.unheld_claims(volumes.iter())))
            .collect();
        for (node, volumes) in absent {
            for volume in volumes {
                holders.entry(volume).or_default().push(node.clone());
            }
        }
        for (volume, mut nodes) in holders {
            nodes.sort();
            nodes.dedup();
            for node in &nodes {
                self.adopt_claim(volume.clone(), node.clone());
            }
            if nodes.len() > 1 {
                self.events.push(Event::ClaimInDoubt { volume, nodes });
            }
        }
    }

    /// Takes the backend's spec for a volume the orchestrator has not registered, so that the
    /// core can detach it; as a removed volume, it is forgotten once detached, unless the
    /// orchestrator registers it meanwhile.
    ///
    /// Returns whether the volume was registered already (its spec then stays).
    fn adopt_spec(&mut self, volume: &D::Volume, spec: VolumeSpec<D::Payload>) -> bool {
        if self.desired.spec(volume).is_some() {
            return true;
        }
        self.desired.keep_spec(volume.clone(), spec);
        self.retiring.insert(volume.clone());
        false
    }

    // ---- results ------------------------------------------------------------------------------

    fn take_op(&mut self, id: OpId, given: OpKind) -> Result<InFlight<D>, ReconcilerError<D>> {
        self.take_op_relook(id, given).map(|(op, _)| op)
    }

    /// [`take_op`](Self::take_op), with whether a look at the operation's volume waits for
    /// its end ([`InFlightTable::take`]).
    fn take_op_relook(
        &mut self,
        id: OpId,
        given: OpKind,
    ) -> Result<(InFlight<D>, bool), ReconcilerError<D>> {
        self.calls
            .in_flight
            .take(id, given)
            .map_err(|actual| match actual {
                None => ReconcilerError::UnknownOperation { id },
                Some(actual) => ReconcilerError::WrongResult { id, actual, given },
            })
    }

    /// The upstream bugs switched back in: the configuration's with the `upstream-bugs`
    /// feature, else none, as a constant every bug branch folds away on.
    #[inline]
    fn bugs(&self) -> UpstreamBugs {
        #[cfg(feature = "upstream-bugs")]
        {
            self.config.upstream_bugs
        }
        #[cfg(not(feature = "upstream-bugs"))]
        {
            UpstreamBugs::NONE
        }
    }

    fn access(&self, volume: &D::Volume) -> Access {
        // A volume of unknown spec is treated as single-node: the stricter rule.
        self.desired
            .spec(volume)
            .map_or(Access::SingleNode, |s| s.access)
    }

    /// Whether an attach or detach of `volume` that concerns `node` is running, whichever
    /// access mode it was planned under.
    ///
    /// The running-operations table counts attaches and detaches per volume, and the gate
    /// holds a volume's keys only while one of them runs: one lookup by reference answers the
    /// usual case (nothing runs on the volume) where the gate's keys are owned, three clones
    /// per ask. A verify asks this of every attachment it checked: with `String` ids that was
    /// a million clones per round at a million attachments.
    fn busy(&self, volume: &D::Volume, node: &D::Node) -> bool {
        let attachment = || {
            self.calls
                .gate
                .is_running(&GateKeyRef::<D>::Attachment(volume, node))
        };
        if !self.calls.in_flight.runs_on(volume) {
            debug_assert!(
                !attachment(),
                "the gate holds an attachment's key only while its operation runs"
            );
            return false;
        }
        self.calls.in_flight.holds_volume(volume) || attachment()
    }

    /// Whether a multi-node look at `volume` (asking the gate under `key`) must wait for an
    /// attach or detach planned while the volume was single-node, which holds the volume's
    /// key instead. A volume made multi-node while its detach ran was otherwise listed in the
    /// node's status again under that detach, and could be detached twice. (The other way,
    /// narrowing, is refused while any of its operations runs.)
    fn runs_as_single_node(&self, key: &GateKeyRef<'_, D>, volume: &D::Volume) -> bool {
        matches!(key, GateKeyRef::Attachment(..)) && self.calls.in_flight.holds_volume(volume)
    }

    // A single-node volume's gate key is held by its running attach or detach in the
    // running-operations table ([`InFlightTable::holds_volume`]), which counts the volume's
    // operations anyway; the gate keeps every other key, and every key's backoff. Held in the
    // gate too, the key was cloned into a set of its own at each start and hashed out again at
    // each end (2 % of a `u32` move's instructions). The next three ask and free a key in the
    // right place.

    /// [`OperationGate::may_start`] for `key`.
    fn may_start(
        &self,
        key: &GateKeyRef<'_, D>,
        kind: OpKind,
        now: Duration,
    ) -> Result<(), Option<Duration>> {
        match key {
            GateKeyRef::Volume(volume) if self.calls.in_flight.holds_volume(volume) => Err(None),
            GateKeyRef::Volume(_) => self.calls.gate.backed_off(key, kind, now),
            _ => self.calls.gate.may_start(key, kind, now),
        }
    }

    /// Takes `key` for the attach or detach about to be recorded as running: a single-node
    /// volume's key is taken by that record.
    fn take_key(&mut self, key: &GateKeyRef<'_, D>) {
        if !matches!(key, GateKeyRef::Volume(_)) {
            self.calls.gate.start(key.to_owned());
        }
    }

    /// [`OperationGate::succeeded`] for `key`, whose operation's record is already gone.
    fn key_succeeded(&mut self, key: &GateKeyRef<'_, D>, kind: OpKind) {
        match key {
            GateKeyRef::Volume(_) => self.calls.gate.cleared(key, kind),
            _ => self.calls.gate.succeeded(key, kind),
        }
    }

    /// The record of (`volume`, `node`) is gone: nothing is attached there any more.
    fn detached(&mut self, volume: &D::Volume, node: &D::Node) {
        self.changed(volume, node);
        // A volume wanted elsewhere (a move) keeps its entry for the attach that comes next.
        // One wanted nowhere loses it, so that idle volumes hold none: the next look at a
        // volume that stops being wanted drops it (`reconcile_volume_with`).
        let keep_record = !self.desired.wanted_on(volume).is_empty();
        if let Some(gone) = self.actual.set_detached(volume, node, keep_record) {
            // The record's states leave the indexes with it.
            self.detaches
                .moved(volume, node, gone.stage, DetachStage::Idle);
            self.detaches
                .release_changed(volume, node, gone.release, Release::None);
            self.detaches.told_changed(gone.told, Told::default());
        }
        // A volume left the node: whatever full answer it gave is over, and the volumes
        // waiting for room there look again.
        if self.calls.capacity.clear_full(node) {
            self.calls
                .gate
                .succeeded(&GateKeyRef::<D>::NodeCapacity(node), OpKind::Attach);
        }
        self.room_freed(node);
    }

    // ---- one attachment's detach: each change of its state, in one place -----------------

    /// Moves the detach of (`volume`, `node`) to `to`, and its entry in the indexes with it.
    /// No record, no detach: nothing changes.
    fn move_detach(&mut self, volume: &D::Volume, node: &D::Node, to: DetachStage) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = std::mem::replace(&mut a.detach.stage, to);
            self.detaches.moved(volume, node, from, to);
        }
    }

    /// The detach's stage, `Idle` without a record.
    fn detach_stage(&self, volume: &D::Volume, node: &D::Node) -> DetachStage {
        self.actual
            .get(volume, node)
            .map_or(DetachStage::Idle, |a| a.detach.stage)
    }

    /// Sets an operator's release of (`volume`, `node`).
    fn set_release(&mut self, volume: &D::Volume, node: &D::Node, to: Release) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = std::mem::replace(&mut a.detach.release, to);
            self.detaches.release_changed(volume, node, from, to);
        }
    }

    /// Notes that a human was told `what` of this detach; returns whether it is news in this
    /// episode (and an event should go out). Without a record it is always news.
    fn tell(&mut self, volume: &D::Volume, node: &D::Node, what: Told) -> bool {
        let Some(a) = self.actual.get_mut(volume, node) else {
            return true;
        };
        let from = a.detach.told;
        let news = a.detach.told.tell(what);
        self.detaches.told_changed(from, a.detach.told);
        news
    }

    /// Forgets that a human was told `what`: the next episode tells it again.
    fn forget_told(&mut self, volume: &D::Volume, node: &D::Node, what: Told) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = a.detach.told;
            a.detach.told.forget(what);
            self.detaches.told_changed(from, a.detach.told);
        }
    }

    /// Whether the indexes of detaches are exactly what the records' states derive; `Err`
    /// names the first disagreement. Scans every record: for tests, the model check and the
    /// fuzzers (debug builds of small worlds also check it after every pass).
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn check_detach_indexes(&self) -> Result<(), String> {
        self.detaches.check(&self.actual)
    }

    /// The call planned as `id` answered `outcome`: the one way results come back.
    ///
    /// `outcome`'s variant must be the operation's kind ([`Outcome::kind`]). Refused, with
    /// nothing changed (the operation keeps waiting for its answer): an id no running
    /// operation has ([`ReconcilerError::UnknownOperation`]: already finished, or planned by
    /// another instance), or an outcome of another kind ([`ReconcilerError::WrongResult`],
    /// which names both kinds).
    ///
    /// A call whose answer is lost (its task panicked) still ends here, with
    /// [`Outcome::panicked`].
    pub fn finish(
        &mut self,
        now: Duration,
        id: OpId,
        outcome: Outcome<D>,
    ) -> Result<(), ReconcilerError<D>> {
        match outcome {
            Outcome::Attach(r) => self.attach_finished(now, id, r),
            Outcome::Detach(r) => self.detach_finished(now, id, r),
            Outcome::Verify(r) => self.verify_finished(now, id, r),
            Outcome::List(r) => self.list_finished(now, id, r),
            Outcome::WriteStatus(r) => self.status_written_with(now, id, r),
            Outcome::ReadStatus(r) => self.status_read(now, id, r),
            Outcome::ListStatuses(r) => self.statuses_listed(now, id, r),
            Outcome::CheckMachine(r) => self.machine_checked(now, id, r),
        }
    }

    /// The attach planned as `id` finished.
    fn attach_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<AttachInfo, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let (
            InFlight::Attach {
                volume,
                node,
                access,
                slot,
            },
            relook,
        ) = self.take_op_relook(id, OpKind::Attach)?
        else {
            unreachable!("kind checked by take_op");
        };
        let succeeded = result.is_ok();
        self.changed(&volume, &node);
        if slot {
            self.calls.capacity.attach_ended(&node);
        }
        self.calls.admission.finished(Class::Attach, id, succeeded);
        // The key the attach holds, from the access mode it was planned under.
        let key = gate_key_ref::<D>(access, &volume, &node);
        match result {
            Ok(info) => {
                self.key_succeeded(&key, OpKind::Attach);
                // The node took a volume: whatever full answer it gave before is over.
                if self.calls.capacity.clear_full(&node) {
                    self.calls
                        .gate
                        .succeeded(&GateKeyRef::<D>::NodeCapacity(&node), OpKind::Attach);
                }
                self.calls.capacity.stop_waiting(&node, &volume);
                self.actual
                    .set_attached(&volume, &node, info.device.as_deref());
                self.events.push(Event::AttachSucceeded {
                    volume: volume.clone(),
                    node,
                });
            }
            Err(BackendError::NodeFull { message, .. }) => {
                // The node, not the volume, is at fault: the volume may go elsewhere at once,
                // and attaches to this node back off.
                self.key_succeeded(&key, OpKind::Attach);
                if slot {
                    self.room_freed(&node);
                }
                self.calls.capacity.set_full(&node);
                let retry = self.calls.gate.failed(
                    GateKey::NodeCapacity(node.clone()),
                    OpKind::Attach,
                    now,
                );
                self.schedule.wake_volume_at(retry, volume.clone());
                self.wait_for_room(
                    &volume,
                    &node,
                    format!(
                        "the backend says the node can hold no more volumes ({message}); attaches \
                         to it back off"
                    ),
                );
            }
            Err(error) => {
                let retry = self.calls.gate.failed(key.to_owned(), OpKind::Attach, now);
                self.schedule.wake_volume_at(retry, volume.clone());
                if slot && !error.may_have_taken_effect() {
                    // Nothing was attached: the room it held is free again.
                    self.room_freed(&node);
                }
                match &error {
                    BackendError::Transient { .. } | BackendError::NodeFull { .. } => {}
                    BackendError::Uncertain { .. } => {
                        self.actual.set_uncertain(&volume, &node);
                    }
                    BackendError::AttachedElsewhere { node: other, .. } => {
                        if self.actual.state(&volume, other) == AttachState::Detached {
                            self.changed(&volume, other);
                            self.actual.set_uncertain(&volume, other);
                        }
                    }
                }
                self.events.push(Event::AttachFailed {
                    volume: volume.clone(),
                    node,
                    message: error.to_string(),
                });
            }
        }
        // A success needs a look only when one was left to it (`relook_when_done`): the
        // look that planned the attach decided everything else, and any input since marked
        // the volume itself. A failure is looked at again (its retry, what it changed).
        if relook || !succeeded {
            self.schedule.mark(volume);
        }
        Ok(())
    }

    /// The detach planned as `id` finished.
    fn detach_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<(), BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::Detach {
            volume,
            node,
            access,
            force,
        } = self.take_op(id, OpKind::Detach)?
        else {
            unreachable!("kind checked by take_op");
        };
        // Every detach's end has its volume looked at (below), asked or not: its relook flag
        // was taken with it and is not needed.
        self.changed(&volume, &node);
        self.calls
            .admission
            .finished(Class::Detach, id, result.is_ok());
        let key = gate_key_ref::<D>(access, &volume, &node);
        match result {
            Ok(()) => {
                self.key_succeeded(&key, OpKind::Detach);
                self.detached(&volume, &node);
                self.events.push(Event::DetachSucceeded {
                    volume: volume.clone(),
                    node,
                    force,
                });
            }
            Err(error) => {
                self.move_detach(&volume, &node, DetachStage::Idle);
                let retry = self.calls.gate.failed(key.to_owned(), OpKind::Detach, now);
                self.schedule.wake_volume_at(retry, volume.clone());
                if error.may_have_taken_effect() {
                    self.actual.set_uncertain(&volume, &node);
                }
                if !self.bugs().c1_lose_report_on_failed_detach {
                    // C1: the volume is still attached as far as anyone knows: report it again.
                    self.actual.set_withheld(&volume, &node, false);
                }
                self.events.push(Event::DetachFailed {
                    volume: volume.clone(),
                    node,
                    message: error.to_string(),
                });
            }
        }
        self.schedule.mark(volume);
        Ok(())
    }

    /// The verify planned as `id` finished; `attached` lists the volumes still attached.
    ///
    /// It also decides each operator's release of an attachment on the node that came before
    /// it was planned ([`Input::ReleaseVolume`]): the volume gone, the attachment is forgotten
    /// ([`Event::VolumeReleased`]); still attached, the release is dropped
    /// ([`Event::ReleaseRefused`], [`ReleaseRefusal::BackendStillAttached`]) and the detach
    /// goes ahead as any. A verify that failed (or gave no answer about the volume) decides
    /// nothing: the release stays pending, and the node is verified again after a backoff.
    fn verify_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<Vec<D::Volume>, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::Verify {
            node,
            epoch,
            checked,
        } = self.take_op(id, OpKind::Verify)?
        else {
            unreachable!("kind checked by take_op");
        };
        // The releases on the node that this verify may decide: those that came before it was
        // planned. One that came while it ran waits for the next. (Most verifies meet none: no
        // list is made then.)
        let mut releases: Vec<D::Volume> = Vec::new();
        for volume in self.detaches.releases_on(&node).to_vec() {
            match self.actual.get(&volume, &node).map(|a| a.detach.release) {
                Some(Release::Pending) => releases.push(volume),
                Some(Release::BehindVerify) => {
                    // Its wait for this verify's end is over: looked at again, it plans the
                    // verify that decides it.
                    self.set_release(&volume, &node, Release::Pending);
                    self.schedule.mark(volume);
                }
                Some(Release::None) | None => {}
            }
        }
        let mut attached = match result {
            Ok(attached) => attached,
            Err(error) if !releases.is_empty() => {
                warn!(node = ?node, %error, "verifying attachments failed; a release waits for a verify, trying again after a backoff");
                let retry =
                    self.calls
                        .gate
                        .failed(GateKey::Verify(node.clone()), OpKind::Verify, now);
                for volume in releases {
                    self.schedule.wake_volume_at(retry, volume);
                }
                return Ok(());
            }
            Err(error) => {
                self.calls
                    .gate
                    .succeeded(&GateKeyRef::<D>::Verify(&node), OpKind::Verify);
                warn!(node = ?node, %error, "verifying attachments failed; trying again next sync");
                return Ok(());
            }
        };
        self.calls
            .gate
            .succeeded(&GateKeyRef::<D>::Verify(&node), OpKind::Verify);
        // Each release this verify leaves undecided is looked at again, and plans another.
        self.schedule.mark_all(releases.iter().cloned());
        if self.actual.epoch_of(&node) != epoch {
            // The node's record was made again, or its generations renumbered, since the
            // verify listed them: its numbers may now be other records'.
            return Ok(());
        }
        // Sorted as the node's list is, then walked beside it: one compare per attachment,
        // where a search of the answer for each cost about five (each a `memcmp` of two
        // names, with text ids). An answer in the order asked (the node's) only has its order
        // confirmed by the sort.
        attached.sort();
        let mut answer = attached.iter().peekable();
        // The node's records the verify listed, unchanged since (their generation is one it
        // listed); answers about attachments that changed, are new, or are being changed are
        // ignored.
        let mut answered = Vec::new();
        let mut decided = Vec::new();
        for (volume, standing) in self.actual.standings_on(&node) {
            let still = loop {
                match answer.peek().map(|listed| (*listed).cmp(volume)) {
                    Some(Ordering::Less) => {
                        answer.next();
                    }
                    Some(Ordering::Equal) => break true,
                    Some(Ordering::Greater) | None => break false,
                }
            };
            if checked.binary_search(&standing.generation()).is_err() {
                continue;
            }
            if !releases.is_empty() && releases.contains(volume) {
                if !self.busy(volume, &node) {
                    decided.push((volume.clone(), still));
                }
                continue;
            }
            if still && standing.reported() {
                // Attached, and the backend agrees: the usual answer, decided from the node's
                // list without a lookup in the volume table.
                continue;
            }
            if !self.busy(volume, &node) {
                answered.push((volume.clone(), still));
            }
        }
        for (volume, still) in answered {
            let Some(a) = self.actual.get(&volume, &node) else {
                continue;
            };
            match (a.state, still) {
                (AttachState::Attached, false) => {
                    debug!(volume = ?volume, node = ?node, "backend says detached");
                    self.detached(&volume, &node);
                    self.schedule.mark(volume);
                }
                // "Gone" settles an Uncertain attachment: an attach or detach that errored
                // after (or without) doing its work is decided by what the backend now says
                // (issue 9, bug 3); a verify counts an attach still under way as attached.
                (AttachState::Uncertain, false) => {
                    debug!(volume = ?volume, node = ?node, "backend says an uncertain attachment is gone");
                    self.detached(&volume, &node);
                    self.schedule.mark(volume);
                }
                // "Attached" does not: a detach that timed out may still be under way and land
                // after this answer, under a mount that a settled attachment would let begin.
                // It stays Uncertain, holding the volume; an attach confirms it where a workload
                // wants it (the backend refuses that attach while the old detach is under way,
                // and runs it after), and a detach ends it where none does.
                (AttachState::Uncertain, true) => {
                    debug!(volume = ?volume, node = ?node, "backend says an uncertain attachment is there; an attach or a detach settles it");
                    self.schedule.mark(volume);
                }
                _ => {}
            }
        }
        for (volume, still) in decided {
            self.set_release(&volume, &node, Release::None);
            if still {
                // The operator's word is older than the backend's: an attach may have landed
                // since they looked. The detach goes ahead as any (forced while the node is
                // fenced), and frees the volume once the backend confirms it.
                warn!(volume = ?volume, node = ?node, "a release was dropped: the backend still lists the attachment");
                self.events.push(Event::ReleaseRefused {
                    volume: volume.clone(),
                    node: node.clone(),
                    reason: ReleaseRefusal::BackendStillAttached,
                });
            } else {
                info!(volume = ?volume, node = ?node, "forgetting a released attachment the backend no longer lists");
                self.detached(&volume, &node);
                self.events.push(Event::VolumeReleased {
                    volume: volume.clone(),
                    node: node.clone(),
                });
            }
            self.schedule.mark(volume);
        }
        Ok(())
    }

    /// The listing planned as `id` finished: `listed` is every attachment the backend knows.
    ///
    /// While the core recovers, this is its recovery listing: retried with backoff when it
    /// failed, taken in once the store's listing is in too.
    ///
    /// An attachment the core does not know of (and that no operation touched while the listing
    /// ran) is taken in as Uncertain, as at recovery: it is detached if nothing needs it, or
    /// confirmed by an attach if a workload there does. Attachments the core knows and the
    /// listing lacks are left to the per-node verify.
    fn list_finished(
        &mut self,
        now: Duration,
        id: OpId,
        listed: Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::List = self.take_op(id, OpKind::List)? else {
            unreachable!("kind checked by take_op");
        };
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.attachments = match listed {
                Ok(list) => {
                    self.calls
                        .gate
                        .succeeded(&GateKeyRef::<D>::List, OpKind::List);
                    Load::Loaded(list)
                }
                Err(error) => {
                    warn!(%error, "listing the backend's attachments for recovery failed; retrying");
                    Load::Due(self.calls.gate.failed(GateKey::List, OpKind::List, now))
                }
            };
            self.finish_recovery();
            return Ok(());
        }
        self.calls
            .gate
            .succeeded(&GateKeyRef::<D>::List, OpKind::List);
        let changed = self
            .listings
            .changed_while_listing
            .take()
            .unwrap_or_default();
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                warn!(%error, "listing the backend's attachments failed; trying again next resync");
                return Ok(());
            }
        };
        for BackendAttachment { volume, node, spec } in listed {
            if changed.contains(&(volume.clone(), node.clone()))
                || self.actual.state(&volume, &node) != AttachState::Detached
            {
                continue;
            }
            if self.busy(&volume, &node) {
                continue;
            }
            warn!(volume = ?volume, node = ?node, "the backend lists an attachment the controller did not know of");
            self.adopt_spec(&volume, spec);
            self.actual.set_uncertain(&volume, &node);
            self.schedule.mark(volume);
        }
        Ok(())
    }

    /// The status write planned as `id` finished: `Ok` with the node's new revision.
    ///
    /// A [`StoreError::Conflict`] (someone else wrote since the revision the write expected)
    /// makes the next write start with a fresh read, at once; only repeated conflicts back off.
    /// An error that may have taken effect ([`StoreError::Uncertain`], a timeout) leaves what
    /// the store holds unknown, so no detach waiting for it goes ahead until a later write or
    /// read settles it (C5); one that certainly did nothing leaves it as it was. Both back off.
    ///
    /// When the store read the node's facts with the write
    /// ([`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts)),
    /// they judge the detaches that waited for it in the next pass, instead of a fresh read.
    /// Only that pass: facts are as fresh as the write, and a later pass reads.
    fn status_written_with(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<WriteReceipt<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::WriteStatus { node, object } = self.take_op(id, OpKind::WriteStatus)? else {
            unreachable!("kind checked by take_op");
        };
        let key = GateKeyRef::<D>::Status(&node);
        if !self.status.is_object(&node, object) {
            // Written to a node object deleted since: this one's list is still unknown, and
            // the next look reads it and writes it afresh.
            debug!(node = ?node, "a status write answered for a node object deleted since");
            self.calls.gate.succeeded(&key, OpKind::WriteStatus);
            self.status.write_superseded(&node);
            self.status_settled(&node);
            return Ok(());
        }
        match result {
            Ok(WriteReceipt { revision, facts }) => {
                self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                if let Some(facts) = facts {
                    // The detaches that waited for this write are judged on its facts, which
                    // serve only the next pass: their volumes are looked at there, even if
                    // it takes only a share of a round.
                    if let Some(waiting) = self.ack_ended(&node) {
                        self.schedule.mark_all_next(waiting);
                    }
                    self.detaches.keep_written_facts(
                        node.clone(),
                        WrittenFacts {
                            facts,
                            revision: revision.clone(),
                            object,
                            at: now,
                        },
                    );
                }
                // The list the store held before: given back for a later write to fill.
                if let Some(replaced) = self.status.write_acked(&node, revision) {
                    replaced.give_back(&mut self.scratch.list_spares);
                }
            }
            Err(StoreError::NotFound { .. }) => {
                self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                self.status.not_found(&node);
            }
            Err(StoreError::Conflict { .. }) => {
                debug!(node = ?node, "status write conflicted; reading the node fresh");
                if self.status.write_conflicted(&node) >= CONFLICTS_BEFORE_BACKOFF {
                    let retry = self
                        .calls
                        .gate
                        .failed(key.to_owned(), OpKind::WriteStatus, now);
                    self.schedule.wake_node_at(retry, node.clone());
                } else {
                    self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                }
            }
            Err(error) => {
                warn!(node = ?node, %error, "writing node status failed");
                let retry = self
                    .calls
                    .gate
                    .failed(key.to_owned(), OpKind::WriteStatus, now);
                self.schedule.wake_node_at(retry, node.clone());
                self.status
                    .write_failed(&node, error.may_have_taken_effect());
            }
        }
        self.status_settled(&node);
        Ok(())
    }

    /// The fresh read of a node's status planned as `id` finished.
    ///
    /// What it shows becomes what the store is known to hold (list and revision), and it
    /// decides each detach that waited for it: a justified one is planned
    /// by the next pass; one held back (say, the node's agent still reports the volume in use)
    /// is no failure: it costs no backoff, no failure event and no status write, and is looked
    /// at again on the node's next report or after [`Config::unmount_recheck`], with one
    /// [`Event::WaitingForUnmount`] per episode. A read that failed decides nothing: the node
    /// is read again after a backoff.
    fn status_read(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<NodeStatus<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::ReadStatus {
            node,
            object,
            checks,
            from_cache,
        } = self.take_op(id, OpKind::ReadStatus)?
        else {
            unreachable!("kind checked by take_op");
        };
        let key = GateKeyRef::<D>::Status(&node);
        if from_cache {
            self.calls.gate.succeeded(&key, OpKind::ReadStatus);
            if let Ok(cached) = result {
                // `report` is in volume order already.
                let report = self.actual.report(&node);
                let seen = ReportedVolumes::from(cached.attached);
                if seen == report {
                    // The copy matches: upstream clears its "update needed" flag and writes
                    // nothing, whatever the store really holds (122413).
                    debug!(node = ?node, "C6: status write skipped on a cached copy");
                    self.status_turns.cache_consulted.remove(&node);
                    self.status
                        .read_owned(node.clone(), report.to_vec(), &cached.revision);
                }
            }
            self.status_settled(&node);
            return Ok(());
        }
        if !self.status.is_object(&node, object) {
            // Read across the deletion of the node object it was planned for: what it found
            // may be the old object's. It decides nothing.
            debug!(node = ?node, "a status read answered across its node object's deletion");
            self.calls.gate.succeeded(&key, OpKind::ReadStatus);
            // As at the deletion: their volumes are looked at again, and their detaches ask
            // for a read of their own.
            for (volume, _) in checks {
                if let DetachStage::Reading { .. } = self.detach_stage(&volume, &node) {
                    self.move_detach(&volume, &node, DetachStage::Idle);
                }
                self.schedule.mark(volume);
            }
            self.status_settled(&node);
            return Ok(());
        }
        let status = match result {
            Ok(status) => {
                self.calls.gate.succeeded(&key, OpKind::ReadStatus);
                self.status
                    .read(node.clone(), &status.attached, &status.revision);
                Some(status)
            }
            Err(StoreError::NotFound { .. }) => {
                self.calls.gate.succeeded(&key, OpKind::ReadStatus);
                self.status.not_found(&node);
                None
            }
            Err(error) => {
                warn!(node = ?node, %error, "reading node status failed");
                let retry = self
                    .calls
                    .gate
                    .failed(key.to_owned(), OpKind::ReadStatus, now);
                self.schedule.wake_node_at(retry, node.clone());
                // The detaches keep waiting for the next read, planned when the retry is due.
                for (volume, force) in checks {
                    if let DetachStage::Reading { .. } = self.detach_stage(&volume, &node) {
                        self.move_detach(&volume, &node, DetachStage::ReadWanted { force });
                    }
                }
                self.status_settled(&node);
                return Ok(());
            }
        };
        // Upstream's C5 detaches whatever the store lists.
        let rewritable =
            self.actual.node_present(&node) && !self.bugs().c5_detach_before_status_ack;
        self.detaches.read_answered(&node, now);
        for (volume, force) in checks {
            // It answers the detaches still waiting for a read: not one wanted again since,
            // or gone back to wait for the store.
            match self.detach_stage(&volume, &node) {
                DetachStage::Reading { .. } | DetachStage::ReadWanted { .. } => {
                    self.move_detach(&volume, &node, DetachStage::Idle);
                }
                _ => continue,
            }
            if rewritable
                && status
                    .as_ref()
                    .is_some_and(|s| s.attached.iter().any(|r| r.volume == volume))
            {
                // The store lists the volume for the node again (another writer): its agent
                // may start mounting it, so the read justifies nothing. The volume goes back
                // to waiting for the store to acknowledge a list without it, then a new read.
                // (A deleted node's status is never rewritten: the read's other facts decide.)
                self.schedule.mark(volume);
                continue;
            }
            match judge_detach(status.as_ref().map(Fresh::from), &volume, force) {
                Ok(()) => {
                    self.move_detach(&volume, &node, DetachStage::Cleared { force });
                    // The clearance serves only the next pass.
                    self.schedule.mark_next(volume);
                }
                Err(reason) => self.hold_back(now, &volume, &node, reason),
            }
        }
        self.detaches.read_judged(&node);
        self.status_settled(&node);
        Ok(())
    }

    /// A fresh read, or the facts a write read, did not justify the detach of `volume` from
    /// `node`: no failure (no backoff, no failure event, no status write). It is looked at
    /// again on the node's next report or after [`Config::unmount_recheck`], with one
    /// [`Event::WaitingForUnmount`] per episode.
    fn hold_back(&mut self, now: Duration, volume: &D::Volume, node: &D::Node, reason: String) {
        debug!(volume = ?volume, node = ?node, %reason, "detach held back by fresh facts");
        if self.tell(volume, node, Told::WAITING_FOR_UNMOUNT) {
            self.events.push(Event::WaitingForUnmount {
                volume: volume.clone(),
                node: node.clone(),
                reason,
            });
        }
        self.schedule.wake_volume_at(
            now.saturating_add(self.config.unmount_recheck),
            volume.clone(),
        );
    }

    /// Until when facts read at `at` (a fresh read's clearance, the facts a write read) may
    /// justify a detach: the next pass, due a reconcile period later, with
    /// [`CLEARANCE_SLACK`].
    fn fresh_until(&self, at: Duration) -> Duration {
        at.saturating_add(self.config.reconcile_period)
            .saturating_add(CLEARANCE_SLACK)
    }

    /// The judgement of the facts `node`'s last status write read, if that write was
    /// acknowledged since the last pass, not longer ago than a read's clearance lasts, and is
    /// still what the core knows the store holds (the same node object, the same revision, a
    /// list without `volume`): `None` when there are no such facts, and the detach needs a
    /// read.
    fn judge_on_written_facts(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        force: Option<ForceReason>,
    ) -> Option<Result<(), String>> {
        let written = self.detaches.written_facts(node)?;
        let current = now <= self.fresh_until(written.at)
            && self.status.is_object(node, written.object)
            && self.status.revision(node) == Some(&written.revision)
            && self.status.confirmed_absent(node, volume);
        if !current {
            return None;
        }
        Some(judge_detach(
            Some(Fresh::from(&written.facts)),
            volume,
            force,
        ))
    }

    /// The node's status call ended: the detaches that waited for the store's acknowledgement
    /// stop waiting, and are returned to be looked at again (the store may or may not have
    /// settled: the look decides).
    fn ack_ended(&mut self, node: &D::Node) -> Option<SmallVec<[D::Volume; 2]>> {
        let waiting = self.detaches.take_awaiting_ack(node)?;
        for volume in &waiting {
            if let Some(a) = self.actual.get_mut(volume, node) {
                a.detach.stage = DetachStage::Idle;
            }
        }
        Some(waiting)
    }

    /// A status write or read of `node` ended: detaches waiting for the store to settle may
    /// go now, the node may need another write, and a node removed meanwhile is forgotten.
    fn status_settled(&mut self, node: &D::Node) {
        if !self.actual.node_present(node) {
            // Removed while the call ran: nothing more is written for it.
            self.status.forget_idle(node);
        }
        if let Some(waiting) = self.ack_ended(node) {
            self.schedule.mark_all(waiting);
        }
        // A pass drops the marks of a node whose call is running, so the node is looked at
        // again now, unless nothing can have been dropped: the store holds the report at its
        // current generation (our write, just acknowledged) and no detach waits for a read.
        // That look was an empty pass at the end of every move; it also gave back the room a
        // burst's operations left, so a quiet end trims here, and at once: a pass trims only
        // once in `TRIM_EVERY_PASSES`, and none may follow.
        let quiet = !self.detaches.wants_read(node)
            && self
                .status
                .holds_report_at(node, self.actual.report_generation(node));
        if quiet {
            // Only when a burst of operations left room to give back (the trim's own rule,
            // applied to the table of running operations): a move one at a time leaves none.
            if self.calls.in_flight.has_room_to_give_back() {
                self.trim();
            }
        } else {
            self.status.mark(node.clone());
        }
    }

    /// The recovery listing of every node's status planned as `id` finished. Retried with
    /// backoff when it failed; once the backend's listing is in too, the core recovers.
    fn statuses_listed(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<Statuses<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::ListStatuses = self.take_op(id, OpKind::ListStatuses)? else {
            unreachable!("kind checked by take_op");
        };
        let load = match result {
            Ok(list) => {
                self.calls
                    .gate
                    .succeeded(&GateKeyRef::<D>::StoreList, OpKind::ListStatuses);
                Load::Loaded(list)
            }
            Err(error) => {
                warn!(%error, "listing node statuses for recovery failed; retrying");
                Load::Due(
                    self.calls
                        .gate
                        .failed(GateKey::StoreList, OpKind::ListStatuses, now),
                )
            }
        };
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.statuses = load;
        }
        self.finish_recovery();
        Ok(())
    }

    /// Takes in both recovery listings once both are loaded: the store's first, so that what
    /// a node was told it has counts as Attached, then the backend's.
    fn finish_recovery(&mut self) {
        let Some((statuses, attachments)) = self
            .listings
            .recovery
            .as_mut()
            .and_then(|r| r.take_loaded())
        else {
            return;
        };
        let removed = self
            .listings
            .recovery
            .take()
            .map(|r| r.removed)
            .unwrap_or_default();
        info!(
            nodes = statuses.len(),
            attachments = attachments.len(),
            "recovered the actual state"
        );
        // Room for every listed attachment at once: a million, taken in one by one, rehashed
        // the volume table a dozen times on the way.
        let listed = statuses.iter().map(|(_, s)| s.attached.len()).sum();
        self.actual.reserve(listed);
        for (node, status) in statuses {
            if !removed.is_empty() && removed.contains(&node) {
                // Listed before its object was deleted: the volumes it lists were attached
                // there, but what the node's status holds now is unknown, and read fresh.
                self.actual.recover_reported(&node, &status.attached);
                self.status.mark(node);
            } else {
                self.take_in_status(node, status.attached, &status.revision);
            }
        }
        // Volume marks are kept again: only what this recovery marks is looked at in the first
        // pass. Every volume the orchestrator registered (whose inputs marked nothing while
        // the core recovered) is marked below unless the backend's listing showed it settled
        // ([`SettledVolumes`]); so is every volume no one registered that a listing holds:
        // the backend's listing gives each it names a spec, and the store-listed ones it never
        // names are asked of the desired state. Which store-listed volumes it names is noted
        // as it looks each up anyway ([`StoreListed`]).
        self.schedule.keep_marks();
        let mut store_listed = StoreListed::new(self.actual.volumes_with_records());
        let mut settled = SettledVolumes::new(self.desired.volume_positions());
        // Each listed attachment looks its volume's spec and records up: batches warmed, as a
        // long pass's.
        let mut listed = attachments.into_iter();
        while listed.len() > 0 {
            let batch = || listed.as_slice().iter().take(WARM_BATCH).map(|a| &a.volume);
            self.desired.warm(batch());
            self.actual.warm(batch());
            // Most listed volumes are known, and dropped: their names' blocks are read first.
            id_warm::warm(batch());
            for a in listed.by_ref().take(WARM_BATCH) {
                self.recover_attachment(a, &mut store_listed, &mut settled);
            }
        }
        // Every volume with a spec the listing did not show settled: registered ones, those
        // whose spec is kept only to detach them, and those no one registered whose spec the
        // backend's listing gave (past the positions `settled` covers). In the volume table's
        // order, not sorted whole before the first pass of the round they make
        // ([`Schedule::mark_distinct`]).
        let mut unsettled: Vec<D::Volume> = (self.desired.volumes_by_position().enumerate())
            .filter(|(at, _)| !settled.is_settled(*at))
            .map(|(_, volume)| volume.clone())
            .collect();
        // And the store-listed volumes the backend never named, if any: asked of the desired
        // state now, and marked if no one registered them (they have no spec, so they are not
        // among the above).
        if !store_listed.all_named() {
            let unnamed = (self.actual.volumes_by_position().enumerate())
                .filter(|(at, _)| store_listed.unnamed(*at))
                .map(|(_, volume)| volume)
                .filter(|volume| self.desired.spec(volume).is_none());
            unsettled.extend(unnamed.cloned());
        }
        self.schedule.mark_distinct(unsettled);
        self.adopt_claims_in_use();
        // What inputs taken while recovering changed is among what was marked above: a volume
        // they left wanted elsewhere, or wanted nowhere, is not settled.
    }

    // ---- planning -----------------------------------------------------------------------------

    /// When [`poll`](Self::poll) next has work, or `None` when nothing can happen until an input
    /// arrives. A driver sleeps until then.
    pub fn next_deadline(&self) -> Option<Duration> {
        if let Some(recovery) = &self.listings.recovery {
            // Only the recovery listings, and their retries, until both are in.
            return recovery.wake_at();
        }
        earliest([self.next_pass(), self.next_verify_slice()])
    }

    /// When the next reconcile pass is due: at least a reconcile period after the last, or at
    /// once while a round of marks is under way ([`Config::volumes_per_pass`]).
    fn next_pass(&self) -> Option<Duration> {
        let has_work = self.status.has_dirty() || self.actual.has_report_changes();
        self.schedule.next_deadline(
            has_work,
            !self.actual.is_empty(),
            self.desired.node_count() > 0,
            || {
                earliest([
                    self.desired.next_pending_wake(),
                    self.calls.admission.wake(),
                    self.calls.machine.next_wake(),
                ])
            },
            self.config.reconcile_period,
        )
    }

    /// When the verify round under way takes its next slice. Not held to the reconcile
    /// period: between two passes a poll plans just the slice ([`MIN_VERIFY_SLICE_GAP`]).
    /// Nothing to verify once nothing is attached (as the round's start).
    fn next_verify_slice(&self) -> Option<Duration> {
        self.listings
            .verify_round
            .filter(|_| !self.actual.is_empty())
            .map(|round| round.next_at())
    }

    /// Runs a reconcile pass if one is due at `now` and returns the operations to start.
    /// Between two passes (at least [`Config::reconcile_period`] apart) a poll may also plan
    /// just the periodic verify's next slice, which is paced on its own
    /// ([`Config::verify_batch`]). A pass looks at [`Config::volumes_per_pass`] marked
    /// volumes at most; the rest of a larger set makes the next passes, due at once (so
    /// [`next_deadline`](Self::next_deadline) is `now` again after such a pass).
    /// [`poll_into`](Self::poll_into) does the same into a buffer the caller keeps.
    pub fn poll(&mut self, now: Duration) -> Vec<Operation<D>> {
        let mut ops = Vec::new();
        self.poll_into(now, &mut ops);
        ops
    }

    /// Runs a reconcile pass if one is due at `now` and appends the operations to start to
    /// `ops`. A driver that drains `ops` and hands it back each time allocates no list per
    /// pass. (It should drop the list once a burst has grown it past a few hundred
    /// operations, as [`drain_events_into`](Self::drain_events_into) does with its own: a
    /// start-up's million attaches would otherwise stay allocated for good.)
    ///
    /// ```
    /// use std::time::Duration;
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Operation, Reconciler};
    /// let mut core = Reconciler::<Ids<&str, &str, &str>>::new(Config::default());
    /// let mut ops = Vec::new();
    /// core.poll_into(Duration::ZERO, &mut ops);
    /// // A new core first lists the store and the backend.
    /// assert_eq!(ops.len(), 2);
    /// assert!(matches!(ops[0], Operation::ListStatuses { .. } | Operation::ListAttachments { .. }));
    /// ```
    pub fn poll_into(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let due = |at: Option<Duration>| at.is_some_and(|at| at <= now);
        if let Some(recovery) = &self.listings.recovery {
            if due(recovery.wake_at()) {
                self.plan_recovery(now, ops);
            }
            return;
        }
        if !due(self.next_pass()) {
            // Between two passes a verify slice may be due: it is planned alone, and the next
            // pass still comes a reconcile period after the last.
            if due(self.next_verify_slice()) {
                self.plan_verify_slice(ops);
            }
            return;
        }
        self.scratch.passes_since_trim += 1;
        if self.scratch.passes_since_trim >= TRIM_EVERY_PASSES {
            self.trim();
        }
        let managing = self.desired.node_count() > 0;
        let (nodes, due) = self.schedule.start_pass(
            now,
            self.config.sync_period,
            self.config.resync_period,
            managing,
        );
        for node in nodes {
            self.status.mark(node);
        }
        self.warn_pending(now);
        if due.sync {
            self.calls.gate.forget_stale(now);
            self.start_verify_round(now);
            self.report_stuck(now);
        }
        if self
            .listings
            .verify_round
            .is_some_and(|round| round.next_at() <= now)
        {
            self.plan_verify_slice(ops);
        }
        if due.resync {
            self.plan_list(ops);
        }
        let mut dirty = self.schedule.take_dirty(self.config.volumes_per_pass);
        // Queued attaches and detaches first, in their order, while capacity lasts.
        self.admit_queued(now, &mut dirty, ops);
        self.reconcile_volumes(now, &mut dirty, ops);
        self.schedule.recycle_dirty(dirty);
        let mut changed = self.actual.take_report_changed();
        if !changed.is_empty() {
            // (A drain is dropped with a call when ids own something, empty or not.)
            self.status.mark_all(changed.drain(..));
        }
        self.actual.recycle_report_changed(changed);
        // The status writes wait for the round's last pass: a node's volumes are spread over
        // the round, and a write after each pass would write the node once per pass that
        // reached one of them.
        if !self.schedule.in_round() {
            self.plan_status(now, ops);
        }
        self.plan_machine_checks(now, ops);
        // A clearance is for the pass right after its read: one this pass did not use (the
        // detach was no longer wanted, or had to wait) is stale by the next. So are the facts
        // a write read.
        if self.detaches.has_fresh_facts() {
            for (volume, node) in self.detaches.lapse() {
                if let Some(a) = self.actual.get_mut(&volume, &node) {
                    a.detach.stage = DetachStage::Idle;
                }
            }
        }
        #[cfg(debug_assertions)]
        if self.actual.len() <= DEBUG_CHECK_UP_TO {
            if let Err(disagreement) = self.detaches.check(&self.actual) {
                panic!("detach indexes disagree with the records: {disagreement}");
            }
        }
        self.release_idle_slots();
    }

    /// Gives back what a past burst left allocated: the tables of running operations and the
    /// timer heaps keep their peak capacity otherwise (at 150,000 attachments, a start-up burst
    /// of attaches left about 95 bytes per attachment behind).
    fn trim(&mut self) {
        self.scratch.passes_since_trim = 0;
        self.schedule.trim();
        self.desired.trim();
        self.detaches.trim();
        self.calls.in_flight.trim();
        trim_set(&mut self.status_turns.read_last);
        self.calls.gate.trim();
        self.calls.capacity.trim();
        self.calls.admission.trim();
    }

    fn next_op_id(&mut self) -> OpId {
        self.calls.next_id += 1;
        OpId(self.calls.next_id)
    }

    /// Reconciles each of `volumes`, and empties the list. A long list (a restart's first pass,
    /// a resync, a dead node's volumes) is taken in batches whose desired and actual records
    /// are first looked up together ([`DenseTable::warm`](crate::core::tables::dense_table::DenseTable::warm)):
    /// at a million volumes the first pass after a restart spent most of its time waiting on
    /// those lookups' cache misses one at a time. A short list (a move's) is not worth the
    /// second lookup. A batch's ids are dropped once it is done, their names' blocks read with
    /// the lookups ([`id_warm`](crate::core::tables::id_warm)): dropped at the end of the pass, each was a
    /// cache miss of its own again.
    fn reconcile_volumes(
        &mut self,
        now: Duration,
        volumes: &mut Vec<D::Volume>,
        ops: &mut Vec<Operation<D>>,
    ) {
        if volumes.is_empty() {
            // A pass with nothing marked: no drain to drop.
            return;
        }
        // A long pass reads its volumes' records ahead in batches. In a state larger than the
        // caches a short one does too, and its volumes' nodes' records, which it would reach
        // one miss after another. (A long pass's volumes share their nodes: read ahead for
        // each volume, a controller's batches of moves at 150,000 attachments ran about 5 %
        // slower.)
        let short = volumes.len() < WARM_FROM;
        let nodes_too = short && self.actual.len() >= WARM_STATE_FROM;
        let warm = nodes_too || !short;
        // Unwarmed, the whole list is one batch.
        let batch = if warm { WARM_BATCH } else { usize::MAX };
        let mut rest = volumes.drain(..);
        while rest.len() > 0 {
            if warm {
                let next = || rest.as_slice().iter().take(batch);
                self.desired.warm(next());
                self.actual.warm(next());
                id_warm::warm(next());
                if nodes_too {
                    self.warm_nodes_of(next());
                }
            }
            for volume in rest.by_ref().take(batch) {
                self.reconcile_volume(now, &volume, ops);
            }
        }
    }

    /// Reads the records of the nodes `volumes` are attached to or wanted on, which their
    /// reconcile reaches next (the node's attachments, searched for each detach and attach,
    /// and the list the store holds, compared before the node's status write): at a million
    /// attachments each is a cache miss, and a pass of a few volumes reached them one after
    /// another. A simulated cache (callgrind, `u32` ids) counted 47 misses of the
    /// second-level cache a move at a million, a third of them in these.
    fn warm_nodes_of<'a>(&self, volumes: impl Iterator<Item = &'a D::Volume>)
    where
        D: 'a,
    {
        for volume in volumes {
            let attached = self.actual.attachments(volume).iter().map(|a| &a.node);
            let wanted = self.desired.wanted_on(volume).iter().map(|w| &w.node);
            for node in attached.chain(wanted) {
                self.actual.warm_node(node);
                self.status.warm_node(node);
            }
        }
    }

    fn reconcile_volume(&mut self, now: Duration, volume: &D::Volume, ops: &mut Vec<Operation<D>>) {
        // The two lists of nodes are the core's own, kept between calls: collected afresh on
        // each of the five calls a move makes, they cost about a twentieth of the move.
        let mut lists = std::mem::take(&mut self.scratch.node_lists);
        self.reconcile_volume_with(now, volume, &mut lists, ops);
        lists.clear();
        // What took the lists' place during the look never had room.
        let NodeLists { wanted, attached } = std::mem::replace(&mut self.scratch.node_lists, lists);
        crate::core::tables::marks::drop_list(wanted);
        crate::core::tables::marks::drop_list(attached);
    }

    fn reconcile_volume_with(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        NodeLists { wanted, attached }: &mut NodeLists<D>,
        ops: &mut Vec<Operation<D>>,
    ) {
        // What an operation already running on the volume changes is decided at its end.
        self.calls.in_flight.relook_when_done(volume);
        // Both lists are filled last node first and taken from the end (below), so that each
        // node's copy can be handed on in order, to be kept where the decision keeps one (the
        // operation it plans, the wait it starts): a clone fewer for each.
        attached.extend(
            self.actual
                .attachments(volume)
                .iter()
                .rev()
                .map(|a| a.node.clone()),
        );
        // The spec and the nodes it is wanted on, in one lookup: nothing below changes them.
        let Some(spec) = self
            .desired
            .spec_and_wanted(volume)
            .map(|(at, (spec, on))| {
                wanted.extend(on.iter().rev().map(|w| w.node.clone()));
                SpecFacts {
                    access: spec.access,
                    attach_required: spec.attach_required,
                    at,
                }
            })
        else {
            // Only the store reported it (at recovery), and neither the orchestrator nor the
            // backend knows it: without its payload the core cannot detach it.
            for node in attached.iter().rev() {
                warn!(volume = ?volume, node = ?node, "attached volume has no spec; register it with set_volume");
                self.report_blocked(volume, node, UNREGISTERED);
            }
            return;
        };
        // Detach pass first, so that a freed single-node volume can move in the same pass.
        while let Some(node) = attached.pop() {
            if !wanted.contains(&node) {
                self.consider_detach(now, volume, node, spec, ops);
            }
        }
        self.calls
            .capacity
            .forget_unwanted(volume, |node| wanted.contains(node));
        if wanted.is_empty() {
            // Wanted nowhere: an entry its last detach kept for an attach that no longer
            // comes is dropped (`detached`).
            self.actual.forget_volume(volume);
        }
        while let Some(node) = wanted.pop() {
            self.consider_attach(now, volume, node, spec, ops);
        }
        if self.retiring.contains(volume)
            && self.actual.attachments(volume).is_empty()
            && !self.calls.in_flight.runs_on(volume)
        {
            // Removed and no longer attached anywhere: forget it, backoff included.
            self.retiring.remove(volume);
            self.desired.forget_volume(volume);
            self.calls.gate.forget_where(|key| match key {
                GateKey::Volume(v) | GateKey::Attachment(v, _) => v == volume,
                GateKey::Status(_)
                | GateKey::Verify(_)
                | GateKey::List
                | GateKey::StoreList
                | GateKey::NodeCapacity(_) => false,
            });
        }
    }

    /// Gathers what the core knows about a detach of (`volume`, `node`), decides it
    /// ([`decide_detach`]) and moves the detach on by one step.
    fn consider_detach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: D::Node,
        spec: SpecFacts,
        ops: &mut Vec<Operation<D>>,
    ) {
        let released = self.detaches.has_releases()
            && (self.actual.get(volume, &node)).is_some_and(|a| a.detach.release != Release::None);
        if released && spec.attach_required {
            // Forgetting an attachment is irreversible: a verify of the node started after
            // the release decides it, not this look.
            return self.await_release_verify(now, volume, &node, ops);
        }
        let key = gate_key_ref::<D>(spec.access, volume, &node);
        let gate = if self.runs_as_single_node(&key, volume) {
            Err(None)
        } else {
            self.may_start(&key, OpKind::Detach, now)
        };
        match gate {
            Ok(()) => {}
            // Its end has the volume looked at again: a detach's always, and an attach's
            // because this look, begun while it ran, asked for it (`reconcile_volume_with`).
            // (Attaches are planned after detaches, so none was planned by this look.)
            Err(None) => return,
            // A released attachment makes no call: the failing detach's backoff is moot.
            Err(Some(_)) if released => {}
            Err(Some(retry)) => return self.schedule.wake_volume_at(retry, volume.clone()),
        }
        let Some((facts, reported)) = self.detach_facts(now, volume, &node) else {
            return;
        };
        let decision = decide_detach(&facts);
        let (Detach::Wait { wake } | Detach::Blocked { wake, .. } | Detach::Go { wake, .. }) =
            decision;
        if let Some(at) = wake {
            self.schedule.wake_volume_at(at, volume.clone());
        }
        let (force, step) = match decision {
            Detach::Wait { .. } => return,
            Detach::Blocked { reason, .. } => return self.report_blocked(volume, &node, reason),
            Detach::Go { force, step, .. } => (force, step),
        };
        if reported {
            // C5: first make the node stop listing it, so its agent does not start mounting it.
            self.actual.set_withheld(volume, &node, true);
        }
        match step {
            // Something certain ends the wait: marking the node makes the next status pass
            // write it (the list now differs from what the store holds or is unknown), or a
            // write already in flight is acknowledged, or a failed write's retry timer fires.
            // An attach that landed after its workload left is never listed in the store, so
            // it needs no write at all and is settled at once (issue 9, bug 1).
            Step::AwaitStore => {
                self.status.mark(node.clone());
                self.move_detach(volume, &node, DetachStage::AwaitingAck);
            }
            Step::ReadNode => self.read_node_for(now, volume, node, spec, force, released, ops),
            Step::Detach => self.plan_detach(now, volume, node, spec, force, released, ops),
        }
    }

    /// What [`decide_detach`] needs of (`volume`, `node`), and whether the node reports the
    /// volume now; `None` without a record. Takes the record's clearance, which serves this
    /// look only.
    fn detach_facts(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<(DetachFacts, bool)> {
        let bugs = self.bugs();
        let a = self.actual.get(volume, node)?;
        let reported = a.is_reported();
        let progress = a.detach;
        #[cfg(feature = "upstream-bugs")]
        let sticky_mount = bugs.c4_sticky_assumed_mount && a.assumed_mounted;
        #[cfg(not(feature = "upstream-bugs"))]
        let sticky_mount = false;
        let clearance = match progress.stage {
            DetachStage::Cleared { force } => {
                let at = self.detaches.cleared_at(node).unwrap_or(now);
                self.move_detach(volume, node, DetachStage::Idle);
                Some((force, self.fresh_until(at)))
            }
            _ => None,
        };
        let unmount_deadline = self
            .actual
            .request_detach(volume, node, now)
            .saturating_add(self.config.max_wait_for_unmount);
        let node_facts = self.actual.node(node);
        let present = node_facts.is_some_and(|n| n.present);
        let held_back = progress.told.has(Told::WAITING_FOR_UNMOUNT);
        let facts = DetachFacts {
            now,
            unmount_deadline,
            present,
            healthy: node_facts.is_some_and(|n| n.healthy),
            fenced: node_facts.is_some_and(|n| n.fenced),
            in_use: node_facts.and_then(|n| n.reports_in_use(volume)),
            force_allowed: self.config.force_detach_on_timeout || bugs.c3_force_detach_unfenced,
            deleted_node_is_fenced: self.config.deleted_node_is_fenced,
            machine_off: machine::held_detach(
                &mut self.calls.machine,
                self.config.machine_fencing.as_ref(),
                now,
                (volume, node),
                node_facts,
                held_back,
            ),
            machine_fencing: self.config.machine_fencing.is_some(),
            held_back,
            sticky_mount,
            store_settled: bugs.c5_detach_before_status_ack || !present || {
                let (missing, absent) = self.status.missing_and_absent(node, volume);
                // L1, our own leak put back: a volume never listed waits for a write anyway.
                missing || ((reported || !bugs.l1_await_unplanned_ack) && absent)
            },
            clearance,
        };
        Some((facts, reported))
    }

    /// The store settled and the detach needs fresh facts: the facts the node's last status
    /// write read, if they are current, else a fresh read of the node, planned by its next
    /// status pass.
    #[allow(clippy::too_many_arguments)]
    fn read_node_for(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: D::Node,
        spec: SpecFacts,
        force: Option<ForceReason>,
        released: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        // No longer waiting for the store's acknowledgement.
        if self.detach_stage(volume, &node) == DetachStage::AwaitingAck {
            self.move_detach(volume, &node, DetachStage::Idle);
        }
        // A claim makes no backend call: backend load does not hold it back.
        if spec.attach_required
            && !self
                .calls
                .admission
                .admit(Class::Detach, volume, &node, now)
        {
            // Queued: a pass admits it to its read when its turn comes.
            return;
        }
        match self.judge_on_written_facts(now, volume, &node, force) {
            // The write that took the volume off the node's list read the facts: they justify
            // the detach as a read after it would, and it goes in this pass.
            Some(Ok(())) => self.plan_detach(now, volume, node, spec, force, released, ops),
            Some(Err(reason)) => self.hold_back(now, volume, &node, reason),
            None => {
                // Nothing irreversible on a view of unknown age: the node's next status pass
                // plans the read (this pass, if nothing runs for the node).
                self.status.mark(node.clone());
                self.move_detach(volume, &node, DetachStage::ReadWanted { force });
            }
        }
    }

    /// Fresh facts justified the detach (forced for `force`): plans its call, or releases a
    /// claim, or forgets a released claim.
    #[allow(clippy::too_many_arguments)]
    fn plan_detach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        owned: D::Node,
        spec: SpecFacts,
        force: Option<ForceReason>,
        released: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        let node = &owned;
        if self.detach_stage(volume, node) == DetachStage::AwaitingAck {
            self.move_detach(volume, node, DetachStage::Idle);
        }
        if spec.attach_required && !self.calls.admission.call_detach(volume, node, now) {
            // Its read began before an earlier episode of it ended: queued, it reads again.
            return;
        }
        self.forget_told(volume, node, Told::BLOCKED);
        self.forget_told(volume, node, Told::WAITING_FOR_UNMOUNT);
        if released {
            // A claim's (an attachment's release is decided by a verify, above).
            self.set_release(volume, node, Release::None);
            if force == Some(ForceReason::OutOfService) {
                // The operator vouched the node no longer uses it, and a fresh read just
                // showed the node still fenced: the backend knows nothing of a claim, so
                // forget it, with no call.
                info!(volume = ?volume, node = ?node, "forgetting a released claim");
                self.detached(volume, node);
                self.events.push(Event::VolumeReleased {
                    volume: volume.clone(),
                    node: node.clone(),
                });
                self.schedule.mark(volume.clone());
                return;
            }
            // The node is no longer fenced: the release is void, and the detach goes as any.
        }
        if !spec.attach_required {
            // A claim is released, not detached: the same proofs (the node's list acknowledged
            // without it, a fresh read justifying it), and no backend call.
            debug!(volume = ?volume, node = ?node, ?force, "releasing a claim-only volume");
            self.detached(volume, node);
            self.events.push(Event::ClaimReleased {
                volume: volume.clone(),
                node: node.clone(),
                force,
            });
            self.schedule.mark(volume.clone());
            return;
        }
        let Some(payload) = self.payload_for_call(volume, spec.at) else {
            // Not reached (see `payload_for_call`); handled as `reconcile_volume` handles a
            // volume with no spec, with the detach slot given back.
            self.calls.admission.give_back(Class::Detach);
            return self.report_blocked(volume, node, UNREGISTERED);
        };
        let key = gate_key_ref::<D>(spec.access, volume, node);
        self.take_key(&key);
        let id = self.next_op_id();
        self.calls.admission.started(Class::Detach, id, node, now);
        debug!(%id, volume = ?volume, node = ?node, ?force, "planning detach");
        self.move_detach(volume, node, DetachStage::Detaching);
        self.calls.in_flight.insert(
            id,
            InFlight::Detach {
                volume: volume.clone(),
                node: node.clone(),
                access: spec.access,
                force,
            },
        );
        ops.push(Operation::Detach {
            id,
            volume: volume.clone(),
            node: owned,
            payload,
            force,
        });
    }

    /// An operator's release of (`volume`, `node`) is pending: a verify of the node planned
    /// after it decides it ([`verify_finished`](Self::verify_finished)): gone, the attachment
    /// is forgotten; still there, the release is dropped and the detach goes as any. This
    /// plans that verify unless one runs (its end looks at the volume again) or a failed one
    /// backs off (the volume wakes when it ends). No detach is planned meanwhile. The wait is
    /// listed by [`stuck_detaches`](Self::stuck_detaches); on a node the backend cannot reach
    /// it lasts as long as that.
    fn await_release_verify(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        ops: &mut Vec<Operation<D>>,
    ) {
        // The detach is wanted, whatever decides it: its wait counts from now at the latest.
        self.actual.request_detach(volume, node, now);
        match self
            .calls
            .gate
            .may_start(&GateKeyRef::<D>::Verify(node), OpKind::Verify, now)
        {
            Ok(()) => self.plan_verify(node.clone(), ops),
            Err(None) => {}
            Err(Some(retry)) => self.schedule.wake_volume_at(retry, volume.clone()),
        }
    }

    /// A copy of `volume`'s payload, for a call about to be planned. `reconcile_volume` found
    /// the volume's spec at the start of the same look, at position `at`, and only its own end
    /// forgets a spec, so this finds it (there, unless an entry moved).
    fn payload_for_call(&self, volume: &D::Volume, at: usize) -> Option<D::Payload> {
        let payload = (self.desired.spec_at(at, volume)).map(|spec| spec.payload.clone());
        debug_assert!(payload.is_some(), "a volume decided on has a spec");
        payload
    }

    /// Drops what a detach of (`volume`, `node`) waited on: a pending fresh read, a
    /// clearance, a reported hold-back. A read already running for it decides nothing for it
    /// any more (it answers only detaches still reading or wanting a read).
    fn forget_detach_checks(&mut self, volume: &D::Volume, node: &D::Node) {
        if let DetachStage::ReadWanted { .. } | DetachStage::Cleared { .. } =
            self.detach_stage(volume, node)
        {
            self.move_detach(volume, node, DetachStage::Idle);
        }
        self.forget_told(volume, node, Told::WAITING_FOR_UNMOUNT);
    }

    /// Tells a human, once per episode, that a detach waits for something only they can do.
    fn report_blocked(&mut self, volume: &D::Volume, node: &D::Node, reason: &str) {
        if self.tell(volume, node, Told::BLOCKED) {
            self.events.push(Event::DetachBlocked {
                volume: volume.clone(),
                node: node.clone(),
                reason: reason.to_string(),
            });
        }
    }

    /// Gathers what the core knows about an attach of (`volume`, `node`), decides it
    /// ([`decide_attach`]) and applies the decision.
    fn consider_attach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        owned: D::Node,
        spec: SpecFacts,
        ops: &mut Vec<Operation<D>>,
    ) {
        let node = &owned;
        let key = gate_key_ref::<D>(spec.access, volume, node);
        let bugs = self.bugs();
        let single_node = spec.access == Access::SingleNode;
        // The volume's records, looked up once: this node's, and for a single-node volume not
        // attached here yet, the others' (nothing below changes them before the decision).
        let list = self.actual.attachments(volume);
        let here = list
            .iter()
            .find(|a| a.node == *node)
            .map(|a| (a.state, a.withheld, a.detach));
        let attached_here = here.is_some_and(|(state, ..)| state == AttachState::Attached);
        let elsewhere = if single_node && !attached_here {
            list.iter()
                .filter(|a| a.node != *node)
                .map(|a| (a.node.clone(), a.state))
                .collect()
        } else {
            SmallVec::new()
        };
        if let Some((.., progress)) = here {
            // Needed again: a later detach starts a new unmount wait, and a new episode.
            self.actual.cancel_detach_request(volume, node);
            if progress != DetachProgress::default() {
                self.forget_detach_checks(volume, node);
                self.set_release(volume, node, Release::None);
                self.forget_told(volume, node, Told::STUCK);
                self.forget_told(volume, node, Told::BLOCKED);
            }
        }
        let widened = self.runs_as_single_node(&key, volume);
        let gate = if widened {
            Err(None)
        } else {
            self.may_start(&key, OpKind::Attach, now)
        };
        let facts = AttachFacts {
            here: here.map(|(state, ..)| state),
            withheld: here.is_some_and(|(_, withheld, _)| withheld),
            // The gate answers "wait" (no retry time) exactly when an operation on the key runs.
            running: gate == Err(None),
            gate,
            single_node,
            elsewhere,
            lose_report: bugs.c1_lose_report_on_failed_detach,
            ignore_uncertain: bugs.c2_ignore_uncertain_holder,
        };
        if facts.running {
            // Whatever waits on it (a report again, an attach here) is decided at its end.
            self.calls.in_flight.relook_when_done(volume);
        }
        match decide_attach(&facts) {
            Attach::Attached { report_again } => {
                if report_again {
                    self.actual.set_withheld(volume, node, false);
                }
            }
            Attach::Running => {}
            Attach::RetryAt(retry) => self.schedule.wake_volume_at(retry, volume.clone()),
            Attach::HeldBy(holders) => self.report_multi_attach(volume, node, holders),
            Attach::Go if !spec.attach_required => {
                // Claimed, not attached: no backend call. The grant is what an attach's
                // success would be; the node lists the volume, and its agent may use it.
                debug!(volume = ?volume, node = ?node, "granting a claim-only volume");
                self.changed(volume, node);
                self.actual.set_attached(volume, node, None);
                self.events.push(Event::ClaimGranted {
                    volume: volume.clone(),
                    node: owned,
                });
            }
            Attach::Go => {
                // A volume with no record here takes room on the node; an Uncertain one
                // already holds it.
                let slot = here.is_none();
                debug_assert!(spec.attach_required);
                if slot {
                    if let Some(reason) = self.no_room(now, volume, node) {
                        return self.wait_for_room(volume, node, reason);
                    }
                }
                if !self.calls.admission.admit(Class::Attach, volume, node, now) {
                    // Queued: a pass offers it capacity when its turn comes.
                    return;
                }
                let Some(payload) = self.payload_for_call(volume, spec.at) else {
                    // Not reached (see `payload_for_call`); the attach slot is given back.
                    self.calls.admission.give_back(Class::Attach);
                    return;
                };
                if slot {
                    self.calls.capacity.attach_started(node);
                } else {
                    self.actual.attach_planned(volume, node);
                }
                self.take_key(&key);
                let id = self.next_op_id();
                self.calls.admission.started(Class::Attach, id, node, now);
                debug!(%id, volume = ?volume, node = ?node, "planning attach");
                self.calls.in_flight.insert(
                    id,
                    InFlight::Attach {
                        volume: volume.clone(),
                        node: node.clone(),
                        access: spec.access,
                        slot,
                    },
                );
                ops.push(Operation::Attach {
                    id,
                    volume: volume.clone(),
                    node: owned,
                    payload,
                });
            }
        }
    }

    /// How many attachments `node` holds or is being given that count against its limit:
    /// attached, maybe attached (Uncertain, a detach under way included) and attaching.
    fn occupied(&self, node: &D::Node) -> u32 {
        let held = self
            .actual
            .volumes_on(node)
            .filter(|v| self.desired.spec(v).is_none_or(|s| s.attach_required))
            .count();
        u32::try_from(held)
            .unwrap_or(u32::MAX)
            .saturating_add(self.calls.capacity.attaching(node))
    }

    /// Why an attach of a volume not yet on `node` must wait for room there, if it must: the
    /// node is at its limit, or the backend said it is full and attaches to it back off (the
    /// volume then wakes when the backoff ends).
    fn no_room(&mut self, now: Duration, volume: &D::Volume, node: &D::Node) -> Option<String> {
        // Only a node the backend said is full has a backoff to look at (no key built else).
        let backoff = if self.calls.capacity.said_full(node) {
            self.calls
                .gate
                .may_start(&GateKeyRef::<D>::NodeCapacity(node), OpKind::Attach, now)
        } else {
            Ok(())
        };
        if let Err(Some(retry)) = backoff {
            self.schedule.wake_volume_at(retry, volume.clone());
            return Some(
                "the backend said the node can hold no more volumes; attaches to it back off"
                    .to_string(),
            );
        }
        let limit = self.actual.node(node).and_then(|n| n.attach_limit)?;
        let held = self.occupied(node);
        (held >= limit).then(|| {
            format!(
                "the node holds {held} volumes (attached, maybe attached or being attached) of \
                 its limit of {limit}; the attach waits until one leaves"
            )
        })
    }

    /// `volume` waits for room on `node`: named in a [`Event::NodeFull`] once per wait (again when a workload joins it), and
    /// looked at again when an attachment there ends, an attach to it fails, the node's limit
    /// changes, or the node's backoff ends.
    fn wait_for_room(&mut self, volume: &D::Volume, node: &D::Node, reason: String) {
        let workloads = self
            .desired
            .wanted_on(volume)
            .iter()
            .find(|w| w.node == *node)
            .map(|w| w.workloads.to_vec())
            .unwrap_or_default();
        if !self.calls.capacity.wait(node, volume, &workloads) {
            return;
        }
        debug!(volume = ?volume, node = ?node, %reason, "attach waits for room on the node");
        self.events.push(Event::NodeFull {
            node: node.clone(),
            volume: volume.clone(),
            workloads,
            reason,
        });
    }

    /// An attachment on `node` ended, or an attach to it failed, or its limit changed: the
    /// volumes waiting for room there (and still wanted there) look again.
    fn room_freed(&mut self, node: &D::Node) {
        let (desired, actual) = (&self.desired, &self.actual);
        self.calls.capacity.retain(node, |v| {
            desired.is_desired(v, node) && actual.get(v, node).is_none()
        });
        let waiting = self.calls.capacity.waiting(node);
        self.schedule.mark_all(waiting);
    }

    fn report_multi_attach(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        holders: SmallVec<[D::Node; 1]>,
    ) {
        let wanted = self.desired.wanted_on(volume);
        let Some(waiting) = wanted.iter().find(|w| w.node == *node) else {
            return;
        };
        if waiting.multi_attach_reported {
            return;
        }
        let holders = holders
            .into_iter()
            .map(|h| Holder {
                workloads: wanted
                    .iter()
                    .find(|w| w.node == h)
                    .map(|w| w.workloads.to_vec())
                    .unwrap_or_default(),
                node: h,
            })
            .collect();
        self.events.push(Event::MultiAttach {
            volume: volume.clone(),
            node: node.clone(),
            workloads: waiting.workloads.to_vec(),
            holders,
        });
        self.desired.set_multi_attach_reported(volume, node, true);
    }

    /// Names, once per episode, every detach wanted for [`Config::stuck_after`] or longer and
    /// not done; looked at on each periodic sync.
    fn report_stuck(&mut self, now: Duration) {
        let stuck_after = self.config.stuck_after;
        let stuck = self.stuck_detaches(now);
        for s in stuck.into_iter().filter(|s| s.waited >= stuck_after) {
            if self.tell(&s.volume, &s.node, Told::STUCK) {
                warn!(volume = ?s.volume, node = ?s.node, waited = ?s.waited, "a detach is stuck");
                self.events.push(Event::DetachStuck {
                    volume: s.volume,
                    node: s.node,
                    waited: s.waited,
                });
            }
        }
    }

    /// Every attachment whose detach was wanted [`Config::stuck_after`] or more before `now`
    /// and has not happened (the backend keeps failing it, the node still mounts it, it waits
    /// for a fence), oldest first. Such a volume stays attached where no workload needs it,
    /// and a single-node one keeps every other node waiting: an operator looks at these (and
    /// may [release](Input::ReleaseVolume) one from a fenced node). An attachment whose
    /// release is pending is listed however long it has waited, with
    /// [`release_pending`](StuckDetach::release_pending) set: no verify of its node has
    /// answered since the release.
    pub fn stuck_detaches(&self, now: Duration) -> Vec<StuckDetach<D>> {
        let mut stuck: Vec<StuckDetach<D>> = self
            .actual
            .detach_requests()
            .filter_map(|(volume, node, since)| {
                let waited = now.saturating_sub(since);
                let release_pending = self.detaches.has_releases()
                    && (self.actual.get(volume, node))
                        .is_some_and(|a| a.detach.release != Release::None)
                    && self.desired.spec(volume).is_none_or(|s| s.attach_required);
                (waited >= self.config.stuck_after || release_pending).then(|| StuckDetach {
                    volume: volume.clone(),
                    node: node.clone(),
                    waited,
                    release_pending,
                })
            })
            .collect();
        stuck.sort_by(|a, b| {
            b.waited
                .cmp(&a.waited)
                .then_with(|| (&a.node, &a.volume).cmp(&(&b.node, &b.volume)))
        });
        stuck
    }

    /// Starts a round of the periodic verify at `now`: every node with attachments once, in
    /// slices of about `verify_batch` attachments spread evenly over the sync period, counted
    /// from the round's start (a late pass does not push the later slices back). The slices
    /// are at least [`MIN_VERIFY_SLICE_GAP`] apart, not a reconcile period: held to the
    /// period, a million attachments at the default periods got 600 slices of about 1,700,
    /// and each pass was 1.7 times the pause `verify_batch` asks for. Only when the sync period
    /// is too short for even that gap do the slices take more.
    ///
    /// A round still under way (its passes came late, or nodes were added during it) is not
    /// started over but goes on from where it is, paced anew: started over, the nodes at its
    /// end could be skipped round after round for ever.
    fn start_verify_round(&mut self, now: Duration) {
        if self.listings.verify_round.is_none() || self.actual.verify_round_done() {
            self.actual.restart_verify_round();
        }
        self.listings.verify_round = Some(VerifyRound::paced(now, self.actual.len(), &self.config));
    }

    /// Plans the verifies of the round's next slice: the next nodes it has not reached, whole,
    /// until they hold the slice's attachments, in node order (a round of one slice plans every
    /// node in order, as a round in one pass did).
    fn plan_verify_slice(&mut self, ops: &mut Vec<Operation<D>>) {
        let Some(round) = self.listings.verify_round else {
            return;
        };
        let mut nodes = Vec::new();
        let mut taken = 0;
        while taken < round.per_slice {
            let Some((node, attached)) = self.actual.next_to_verify() else {
                break;
            };
            taken += attached;
            nodes.push(node);
        }
        self.listings.verify_round = (!self.actual.verify_round_done()).then(|| VerifyRound {
            slices_done: round.slices_done.saturating_add(1),
            ..round
        });
        nodes.sort();
        for node in nodes {
            self.plan_verify(node, ops);
        }
    }

    /// Plans a verify of every attachment of `node` the backend knows of, unless one runs.
    fn plan_verify(&mut self, node: D::Node, ops: &mut Vec<Operation<D>>) {
        let key = GateKeyRef::<D>::Verify(&node);
        if self.calls.gate.is_running(&key) {
            return;
        }
        // The node's own list holds each attachment's generation: no lookup of the attachment
        // in the volume table, only of the spec. The specs are looked up in warmed batches, as a
        // long pass's volumes are: a verify is planned in slices of about `verify_batch`
        // attachments, and a slice waited on each spec's cache misses one after the other.
        let standings = self.actual.standings_on(&node);
        let mut checked = Vec::with_capacity(standings.len());
        let mut volumes = Vec::with_capacity(standings.len());
        for batch in standings.chunks(WARM_BATCH) {
            self.desired.warm(batch.iter().map(|(volume, _)| volume));
            for (volume, standing) in batch {
                let Some(spec) = self.desired.spec(volume) else {
                    continue;
                };
                if !spec.attach_required {
                    // The backend knows nothing of a claim.
                    continue;
                }
                checked.push(standing.generation());
                volumes.push((volume.clone(), spec.payload.clone()));
            }
        }
        if volumes.is_empty() {
            return;
        }
        checked.sort_unstable();
        self.calls.gate.start(key.to_owned());
        let id = self.next_op_id();
        self.calls.in_flight.insert(
            id,
            InFlight::Verify {
                node: node.clone(),
                epoch: self.actual.epoch_of(&node),
                checked,
            },
        );
        ops.push(Operation::Verify { id, node, volumes });
    }

    /// Plans the recovery listings that are due.
    fn plan_recovery(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let Some(recovery) = &mut self.listings.recovery else {
            return;
        };
        let statuses = recovery.statuses.is_due(now);
        let attachments = recovery.attachments.is_due(now);
        if statuses {
            recovery.statuses = Load::Listing;
        }
        if attachments {
            recovery.attachments = Load::Listing;
        }
        if statuses {
            self.calls.gate.start(GateKey::StoreList);
            let id = self.next_op_id();
            self.calls.in_flight.insert(id, InFlight::ListStatuses);
            ops.push(Operation::ListStatuses { id });
        }
        if attachments {
            self.calls.gate.start(GateKey::List);
            let id = self.next_op_id();
            self.calls.in_flight.insert(id, InFlight::List);
            ops.push(Operation::ListAttachments { id });
        }
    }

    fn plan_list(&mut self, ops: &mut Vec<Operation<D>>) {
        if self.calls.gate.is_running(&GateKey::List) {
            return;
        }
        self.calls.gate.start(GateKey::List);
        let id = self.next_op_id();
        self.calls.in_flight.insert(id, InFlight::List);
        self.listings.changed_while_listing = Some(BTreeSet::new());
        ops.push(Operation::ListAttachments { id });
    }

    /// An operation's result changed what is attached at (`volume`, `node`): a listing running
    /// now may have seen it before the change.
    fn changed(&mut self, volume: &D::Volume, node: &D::Node) {
        if let Some(changed) = &mut self.listings.changed_while_listing {
            changed.insert((volume.clone(), node.clone()));
        }
    }

    /// Plans, for each node whose report may differ from the store or whose detaches wait for
    /// a fresh read, the node's next store call: a read when detaches wait for one or the
    /// revision to write against is unknown, else a compare-and-set write. One call per node at
    /// a time: a running one marks the node when it ends, a backoff timer when it expires.
    fn plan_status(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        if !self.status.has_dirty() {
            // Most passes of a move: no list taken, no drain dropped.
            return;
        }
        let mut nodes = self.status.take_dirty();
        for node in nodes.drain(..) {
            let checks = self.detaches.wants_read(&node);
            let present = self.actual.node_present(&node);
            if !checks && !present {
                // Nothing to write to; it is rewritten when it appears (50721).
                continue;
            }
            let key = GateKeyRef::<D>::Status(&node);
            if self.calls.gate.is_running(&key) {
                continue;
            }
            // Compared borrowed: a node whose store already holds its report costs no copy.
            let generation = self.actual.report_generation(&node);
            let wants_write = present
                && self
                    .calls
                    .gate
                    .may_start(&key, OpKind::WriteStatus, now)
                    .is_ok()
                && self.status.needs_write(&node, generation, |stored| {
                    self.actual.report_matches(&node, stored)
                });
            // When detaches wait for a read and the report for a write, the two take turns,
            // so that neither starves the other on a busy node.
            let read_turn =
                checks && (!wants_write || !self.status_turns.read_last.contains(&node));
            let unknown_revision = wants_write && self.status.revision(&node).is_none();
            if read_turn || unknown_revision {
                if let Err(Some(retry)) = self.calls.gate.may_start(&key, OpKind::ReadStatus, now) {
                    self.schedule.wake_node_at(retry, node);
                    continue;
                }
                // A read also gives the revision to write against: one read serves both.
                let checks = self.start_reading(&node);
                self.status_turns.read_last.insert(node.clone());
                self.plan_read(node, checks, false, ops);
                continue;
            }
            self.status_turns.read_last.remove(&node);
            if !wants_write {
                continue;
            }
            if self.bugs().c6_diff_against_stale_read
                && self.status_turns.cache_consulted.insert(node.clone())
            {
                // C6, upstream's bug: diff against a cached copy of unknown age first.
                self.plan_read(node, Vec::new(), true, ops);
                continue;
            }
            self.status_turns.cache_consulted.remove(&node);
            let Some(expected) = self.status.revision(&node).cloned() else {
                continue;
            };
            let warm = self.actual.len() >= WARM_STATE_FROM;
            let own = self.status.take_spare(&node);
            let report = self
                .actual
                .report_with(&node, &mut self.scratch.list_spares, own, warm);
            self.calls.gate.start(key.to_owned());
            let id = self.next_op_id();
            let object = self.status.object(&node);
            self.calls.in_flight.insert(
                id,
                InFlight::WriteStatus {
                    node: node.clone(),
                    object,
                },
            );
            self.status.start_write(&node, generation, report.clone());
            let read_facts = self.detaches.awaits_ack(&node);
            ops.push(Operation::WriteStatus {
                id,
                node,
                attached: report,
                expected,
                read_facts,
            });
        }
        self.status.recycle_dirty(nodes);
    }

    /// The detaches on `node` that wanted a fresh read are now reading: the read's checks,
    /// each with the force reason it is checked for.
    fn start_reading(&mut self, node: &D::Node) -> Vec<(D::Volume, Option<ForceReason>)> {
        let mut checks = Vec::new();
        for volume in self.detaches.take_reads_wanted(node) {
            if let Some(a) = self.actual.get_mut(&volume, node) {
                if let DetachStage::ReadWanted { force } = a.detach.stage {
                    a.detach.stage = DetachStage::Reading { force };
                    checks.push((volume, force));
                }
            }
        }
        checks
    }

    fn plan_read(
        &mut self,
        node: D::Node,
        checks: Vec<(D::Volume, Option<ForceReason>)>,
        from_cache: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        self.calls.gate.start(GateKey::Status(node.clone()));
        let id = self.next_op_id();
        self.calls
            .admission
            .reading(&node, checks.iter().map(|(v, _)| v), id);
        let object = self.status.object(&node);
        self.calls.in_flight.insert(
            id,
            InFlight::ReadStatus {
                node: node.clone(),
                object,
                checks,
                from_cache,
            },
        );
        ops.push(Operation::ReadStatus {
            id,
            node,
            #[cfg(feature = "upstream-bugs")]
            from_cache,
        });
    }

    /// Events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<Event<D>> {
        std::mem::take(&mut self.events)
    }

    /// Moves the events since the last call to the end of `out`, oldest first. Both lists
    /// keep their capacity: a driver that clears `out` after use allocates nothing per event.
    /// (The core drops its own list once a burst has grown it past 256 events. A driver
    /// should do likewise with `out`, or it holds the burst's peak for good.)
    pub fn drain_events_into(&mut self, out: &mut Vec<Event<D>>) {
        out.append(&mut self.events);
        if self.events.capacity() > KEPT_EVENTS {
            self.events = Vec::new();
        }
    }
}

/// The members of `all` not in `seen`, sorted.
fn unseen<'a, T: Id>(all: impl Iterator<Item = &'a T>, seen: &FxHashSet<T>) -> Vec<T> {
    let mut gone: Vec<T> = all.filter(|x| !seen.contains(*x)).cloned().collect();
    gone.sort();
    gone
}

mod admission_pass;

// Fencing without a human: planning machine checks and taking their answers.
mod machine;

#[cfg(test)]
mod payload_tests;
#[cfg(test)]
mod store_protocol_tests;
#[cfg(test)]
mod tests;
