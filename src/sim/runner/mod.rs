//! Runs a scenario: the real controller and core on tokio's paused clock, against the simulated
//! world, with invariants checked as things happen and expectations at their times.
//!
//! Here: what a run reports and how it is started, and the [`Sim`] every part of a run works on.
//! The parts live beside: [`process`] starts and crashes the controller, [`steps`] is the run's
//! loop, [`agents`] the node agents' passes, [`delivery`] the pod changes and their lag,
//! [`actions`] the scenario's actions, [`expect`] its expectations, [`recorder`] the events.

mod actions;
mod agents;
mod clock;
mod delivery;
mod expect;
mod process;
mod recorder;
mod steps;
mod summary;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::SimIds;
use super::backend::{CallLoad, SimBackend};
use super::panics::{self, Tasks};
use super::scenario::{Scenario, UpstreamBug};
use super::timeline::Record;
use super::world::{Violation, World};
use crate::config::{Config, MachineFencing, UpstreamBugs};
use crate::controller::{ControllerHandle, ShutdownReport};
use crate::core::input::Input;
use crate::memory::MemoryStore;

pub use summary::{summary_header, summary_line, violation_line};

/// How often node agents look at their node, as kubelet's volume manager does. Agents pass on
/// this grid (0, 100 ms, 200 ms, ...), but only over nodes where something changed: a pass over
/// any other node would change nothing, so an idle stretch costs no work at all and the paused
/// clock jumps over it.
const AGENT_PERIOD: Duration = Duration::from_millis(100);

/// How long after its placement a pod still waiting is explained in an event.
const EXPLAIN_WAITS_AFTER: Duration = Duration::from_secs(60);

/// How long a run without `run <time>` goes on after its last `at` line, to let the world settle.
pub const SETTLE: Duration = Duration::from_secs(10 * 60);

/// What a scenario run found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Invariants and expectations that did not hold, in the order seen.
    pub violations: Vec<Violation>,
    /// Virtual time of the last change in the world (attach, detach, status write, mount, pod).
    pub converged: Duration,
    /// Virtual time the run ended.
    pub end: Duration,
    /// Attach calls made to the backend.
    pub attach_calls: u64,
    /// Detach calls made to the backend.
    pub detach_calls: u64,
    /// Status write attempts across all nodes.
    pub status_writes: u64,
    /// What the node agents' passes looked at, in volumes and pods considered and counts
    /// moved: a measure of the simulator's own work, which follows what changed in the world
    /// (a mount, a pod placed or deleted, a status write), not how much the world holds.
    pub agent_work: u64,
    /// Every step, one line each (empty unless [`Recording::trace`] asked for it).
    pub trace: Vec<String>,
    /// What happened, structured, in the order seen: what [`render_svg`] draws (empty unless
    /// [`Recording::timeline`] asked for it).
    ///
    /// [`render_svg`]: super::timeline::render_svg
    pub timeline: Vec<Record>,
}

impl Report {
    /// Whether every invariant and expectation held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What a run keeps of what happened, beyond its summary and violations: its trace, its
/// timeline, both or neither. Both grow with everything that happens, a status write listing
/// the node's volumes in each (a node gaining its 5,000th volume one by one writes 12.5
/// million names), so a run whose trace or picture nobody reads keeps neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recording {
    /// Keep [`Report::trace`].
    pub trace: bool,
    /// Keep [`Report::timeline`].
    pub timeline: bool,
}

impl Recording {
    /// The trace and the timeline: what [`run`] keeps.
    pub const ALL: Recording = Recording {
        trace: true,
        timeline: true,
    };
    /// Neither: the summary and the violations only.
    pub const NONE: Recording = Recording {
        trace: false,
        timeline: false,
    };
}

/// Turns the scenario's settings into the core's configuration.
pub fn config_of(scenario: &Scenario) -> Config {
    let s = &scenario.settings;
    let on = |b: UpstreamBug| s.upstream_bugs.contains(&b);
    Config {
        reconcile_period: s.reconcile_period,
        sync_period: s.sync_period,
        // The simulated backend changes only through the controller's own calls, and its
        // listing includes calls under way, so a periodic listing would find nothing the
        // recovery listing did not; off, an idle stretch stays a single clock jump.
        resync_period: None,
        max_wait_for_unmount: s.max_wait_for_unmount,
        force_detach_on_timeout: s.force_detach_on_timeout,
        backend_load: s.backend_load,
        verify_batch: s.verify_batch.unwrap_or(Config::default().verify_batch),
        volumes_per_pass: s
            .volumes_per_pass
            .unwrap_or(Config::default().volumes_per_pass),
        machine_fencing: s.machine_fencing.then(MachineFencing::default),
        // As the Kubernetes adapter runs it (sooner): every long wait is explained, and the
        // recorder holds each explanation to naming what it waits for.
        explain_waits_after: Some(EXPLAIN_WAITS_AFTER),
        upstream_bugs: UpstreamBugs {
            c1_lose_report_on_failed_detach: on(UpstreamBug::C1),
            c2_ignore_uncertain_holder: on(UpstreamBug::C2),
            c3_force_detach_unfenced: on(UpstreamBug::C3),
            c4_sticky_assumed_mount: on(UpstreamBug::C4),
            c5_detach_before_status_ack: on(UpstreamBug::C5),
            c6_diff_against_stale_read: on(UpstreamBug::C6),
            l1_await_unplanned_ack: on(UpstreamBug::L1),
            l2_shared_backend_queue: on(UpstreamBug::L2),
        },
        ..Config::default()
    }
}

/// Runs `scenario` to the end on a fresh single-threaded runtime with a paused clock. The same
/// scenario gives the same report, byte for byte.
///
/// A scenario built in code that [`Scenario::validate`] refuses is not simulated: the report
/// carries the reason as its one violation.
///
/// A panic anywhere in the run fails it with the panic's message: in the controller's task, in
/// the simulated backend or store, in the simulator's own tasks, or in the runner itself.
pub fn run(scenario: &Scenario) -> Report {
    run_with(scenario, Sabotage::None, Recording::ALL)
}

/// [`run`], keeping of the trace and the timeline only what `recording` asks for: the rest of
/// the report is the same.
///
/// ```
/// use attach_detach::sim::{run, run_recording, Recording, scenario::parse};
/// let scenario = parse("node n1\nvolume v single-node\nat 0s pod p on n1 uses v\nrun 10s\n").unwrap();
/// let full = run(&scenario);
/// let bare = run_recording(&scenario, Recording::NONE);
/// assert!(bare.trace.is_empty() && bare.timeline.is_empty());
/// assert_eq!((bare.converged, bare.attach_calls), (full.converged, full.attach_calls));
/// ```
pub fn run_recording(scenario: &Scenario, recording: Recording) -> Report {
    run_with(scenario, Sabotage::None, recording)
}

/// Where [`run_with`] makes the simulator's own parts panic, for the runner's tests: a panic
/// must fail the run however it happens, without relying on a bug staying unfixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sabotage {
    /// Nothing panics.
    None,
    /// The event recorder panics on the first event, inside the controller's task.
    Recorder,
    /// Every status write panics, inside the controller's operation tasks.
    StoreWrite,
    /// Every backend effect panics, in the simulator's own tasks.
    BackendEffect,
    /// The runner panics when it applies the scenario's first action.
    Runner,
}

/// [`run`], with the simulator's own parts made to panic where `sabotage` says.
pub(crate) fn run_with(scenario: &Scenario, sabotage: Sabotage, recording: Recording) -> Report {
    if let Err(error) = scenario.validate() {
        return failed_report(format!("not simulated: {error}"));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return failed_report(format!("no runtime to simulate on: {error}")),
    };
    // The epoch must be read on the paused clock, inside the runtime.
    let run = catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(async { Sim::new(scenario, sabotage, recording).run(scenario).await })
    }));
    run.unwrap_or_else(|payload| {
        failed_report(format!(
            "the simulator panicked: {}",
            panics::message(payload.as_ref())
        ))
    })
}

/// The report of a run that could not be simulated (or not to the end), with the reason.
fn failed_report(message: String) -> Report {
    Report {
        violations: vec![Violation {
            at: Duration::ZERO,
            line: None,
            message,
        }],
        converged: Duration::ZERO,
        end: Duration::ZERO,
        attach_calls: 0,
        detach_calls: 0,
        status_writes: 0,
        agent_work: 0,
        trace: Vec::new(),
        timeline: Vec::new(),
    }
}

/// How to reach the running controller (`None` while none runs), shared with the forwarder.
type Slot = Arc<Mutex<Option<ControllerHandle<SimIds>>>>;

struct Sim {
    epoch: Instant,
    world: Arc<Mutex<World>>,
    store: MemoryStore<SimIds>,
    /// The lagging view an upstream-style status updater diffs against; only with `c6` on.
    cache: Option<Arc<dyn crate::traits::NodeStatusStore<SimIds>>>,
    backend: SimBackend,
    /// The calls the running controller awaits (I6, I7).
    load: CallLoad,
    config: Config,
    status_latency: Duration,
    multi_attach: Arc<Mutex<BTreeSet<String>>>,
    node_full: Arc<Mutex<BTreeSet<String>>>,
    slot: Slot,
    /// The running controller's task, joined to see how it ended.
    controller: Option<JoinHandle<ShutdownReport<SimIds>>>,
    /// The simulator's own tasks: the forwarder and the backend's effects.
    tasks: Tasks,
    /// Notified when a node turns dirty (shared with the world).
    wake: Arc<Notify>,
    forward: mpsc::UnboundedSender<(Instant, Input<SimIds>)>,
    forward_rx: Option<mpsc::UnboundedReceiver<(Instant, Input<SimIds>)>>,
    cache_lag: Duration,
    generation: u64,
    sabotage: Sabotage,
}
