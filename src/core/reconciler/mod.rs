//! The reconciler: a pure, synchronous planner that turns changes into operations.
//!
//! [`Reconciler`] takes [`Input`]s and the results of the operations it planned, keeps the
//! state, and asks the rules whether each step may happen now. This file holds the struct and
//! the verbs a driver learns; the rest, one concern per file:
//!
//! - `inputs.rs`: what the orchestrator tells it;
//! - `pass.rs`: what [`poll`](Reconciler::poll) does, volume by volume;
//! - `detach.rs` and `attach.rs`: the look that moves one attachment on by a step;
//! - `status_pass.rs`: the node-status updater (writes, fresh reads, what their ends settle);
//! - `results.rs`: attaches, detaches and verifies coming back;
//! - `recovery.rs`: the restart's listings, claims adopted, the periodic listing;
//! - `gate_key.rs`: one operation per key at a time;
//! - `admission_pass.rs`: queued attaches and detaches under `Config::backend_load`;
//! - `machine.rs`: fencing without a human (machine checks);
//! - `explain.rs`: why a volume or a workload waits, read off the same rules;
//! - tests: `tests.rs` with `tests/`, `payload_tests.rs`, `store_protocol_tests.rs`.
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
use crate::core::calls::volume::{Access, DriverId, VolumeSpec};
use crate::core::event::{Event, Holder};
use crate::core::input::{Input, Kind, ReconcilerError, Rejection, ReleaseRefusal, Relists};
use crate::core::operation::{ForceReason, InFlight, OpId, OpKind, Operation};
use crate::core::outcome::Outcome;
use crate::core::plan::detaches::DetachIndex;
use crate::core::plan::in_flight::InFlightTable;
use crate::core::plan::recovery::{Load, Recovery, SettledVolumes, Statuses, StoreListed};
use crate::core::plan::schedule::Schedule;
use crate::core::plan::waits::WaitWatch;
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
    /// Placements to explain if they still wait (`Config::explain_waits_after`).
    waits: WaitWatch<D>,
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
    /// The driver whose per-node limit it counts against.
    driver: Option<DriverId>,
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
            waits: WaitWatch::new(config.explain_waits_after),
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

    // A single-node volume's gate key is held by its running attach or detach in the
    // running-operations table ([`InFlightTable::holds_volume`]), which counts the volume's
    // operations anyway; the gate keeps every other key, and every key's backoff. Held in the
    // gate too, the key was cloned into a set of its own at each start and hashed out again at
    // each end (2 % of a `u32` move's instructions). The next three ask and free a key in the
    // right place.

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
mod attach;
mod detach;
mod explain;
mod gate_key;
mod inputs;
mod machine;
mod pass;
mod recovery;
mod results;
mod status_pass;

use gate_key::{GateKey, GateKeyRef, gate_key_ref};

#[cfg(test)]
mod payload_tests;
#[cfg(test)]
mod store_protocol_tests;
#[cfg(test)]
mod tests;
