//! Tunables of the core and the driver, with upstream's defaults except where upstream is
//! unsafe, and the checks that keep them usable.
//!
//! A [`Config`] is what [`Reconciler::new`](crate::core::Reconciler::new) and
//! [`Controller::new`](crate::controller::Controller::new) take; the other types are its parts.
//! [`Config::default()`] is safe as it is: you need this module to tune the periods, the
//! backoff or the call timeouts, and (with the `upstream-bugs` feature, for tests only) to put
//! an upstream bug back.

use std::fmt;
use std::time::Duration;

// Public only with the `upstream-bugs` feature; the core reads it either way.
#[cfg(not(feature = "upstream-bugs"))]
pub(crate) use crate::upstream_bugs::UpstreamBugs;
#[cfg(feature = "upstream-bugs")]
pub use crate::upstream_bugs::UpstreamBugs;

/// How the core paces itself and how far it may go to free a volume, and how long the driver
/// waits for each call to the outside.
///
/// Defaults follow Kubernetes (100 ms loop, 60 s sync, 6 min unmount wait, 500 ms .. 2 min 2 s
/// backoff) except `force_detach_on_timeout`, which is off: a volume is only detached from a node
/// that still mounts it when the node is fenced (see seed 004). [`CallTimeouts`] explains its
/// own defaults.
///
/// [`Controller::new`](crate::controller::Controller::new) refuses a configuration that
/// [`validate`](Config::validate) refuses; a user driving the
/// [`Reconciler`](crate::core::Reconciler) by hand should call it too.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Minimum time between two reconcile passes; changes that arrive in between are batched.
    /// (A slice of the periodic verify may come between two passes; it plans only verifies.)
    pub reconcile_period: Duration,
    /// How often attachments are verified with the backend: every attachment once per period.
    ///
    /// A round starts every period. In a large cluster it is spread over the period in slices
    /// of about [`verify_batch`](Self::verify_batch) attachments (whole nodes), so that no
    /// pass stalls for the whole cluster; a cluster of at most `verify_batch` attachments is
    /// verified in one pass, as upstream does.
    pub sync_period: Duration,
    /// The most attachments one pass of the periodic verify takes (at least one node's
    /// worth). 250 by default: at a million attachments one round of every node in one pass
    /// took 374 ms, during which nothing else was planned. In slices the round still ends
    /// within the period, and a slice's pause falls faster than its size (its planning alone
    /// costs about half as much an attachment in slices of 250 as of 1,000): at a million
    /// attachments with `String` ids, the largest pass of a round read 1.2 to 4.4 ms in
    /// slices of 1,000 and 0.24 to 0.38 ms in slices of 250, and the whole round took half
    /// the time. The price is wake-ups: 4,000 slices a minute at a million at the default
    /// periods, each a poll. Slices are at least 10 ms apart (the driver wakes for each at the
    /// core's deadline, not at its reconcile tick); only when the sync period is too short for
    /// that at this size (over 6,000 slices in the default 60 s: a million and a half
    /// attachments) do the slices grow. A round still under way when the next
    /// is due (its passes came late, or nodes were added) goes on from where it is rather
    /// than starting over, so no node is skipped for ever.
    pub verify_batch: usize,
    /// The most marked volumes one reconcile pass looks at. 250 by default. A larger set of
    /// marks (a restart that cannot show its volumes settled, a resync, a zone's nodes lost
    /// at once) is a round looked at over several passes in mark order (a restart's in the
    /// order of the volume table, each pass's share sorted), each due at once
    /// (not paced by `reconcile_period`), so the first operations are planned after its first
    /// pass instead of after all of it, and no single pass stalls the driver: at a million
    /// attachments a restart whose store reported nothing looked at every volume in one pass
    /// of 0.9 s with `u32` ids and 4.3 s with `String` ids. Marks made during a round wait for
    /// its end, so every volume of the round is reached within its length over this many
    /// passes. The nodes' status writes wait for the round's last pass (a node is written
    /// for the round, not once per pass that reached one of its volumes; what the last pass
    /// began may take one more write). A fresh read's clearance or a status write's facts
    /// serve only the pass right after them, so that pass also looks at the volumes they
    /// concern (the cleared ones, those whose detaches waited for the write), beside its
    /// share of the round.
    /// A driver should poll again as soon as [`next_deadline`] says (the crate's controller
    /// does); one that polls only on its own tick gets one pass of a round per tick.
    ///
    /// [`next_deadline`]: crate::core::Reconciler::next_deadline
    pub volumes_per_pass: usize,
    /// How often every attachment the backend knows is listed, to find those the core does
    /// not know of; `None` never lists after recovery.
    ///
    /// A call that a previous controller started and lost in a restart can land after the new
    /// controller recovered: neither the store nor the backend listed it then, and nothing the
    /// core knows would ever look at it again, so a single-node volume would stay attached to
    /// a node that does not need it and block every other node. Upstream has no such sweep.
    /// Attachments found are taken in as Uncertain and reconciled like any other.
    pub resync_period: Option<Duration>,
    /// How long a detach waits for the node to unmount before a forced detach may be considered.
    pub max_wait_for_unmount: Duration,
    /// How soon a detach that a fresh read of the node held back (the node's agent still
    /// reports the volume in use, although the core's view of the node said otherwise) is
    /// looked at again, if the node sends no new report first. A held-back detach is not a
    /// failure: it costs no backoff, no failure event and no status write, only this re-read.
    /// The read is the newer fact: on an unhealthy node, `force_detach_on_timeout` applies to
    /// such a detach as to one the view knows mounted.
    pub unmount_recheck: Duration,
    /// Allow detaching a still-mounted volume from an unhealthy, unfenced node after
    /// `max_wait_for_unmount`. Risky: the node may still be writing. Never applies to a healthy
    /// node, nor to a node whose object was deleted (its health is unknown: see
    /// `deleted_node_is_fenced`).
    pub force_detach_on_timeout: bool,
    /// Treat a deleted node object as fenced: its volumes are detached (forced, reason
    /// `node-deleted`) once a fresh read confirms the store has no such node.
    ///
    /// Off by default: a node object can be deleted while its machine still runs and writes
    /// (an operator's `kubectl delete node`), so its volumes stay attached, and a single-node
    /// volume stays pinned there (with a [`DetachBlocked`](crate::core::Event::DetachBlocked)
    /// event), until the node comes back and reports, or is fenced. Turn it on when your
    /// orchestrator deletes a node object only once its machine is gone, as cloud node
    /// lifecycle controllers do (Kubernetes' deletes a Node whose instance the cloud reports
    /// terminated).
    pub deleted_node_is_fenced: bool,
    /// Fencing without a human: ask the backend
    /// ([`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state)) whether
    /// an unhealthy node's machine is powered off, and count the node as fenced (force reason
    /// `powered-off`) once it says so twice, fresh. `None` (the default) never asks: a node
    /// counts as fenced only by the orchestrator's `out-of-service` taint.
    ///
    /// Turn it on only with a backend whose `Off` means the machine cannot write (a stopped
    /// or terminated cloud instance); see [`MachineFencing`].
    pub machine_fencing: Option<MachineFencing>,
    /// At most this many workloads may wait for a node or a volume the core was not told of
    /// (see [`Input::WorkloadScheduled`](crate::core::Input::WorkloadScheduled)); beyond it, a
    /// workload that would wait is refused with
    /// [`DesiredError::TooManyPending`](crate::core::DesiredError::TooManyPending).
    ///
    /// Out-of-order inputs are normal with watchers (a pod may be seen before its node or its
    /// volume), so workloads wait rather than being refused; but a workload naming a node or a
    /// volume that never comes waits forever, and without a bound a misconfigured feed would
    /// grow the core without limit. The bound counts every waiting workload, but only a new
    /// wait is refused: a node or a volume removed under its workloads is always accepted, and
    /// the workloads it sends back to waiting may go beyond the bound (they were placed, so
    /// they take no more room than before). 0 refuses every out-of-order workload.
    pub max_pending_workloads: usize,
    /// A workload that still waits for a node or a volume after this long is named once in an
    /// [`Event::WorkloadWaiting`](crate::core::Event::WorkloadWaiting), with what it waits for.
    ///
    /// Counted from the first reconcile pass that saw it wait. Short waits are normal (watchers
    /// deliver kinds in no set order); two minutes is long past any informer's lag.
    pub pending_workload_warning: Duration,
    /// A workload placed (or sent back to waiting) this long ago whose volumes are still not
    /// all attached on its node is explained once in an
    /// [`Event::WaitExplained`](crate::core::Event::WaitExplained): what each of its volumes
    /// waits for ([`Reconciler::explain_workload`](crate::core::Reconciler::explain_workload)),
    /// so that a person looking at the stuck workload reads why. `None` (the default) never
    /// does: an embedder that shows the events to people turns it on (the Kubernetes adapter
    /// does, at two minutes). Counted from the first reconcile pass after the placement.
    pub explain_waits_after: Option<Duration>,
    /// A detach wanted this long and not done is named once in an
    /// [`Event::DetachStuck`](crate::core::Event::DetachStuck) and listed by
    /// [`Reconciler::stuck_detaches`](crate::core::Reconciler::stuck_detaches). Looked at on
    /// each periodic sync, so the event comes up to a `sync_period` later.
    ///
    /// Ten minutes: past the six-minute unmount wait, so that a detach that only waited for
    /// an unmount it got in time is never called stuck.
    pub stuck_after: Duration,
    /// Retry pacing of failed operations.
    pub backoff: BackoffConfig,
    /// Concurrency limits per class (attach, detach) and a rate limit on backend calls, with
    /// first-come-first-served queues; unbounded by default. See [`BackendLoad`].
    ///
    /// A call that hangs does not hold its slot for its whole deadline: once it has run
    /// [`OverdueCalls::after`] (15 s by default) it is overdue and gives its slot to the next
    /// queued call, though the core still awaits it. At most [`OverdueCalls::max`] (16) overdue
    /// calls per class hold no slot, so the calls of a class under way never exceed its limit
    /// plus that bound. A node with an overdue call lets other nodes' queued calls go first.
    pub backend_load: BackendLoad,
    /// How long the driver waits for each kind of call to the backend or the store before it
    /// gives up on it. The core only reads the attach and detach deadlines, as how long a
    /// node whose calls hang lets other nodes' calls go first ([`OverdueCalls`]).
    pub call_timeouts: CallTimeouts,
    /// Re-enable upstream Kubernetes bugs. For regression tests and demonstrations only; only
    /// with the `upstream-bugs` feature.
    #[cfg(feature = "upstream-bugs")]
    pub upstream_bugs: UpstreamBugs,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reconcile_period: Duration::from_millis(100),
            sync_period: Duration::from_secs(60),
            verify_batch: 250,
            volumes_per_pass: 250,
            resync_period: Some(Duration::from_secs(5 * 60)),
            max_wait_for_unmount: Duration::from_secs(6 * 60),
            unmount_recheck: Duration::from_secs(5),
            force_detach_on_timeout: false,
            deleted_node_is_fenced: false,
            machine_fencing: None,
            max_pending_workloads: 100_000,
            pending_workload_warning: Duration::from_secs(2 * 60),
            explain_waits_after: None,
            stuck_after: Duration::from_secs(10 * 60),
            backoff: BackoffConfig::default(),
            backend_load: BackendLoad::UNBOUNDED,
            call_timeouts: CallTimeouts::default(),
            #[cfg(feature = "upstream-bugs")]
            upstream_bugs: UpstreamBugs::default(),
        }
    }
}

impl Config {
    /// The longest duration any setting may have: 100 years (of 365 days).
    ///
    /// A period that long already means "never". The bound exists because the core adds
    /// settings to its clock (time since the controller started) and the driver adds that clock
    /// to the instant it started: with every setting at most a century, each such sum stays far
    /// inside what [`Duration`] and every platform's `Instant` can represent, while
    /// [`Duration::MAX`] overflows the first addition.
    pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

    /// Checks that this configuration can run, and returns the first problem found.
    ///
    /// Refused, checked in this order: any duration longer than
    /// [`MAX_DURATION`](Self::MAX_DURATION) (settings in declaration order); a zero
    /// `reconcile_period` together with a zero `backoff.initial` (a failing call would be
    /// retried in a busy loop, hundreds of thousands of calls a second); `backoff.initial`
    /// longer than `backoff.max`; a zero `sync_period` (every pass would verify every
    /// attachment); a zero `verify_batch` (a round could never end); a zero
    /// `volumes_per_pass` (no volume would be looked at); a zero `resync_period`;
    /// a zero `unmount_recheck`; a zero call timeout (every such call would fail at once); a
    /// zero [`BackendLoad`] limit or burst (no call of its class could ever start); a zero
    /// `backend_load.rate.every`; with `backend_load.overdue`, a zero `after` (every call
    /// would be overdue at once), a zero `max` (none ever would), or, for a limited class,
    /// an `after` not shorter than that class's call timeout (the driver would give up on a
    /// call first); with `machine_fencing`, a zero interval (a node's machine
    /// would be asked on every pass) or a `max_age` below the interval (the paced checks could
    /// not keep a confirmation fresh).
    ///
    /// ```
    /// use std::time::Duration;
    /// use attach_detach::config::{BackoffConfig, Config, ConfigError};
    /// assert_eq!(Config::default().validate(), Ok(()));
    /// let busy = Config {
    ///     reconcile_period: Duration::ZERO,
    ///     backoff: BackoffConfig { initial: Duration::ZERO, ..BackoffConfig::default() },
    ///     ..Config::default()
    /// };
    /// assert_eq!(busy.validate(), Err(ConfigError::BusyRetry));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let durations = [
            ("reconcile_period", self.reconcile_period),
            ("sync_period", self.sync_period),
            ("max_wait_for_unmount", self.max_wait_for_unmount),
            ("unmount_recheck", self.unmount_recheck),
            ("pending_workload_warning", self.pending_workload_warning),
            ("stuck_after", self.stuck_after),
            ("backoff.initial", self.backoff.initial),
            ("backoff.max", self.backoff.max),
        ]
        .into_iter()
        .chain(self.resync_period.map(|period| ("resync_period", period)))
        .chain(
            self.explain_waits_after
                .map(|after| ("explain_waits_after", after)),
        )
        .chain(
            self.backend_load
                .rate
                .map(|rate| ("backend_load.rate.every", rate.every)),
        )
        .chain(
            self.backend_load
                .overdue
                .map(|overdue| ("backend_load.overdue.after", overdue.after)),
        )
        .chain(self.machine_fencing.into_iter().flat_map(|m| {
            [
                ("machine_fencing.interval", m.interval),
                ("machine_fencing.max_age", m.max_age),
            ]
        }))
        .chain(self.call_timeouts.fields());
        for (field, value) in durations {
            if value > Self::MAX_DURATION {
                return Err(ConfigError::TooLarge { field, value });
            }
        }
        if self.reconcile_period.is_zero() && self.backoff.initial.is_zero() {
            return Err(ConfigError::BusyRetry);
        }
        if self.backoff.initial > self.backoff.max {
            return Err(ConfigError::BackoffInitialAboveMax {
                initial: self.backoff.initial,
                max: self.backoff.max,
            });
        }
        if self.sync_period.is_zero() {
            return Err(ConfigError::ZeroSyncPeriod);
        }
        if self.verify_batch == 0 {
            return Err(ConfigError::ZeroVerifyBatch);
        }
        if self.volumes_per_pass == 0 {
            return Err(ConfigError::ZeroVolumesPerPass);
        }
        if self.resync_period.is_some_and(|period| period.is_zero()) {
            return Err(ConfigError::ZeroResyncPeriod);
        }
        if self.unmount_recheck.is_zero() {
            return Err(ConfigError::ZeroUnmountRecheck);
        }
        if let Some((field, _)) = self.call_timeouts.fields().find(|(_, t)| t.is_zero()) {
            return Err(ConfigError::ZeroCallTimeout { field });
        }
        if let Some(field) = self.backend_load.zero_field() {
            return Err(ConfigError::ZeroBackendLimit { field });
        }
        if self
            .backend_load
            .rate
            .is_some_and(|rate| rate.every.is_zero())
        {
            return Err(ConfigError::ZeroRateInterval);
        }
        if let Some(overdue) = self.backend_load.overdue {
            if overdue.after.is_zero() {
                return Err(ConfigError::ZeroOverdueAfter);
            }
            if overdue.max == 0 {
                return Err(ConfigError::ZeroOverdueMax);
            }
            // Only a limited class has slots to give back.
            let limited = [
                (
                    self.backend_load.max_attaches,
                    "call_timeouts.attach",
                    self.call_timeouts.attach,
                ),
                (
                    self.backend_load.max_detaches,
                    "call_timeouts.detach",
                    self.call_timeouts.detach,
                ),
            ];
            for (limit, timeout_field, timeout) in limited {
                if limit.is_some() && overdue.after >= timeout {
                    return Err(ConfigError::OverdueAfterPastDeadline {
                        after: overdue.after,
                        timeout_field,
                        timeout,
                    });
                }
            }
        }
        if let Some(m) = self.machine_fencing {
            if m.interval.is_zero() {
                return Err(ConfigError::ZeroMachineCheckInterval);
            }
            if m.max_age < m.interval {
                return Err(ConfigError::MachineMaxAgeBelowInterval {
                    max_age: m.max_age,
                    interval: m.interval,
                });
            }
        }
        Ok(())
    }
}

/// Why [`Config::validate`] refused a configuration. Fields are named as in Rust source
/// (`backoff.initial`, `call_timeouts.attach`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration is longer than [`Config::MAX_DURATION`].
    #[error("{field} is {value:?}, longer than the longest supported duration (100 years)")]
    TooLarge {
        /// The setting.
        field: &'static str,
        /// Its value.
        value: Duration,
    },
    /// `reconcile_period` and `backoff.initial` are both zero: nothing would pace the retries
    /// of a failing call.
    #[error(
        "reconcile_period and backoff.initial are both zero: a failing call would be retried in a busy loop"
    )]
    BusyRetry,
    /// The first retry would wait longer than the longest wait.
    #[error("backoff.initial ({initial:?}) is longer than backoff.max ({max:?})")]
    BackoffInitialAboveMax {
        /// `backoff.initial`.
        initial: Duration,
        /// `backoff.max`.
        max: Duration,
    },
    /// `sync_period` is zero: every reconcile pass would verify every attachment.
    #[error("sync_period is zero: every reconcile pass would verify every attachment")]
    ZeroSyncPeriod,
    /// `verify_batch` is zero: a verify round would take nothing and never end.
    #[error("verify_batch is zero: a verify round would take no attachment per pass and never end")]
    ZeroVerifyBatch,
    /// `volumes_per_pass` is zero: a pass would look at no volume and a round never end.
    #[error(
        "volumes_per_pass is zero: a reconcile pass would look at no volume and its marks would never be reached"
    )]
    ZeroVolumesPerPass,
    /// `unmount_recheck` is zero: a held-back detach would re-read its node on every pass.
    #[error(
        "unmount_recheck is zero: a detach held back by a node still using its volume would re-read the node on every pass"
    )]
    ZeroUnmountRecheck,
    /// `resync_period` is `Some(0)`.
    #[error(
        "resync_period is zero: every reconcile pass would list every attachment (use None to turn the listing off)"
    )]
    ZeroResyncPeriod,
    /// A call timeout is zero: every such call would time out before it started.
    #[error("{field} is zero: every such call would time out at once")]
    ZeroCallTimeout {
        /// The setting.
        field: &'static str,
    },
    /// A backend load limit (`backend_load.max_attaches`, `backend_load.max_detaches`,
    /// `backend_load.rate.burst`) is zero: no call of its class could ever start, and every
    /// workload needing one would wait for ever.
    #[error("{field} is zero: no such backend call could ever start (use None for no limit)")]
    ZeroBackendLimit {
        /// The setting.
        field: &'static str,
    },
    /// `backend_load.rate.every` is zero: a token every instant is no rate at all.
    #[error("backend_load.rate.every is zero: that is no rate limit (use rate: None for none)")]
    ZeroRateInterval,
    /// `backend_load.overdue.after` is zero: every call would be overdue as soon as it is
    /// planned and give its slot back at once, so the limits would bound nothing but the
    /// overdue calls.
    #[error(
        "backend_load.overdue.after is zero: every call would be overdue at once and the limits would bound nothing (use overdue: None to keep every call in its slot)"
    )]
    ZeroOverdueAfter,
    /// `backend_load.overdue.max` is zero: no call could ever be overdue.
    #[error(
        "backend_load.overdue.max is zero: no call could ever be overdue (use overdue: None to keep every call in its slot until it ends)"
    )]
    ZeroOverdueMax,
    /// `backend_load.overdue.after` is not shorter than the deadline of a limited class's calls:
    /// the driver gives up on such a call before it could be overdue, so a hung call would
    /// keep its slot for its whole deadline after all.
    #[error(
        "backend_load.overdue.after ({after:?}) is not shorter than {timeout_field} ({timeout:?}): the driver gives up on a call before it could be overdue"
    )]
    OverdueAfterPastDeadline {
        /// `backend_load.overdue.after`.
        after: Duration,
        /// The call timeout it must be below, by name.
        timeout_field: &'static str,
        /// That timeout.
        timeout: Duration,
    },
    /// `machine_fencing.interval` is zero: an unhealthy node's machine would be asked about on
    /// every pass, and a single answer could count twice.
    #[error(
        "machine_fencing.interval is zero: a node's machine would be asked about on every pass, and two answers an instant apart would fence it"
    )]
    ZeroMachineCheckInterval,
    /// `machine_fencing.max_age` is below `machine_fencing.interval`: the confirmation would
    /// lapse between two paced checks, so detaches would rarely, if ever, go.
    #[error(
        "machine_fencing.max_age ({max_age:?}) is shorter than machine_fencing.interval ({interval:?}): a confirmation would lapse between two checks"
    )]
    MachineMaxAgeBelowInterval {
        /// `machine_fencing.max_age`.
        max_age: Duration,
        /// `machine_fencing.interval`.
        interval: Duration,
    },
}

/// The kinds of call the driver makes to the outside, each with its own deadline in
/// [`CallTimeouts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CallKind {
    /// [`AttachBackend::attach`](crate::traits::AttachBackend::attach).
    Attach,
    /// [`AttachBackend::detach`](crate::traits::AttachBackend::detach).
    Detach,
    /// [`AttachBackend::verify`](crate::traits::AttachBackend::verify).
    Verify,
    /// [`NodeStatusStore::read`](crate::traits::NodeStatusStore::read): the fresh read before a
    /// status write or before a detach.
    StatusRead,
    /// [`NodeStatusStore::write`](crate::traits::NodeStatusStore::write).
    StatusWrite,
    /// [`NodeStatusStore::list`](crate::traits::NodeStatusStore::list), at recovery.
    StoreList,
    /// [`AttachBackend::list`](crate::traits::AttachBackend::list), at recovery.
    BackendList,
    /// [`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state), with
    /// `Config::machine_fencing`.
    MachineState,
}

impl CallKind {
    /// Every kind, in declaration order.
    pub const ALL: [CallKind; 8] = [
        CallKind::Attach,
        CallKind::Detach,
        CallKind::Verify,
        CallKind::StatusRead,
        CallKind::StatusWrite,
        CallKind::StoreList,
        CallKind::BackendList,
        CallKind::MachineState,
    ];

    /// A short lowercase name: `attach`, `status write`, `backend list`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Attach => "attach",
            CallKind::Detach => "detach",
            CallKind::Verify => "verify",
            CallKind::StatusRead => "status read",
            CallKind::StatusWrite => "status write",
            CallKind::StoreList => "store list",
            CallKind::BackendList => "backend list",
            CallKind::MachineState => "machine state",
        }
    }

    /// Whether a call of this kind that timed out may nevertheless have changed something:
    /// only an attach or a detach may (the driver then reports it as
    /// [`BackendError::Uncertain`](crate::traits::BackendError::Uncertain)).
    pub fn may_take_effect(self) -> bool {
        matches!(self, CallKind::Attach | CallKind::Detach)
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long the driver waits for one call to the outside before it gives up on it.
///
/// A call that gets no answer in time is treated as failed: a timed-out attach or detach as
/// [`BackendError::Uncertain`](crate::traits::BackendError::Uncertain) (it may still take effect),
/// a timed-out verify or store call as transient (it changed nothing the driver relies on), and a
/// timed-out recovery listing is retried with the backoff. Each timeout raises an
/// [`Event::CallTimedOut`](crate::core::Event::CallTimedOut) and is counted in the metrics. Without
/// a deadline a single hung call pins its volume, or at start-up the whole controller, forever.
///
/// The defaults:
///
/// - `attach`, `detach`: 2 minutes. Kubernetes' CSI attacher in the controller manager waits up
///   to 2 minutes (`csiTimeout`) for a volume to be attached or detached, and cloud attaches
///   commonly take tens of seconds. (The CSI external-attacher's 15 s per RPC is shorter because
///   it re-issues the same idempotent call; here the core's backoff does that.)
/// - `verify`: 1 minute: one call per node, for all its volumes.
/// - `status_read`, `status_write`: 30 seconds. One node object read or compare-and-set write
///   normally takes milliseconds; 30 s is half the Kubernetes API server's own 60 s request
///   timeout, so the driver gives up on a hung connection before the server would.
/// - `list`: 2 minutes. A recovery listing reads every node or every attachment, so it may take
///   much longer than one call; while it hangs nothing is planned at all, so it must still end.
/// - `machine_state`: 30 seconds, as a store read: one read of a cloud's instance state. A
///   check that times out fences nothing (it counts as a failed check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTimeouts {
    /// [`AttachBackend::attach`](crate::traits::AttachBackend::attach).
    pub attach: Duration,
    /// [`AttachBackend::detach`](crate::traits::AttachBackend::detach).
    pub detach: Duration,
    /// [`AttachBackend::verify`](crate::traits::AttachBackend::verify).
    pub verify: Duration,
    /// [`NodeStatusStore::write`](crate::traits::NodeStatusStore::write), each compare-and-set
    /// call.
    pub status_write: Duration,
    /// [`NodeStatusStore::read`](crate::traits::NodeStatusStore::read), each call (before a write,
    /// after a conflict, before a detach).
    pub status_read: Duration,
    /// [`NodeStatusStore::list`](crate::traits::NodeStatusStore::list) and
    /// [`AttachBackend::list`](crate::traits::AttachBackend::list) at recovery.
    pub list: Duration,
    /// [`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state), with
    /// `Config::machine_fencing`: one read of a cloud's instance state.
    pub machine_state: Duration,
}

impl Default for CallTimeouts {
    fn default() -> Self {
        CallTimeouts {
            attach: Duration::from_secs(2 * 60),
            detach: Duration::from_secs(2 * 60),
            verify: Duration::from_secs(60),
            status_write: Duration::from_secs(30),
            status_read: Duration::from_secs(30),
            list: Duration::from_secs(2 * 60),
            machine_state: Duration::from_secs(30),
        }
    }
}

impl CallTimeouts {
    /// The deadline of a call of `kind`.
    pub fn of(&self, kind: CallKind) -> Duration {
        match kind {
            CallKind::Attach => self.attach,
            CallKind::Detach => self.detach,
            CallKind::Verify => self.verify,
            CallKind::StatusRead => self.status_read,
            CallKind::StatusWrite => self.status_write,
            CallKind::StoreList | CallKind::BackendList => self.list,
            CallKind::MachineState => self.machine_state,
        }
    }

    /// Each setting with its name as [`ConfigError`] spells it.
    fn fields(&self) -> impl Iterator<Item = (&'static str, Duration)> {
        [
            ("call_timeouts.attach", self.attach),
            ("call_timeouts.detach", self.detach),
            ("call_timeouts.verify", self.verify),
            ("call_timeouts.status_write", self.status_write),
            ("call_timeouts.status_read", self.status_read),
            ("call_timeouts.list", self.list),
            ("call_timeouts.machine_state", self.machine_state),
        ]
        .into_iter()
    }
}

/// Exponential backoff: the first retry waits `initial`, each further failure doubles the wait up
/// to `max`. Kept per operation kind, so a failed attach never delays a detach (upstream 75209).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Wait after the first failure.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(500),
            max: Duration::from_millis(2 * 60_000 + 2_000),
        }
    }
}

/// Limits on the backend calls the core plans: concurrency per class and a shared call rate.
/// Part of [`Config`] (`backend_load`).
///
/// The default is unbounded, as upstream Kubernetes: every attach and detach that may start
/// starts at once. Set limits when your backend throttles (cloud APIs do, per account and
/// region) or degrades under load: a burst of attaches at a rollout then neither trips the
/// throttle nor starves the detaches that free volumes for the very pods waiting.
///
/// How to pick values: `max_detaches` and `max_attaches` a little below the concurrency the
/// backend sustains (for a cloud, a few tens each); `rate` a little below the backend's
/// sustained mutating-call quota, minus the verifies (one per node with attachments per
/// `sync_period`), with `burst` what the quota's own bucket allows; `overdue` as
/// [`OverdueCalls`] says.
///
/// ```
/// use std::time::Duration;
/// use attach_detach::config::{BackendLoad, Config, OverdueCalls, RateLimit};
/// let config = Config {
///     backend_load: BackendLoad {
///         max_attaches: Some(20),
///         max_detaches: Some(20),
///         // 10 calls a second, bursts of 20.
///         rate: Some(RateLimit { every: Duration::from_millis(100), burst: 20 }),
///         // A call running 15 s gives its slot back; 16 such calls per class at most.
///         overdue: Some(OverdueCalls::DEFAULT),
///     },
///     ..Config::default()
/// };
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendLoad {
    /// At most this many attach calls under way at once that are not overdue; `None`: no
    /// limit.
    pub max_attaches: Option<usize>,
    /// At most this many detaches under way at once that are not overdue, counting those
    /// admitted to the fresh read that precedes their call; `None`: no limit.
    pub max_detaches: Option<usize>,
    /// A token bucket shared by attach and detach calls; `None`: no rate limit.
    pub rate: Option<RateLimit>,
    /// When a call that hangs gives its slot back, and how many such calls may be under way
    /// beyond each limit; [`OverdueCalls::DEFAULT`] by default. `None`: a call holds its slot
    /// until it ends (its answer, or the driver's deadline), however long it hangs. Used only
    /// with `max_attaches` or `max_detaches`.
    pub overdue: Option<OverdueCalls>,
}

impl Default for BackendLoad {
    fn default() -> Self {
        BackendLoad::UNBOUNDED
    }
}

impl BackendLoad {
    /// No limit at all: the default (with [`OverdueCalls::DEFAULT`], which matters only once
    /// a limit is set).
    pub const UNBOUNDED: BackendLoad = BackendLoad {
        max_attaches: None,
        max_detaches: None,
        rate: None,
        overdue: Some(OverdueCalls::DEFAULT),
    };

    /// The first setting that would stop every call of its class for ever, by name.
    pub(crate) fn zero_field(&self) -> Option<&'static str> {
        if self.max_attaches == Some(0) {
            return Some("backend_load.max_attaches");
        }
        if self.max_detaches == Some(0) {
            return Some("backend_load.max_detaches");
        }
        if self.rate.is_some_and(|r| r.burst == 0) {
            return Some("backend_load.rate.burst");
        }
        None
    }
}

/// When an attach or detach call that has not ended stops counting against its class's limit
/// (part of [`BackendLoad`], `overdue`).
///
/// A call still running `after` after the core planned it is *overdue*: its slot goes to the
/// next queued call, while the core still awaits its answer (or the driver's deadline, which
/// makes it Uncertain); nothing about the volume is assumed meanwhile. At most `max` overdue
/// calls of a class hold no slot at once; a further one keeps its slot until one of them ends.
/// So with `max_attaches: Some(s)`, at most `s` attach calls younger than `after`, and `s +
/// max` in all, are under way. As long as no more than `max` calls of a class hang, a call that
/// hangs holds back the calls queued behind it for `after` at most.
///
/// A node with an overdue call (or whose last overdue call ended without a success) is
/// suspect: its queued calls let other nodes' calls go first, those that join the queue
/// within one call deadline (`Config::call_timeouts`) after them. A hung node's retries and
/// other volumes then take no slot from the other nodes, and still wait a bounded time. A call
/// of the node that ends before it is overdue, or an overdue one that succeeds, clears it.
///
/// Pick `after` a little above the longest a healthy call of your backend takes (a merely slow
/// call counted overdue only lets one more call start), and `max` as the extra calls the
/// backend can take while some hang.
///
/// ```
/// use std::time::Duration;
/// use attach_detach::config::{BackendLoad, Config, OverdueCalls};
/// let config = Config {
///     backend_load: BackendLoad {
///         max_attaches: Some(4),
///         // A healthy attach takes under 2 s here: one running 5 s hangs.
///         overdue: Some(OverdueCalls { after: Duration::from_secs(5), max: 8 }),
///         ..BackendLoad::UNBOUNDED
///     },
///     ..Config::default()
/// };
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverdueCalls {
    /// How long a call runs, from the pass that planned it, before it is overdue; not zero,
    /// and shorter than the call's deadline (`Config::call_timeouts`), or nothing would ever
    /// be overdue.
    pub after: Duration,
    /// The most overdue calls of each class that hold no slot; not zero (use `overdue: None`
    /// to keep every call in its slot).
    pub max: usize,
}

impl OverdueCalls {
    /// 15 s and 16 calls. 15 s is the CSI external-attacher's deadline for one attach or
    /// detach call (`--timeout`): a call running longer is one the CSI sidecar already gives
    /// up on and makes again. 16 calls beyond each limit is the extra load on the backend
    /// while calls hang, and the number of hung nodes (one overdue call each, see fairness)
    /// that healthy nodes can wait past within `after`.
    pub const DEFAULT: OverdueCalls = OverdueCalls {
        after: Duration::from_secs(15),
        max: 16,
    };
}

/// A token bucket: it holds at most `burst` tokens, gains one every `every` of the core's
/// virtual time, and each attach or detach admitted takes one.
///
/// Over any stretch of time `t`, at most `burst + t / every` calls are admitted. Integer
/// arithmetic on [`Duration`]s: the same inputs give the same admissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// One token is added every this long; must not be zero.
    pub every: Duration,
    /// The most tokens the bucket holds (it starts full); must not be zero.
    pub burst: u32,
}

/// Fencing without a human ([`Config::machine_fencing`](crate::config::Config::machine_fencing)):
/// how the core asks the backend whether an unhealthy node's machine is off, and how fresh the
/// answers must be.
///
/// A node that is not healthy, not fenced by the orchestrator, and has volumes whose detach
/// waits (they are still reported mounted, or the node was never heard from) gets one
/// [`Operation::CheckMachine`](crate::core::Operation::CheckMachine) every `interval` while
/// they wait. Two consecutive `Off` answers, the second asked at least `interval` after the
/// first came back, make it count as fenced (force reason
/// [`PoweredOff`](crate::core::ForceReason::PoweredOff)) for as long as the last such answer
/// is at most `max_age` old; the checks go on while detaches wait, to keep it fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineFencing {
    /// The time between the answer of one check and the next check of the same node, and so
    /// the least time between the two `Off` answers that fence a node: a single answer, which
    /// a provider's glitch or a machine rebooting may give, never fences.
    pub interval: Duration,
    /// How old (counted from when the check was asked) the last `Off` answer may be when a
    /// detach is planned on it. Must be at least `interval`, so the paced checks can keep a
    /// confirmation fresh; a run of `Off` answers with a gap longer than this starts over.
    pub max_age: Duration,
}

impl Default for MachineFencing {
    /// Five seconds between checks, answers good for thirty: a powered-off node's volumes
    /// move within about five seconds of the first check, and a check whose answer took long
    /// (the driver's own deadline is `call_timeouts.machine_state`) leaves room to re-check.
    fn default() -> Self {
        MachineFencing {
            interval: Duration::from_secs(5),
            max_age: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn no_waiting_workloads_and_an_immediate_warning_are_valid() {
        // Strict ordering (every out-of-order workload refused) and a warning at the first
        // pass are choices, not mistakes.
        let strict = Config {
            max_pending_workloads: 0,
            pending_workload_warning: Duration::ZERO,
            ..Config::default()
        };
        assert_eq!(strict.validate(), Ok(()));
    }

    #[test]
    fn every_duration_is_bounded() {
        let max = Config::MAX_DURATION;
        let over = max + Duration::from_nanos(1);
        // At the bound is fine (the benches push the sync period out by exactly that much).
        let at_bound = Config {
            reconcile_period: max,
            sync_period: max,
            max_wait_for_unmount: max,
            unmount_recheck: max,
            pending_workload_warning: max,
            stuck_after: max,
            backoff: BackoffConfig { initial: max, max },
            call_timeouts: CallTimeouts {
                attach: max,
                detach: max,
                verify: max,
                status_write: max,
                status_read: max,
                list: max,
                machine_state: max,
            },
            machine_fencing: Some(MachineFencing {
                interval: max,
                max_age: max,
            }),
            ..Config::default()
        };
        assert_eq!(at_bound.validate(), Ok(()));
        type Set = fn(&mut Config, Duration);
        let setters: [(&str, Set); 13] = [
            ("reconcile_period", |c, d| c.reconcile_period = d),
            ("unmount_recheck", |c, d| c.unmount_recheck = d),
            ("sync_period", |c, d| c.sync_period = d),
            ("max_wait_for_unmount", |c, d| c.max_wait_for_unmount = d),
            ("pending_workload_warning", |c, d| {
                c.pending_workload_warning = d
            }),
            ("backoff.initial", |c, d| c.backoff.initial = d),
            ("backoff.max", |c, d| c.backoff.max = d),
            ("call_timeouts.attach", |c, d| c.call_timeouts.attach = d),
            ("call_timeouts.detach", |c, d| c.call_timeouts.detach = d),
            ("call_timeouts.verify", |c, d| c.call_timeouts.verify = d),
            ("call_timeouts.status_write", |c, d| {
                c.call_timeouts.status_write = d
            }),
            ("call_timeouts.status_read", |c, d| {
                c.call_timeouts.status_read = d
            }),
            ("call_timeouts.list", |c, d| c.call_timeouts.list = d),
        ];
        for (field, set) in setters {
            for value in [over, Duration::MAX] {
                let mut config = at_bound.clone();
                set(&mut config, value);
                assert_eq!(
                    config.validate(),
                    Err(ConfigError::TooLarge { field, value }),
                    "{field}"
                );
            }
        }
    }

    #[test]
    fn a_busy_retry_loop_is_refused() {
        let busy = Config {
            reconcile_period: Duration::ZERO,
            backoff: BackoffConfig {
                initial: Duration::ZERO,
                max: secs(1),
            },
            ..Config::default()
        };
        assert_eq!(busy.validate(), Err(ConfigError::BusyRetry));
        // Either one alone still paces retries.
        let paced_by_backoff = Config {
            reconcile_period: Duration::ZERO,
            ..Config::default()
        };
        assert_eq!(paced_by_backoff.validate(), Ok(()));
        let paced_by_passes = Config {
            backoff: busy.backoff,
            ..Config::default()
        };
        assert_eq!(paced_by_passes.validate(), Ok(()));
    }

    #[test]
    fn backoff_must_start_below_its_cap() {
        let inverted = Config {
            backoff: BackoffConfig {
                initial: secs(10),
                max: secs(5),
            },
            ..Config::default()
        };
        assert_eq!(
            inverted.validate(),
            Err(ConfigError::BackoffInitialAboveMax {
                initial: secs(10),
                max: secs(5)
            })
        );
        let flat = Config {
            backoff: BackoffConfig {
                initial: secs(5),
                max: secs(5),
            },
            ..Config::default()
        };
        assert_eq!(flat.validate(), Ok(()));
    }

    #[test]
    fn a_zero_sync_period_is_refused() {
        let config = Config {
            sync_period: Duration::ZERO,
            ..Config::default()
        };
        assert_eq!(config.validate(), Err(ConfigError::ZeroSyncPeriod));
    }

    #[test]
    fn a_zero_verify_batch_is_refused() {
        let config = Config {
            verify_batch: 0,
            ..Config::default()
        };
        assert_eq!(config.validate(), Err(ConfigError::ZeroVerifyBatch));
        assert!(
            ConfigError::ZeroVerifyBatch
                .to_string()
                .contains("verify_batch is zero")
        );
    }

    #[test]
    fn a_zero_volumes_per_pass_is_refused() {
        let config = Config {
            volumes_per_pass: 0,
            ..Config::default()
        };
        assert_eq!(config.validate(), Err(ConfigError::ZeroVolumesPerPass));
        assert!(
            ConfigError::ZeroVolumesPerPass
                .to_string()
                .contains("volumes_per_pass is zero")
        );
    }

    #[test]
    fn a_zero_resync_period_is_refused_and_none_is_fine() {
        let zero = Config {
            resync_period: Some(Duration::ZERO),
            ..Config::default()
        };
        assert_eq!(zero.validate(), Err(ConfigError::ZeroResyncPeriod));
        let huge = Config {
            resync_period: Some(Duration::MAX),
            ..Config::default()
        };
        assert!(matches!(
            huge.validate(),
            Err(ConfigError::TooLarge {
                field: "resync_period",
                ..
            })
        ));
        let off = Config {
            resync_period: None,
            ..Config::default()
        };
        assert_eq!(off.validate(), Ok(()));
    }

    #[test]
    fn zero_call_timeouts_are_refused_by_name() {
        let zero = Duration::ZERO;
        let cases = [
            (
                CallTimeouts {
                    attach: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.attach",
            ),
            (
                CallTimeouts {
                    detach: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.detach",
            ),
            (
                CallTimeouts {
                    verify: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.verify",
            ),
            (
                CallTimeouts {
                    status_write: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.status_write",
            ),
            (
                CallTimeouts {
                    status_read: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.status_read",
            ),
            (
                CallTimeouts {
                    list: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.list",
            ),
            (
                CallTimeouts {
                    machine_state: zero,
                    ..CallTimeouts::default()
                },
                "call_timeouts.machine_state",
            ),
        ];
        for (call_timeouts, field) in cases {
            let config = Config {
                call_timeouts,
                ..Config::default()
            };
            assert_eq!(
                config.validate(),
                Err(ConfigError::ZeroCallTimeout { field })
            );
        }
    }

    #[test]
    fn zero_backend_load_limits_are_refused_by_name() {
        let rate = RateLimit {
            every: Duration::from_millis(100),
            burst: 5,
        };
        let cases = [
            (
                BackendLoad {
                    max_attaches: Some(0),
                    ..BackendLoad::UNBOUNDED
                },
                Err(ConfigError::ZeroBackendLimit {
                    field: "backend_load.max_attaches",
                }),
            ),
            (
                BackendLoad {
                    max_detaches: Some(0),
                    ..BackendLoad::UNBOUNDED
                },
                Err(ConfigError::ZeroBackendLimit {
                    field: "backend_load.max_detaches",
                }),
            ),
            (
                BackendLoad {
                    rate: Some(RateLimit { burst: 0, ..rate }),
                    ..BackendLoad::UNBOUNDED
                },
                Err(ConfigError::ZeroBackendLimit {
                    field: "backend_load.rate.burst",
                }),
            ),
            (
                BackendLoad {
                    rate: Some(RateLimit {
                        every: Duration::ZERO,
                        ..rate
                    }),
                    ..BackendLoad::UNBOUNDED
                },
                Err(ConfigError::ZeroRateInterval),
            ),
            (
                BackendLoad {
                    rate: Some(RateLimit {
                        every: Duration::MAX,
                        ..rate
                    }),
                    ..BackendLoad::UNBOUNDED
                },
                Err(ConfigError::TooLarge {
                    field: "backend_load.rate.every",
                    value: Duration::MAX,
                }),
            ),
            (
                BackendLoad {
                    max_attaches: Some(1),
                    max_detaches: Some(1),
                    rate: Some(RateLimit {
                        every: Config::MAX_DURATION,
                        burst: 1,
                    }),
                    overdue: None,
                },
                Ok(()),
            ),
        ];
        for (backend_load, expected) in cases {
            let config = Config {
                backend_load,
                ..Config::default()
            };
            assert_eq!(config.validate(), expected, "{backend_load:?}");
        }
    }

    #[test]
    fn overdue_calls_are_checked_by_name() {
        let limited = |overdue| Config {
            backend_load: BackendLoad {
                max_attaches: Some(4),
                overdue,
                ..BackendLoad::UNBOUNDED
            },
            ..Config::default()
        };
        let overdue = |after, max| Some(OverdueCalls { after, max });
        assert_eq!(BackendLoad::default().overdue, Some(OverdueCalls::DEFAULT));
        assert_eq!(limited(Some(OverdueCalls::DEFAULT)).validate(), Ok(()));
        assert_eq!(
            limited(None).validate(),
            Ok(()),
            "hung calls keep their slots"
        );
        assert_eq!(
            limited(overdue(Duration::ZERO, 4)).validate(),
            Err(ConfigError::ZeroOverdueAfter)
        );
        assert_eq!(
            limited(overdue(secs(1), 0)).validate(),
            Err(ConfigError::ZeroOverdueMax)
        );
        // Not shorter than the attach deadline: the driver gives up on the call first.
        assert_eq!(
            limited(overdue(secs(120), 4)).validate(),
            Err(ConfigError::OverdueAfterPastDeadline {
                after: secs(120),
                timeout_field: "call_timeouts.attach",
                timeout: secs(120),
            })
        );
        assert_eq!(limited(overdue(secs(119), 4)).validate(), Ok(()));
        // A class without a limit has no slot to give back: its deadline is not compared.
        let detaches = Config {
            backend_load: BackendLoad {
                max_detaches: Some(2),
                overdue: overdue(secs(30), 4),
                ..BackendLoad::UNBOUNDED
            },
            call_timeouts: CallTimeouts {
                attach: secs(10),
                detach: secs(20),
                ..CallTimeouts::default()
            },
            ..Config::default()
        };
        assert_eq!(
            detaches.validate(),
            Err(ConfigError::OverdueAfterPastDeadline {
                after: secs(30),
                timeout_field: "call_timeouts.detach",
                timeout: secs(20),
            })
        );
        assert!(matches!(
            limited(overdue(Duration::MAX, 4)).validate(),
            Err(ConfigError::TooLarge {
                field: "backend_load.overdue.after",
                ..
            })
        ));
        assert_eq!(
            ConfigError::OverdueAfterPastDeadline {
                after: secs(120),
                timeout_field: "call_timeouts.attach",
                timeout: secs(120),
            }
            .to_string(),
            "backend_load.overdue.after (120s) is not shorter than call_timeouts.attach (120s): \
             the driver gives up on a call before it could be overdue"
        );
    }

    #[test]
    fn errors_name_the_setting() {
        assert_eq!(
            ConfigError::TooLarge {
                field: "sync_period",
                value: Duration::MAX
            }
            .to_string(),
            format!(
                "sync_period is {:?}, longer than the longest supported duration (100 years)",
                Duration::MAX
            )
        );
        assert_eq!(
            ConfigError::ZeroCallTimeout {
                field: "call_timeouts.list"
            }
            .to_string(),
            "call_timeouts.list is zero: every such call would time out at once"
        );
    }

    #[test]
    fn machine_fencing_is_off_by_default_and_checked_when_on() {
        assert_eq!(Config::default().machine_fencing, None);
        let with = |interval, max_age| Config {
            machine_fencing: Some(MachineFencing { interval, max_age }),
            ..Config::default()
        };
        assert_eq!(with(secs(5), secs(30)).validate(), Ok(()));
        assert_eq!(with(secs(5), secs(5)).validate(), Ok(()));
        assert_eq!(
            with(Duration::ZERO, secs(30)).validate(),
            Err(ConfigError::ZeroMachineCheckInterval)
        );
        assert_eq!(
            with(secs(10), secs(9)).validate(),
            Err(ConfigError::MachineMaxAgeBelowInterval {
                max_age: secs(9),
                interval: secs(10)
            })
        );
        assert!(matches!(
            with(secs(5), Duration::MAX).validate(),
            Err(ConfigError::TooLarge {
                field: "machine_fencing.max_age",
                ..
            })
        ));
    }

    #[test]
    fn each_call_kind_has_its_deadline() {
        let t = CallTimeouts {
            attach: secs(1),
            detach: secs(2),
            verify: secs(3),
            status_write: secs(4),
            status_read: secs(5),
            list: secs(6),
            machine_state: secs(7),
        };
        let of: Vec<_> = CallKind::ALL.iter().map(|k| t.of(*k).as_secs()).collect();
        assert_eq!(of, vec![1, 2, 3, 5, 4, 6, 6, 7]);
        let may: Vec<_> = CallKind::ALL
            .iter()
            .filter(|k| k.may_take_effect())
            .collect();
        assert_eq!(may, vec![&CallKind::Attach, &CallKind::Detach]);
        assert_eq!(CallKind::BackendList.to_string(), "backend list");
    }
}
