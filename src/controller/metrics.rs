//! Counters the controller keeps so an operator can see what it does without reading logs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::config::CallKind;
use crate::core::operation::ForceReason;
use crate::core::operation::OpKind;
use crate::core::rules::admission::QueueStats;

/// How an operation ended, as the metrics count it: succeeded, failed or abandoned. (What
/// the call answered is a [`core::Outcome`](crate::core::Outcome).)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ending {
    /// The call succeeded (for a status write: the store holds the wanted list).
    Succeeded,
    /// The call returned an error (or panicked); the core decides what follows.
    Failed,
    /// The controller stopped before the call returned; its effect is unknown until the next
    /// controller recovers.
    Abandoned,
}

impl Ending {
    fn index(self) -> usize {
        self as usize
    }
}

const KINDS: usize = OpKind::ALL.len();
const OUTCOMES: usize = 3;

fn kind_index(kind: OpKind) -> usize {
    match kind {
        OpKind::Attach => 0,
        OpKind::Detach => 1,
        OpKind::Verify => 2,
        OpKind::WriteStatus => 3,
        OpKind::List => 4,
        OpKind::ReadStatus => 5,
        OpKind::ListStatuses => 6,
        OpKind::CheckMachine => 7,
    }
}

/// The short name of an operation kind, in logs, spans and metric labels.
pub(crate) fn op_label(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Attach => "attach",
        OpKind::Detach => "detach",
        OpKind::Verify => "verify",
        OpKind::WriteStatus => "write_status",
        OpKind::ReadStatus => "read_status",
        OpKind::ListStatuses => "list_statuses",
        OpKind::List => "list",
        OpKind::CheckMachine => "check_machine",
    }
}

const CALL_KINDS: usize = CallKind::ALL.len();

fn call_index(kind: CallKind) -> usize {
    match kind {
        CallKind::Attach => 0,
        CallKind::Detach => 1,
        CallKind::Verify => 2,
        CallKind::StatusRead => 3,
        CallKind::StatusWrite => 4,
        CallKind::StoreList => 5,
        CallKind::BackendList => 6,
        CallKind::MachineState => 7,
    }
}

fn reason_index(reason: ForceReason) -> usize {
    match reason {
        ForceReason::OutOfService => 0,
        ForceReason::Timeout => 1,
        ForceReason::NodeDeleted => 2,
        ForceReason::PoweredOff => 3,
    }
}

/// The controller's live counters: plain atomics, cheap to bump from any task.
///
/// Read them through [`snapshot`](Metrics::snapshot) (or
/// [`ControllerHandle::metrics`](crate::controller::ControllerHandle::metrics)); export the
/// snapshot to whatever metrics system you use.
///
/// ```
/// use attach_detach::controller::{Metrics, Ending};
/// use attach_detach::core::OpKind;
/// let metrics = Metrics::default();
/// metrics.operation_finished(OpKind::Attach, Ending::Succeeded);
/// assert_eq!(metrics.snapshot().operations(OpKind::Attach).succeeded, 1);
/// ```
#[derive(Debug)]
pub struct Metrics {
    operations: [[AtomicU64; OUTCOMES]; KINDS],
    in_flight: AtomicU64,
    reconcile_passes: AtomicU64,
    store_writes: AtomicU64,
    store_write_conflicts: AtomicU64,
    forced_detaches: [AtomicU64; 4],
    timeouts: [AtomicU64; CALL_KINDS],
    recorder_panics: AtomicU64,
    refused_inputs: AtomicU64,
    desired_attachments: AtomicU64,
    actual_attachments: AtomicU64,
    pending_workloads: AtomicU64,
    waiting_for_room: AtomicU64,
    stuck_detaches: AtomicU64,
    recovering: AtomicBool,
    /// When the oldest call the driver still waits for started.
    oldest_start: Mutex<Option<Instant>>,
    /// The core's backend queues as last published, and when.
    backend_queue: Mutex<(QueueStats, Option<Instant>)>,
    /// How long the operations took, for the `prometheus` feature's histogram only: without
    /// the feature the driver measures nothing.
    #[cfg(feature = "prometheus")]
    durations: durations::Durations,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            operations: Default::default(),
            in_flight: AtomicU64::default(),
            reconcile_passes: AtomicU64::default(),
            store_writes: AtomicU64::default(),
            store_write_conflicts: AtomicU64::default(),
            forced_detaches: Default::default(),
            timeouts: Default::default(),
            recorder_panics: AtomicU64::default(),
            refused_inputs: AtomicU64::default(),
            desired_attachments: AtomicU64::default(),
            actual_attachments: AtomicU64::default(),
            pending_workloads: AtomicU64::default(),
            waiting_for_room: AtomicU64::default(),
            stuck_detaches: AtomicU64::default(),
            // A controller starts by recovering (the core's first operations are the listings).
            recovering: AtomicBool::new(true),
            oldest_start: Mutex::default(),
            backend_queue: Mutex::default(),
            #[cfg(feature = "prometheus")]
            durations: durations::Durations::default(),
        }
    }
}

impl Metrics {
    /// An operation of `kind` ended with `outcome`.
    pub fn operation_finished(&self, kind: OpKind, outcome: Ending) {
        self.operations[kind_index(kind)][outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn operation_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn operation_ended(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn reconcile_pass(&self) {
        self.reconcile_passes.fetch_add(1, Ordering::Relaxed);
    }

    /// A detach of a still-mounted volume was started for `reason` (upstream's
    /// `attachdetach_controller_forced_detaches`).
    pub fn forced_detach(&self, reason: ForceReason) {
        self.forced_detaches[reason_index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_write(&self) {
        self.store_writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_write_conflict(&self) {
        self.store_write_conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// A call of `kind` got no answer within its deadline and was given up.
    pub fn call_timed_out(&self, kind: CallKind) {
        self.timeouts[call_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn recorder_panicked(&self) {
        self.recorder_panics.fetch_add(1, Ordering::Relaxed);
    }

    /// The core refused `count` inputs (see [`Rejection`](crate::core::Rejection)).
    pub(crate) fn inputs_refused(&self, count: usize) {
        self.refused_inputs
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// The driver publishes the size of the core's state after each step.
    pub(crate) fn set_state(&self, state: StateSizes) {
        let store = |a: &AtomicU64, n: usize| a.store(n as u64, Ordering::Relaxed);
        store(&self.desired_attachments, state.desired);
        store(&self.actual_attachments, state.actual);
        store(&self.pending_workloads, state.pending);
        store(&self.waiting_for_room, state.waiting_for_room);
        store(&self.stuck_detaches, state.stuck_detaches);
        self.recovering.store(state.recovering, Ordering::Relaxed);
    }

    /// An operation of `kind` that got an answer (`succeeded` or not) took `took`.
    #[cfg(feature = "prometheus")]
    pub(crate) fn observe_duration(&self, kind: OpKind, succeeded: bool, took: Duration) {
        self.durations.observe(kind_index(kind), succeeded, took);
    }

    /// The duration histogram of operations of `kind` that `succeeded` (or failed).
    #[cfg(feature = "prometheus")]
    pub(crate) fn durations(&self, kind: OpKind, succeeded: bool) -> durations::Histogram {
        self.durations.read(kind_index(kind), succeeded)
    }

    /// The driver publishes when the oldest call it waits for started (`None`: no call runs).
    pub(crate) fn set_oldest_start(&self, start: Option<Instant>) {
        *self.oldest_start.lock() = start;
    }

    /// The driver publishes the core's backend queues as they were at `at`.
    pub(crate) fn set_backend_queue(&self, stats: QueueStats, at: Instant) {
        *self.backend_queue.lock() = (stats, Some(at));
    }

    /// The published backend queues, each oldest wait aged to now: the queues change only in a
    /// step of the driver, which publishes them again.
    fn backend_queue(&self) -> QueueStats {
        let (mut stats, at) = *self.backend_queue.lock();
        let since = at.map_or(Duration::ZERO, |at| {
            Instant::now().saturating_duration_since(at)
        });
        for class in [&mut stats.attach, &mut stats.detach] {
            if class.queued > 0 {
                class.oldest_wait = class.oldest_wait.saturating_add(since);
            }
        }
        stats
    }

    /// The counters as they are now. Each counter is read atomically, the set as a whole is not.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let counts = |kind: OpKind| {
            let row = &self.operations[kind_index(kind)];
            EndingCounts {
                succeeded: load(&row[Ending::Succeeded.index()]),
                failed: load(&row[Ending::Failed.index()]),
                abandoned: load(&row[Ending::Abandoned.index()]),
            }
        };
        MetricsSnapshot {
            attach: counts(OpKind::Attach),
            detach: counts(OpKind::Detach),
            verify: counts(OpKind::Verify),
            write_status: counts(OpKind::WriteStatus),
            list: counts(OpKind::List),
            read_status: counts(OpKind::ReadStatus),
            list_statuses: counts(OpKind::ListStatuses),
            check_machine: counts(OpKind::CheckMachine),
            in_flight: load(&self.in_flight),
            reconcile_passes: load(&self.reconcile_passes),
            store_writes: load(&self.store_writes),
            store_write_conflicts: load(&self.store_write_conflicts),
            forced_detaches_out_of_service: load(
                &self.forced_detaches[reason_index(ForceReason::OutOfService)],
            ),
            forced_detaches_timeout: load(
                &self.forced_detaches[reason_index(ForceReason::Timeout)],
            ),
            forced_detaches_node_deleted: load(
                &self.forced_detaches[reason_index(ForceReason::NodeDeleted)],
            ),
            forced_detaches_powered_off: load(
                &self.forced_detaches[reason_index(ForceReason::PoweredOff)],
            ),
            timeouts: TimeoutCounts {
                attach: load(&self.timeouts[call_index(CallKind::Attach)]),
                detach: load(&self.timeouts[call_index(CallKind::Detach)]),
                verify: load(&self.timeouts[call_index(CallKind::Verify)]),
                status_read: load(&self.timeouts[call_index(CallKind::StatusRead)]),
                status_write: load(&self.timeouts[call_index(CallKind::StatusWrite)]),
                store_list: load(&self.timeouts[call_index(CallKind::StoreList)]),
                backend_list: load(&self.timeouts[call_index(CallKind::BackendList)]),
                machine_state: load(&self.timeouts[call_index(CallKind::MachineState)]),
            },
            recorder_panics: load(&self.recorder_panics),
            refused_inputs: load(&self.refused_inputs),
            desired_attachments: load(&self.desired_attachments),
            actual_attachments: load(&self.actual_attachments),
            pending_workloads: load(&self.pending_workloads),
            waiting_for_room: load(&self.waiting_for_room),
            stuck_detaches: load(&self.stuck_detaches),
            recovering: self.recovering.load(Ordering::Relaxed),
            oldest_running: self
                .oldest_start
                .lock()
                .map(|start| Instant::now().saturating_duration_since(start)),
            backend_queue: self.backend_queue(),
        }
    }
}

/// The size of the core's state, as the driver publishes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StateSizes {
    pub(crate) desired: usize,
    pub(crate) actual: usize,
    pub(crate) pending: usize,
    pub(crate) waiting_for_room: usize,
    pub(crate) stuck_detaches: usize,
    pub(crate) recovering: bool,
}

/// How many operations of one kind ended each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndingCounts {
    /// Ended with success.
    pub succeeded: u64,
    /// Ended with an error.
    pub failed: u64,
    /// Cut off by a shutdown.
    pub abandoned: u64,
}

impl EndingCounts {
    /// Ended in any way.
    pub fn total(&self) -> u64 {
        self.succeeded + self.failed + self.abandoned
    }
}

/// How many calls of each kind timed out (see [`CallTimeouts`](crate::config::CallTimeouts)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutCounts {
    /// Attach calls, each then handled as an uncertain failure.
    pub attach: u64,
    /// Detach calls, each then handled as an uncertain failure.
    pub detach: u64,
    /// Verify calls.
    pub verify: u64,
    /// Fresh reads of a node's status (before a write, after a conflict, before a detach).
    pub status_read: u64,
    /// Compare-and-set writes of a node's status.
    pub status_write: u64,
    /// Recovery listings of the store.
    pub store_list: u64,
    /// Recovery listings of the backend.
    pub backend_list: u64,
    /// Machine checks (`Config::machine_fencing`), each then a failed check.
    pub machine_state: u64,
}

impl TimeoutCounts {
    /// Timeouts of calls of `kind`.
    pub fn of(&self, kind: CallKind) -> u64 {
        match kind {
            CallKind::Attach => self.attach,
            CallKind::Detach => self.detach,
            CallKind::Verify => self.verify,
            CallKind::StatusRead => self.status_read,
            CallKind::StatusWrite => self.status_write,
            CallKind::StoreList => self.store_list,
            CallKind::BackendList => self.backend_list,
            CallKind::MachineState => self.machine_state,
        }
    }

    /// Timeouts of every kind.
    pub fn total(&self) -> u64 {
        CallKind::ALL.iter().map(|k| self.of(*k)).sum()
    }
}

/// A copy of the controller's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Attach calls.
    pub attach: EndingCounts,
    /// Detach calls.
    pub detach: EndingCounts,
    /// Verify calls.
    pub verify: EndingCounts,
    /// Status write operations (each may take several store calls).
    pub write_status: EndingCounts,
    /// Listings of every attachment the backend knows (recovery, and `Config::resync_period`).
    pub list: EndingCounts,
    /// Fresh reads of a node's status (before every detach, and before a write whose revision
    /// is unknown).
    pub read_status: EndingCounts,
    /// Recovery listings of every node's status.
    pub list_statuses: EndingCounts,
    /// Checks of an unhealthy node's machine (`Config::machine_fencing`).
    pub check_machine: EndingCounts,
    /// Operations running now.
    pub in_flight: u64,
    /// Reconcile passes run: stays flat while the controller is idle. A poll that plans just
    /// a slice of the periodic verify between two passes counts as one.
    pub reconcile_passes: u64,
    /// Compare-and-set write calls to the node-status store.
    pub store_writes: u64,
    /// Of those, how many lost a race and were retried after a fresh read.
    pub store_write_conflicts: u64,
    /// Forced detaches started because the node is out of service.
    pub forced_detaches_out_of_service: u64,
    /// Forced detaches started because the unmount wait expired.
    pub forced_detaches_timeout: u64,
    /// Forced detaches started because the node was deleted (`deleted_node_is_fenced`).
    pub forced_detaches_node_deleted: u64,
    /// Forced detaches started because the node's machine is powered off, twice, fresh
    /// (`Config::machine_fencing`).
    pub forced_detaches_powered_off: u64,
    /// Calls to the backend or the store given up at their deadline, by kind.
    pub timeouts: TimeoutCounts,
    /// Times the [`EventRecorder`](crate::controller::EventRecorder) panicked; the controller logs
    /// each and carries on.
    pub recorder_panics: u64,
    /// Inputs the core refused (each also came back to its sender as an error).
    pub refused_inputs: u64,
    /// Desired (volume, node) attachments (upstream's desired state of world).
    pub desired_attachments: u64,
    /// Attachment records the controller holds, attached or uncertain (upstream's actual state
    /// of world).
    pub actual_attachments: u64,
    /// Workloads waiting for their node or a volume to be known.
    pub pending_workloads: u64,
    /// Attaches waiting for room on a node at its attach limit (or that the backend said is
    /// full), each named in a `NodeFull` event.
    pub waiting_for_room: u64,
    /// Detaches wanted for `Config::stuck_after` or longer and not done, each named in a
    /// `DetachStuck` event (counted at the periodic sync that named them, until they end).
    pub stuck_detaches: u64,
    /// Whether the controller still waits for its recovery listings (nothing else is planned
    /// until they are in).
    pub recovering: bool,
    /// How long the oldest call the controller still waits for (an operation or a recovery
    /// listing) has been running, when the snapshot was taken; `None` when none runs. Every call
    /// has a deadline ([`CallTimeouts`](crate::config::CallTimeouts)), so this stays bounded; an
    /// age near those deadlines means the backend or the store is hanging.
    pub oldest_running: Option<Duration>,
    /// Attach and detach calls under way, holding a slot, and waiting for one (or for a token)
    /// under [`Config::backend_load`](crate::config::Config::backend_load), with the oldest
    /// wait per class at the snapshot. A queue that stays long, or an oldest wait that keeps
    /// growing, means the limits are below what the cluster asks of the backend. Counts and
    /// tokens are as of the controller's last pass (they change only in one); the oldest waits
    /// are aged to the snapshot.
    pub backend_queue: QueueStats,
}

impl MetricsSnapshot {
    /// The counts of one kind of operation.
    pub fn operations(&self, kind: OpKind) -> EndingCounts {
        match kind {
            OpKind::Attach => self.attach,
            OpKind::Detach => self.detach,
            OpKind::Verify => self.verify,
            OpKind::WriteStatus => self.write_status,
            OpKind::List => self.list,
            OpKind::ReadStatus => self.read_status,
            OpKind::ListStatuses => self.list_statuses,
            OpKind::CheckMachine => self.check_machine,
        }
    }

    /// Forced detaches started for `reason`.
    pub fn forced_detaches(&self, reason: ForceReason) -> u64 {
        match reason {
            ForceReason::OutOfService => self.forced_detaches_out_of_service,
            ForceReason::Timeout => self.forced_detaches_timeout,
            ForceReason::NodeDeleted => self.forced_detaches_node_deleted,
            ForceReason::PoweredOff => self.forced_detaches_powered_off,
        }
    }
}

#[cfg(feature = "prometheus")]
pub(crate) mod durations {
    //! Fixed-bucket histograms of operation durations: plain atomics, so an observation costs
    //! a few relaxed additions and no lock.

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::KINDS;

    /// Upstream's buckets for `storage_operation_duration_seconds`, in seconds.
    pub(crate) const BOUNDS: [f64; 13] = [
        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
    ];

    /// The same bounds in nanoseconds, compared against without floating point.
    const BOUNDS_NANOS: [u64; 13] = [
        100_000_000,
        250_000_000,
        500_000_000,
        1_000_000_000,
        2_500_000_000,
        5_000_000_000,
        10_000_000_000,
        15_000_000_000,
        25_000_000_000,
        50_000_000_000,
        120_000_000_000,
        300_000_000_000,
        600_000_000_000,
    ];

    /// One histogram: a count per bucket (the last is `+Inf`), and the sum in nanoseconds.
    #[derive(Debug, Default)]
    struct Cell {
        buckets: [AtomicU64; BOUNDS.len() + 1],
        sum_nanos: AtomicU64,
    }

    /// A histogram per operation kind and status (index 0: succeeded, 1: failed).
    #[derive(Debug, Default)]
    pub(crate) struct Durations([[Cell; 2]; KINDS]);

    /// A copy of one histogram.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) struct Histogram {
        /// Each bucket's upper bound in seconds (the last `+Inf`) with the observations that
        /// fell in it (not cumulative).
        pub(crate) buckets: Vec<(f64, u64)>,
        /// Observations.
        pub(crate) count: u64,
        /// Their sum in seconds.
        pub(crate) sum: f64,
    }

    /// The bucket `nanos` falls in: the first whose bound it does not exceed.
    pub(crate) fn bucket(nanos: u64) -> usize {
        BOUNDS_NANOS.partition_point(|bound| *bound < nanos)
    }

    impl Durations {
        pub(crate) fn observe(&self, kind: usize, succeeded: bool, took: Duration) {
            let cell = &self.0[kind][usize::from(!succeeded)];
            let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
            cell.buckets[bucket(nanos)].fetch_add(1, Ordering::Relaxed);
            cell.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        }

        pub(crate) fn read(&self, kind: usize, succeeded: bool) -> Histogram {
            let cell = &self.0[kind][usize::from(!succeeded)];
            let buckets: Vec<(f64, u64)> = BOUNDS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(cell.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
                .collect();
            Histogram {
                count: buckets.iter().map(|(_, n)| n).sum(),
                sum: Duration::from_nanos(cell.sum_nanos.load(Ordering::Relaxed)).as_secs_f64(),
                buckets,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_their_own_cells() {
        let m = Metrics::default();
        m.operation_finished(OpKind::Detach, Ending::Failed);
        m.operation_finished(OpKind::Detach, Ending::Failed);
        m.operation_finished(OpKind::WriteStatus, Ending::Abandoned);
        m.forced_detach(ForceReason::Timeout);
        m.operation_started();
        let s = m.snapshot();
        assert_eq!(
            s.detach,
            EndingCounts {
                succeeded: 0,
                failed: 2,
                abandoned: 0
            }
        );
        assert_eq!(s.operations(OpKind::WriteStatus).abandoned, 1);
        assert_eq!(s.operations(OpKind::Attach).total(), 0);
        assert_eq!(s.forced_detaches(ForceReason::Timeout), 1);
        assert_eq!(s.forced_detaches(ForceReason::OutOfService), 0);
        assert_eq!(s.in_flight, 1);
    }

    #[test]
    fn a_total_adds_the_three_outcomes() {
        let counts = EndingCounts {
            succeeded: 1,
            failed: 2,
            abandoned: 3,
        };
        assert_eq!(counts.total(), 6);
        assert_eq!(EndingCounts::default().total(), 0);
    }

    #[test]
    fn every_kind_of_count_is_read_from_its_own_cell() {
        let m = Metrics::default();
        for (k, kind) in OpKind::ALL.iter().enumerate() {
            for _ in 0..k + 2 {
                m.operation_finished(*kind, Ending::Succeeded);
            }
        }
        for (i, call) in CallKind::ALL.iter().enumerate() {
            for _ in 0..i + 2 {
                m.call_timed_out(*call);
            }
        }
        for (i, reason) in [
            ForceReason::OutOfService,
            ForceReason::Timeout,
            ForceReason::NodeDeleted,
            ForceReason::PoweredOff,
        ]
        .iter()
        .enumerate()
        {
            for _ in 0..i + 2 {
                m.forced_detach(*reason);
            }
        }
        let s = m.snapshot();
        for (k, kind) in OpKind::ALL.iter().enumerate() {
            assert_eq!(s.operations(*kind).succeeded, k as u64 + 2, "{kind:?}");
            assert_eq!(s.operations(*kind).total(), k as u64 + 2, "{kind:?}");
        }
        for (i, call) in CallKind::ALL.iter().enumerate() {
            assert_eq!(s.timeouts.of(*call), i as u64 + 2, "{call:?}");
        }
        assert_eq!(s.timeouts.total(), (2..10).sum::<u64>());
        assert_eq!(s.forced_detaches(ForceReason::OutOfService), 2);
        assert_eq!(s.forced_detaches(ForceReason::Timeout), 3);
        assert_eq!(s.forced_detaches(ForceReason::NodeDeleted), 4);
        assert_eq!(s.forced_detaches(ForceReason::PoweredOff), 5);
    }

    #[test]
    fn the_state_sizes_and_refusals_are_published() {
        let m = Metrics::default();
        assert!(m.snapshot().recovering, "a controller starts by recovering");
        m.set_state(StateSizes {
            desired: 1,
            actual: 2,
            pending: 3,
            waiting_for_room: 6,
            stuck_detaches: 7,
            recovering: false,
        });
        m.inputs_refused(4);
        m.inputs_refused(1);
        let s = m.snapshot();
        assert_eq!(
            (
                s.desired_attachments,
                s.actual_attachments,
                s.pending_workloads,
                s.waiting_for_room,
                s.stuck_detaches,
                s.recovering,
                s.refused_inputs
            ),
            (1, 2, 3, 6, 7, false, 5)
        );
    }

    #[cfg(feature = "prometheus")]
    #[test]
    fn a_duration_on_a_bound_falls_in_that_bound_s_bucket() {
        use super::durations::bucket;
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(100_000_000), 0);
        assert_eq!(bucket(100_000_001), 1);
        assert_eq!(bucket(250_000_000), 1);
        assert_eq!(bucket(600_000_000_000), 12);
        assert_eq!(bucket(600_000_000_001), 13);
        assert_eq!(bucket(u64::MAX), 13);
        let m = Metrics::default();
        m.observe_duration(OpKind::Detach, false, Duration::from_millis(300));
        m.observe_duration(OpKind::Detach, false, Duration::MAX);
        let failed = m.durations(OpKind::Detach, false);
        assert_eq!(failed.count, 2);
        assert_eq!(failed.buckets[2], (0.5, 1));
        assert_eq!(failed.buckets[13], (f64::INFINITY, 1));
        assert_eq!(m.durations(OpKind::Detach, true).count, 0);
        assert_eq!(m.durations(OpKind::Attach, false).count, 0);
    }
}
