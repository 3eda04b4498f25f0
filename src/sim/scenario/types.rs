//! The scenario as data: what a script says, typed, whether it came from [`parse`](super::parse)
//! or was built in code (a fuzzer's schedule), and the one check such a scenario needs,
//! [`Scenario::validate`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::ScenarioError;
use crate::core::calls::volume::Access;

/// The longest duration a scenario may state: 876000h, 100 years of 365 days.
///
/// Far beyond any incident, and far enough below the limits of [`Duration`] and of the clock's
/// `Instant` that every sum the simulator, the driver and the core form from a scenario's
/// durations (a step's time plus a cache lag plus one and a half latencies, a deadline plus a
/// period) fits with room to spare.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// When the simulator's controller counts a call overdue, unless a scenario says otherwise:
/// after 1 s, five times the simulated backend's default latency (the core's default, 15 s,
/// is meant for clouds whose calls take seconds), with room for 16 overdue calls per class.
pub const SIM_OVERDUE: crate::config::OverdueCalls = crate::config::OverdueCalls {
    after: Duration::from_secs(1),
    max: 16,
};

/// A parsed incident script: what the simulator needs to replay it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scenario {
    /// Timings and switches; the defaults unless a `set` line changed them.
    pub settings: Settings,
    /// Declared nodes, in file order, so the simulator creates them deterministically.
    pub nodes: Vec<String>,
    /// Declared volumes with their access mode, in file order.
    pub volumes: Vec<(String, Access)>,
    /// Volumes declared `claim-only`: a node reaches them by itself (NFS, a local disk), so the
    /// controller makes no backend call for them, only grants them to a node at a time.
    pub claim_only: BTreeSet<String>,
    /// Nodes declared with `attach-limit`: how many volumes each can hold.
    pub attach_limits: BTreeMap<String, AttachLimit>,
    /// The `at` lines, in file order (their times never decrease).
    pub steps: Vec<Step>,
    /// How long to simulate, if the script says; otherwise the runner picks.
    pub run: Option<Duration>,
}

/// How many volumes a node's machine can hold (`node <n> attach-limit <k> [unreported]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachLimit {
    /// The backend refuses (node full) an attach that would go past it.
    pub limit: u32,
    /// The node's facts tell the controller the limit (as Kubernetes' CSINode does); without
    /// it only the backend's refusals do.
    pub reported: bool,
}

/// The knobs an incident depends on: controller periods, cache lag, backend latencies and seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How often the reconciler runs (upstream: 100 ms).
    pub reconcile_period: Duration,
    /// How often attachments are verified against the backend (upstream: 60 s).
    pub sync_period: Duration,
    /// How long a detach waits for the node to unmount before it may be forced (upstream: 6 min).
    pub max_wait_for_unmount: Duration,
    /// Whether an unhealthy node's volumes are force-detached after that wait; off by default
    /// because forcing without fencing can let two kernels write one block device.
    pub force_detach_on_timeout: bool,
    /// Fencing without a human (`set machine-fencing on`): the controller asks the backend
    /// whether an unhealthy node's machine is powered off, and two fresh `Off` answers fence
    /// it ([`MachineFencing::default`](crate::config::MachineFencing) timings). Off by default.
    pub machine_fencing: bool,
    /// How far the controller's view of pods and nodes lags behind the orchestrator's API.
    pub cache_lag: Duration,
    /// How far the node-status cache that an upstream-style updater diffs against (`upstream-bug
    /// c6`) lags behind the store; the source of kubernetes#122413. Our updater never reads it.
    pub status_cache_lag: Duration,
    /// How long the simulated backend takes to attach.
    pub attach_latency: Duration,
    /// How long the simulated backend takes to detach.
    pub detach_latency: Duration,
    /// How long a node status write takes to land in the store.
    pub status_latency: Duration,
    /// Seeds every random choice the simulator makes, so a run replays exactly: 0 (the default)
    /// makes none, so hand-written timelines are exact; any other value varies each backend
    /// and store call's latency between half and one and a half of its setting.
    pub seed: u64,
    /// Upstream bugs whose reproduction is switched on, to show the scenario catches them.
    pub upstream_bugs: BTreeSet<UpstreamBug>,
    /// The controller's backend load limits (`set max-attaches 20`, `set max-detaches 20`,
    /// `set backend-rate 100ms 20`: a token every 100 ms, bursts of 20); unbounded by default.
    /// A call is overdue after 1 s by default ([`SIM_OVERDUE`]; `set overdue-after 3s`, `set
    /// max-overdue 4`).
    pub backend_load: crate::config::BackendLoad,
    /// The most attachments one pass of the periodic verify takes (`set verify-batch 2`);
    /// `None` keeps the core's default ([`Config::verify_batch`](crate::config::Config)).
    pub verify_batch: Option<usize>,
    /// The most marked volumes one reconcile pass looks at (`set volumes-per-pass 2`); `None`
    /// keeps the core's default ([`Config::volumes_per_pass`](crate::config::Config)).
    pub volumes_per_pass: Option<usize>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reconcile_period: Duration::from_millis(100),
            sync_period: Duration::from_secs(60),
            max_wait_for_unmount: Duration::from_secs(6 * 60),
            force_detach_on_timeout: false,
            machine_fencing: false,
            cache_lag: Duration::ZERO,
            status_cache_lag: Duration::ZERO,
            attach_latency: Duration::from_millis(200),
            detach_latency: Duration::from_millis(200),
            status_latency: Duration::from_millis(10),
            seed: 0,
            upstream_bugs: BTreeSet::new(),
            backend_load: crate::config::BackendLoad {
                overdue: Some(SIM_OVERDUE),
                ..crate::config::BackendLoad::UNBOUNDED
            },
            verify_batch: None,
            volumes_per_pass: None,
        }
    }
}

impl Settings {
    /// The keys of the duration-valued settings, in file order (for tests that try each).
    pub fn duration_keys() -> [&'static str; 8] {
        Settings::default().durations_mut().map(|(key, _)| key)
    }

    /// The duration-valued settings with their keys: one table for parsing and printing.
    pub(super) fn durations_mut(&mut self) -> [(&'static str, &mut Duration); 8] {
        [
            ("reconcile-period", &mut self.reconcile_period),
            ("sync-period", &mut self.sync_period),
            ("max-wait-for-unmount", &mut self.max_wait_for_unmount),
            ("cache-lag", &mut self.cache_lag),
            ("status-cache-lag", &mut self.status_cache_lag),
            ("attach-latency", &mut self.attach_latency),
            ("detach-latency", &mut self.detach_latency),
            ("status-latency", &mut self.status_latency),
        ]
    }
}

/// An upstream bug the simulator can reproduce on demand (`set upstream-bug c1 on`), so a
/// scenario can be shown to fail against the behaviour it guards against. The simulator defines
/// what each one reproduces; the parser only names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpstreamBug {
    /// Reproduction `c1`.
    C1,
    /// Reproduction `c2`.
    C2,
    /// Reproduction `c3`.
    C3,
    /// Reproduction `c4`.
    C4,
    /// Reproduction `c5`.
    C5,
    /// Reproduction `c6`.
    C6,
    /// Reproduction `l1`: not upstream's, this crate's own leak put back
    /// ([`UpstreamBugs::l1_await_unplanned_ack`](crate::config::UpstreamBugs)).
    L1,
    /// Reproduction `l2`: one queue and one limit for attaches and detaches
    /// ([`UpstreamBugs::l2_shared_backend_queue`](crate::config::UpstreamBugs)).
    L2,
}

/// One `at` line: an action at a point in virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// When, counted from the start of the scenario.
    pub at: Duration,
    /// The 1-based source line, so a failed expectation can point at its line.
    pub line: usize,
    /// What happens.
    pub action: Action,
}

/// What an `at` line makes happen, or checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A pod is scheduled to a node and needs these volumes.
    Schedule {
        /// The pod.
        pod: String,
        /// Where it is scheduled.
        node: String,
        /// The volumes it uses (at least one).
        volumes: Vec<String>,
    },
    /// A graceful delete: the node agent unmounts, then the pod is gone.
    Delete {
        /// The pod.
        pod: String,
    },
    /// A force delete: gone from the API at once; a live agent unmounts later.
    ForceDelete {
        /// The pod.
        pod: String,
    },
    /// The node's agent stops: nothing unmounts and the node turns unhealthy.
    Crash(String),
    /// The node's agent comes back.
    Recover(String),
    /// The node is marked out-of-service; its pods are force-deleted.
    Fence(String),
    /// The out-of-service mark is removed.
    Unfence(String),
    /// The node's machine is powered off at the provider, with no taint and its pods left in
    /// the API: nothing is mounted any more, its agent is gone (the node turns unhealthy, its
    /// last in-use report stays), and only the backend's machine state says it is off.
    PowerOff(String),
    /// The powered-off machine boots again: a clean boot, its agent reports nothing in use.
    PowerOn(String),
    /// The node object is deleted from the API (its machine runs on, its mounts and pods stay):
    /// the store forgets its status, the controller hears `NodeRemoved`, and its agent's
    /// reports reach nobody until the object is created again (upstream 50721).
    DeleteNode(String),
    /// The node object is created again under the same name, as a re-registering agent does:
    /// a fresh status with nothing listed, whatever the old object listed, and the agent's
    /// current in-use report.
    CreateNode(String),
    /// The node's agent loses the API while its machine runs (a network cut between the node
    /// and the API server, a wedged agent): it neither reports nor hears of changes, so the
    /// store keeps its last in-use report, stale, and its pods run on with their mounts, even
    /// those deleted from the API meanwhile.
    StopReporting(String),
    /// The node's agent reaches the API again: it catches up with the changes it missed and
    /// reports what it has in use.
    ResumeReporting(String),
    /// From now on the agent cannot finish unmounting the volume from the node (upstream
    /// 110721): it stays mounted and reported in use, and a pod deleted gracefully stays
    /// terminating, until the unmount is released or the node fenced (powered off).
    HangUnmount {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// An operator releases the volume from the node (`release <v> from <n>`): the controller
    /// is told the attachment is gone ([`Input::ReleaseVolume`](crate::core::Input)); it
    /// refuses unless the node is fenced.
    ReleaseVolume {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// An operator detaches the volume from the node behind the controller's back, as from a
    /// cloud console (`operator-detach <v> from <n>`): the backend no longer has it there.
    OperatorDetach {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// A hung unmount of the volume on the node ends: the agent finishes it at its next pass.
    ReleaseUnmount {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// The backend can no longer reach the node: every attach, detach and verify about it
    /// hangs (the controller's call deadlines end its waits) and takes effect only once the
    /// partition heals; calls about other nodes go on as usual.
    PartitionBackend(String),
    /// The partition of the node from the backend heals: its hung calls go on.
    HealBackend(String),
    /// The next attach calls of a volume to a node fail.
    FailAttach {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How many consecutive calls fail (at least 1).
        times: u32,
        /// The call errors although the backend did attach.
        uncertain: bool,
    },
    /// The next detach calls of a volume from a node fail.
    FailDetach {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How many consecutive calls fail (at least 1).
        times: u32,
        /// The call errors although the backend did detach.
        uncertain: bool,
    },
    /// The next node status writes for a node fail.
    FailStatus {
        /// The node.
        node: String,
        /// How many consecutive writes fail (at least 1).
        times: u32,
    },
    /// The controller restarts: in-flight calls are lost to it; it recovers from store and
    /// backend.
    RestartController,
    /// A check of the simulated world at this time.
    Expect(Expectation),
}

/// A check the runner makes at a step's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// The pod is in this state.
    Pod {
        /// The pod.
        pod: String,
        /// Its expected state.
        state: PodState,
    },
    /// The backend has the volume attached to the node.
    Attached {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// The backend does not have the volume attached to the node.
    Detached {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// The node's reported list in the store is exactly this (empty for `none`).
    Reported {
        /// The node.
        node: String,
        /// The expected list, in the order written.
        volumes: Vec<String>,
    },
    /// A Multi-Attach event was emitted for the pod.
    Event {
        /// The pod.
        pod: String,
    },
    /// No Multi-Attach event was emitted for the pod.
    NoEvent {
        /// The pod.
        pod: String,
    },
    /// A node-full event named the pod: its volume waits for room on its node.
    NodeFullEvent {
        /// The pod.
        pod: String,
    },
    /// The number of backend calls of one kind for a volume and node so far.
    Calls {
        /// Attach or detach.
        op: CallOp,
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How the seen count compares with `count`.
        cmp: Cmp,
        /// The count to compare with.
        count: u64,
    },
    /// The number of node status writes for a node so far (catches write churn).
    Writes {
        /// The node.
        node: String,
        /// How the seen count compares with `count`.
        cmp: Cmp,
        /// The count to compare with.
        count: u64,
    },
    /// The running controller explains the pod's (or the volume's) wait as `wait`: for a pod,
    /// one of the pairs that hold it back (on its node, or a holder's detach); for a volume,
    /// one of its pairs. With `node`, that pair's node, or for `held-elsewhere` a holder.
    Wait {
        /// A pod's name, or a declared volume's.
        subject: String,
        /// What it waits for.
        wait: ExpectedWait,
        /// The node named, if any.
        node: Option<String>,
    },
}

/// A wait an expectation can name: a kind of [`Wait`](crate::core::Wait), or a pod's
/// missing node or volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpectedWait {
    /// A pair's wait of this kind.
    Kind(crate::core::WaitKind),
    /// The pod names a node or a volume the controller was not told of.
    Missing,
}

/// A pod state an expectation can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodState {
    /// All its volumes are mounted and it runs.
    Running,
    /// It exists but has not started (for instance, waiting for an attach).
    Pending,
    /// It no longer exists.
    Gone,
}

/// A backend call kind an expectation can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallOp {
    /// Attach calls.
    Attach,
    /// Detach calls.
    Detach,
}

/// How a counted value is compared, so that scripts can bound churn as well as require work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `<=`
    Le,
    /// `>=`
    Ge,
}

impl Cmp {
    /// Whether the count the runner `seen` satisfies the comparison with `expected`.
    pub fn holds(self, seen: u64, expected: u64) -> bool {
        match self {
            Cmp::Eq => seen == expected,
            Cmp::Le => seen <= expected,
            Cmp::Ge => seen >= expected,
        }
    }
}

impl Scenario {
    /// Checks what [`parse`] checks of every duration, for a scenario built in code: each one
    /// (settings, step times, `run`) is at most [`MAX_DURATION`]. The runner refuses to simulate
    /// a scenario that fails this, and reports why instead.
    ///
    /// [`parse`]: super::parse
    pub fn validate(&self) -> std::result::Result<(), ScenarioError> {
        let check = |what: String, value: Duration| {
            if value > MAX_DURATION {
                Err(ScenarioError::TooLong { what, value })
            } else {
                Ok(())
            }
        };
        let mut settings = self.settings.clone();
        for (key, value) in settings.durations_mut() {
            check(format!("`set {key}`"), *value)?;
        }
        if let Some(rate) = self.settings.backend_load.rate {
            check("`set backend-rate`".to_string(), rate.every)?;
        }
        if let Some(overdue) = self.settings.backend_load.overdue {
            check("`set overdue-after`".to_string(), overdue.after)?;
        }
        for (index, step) in self.steps.iter().enumerate() {
            let what = format!("the time of step {} (line {})", index + 1, step.line);
            check(what, step.at)?;
        }
        if let Some(run) = self.run {
            check("`run`".to_string(), run)?;
        }
        Ok(())
    }
}
