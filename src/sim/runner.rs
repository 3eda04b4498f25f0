//! Runs a scenario: the real controller and core on tokio's paused clock, against the simulated
//! world, with invariants checked as things happen and expectations at their times.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
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
use super::scenario::{Action, CallOp, Expectation, MAX_DURATION, PodState, Scenario, UpstreamBug};
use super::store::SimStore;
use super::timeline::{Happening, NodeChange, PodPhase, Record};
use super::world::{Phase, Power, SimNode, Violation, World, fmt_time, join};
use crate::actual::NodeFacts;
use crate::config::{Config, MachineFencing, UpstreamBugs};
use crate::controller::{
    Controller, ControllerHandle, EventRecorder, ShutdownReport, World as Start,
};
use crate::event::Event;
use crate::input::Input;
use crate::memory::MemoryStore;
use crate::volume::VolumeSpec;

/// How often node agents look at their node, as kubelet's volume manager does. Agents pass on
/// this grid (0, 100 ms, 200 ms, ...), but only over nodes where something changed: a pass over
/// any other node would change nothing, so an idle stretch costs no work at all and the paused
/// clock jumps over it.
const AGENT_PERIOD: Duration = Duration::from_millis(100);

/// How long a run without `run <time>` goes on after its last step, to let the world settle.
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
    /// The runner panics when it applies the first step.
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

/// `at` on the paused clock. The scenario's bounds keep every time the runner forms far below
/// where `Instant` ends; the fallbacks only keep this from panicking if they did not.
fn instant(epoch: Instant, at: Duration) -> Instant {
    epoch
        .checked_add(at)
        .or_else(|| epoch.checked_add(MAX_DURATION.saturating_mul(4)))
        .unwrap_or(epoch)
}

/// The first agent pass at or after `now` and after the pass at `last`, if any.
fn next_tick(now: Duration, last: Option<Duration>) -> Duration {
    let period = AGENT_PERIOD.as_nanos();
    let mut tick = now.as_nanos().div_ceil(period);
    if let Some(last) = last {
        tick = tick.max(last.as_nanos() / period + 1);
    }
    let nanos = tick.saturating_mul(period);
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// Whether `at` is on the agents' grid.
fn is_tick(at: Duration) -> bool {
    at.as_nanos() % AGENT_PERIOD.as_nanos() == 0
}

/// How to reach the running controller (`None` while none runs), shared with the forwarder.
type Slot = Arc<Mutex<Option<ControllerHandle<SimIds>>>>;

/// A pod change in the orchestrator's API. Node agents see it at once (kubelet watches its own
/// pods directly); the controller sees it after the cache lag, which lets an agent mount for a
/// pod the controller has not heard of yet. Verify-safe-to-detach covers that window.
enum Delivery {
    /// A pod is bound to a node.
    Schedule {
        pod: String,
        node: String,
        volumes: Vec<String>,
    },
    /// A pod is deleted gracefully: its agent unmounts, then it is gone.
    Delete { pod: String },
    /// A pod is gone from the API at once.
    ForceDelete { pod: String },
}

/// The node an event is about, if any.
fn event_node(event: &Event<SimIds>) -> Option<&String> {
    match event {
        Event::MultiAttach { node, .. }
        | Event::AttachSucceeded { node, .. }
        | Event::AttachFailed { node, .. }
        | Event::DetachSucceeded { node, .. }
        | Event::DetachBlocked { node, .. }
        | Event::WaitingForUnmount { node, .. }
        | Event::DetachFailed { node, .. }
        | Event::WorkloadWaiting { node, .. }
        | Event::NodeFull { node, .. }
        | Event::DetachStuck { node, .. }
        | Event::VolumeReleased { node, .. }
        | Event::ReleaseRefused { node, .. }
        | Event::ClaimGranted { node, .. }
        | Event::ClaimReleased { node, .. } => Some(node),
        Event::NodePoweredOff { node } | Event::MachineCheckFailed { node, .. } => Some(node),
        Event::CallTimedOut { node, .. } => node.as_ref(),
        Event::ClaimInDoubt { .. } => None,
    }
}

struct Recorder {
    world: Arc<Mutex<World>>,
    epoch: Instant,
    multi_attach: Arc<Mutex<BTreeSet<String>>>,
    /// The pods named in node-full events.
    node_full: Arc<Mutex<BTreeSet<String>>>,
    sabotaged: bool,
}

impl Recorder {
    fn note(&self, event: &Event<SimIds>) {
        assert!(!self.sabotaged, "sabotaged recorder, given: {event}");
        if let Event::MultiAttach { workloads, .. } = event {
            self.multi_attach.lock().extend(workloads.iter().cloned());
        }
        if let Event::NodeFull { workloads, .. } = event {
            self.node_full.lock().extend(workloads.iter().cloned());
        }
        let mut w = self.world.lock();
        if let Event::ClaimInDoubt { volume, nodes } = event {
            w.claims_in_doubt
                .entry(volume.clone())
                .or_default()
                .extend(nodes.iter().cloned());
        }
        w.now = self.epoch.elapsed();
        if let Event::VolumeReleased { volume, node } = event {
            w.note_release(volume, node);
        }
        // An event can name many pods (all those waiting for one node's attach slot): its
        // message is written only for a trace or a timeline that is kept.
        if w.tracing {
            w.log(format!("event {}: {event}", event.reason()));
        }
        if w.timelining {
            w.record(Happening::Event {
                node: event_node(event).cloned(),
                reason: event.reason().to_string(),
                message: event.to_string(),
                warning: event.is_warning(),
            });
        }
    }
}

impl EventRecorder<SimIds> for Recorder {
    /// The controller contains a recorder's panic and carries on; this one is the simulator's
    /// own bookkeeping, so its panic fails the run first.
    fn record(&self, event: &Event<SimIds>) {
        let noted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.note(event)));
        if let Err(payload) = noted {
            let mut w = self.world.lock();
            w.now = self.epoch.elapsed();
            w.violation(format!(
                "the simulated event recorder panicked: {}",
                super::panics::message(payload.as_ref())
            ));
            drop(w);
            std::panic::resume_unwind(payload);
        }
    }
}

struct Sim {
    epoch: Instant,
    world: Arc<Mutex<World>>,
    store: MemoryStore<SimIds>,
    /// The lagging view an upstream-style status updater diffs against; only with `c6` on.
    cache: Option<Arc<dyn crate::store::NodeStatusStore<SimIds>>>,
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

impl Sim {
    fn new(scenario: &Scenario, sabotage: Sabotage, recording: Recording) -> Self {
        let epoch = Instant::now();
        let mut world = World {
            force_detach_on_timeout: scenario.settings.force_detach_on_timeout,
            max_wait_for_unmount: scenario.settings.max_wait_for_unmount,
            machine_fencing: scenario.settings.machine_fencing,
            // Any fixed non-zero state works for xorshift; a seed of 0 means no jitter.
            rng: scenario.settings.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            tracing: recording.trace,
            timelining: recording.timeline,
            ..World::default()
        };
        let wake = Arc::clone(&world.wake);
        let store = MemoryStore::new();
        for node in &scenario.nodes {
            let mut sim_node = SimNode::new();
            sim_node.attach_limit = scenario.attach_limits.get(node).copied();
            world.nodes.insert(node.clone(), sim_node);
            store.add_node(node.clone());
        }
        for (volume, access) in &scenario.volumes {
            world.volumes.insert(volume.clone(), *access);
        }
        world.claim_only = scenario.claim_only.clone();
        let world = Arc::new(Mutex::new(world));
        let config = config_of(scenario);
        // Only the c6 reproduction reads the lagging view; without one the store keeps no
        // history (and copies no status per write).
        let cache = config.upstream_bugs.c6_diff_against_stale_read.then(|| {
            Arc::new(store.cached(scenario.settings.status_cache_lag))
                as Arc<dyn crate::store::NodeStatusStore<SimIds>>
        });
        let tasks = Tasks::default();
        let backend = SimBackend {
            world: Arc::clone(&world),
            store: store.clone(),
            epoch,
            attach_latency: scenario.settings.attach_latency,
            detach_latency: scenario.settings.detach_latency,
            tasks: tasks.clone(),
            sabotaged: sabotage == Sabotage::BackendEffect,
            load: CallLoad::new(&config_of(scenario), epoch),
        };
        let load = backend.load.clone();
        let (forward, forward_rx) = mpsc::unbounded_channel();
        Sim {
            epoch,
            world,
            store,
            cache,
            backend,
            config,
            status_latency: scenario.settings.status_latency,
            multi_attach: Arc::default(),
            node_full: Arc::default(),
            slot: Arc::default(),
            controller: None,
            tasks,
            wake,
            forward,
            forward_rx: Some(forward_rx),
            cache_lag: scenario.settings.cache_lag,
            generation: 0,
            sabotage,
            load,
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn log(&self, line: String) {
        let mut w = self.world.lock();
        w.now = self.now();
        w.log(line);
    }

    /// The orchestrator's API as a freshly started controller lists it.
    fn snapshot(&self) -> Start<SimIds> {
        let w = self.world.lock();
        let mut start = Start::new();
        for (volume, access) in &w.volumes {
            start = start.volume(
                volume.clone(),
                VolumeSpec {
                    access: *access,
                    payload: (),
                    attach_required: !w.claim_only.contains(volume),
                },
            );
        }
        // The orchestrator lists node objects: a node whose object is gone is not among them,
        // whatever its machine still runs.
        for (name, node) in w.nodes.iter().filter(|(_, n)| n.object) {
            start = start.node(name.clone(), facts_of(node));
        }
        for (name, pod) in &w.pods {
            if matches!(pod.phase, Phase::Pending | Phase::Running) {
                start = start.workload(name.clone(), pod.node.clone(), pod.volumes.clone());
            }
        }
        start
    }

    fn start_controller(&mut self) {
        self.generation = self.generation.saturating_add(1);
        let generation = self.generation;
        let sabotaged = self.sabotage == Sabotage::StoreWrite;
        let store = Arc::new(SimStore {
            inner: Arc::new(self.store.clone()),
            world: Arc::clone(&self.world),
            epoch: self.epoch,
            latency: self.status_latency,
            traced: true,
            sabotaged,
        });
        let recorder = Arc::new(Recorder {
            world: Arc::clone(&self.world),
            epoch: self.epoch,
            multi_attach: Arc::clone(&self.multi_attach),
            node_full: Arc::clone(&self.node_full),
            sabotaged: self.sabotage == Sabotage::Recorder,
        });
        // Each controller counts the calls it awaits afresh: a restarted one's lost calls are
        // no longer its own.
        let backend = self.backend.for_new_controller();
        self.load = backend.load.clone();
        let controller = match Controller::new(
            self.config.clone(),
            Arc::new(backend),
            store,
            self.snapshot(),
        ) {
            Ok(controller) => controller.with_recorder(recorder),
            Err(error) => {
                // A scenario built in code may place a pod on a node it never declared.
                let mut w = self.world.lock();
                w.now = self.epoch.elapsed();
                w.violation(format!("the controller refused to start: {error}"));
                return;
            }
        };
        let controller = match &self.cache {
            Some(cache) => controller.with_status_diff_source(Arc::new(SimStore {
                inner: Arc::clone(cache),
                world: Arc::clone(&self.world),
                epoch: self.epoch,
                latency: self.status_latency,
                traced: false,
                sabotaged,
            })),
            None => controller,
        };
        let (handle, task) = controller.spawn();
        *self.slot.lock() = Some(handle);
        self.controller = Some(task);
        self.log(format!("controller started (generation {generation})"));
        let mut w = self.world.lock();
        w.now = self.now();
        w.note_invisible_claims();
        w.record(Happening::ControllerStarted { generation });
    }

    /// Stops the running controller like a crash, and fails the run if it had panicked.
    async fn stop_controller(&mut self) {
        *self.slot.lock() = None;
        if let Some(task) = self.controller.take() {
            task.abort();
            if let Err(error) = task.await {
                self.panicked("the controller", error);
            }
        }
    }

    /// Records a task's panic as a violation; a cancelled task is no violation.
    fn panicked(&self, what: &str, error: tokio::task::JoinError) {
        if let Some(message) = panics::of_join_error(error) {
            let mut w = self.world.lock();
            w.now = self.epoch.elapsed();
            w.violation(format!("{what} panicked: {message}"));
        }
    }

    /// Fails the run for every simulator task that panicked since the last look.
    fn reap(&self) {
        for message in self.tasks.reap() {
            let mut w = self.world.lock();
            w.now = self.epoch.elapsed();
            w.violation(format!("a simulator task panicked: {message}"));
        }
    }

    /// Sleeps until `at`, or until a node turns dirty if `or_dirty`, or until the controller's
    /// task ends. True when `at` came.
    async fn wait(&mut self, at: Duration, or_dirty: bool) -> bool {
        let deadline = instant(self.epoch, at);
        let task = &mut self.controller;
        let controller = async {
            match task.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => return true,
            () = self.wake.notified(), if or_dirty => return false,
            ended = controller => ended,
        };
        self.controller_ended(ended);
        false
    }

    /// The controller's task ended: it never does on its own (no handle is dropped or shut
    /// down), so it panicked, which fails the run.
    fn controller_ended(&mut self, ended: Result<ShutdownReport<SimIds>, tokio::task::JoinError>) {
        self.controller = None;
        *self.slot.lock() = None;
        match ended {
            Err(error) => self.panicked("the controller", error),
            Ok(_) => self.log("controller stopped on its own".to_string()),
        }
    }

    /// A pod change lands in the world now; the controller hears of it after the lag.
    fn deliver(&self, delivery: Delivery) {
        let input = {
            let mut w = self.world.lock();
            w.now = self.now();
            land(&mut w, delivery)
        };
        if let Some(input) = input {
            self.tell(input);
        }
    }

    /// Sends an input to the controller after the cache lag, in order.
    fn tell(&self, input: Input<SimIds>) {
        let due = instant(self.epoch, self.now().saturating_add(self.cache_lag));
        let _ = self.forward.send((due, input));
    }

    fn spawn_forwarder(&mut self) {
        let Some(mut rx) = self.forward_rx.take() else {
            return;
        };
        let slot = Arc::clone(&self.slot);
        let world = Arc::clone(&self.world);
        let epoch = self.epoch;
        self.tasks.spawn(async move {
            while let Some((due, input)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                // Whichever controller runs now gets it: one started since has listed a world
                // that may not contain this change yet.
                let handle = slot.lock().clone();
                let Some(handle) = handle else { continue };
                if let Err(e) = handle.send(input.clone()).await {
                    let mut w = world.lock();
                    w.now = epoch.elapsed();
                    w.log(format!("controller refused {input:?}: {e}"));
                }
            }
        })
    }

    async fn run(mut self, scenario: &Scenario) -> Report {
        self.spawn_forwarder();
        self.start_controller();
        let last_step = scenario.steps.last().map_or(Duration::ZERO, |s| s.at);
        let end = scenario
            .run
            .unwrap_or_else(|| last_step.saturating_add(SETTLE));
        let mut steps = scenario.steps.iter().peekable();
        let mut last_tick: Option<Duration> = None;
        loop {
            self.reap();
            let now = self.now();
            // Agents pass only when a node is dirty; otherwise the clock jumps to the next step
            // (or the end), unless something turns a node dirty on the way.
            let dirty = !self.world.lock().dirty.is_empty();
            let tick = dirty.then(|| next_tick(now, last_tick));
            let step = steps.peek().map(|s| s.at);
            // And when a breach of I7 seen on the way would have lasted its slack.
            let recheck = self.load.recheck_at();
            let next = (tick.into_iter().chain(step).chain(recheck))
                .min()
                .filter(|at| *at <= end);
            let Some(next) = next else {
                if self.wait(end, true).await {
                    break;
                }
                continue;
            };
            if !self.wait(next, tick.is_none()).await {
                continue;
            }
            self.refresh_listed();
            // I7 as the step finds the world, before the step changes it (a restart starts a
            // new count).
            self.check_slots();
            while let Some(step) = steps.next_if(|s| s.at <= next) {
                self.world.lock().now = next;
                self.apply(step.line, &step.action).await;
            }
            // A step on the grid turns nodes dirty that the agents see in this same pass.
            let due = is_tick(next) && last_tick.is_none_or(|last| next > last);
            if due && !self.world.lock().dirty.is_empty() {
                // A step may have let a write land (a restart awaits the old controller), so
                // the lists agents read are refreshed again right before they look.
                self.refresh_listed();
                // A step may have ended a mount (a fence, a power-off): its excuse goes
                // before an agent could mount the volume again.
                self.world.lock().forget_ended_invisible_claims();
                self.agents();
                last_tick = Some(next);
            }
            self.world.lock().forget_ended_invisible_claims();
            self.check_slots();
        }
        self.refresh_listed();
        self.check_slots();
        let multi = self.multi_attach.lock().clone();
        let full = self.node_full.lock().clone();
        let nodes: Vec<String> = self.world.lock().nodes.keys().cloned().collect();
        let in_use: BTreeMap<String, BTreeSet<String>> = nodes
            .into_iter()
            .map(|node| {
                let reported = self.store.with_status(&node, |status| {
                    status
                        .and_then(|s| s.in_use.as_ref())
                        .map(|list| list.iter().cloned().collect())
                        .unwrap_or_default()
                });
                (node, reported)
            })
            .collect();
        {
            let mut w = self.world.lock();
            w.now = end;
            w.check_final(&multi, &full, &in_use);
        }
        // A crash not seen yet is seen now; a controller still running stops here.
        if let Some(task) = self.controller.take() {
            if task.is_finished() {
                let ended = task.await;
                self.controller_ended(ended);
            } else {
                task.abort();
            }
        }
        self.reap();
        self.tasks.abort_all();
        let writes = {
            let w = self.world.lock();
            w.nodes.keys().map(|n| self.store.writes(n)).sum()
        };
        let mut w = self.world.lock();
        Report {
            violations: std::mem::take(&mut w.violations),
            converged: w.last_change,
            end,
            attach_calls: w.total_calls(CallOp::Attach),
            detach_calls: w.total_calls(CallOp::Detach),
            status_writes: writes,
            agent_work: w.agent_work,
            trace: std::mem::take(&mut w.trace),
            timeline: std::mem::take(&mut w.timeline),
        }
    }

    /// I7 on this step: no call past its overdue time holds a slot that calls wait for.
    fn check_slots(&self) {
        if self.load.is_unlimited() {
            return;
        }
        let handle = self.slot.lock().clone();
        let Some(handle) = handle else { return };
        let breaches = self.load.stuck_slots(&handle.metrics().backend_queue);
        if breaches.is_empty() {
            return;
        }
        let mut w = self.world.lock();
        w.now = self.now();
        for breach in breaches {
            w.violation(breach);
        }
    }

    /// Refreshes the stores' lists the agents and expectations read, for the nodes written to
    /// since the last refresh.
    ///
    /// The store's list is read in place and walked beside the old one, both in volume order:
    /// only the volumes that came onto the list or went off it are copied, and a node's agent
    /// looks at those.
    fn refresh_listed(&self) {
        let mut w = self.world.lock();
        for node in std::mem::take(&mut w.stale_listed) {
            let mut listed = w.listed.remove(&node).unwrap_or_default();
            let (came, gone) = self
                .store
                .with_listed(&node, |now| list_changes(&listed, now))
                .unwrap_or_else(|| {
                    self.store
                        .with_listed(&node, |now| set_changes(&listed, now))
                });
            for v in &gone {
                listed.remove(v);
                w.touch(&node, v);
            }
            for v in came {
                w.touch(&node, &v);
                listed.insert(v);
            }
            w.listed.insert(node, listed);
        }
    }

    /// One agent pass over every dirty node, in name order.
    fn agents(&self) {
        let dirty = std::mem::take(&mut self.world.lock().dirty);
        for node in dirty {
            let pass = {
                let mut w = self.world.lock();
                w.now = self.now();
                // The crate's tests check every pass against the reference, and so do the
                // fuzzers when asked (it takes them about twice as long a run).
                #[cfg(test)]
                let pass = w.agent_checked(&node);
                #[cfg(all(fuzzing, not(test)))]
                let pass = if super::agent_check::wanted() {
                    w.agent_checked(&node)
                } else {
                    w.agent(&node)
                };
                #[cfg(not(any(test, fuzzing)))]
                let pass = w.agent(&node);
                pass
            };
            for pod in pass.gone {
                self.tell(Input::WorkloadRemoved { workload: pod });
            }
            if let Some(in_use) = pass.report {
                // The agent's own status update: fresh in the store, lagging in the cache.
                self.store.set_in_use(&node, in_use);
                let facts = self.world.lock().nodes.get(&node).map(facts_of);
                if let Some(facts) = facts {
                    self.tell(Input::NodeUpdated { node, facts });
                }
            }
        }
    }

    async fn apply(&mut self, line: usize, action: &Action) {
        self.log(format!("step (line {line}): {action}"));
        assert!(
            self.sabotage != Sabotage::Runner,
            "sabotaged runner, at line {line}"
        );
        match action {
            Action::Schedule { pod, node, volumes } => self.deliver(Delivery::Schedule {
                pod: pod.clone(),
                node: node.clone(),
                volumes: volumes.clone(),
            }),
            Action::Delete { pod } => self.deliver(Delivery::Delete { pod: pod.clone() }),
            Action::ForceDelete { pod } => self.force_delete(pod),
            Action::Crash(node) => self.power(node, Power::Crashed, NodeChange::Crash),
            Action::Recover(node) => self.power(node, Power::Up, NodeChange::Recover),
            Action::Fence(node) => {
                // The pods placed there that are not gone, in name order.
                let pods: Vec<String> = {
                    let w = self.world.lock();
                    w.pods_on.get(node).into_iter().flatten().cloned().collect()
                };
                for pod in pods {
                    self.force_delete(&pod);
                }
                self.power(node, Power::Fenced, NodeChange::Fence);
            }
            Action::Unfence(node) => self.power(node, Power::Up, NodeChange::Unfence),
            Action::PowerOff(node) => self.power(node, Power::Off, NodeChange::PowerOff),
            Action::PowerOn(node) => self.power(node, Power::Up, NodeChange::PowerOn),
            Action::DeleteNode(node) => self.delete_node(node),
            Action::CreateNode(node) => self.create_node(node),
            Action::StopReporting(node) => self.reporting(node, false),
            Action::ResumeReporting(node) => self.reporting(node, true),
            Action::HangUnmount { volume, node } => self.hang_unmount(volume, node, true),
            Action::ReleaseUnmount { volume, node } => self.hang_unmount(volume, node, false),
            Action::ReleaseVolume { volume, node } => self.tell(Input::ReleaseVolume {
                volume: volume.clone(),
                node: node.clone(),
            }),
            Action::OperatorDetach { volume, node } => {
                let mut w = self.world.lock();
                w.now = self.now();
                w.operator_detach(volume, node);
            }
            Action::PartitionBackend(node) => self.partition(node, true),
            Action::HealBackend(node) => self.partition(node, false),
            Action::FailAttach {
                volume,
                node,
                times,
                uncertain,
            } => self.fault(CallOp::Attach, volume, node, *times, *uncertain),
            Action::FailDetach {
                volume,
                node,
                times,
                uncertain,
            } => self.fault(CallOp::Detach, volume, node, *times, *uncertain),
            Action::FailStatus { node, times } => self.store.fail_next_write(
                node.clone(),
                *times,
                crate::store::StoreError::transient("injected by the scenario"),
            ),
            Action::RestartController => {
                // A crash, not a shutdown: calls in flight are lost to it.
                self.world.lock().restarted = true;
                self.stop_controller().await;
                self.start_controller();
            }
            Action::Expect(expectation) => self.expect(line, expectation),
        }
    }

    fn fault(&self, op: CallOp, volume: &str, node: &str, times: u32, uncertain: bool) {
        // A fault built in code with `times: 0` counts as one, like the parser's minimum.
        let key = (op, volume.to_string(), node.to_string());
        self.world.lock().faults.push(key, times.max(1), uncertain);
    }

    fn force_delete(&self, pod: &str) {
        self.deliver(Delivery::ForceDelete {
            pod: pod.to_string(),
        });
    }

    fn power(&self, node: &str, power: Power, change: NodeChange) {
        let (facts, report) = {
            let mut w = self.world.lock();
            w.now = self.now();
            let Some(n) = w.nodes.get_mut(node) else {
                return;
            };
            if n.power == power {
                return;
            }
            if power == Power::Fenced || n.power == Power::Fenced || n.power == Power::Off {
                // Fenced means powered off; whatever comes next starts from a clean boot.
                n.mounted.clear();
                n.in_use.clear();
                n.hung.clear();
            }
            if power == Power::Off {
                // Powered off without a taint: no kernel mounts anything any more, but the
                // agent's last in-use report stays, in the store and in the controller's view.
                n.mounted.clear();
                n.hung.clear();
            }
            // An agent that starts (again) reports what it has in use: nothing after a clean
            // boot, its mounts after a crash. (A stopped agent's last report stays in the
            // store: no agent runs to change it; nor does one whose reports reach nobody.)
            let report = (power == Power::Up && n.reporting && n.object)
                .then(|| n.in_use.iter().cloned().collect());
            n.power = power;
            let facts = facts_of(n);
            let object = n.object;
            w.changed();
            w.touch_all(node);
            w.mark(node);
            w.record(Happening::Node {
                node: node.to_string(),
                change,
            });
            if !object {
                // No node object to carry the change: the controller hears of it when one
                // is created again.
                return;
            }
            (facts, report)
        };
        // The store holds the node's fence and health as they are now (a taint, a Ready
        // condition); the controller hears of them through the watch, late.
        let name = node.to_string();
        let mut facts = facts;
        match report {
            Some(in_use) => self.store.set_in_use(&name, in_use),
            // No agent reported: the watch carries the in-use list the store still holds,
            // not the machine's (a clean boot cleared that, but only an agent tells the API).
            None => {
                facts.in_use = self
                    .store
                    .with_status(&name, |status| status.and_then(|s| s.in_use.clone()));
            }
        }
        self.store.set_fenced(&name, facts.fenced);
        self.store.set_healthy(&name, facts.healthy);
        self.tell(Input::NodeUpdated { node: name, facts });
    }

    /// `node delete`: the object goes from the API (the store, then the controller's watch);
    /// the machine, its mounts and its pods stay.
    fn delete_node(&self, node: &str) {
        {
            let mut w = self.world.lock();
            w.now = self.now();
            let Some(n) = w.nodes.get_mut(node) else {
                return;
            };
            if !n.object {
                return;
            }
            n.object = false;
            w.changed();
            w.record(Happening::Node {
                node: node.to_string(),
                change: NodeChange::Delete,
            });
        }
        let name = node.to_string();
        self.store.remove_node(&name);
        self.world.lock().stored_changed(node);
        self.tell(Input::NodeRemoved { node: name });
    }

    /// `node create`: the object comes back under the same name, as its agent re-registers
    /// it: a fresh status that lists nothing, whatever the old one listed, with the agent's
    /// in-use report and the machine's health and fence.
    fn create_node(&self, node: &str) {
        let (facts, in_use) = {
            let mut w = self.world.lock();
            w.now = self.now();
            let Some(n) = w.nodes.get_mut(node) else {
                return;
            };
            if n.object {
                return;
            }
            n.object = true;
            let facts = facts_of(n);
            let in_use: Vec<String> = n.in_use.iter().cloned().collect();
            w.changed();
            w.touch_all(node);
            w.record(Happening::Node {
                node: node.to_string(),
                change: NodeChange::Create,
            });
            (facts, in_use)
        };
        let name = node.to_string();
        self.store.add_node(name.clone());
        self.store.set_in_use(&name, in_use);
        self.store.set_fenced(&name, facts.fenced);
        self.store.set_healthy(&name, facts.healthy);
        self.world.lock().stored_changed(node);
        self.tell(Input::NodeUpdated { node: name, facts });
    }

    /// `node stop-reporting` / `resume-reporting`. A resumed agent reports at its next pass
    /// whatever changed while its reports reached nobody.
    fn reporting(&self, node: &str, on: bool) {
        let mut w = self.world.lock();
        w.now = self.now();
        let Some(n) = w.nodes.get_mut(node) else {
            return;
        };
        if n.reporting == on {
            return;
        }
        n.reporting = on;
        n.resync = on;
        w.touch_all(node);
        w.mark(node);
        w.record(Happening::Node {
            node: node.to_string(),
            change: if on {
                NodeChange::ResumeReporting
            } else {
                NodeChange::StopReporting
            },
        });
    }

    /// `hang unmount` / `release unmount`: the agent looks again at its next pass.
    fn hang_unmount(&self, volume: &str, node: &str, hang: bool) {
        let mut w = self.world.lock();
        w.now = self.now();
        let Some(n) = w.nodes.get_mut(node) else {
            return;
        };
        let changed = if hang {
            n.hung.insert(volume.to_string())
        } else {
            n.hung.remove(volume)
        };
        if !changed {
            return;
        }
        w.touch(node, volume);
        w.mark(node);
        w.record(Happening::Node {
            node: node.to_string(),
            change: if hang {
                NodeChange::HangUnmount(volume.to_string())
            } else {
                NodeChange::ReleaseUnmount(volume.to_string())
            },
        });
    }

    /// `partition backend` / `heal backend`: calls about the node hang until it heals.
    fn partition(&self, node: &str, cut: bool) {
        let mut w = self.world.lock();
        w.now = self.now();
        let changed = if cut {
            w.partitioned.insert(node.to_string())
        } else {
            w.partitioned.remove(node)
        };
        if !changed {
            return;
        }
        if !cut {
            w.healed.notify_waiters();
            // The backend answers for the node again: what was detached by hand there is
            // known to it.
            w.detached_by_hand.retain(|(_, n)| n != node);
        }
        w.record(Happening::Node {
            node: node.to_string(),
            change: if cut {
                NodeChange::Partition
            } else {
                NodeChange::Heal
            },
        });
    }

    fn expect(&self, line: usize, expectation: &Expectation) {
        let seen: Result<(), String> = {
            let w = self.world.lock();
            match expectation {
                Expectation::Pod { pod, state } => {
                    let phase = w.pods.get(pod).map_or(Phase::Gone, |p| p.phase);
                    let now = match phase {
                        Phase::Running => PodState::Running,
                        Phase::Pending | Phase::Terminating => PodState::Pending,
                        Phase::Gone => PodState::Gone,
                    };
                    if now == *state {
                        Ok(())
                    } else {
                        Err(format!("pod {pod} is {phase:?}"))
                    }
                }
                Expectation::Attached { volume, node } | Expectation::Detached { volume, node } => {
                    let want = matches!(expectation, Expectation::Attached { .. });
                    if w.is_attached(volume, node) == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "{volume} is {} {node}",
                            if want {
                                "not attached to"
                            } else {
                                "attached to"
                            }
                        ))
                    }
                }
                Expectation::Reported { node, volumes } => {
                    let want: BTreeSet<String> = volumes.iter().cloned().collect();
                    let seen = w.listed.get(node).cloned().unwrap_or_default();
                    if seen == want {
                        Ok(())
                    } else {
                        Err(format!("{node} reports [{}]", join(&seen)))
                    }
                }
                Expectation::Event { pod } | Expectation::NoEvent { pod } => {
                    let want = matches!(expectation, Expectation::Event { .. });
                    let seen = self.multi_attach.lock().contains(pod);
                    if seen == want {
                        Ok(())
                    } else if seen {
                        Err(format!("a Multi-Attach event named {pod}"))
                    } else {
                        Err(format!("no Multi-Attach event named {pod}"))
                    }
                }
                Expectation::NodeFullEvent { pod } => {
                    if self.node_full.lock().contains(pod) {
                        Ok(())
                    } else {
                        Err(format!("no node-full event named {pod}"))
                    }
                }
                Expectation::Calls {
                    op,
                    volume,
                    node,
                    cmp,
                    count,
                } => {
                    let seen = w
                        .calls
                        .get(&(*op, volume.clone(), node.clone()))
                        .copied()
                        .unwrap_or(0);
                    if cmp.holds(seen, *count) {
                        Ok(())
                    } else {
                        Err(format!("{seen} {op} calls"))
                    }
                }
                Expectation::Writes { node, cmp, count } => {
                    let seen = self.store.writes(node);
                    if cmp.holds(seen, *count) {
                        Ok(())
                    } else {
                        Err(format!("{seen} status writes"))
                    }
                }
            }
        };
        let mut w = self.world.lock();
        match seen {
            Ok(()) => w.log(format!("ok: expect {expectation}")),
            Err(seen) => {
                let message = format!("expected {expectation}, seen: {seen}");
                w.log(format!("FAILED (line {line}) {message}"));
                let at = w.now;
                w.violations.push(Violation {
                    at,
                    line: Some(line),
                    message,
                });
            }
        }
    }
}

/// The volumes on `now` and not on `before` (came), and on `before` and not on `now` (gone),
/// found walking the two side by side in volume order, each name compared once, only the
/// changes copied. `None` if `now` is out of order (no store of this crate writes such a list):
/// [`set_changes`] compares it as a set.
fn list_changes(
    before: &BTreeSet<String>,
    now: &mut dyn Iterator<Item = &String>,
) -> Option<(Vec<String>, Vec<String>)> {
    let (mut came, mut gone) = (Vec::new(), Vec::new());
    let mut old = before.iter().peekable();
    let mut last: Option<&String> = None;
    for v in now {
        if last.is_some_and(|last| last >= v) {
            return None;
        }
        last = Some(v);
        loop {
            match old.peek().map(|o| o.as_str().cmp(v)) {
                Some(Ordering::Less) => gone.extend(old.next().cloned()),
                Some(Ordering::Equal) => {
                    old.next();
                    break;
                }
                Some(Ordering::Greater) | None => {
                    came.push(v.clone());
                    break;
                }
            }
        }
    }
    gone.extend(old.cloned());
    Some((came, gone))
}

/// [`list_changes`] for a list in any order.
fn set_changes(
    before: &BTreeSet<String>,
    now: &mut dyn Iterator<Item = &String>,
) -> (Vec<String>, Vec<String>) {
    let now: BTreeSet<&String> = now.collect();
    let came = now
        .iter()
        .filter(|v| !before.contains(**v))
        .map(|v| (*v).clone())
        .collect();
    let gone = before
        .iter()
        .filter(|v| !now.contains(v))
        .cloned()
        .collect();
    (came, gone)
}

/// A delivery lands in the world; returns what the controller must be told.
fn land(w: &mut World, delivery: Delivery) -> Option<Input<SimIds>> {
    match delivery {
        Delivery::Schedule { pod, node, volumes } => {
            w.schedule(&pod, &node, volumes.clone());
            w.record(Happening::Pod {
                pod: pod.clone(),
                node: node.clone(),
                phase: PodPhase::Scheduled,
            });
            w.changed();
            Some(Input::WorkloadScheduled {
                workload: pod,
                node,
                volumes,
            })
        }
        Delivery::Delete { pod } => {
            let node = w.terminate(&pod)?;
            w.record(Happening::Pod {
                pod,
                node,
                phase: PodPhase::Terminating,
            });
            None
        }
        Delivery::ForceDelete { pod } => {
            let node = w.force_delete(&pod)?;
            w.record(Happening::Pod {
                pod: pod.clone(),
                node,
                phase: PodPhase::Gone,
            });
            w.changed();
            Some(Input::WorkloadRemoved { workload: pod })
        }
    }
}

fn facts_of(node: &SimNode) -> NodeFacts<String> {
    NodeFacts {
        healthy: node.power == Power::Up,
        fenced: node.power == Power::Fenced,
        in_use: Some(node.in_use.iter().cloned().collect()),
        attach_limit: node.attach_limit.filter(|l| l.reported).map(|l| l.limit),
    }
}

/// One line of the summary table.
pub fn summary_line(name: &str, report: &Report) -> String {
    format!(
        "{:<44} {:<6} {:>10} {:>7} {:>7} {:>7}",
        name,
        if report.passed() { "pass" } else { "FAIL" },
        fmt_time(report.converged),
        report.attach_calls,
        report.detach_calls,
        report.status_writes
    )
}

/// One violation as the simulator prints it: `file:line: at <time>: <message>`, or without the
/// line for an invariant (or a panic), which belongs to no line.
pub fn violation_line(name: &str, violation: &Violation) -> String {
    let at = match violation.line {
        Some(line) => format!("{name}:{line}"),
        None => name.to_string(),
    };
    format!("{at}: at {:?}: {}", violation.at, violation.message)
}

/// The summary table's header.
pub fn summary_header() -> String {
    format!(
        "{:<44} {:<6} {:>10} {:>7} {:>7} {:>7}",
        "scenario", "result", "converged", "attach", "detach", "writes"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario::parse;

    const SCENARIO: &str = "node a\nvolume v single-node\n\
        at 0s pod p on a uses v\nat 5s expect pod p running\nrun 10s\n";

    /// Wherever a panic happens, the run fails with a violation carrying its message, and the
    /// simulator prints it: the parts are made to panic on purpose, so the test does not
    /// depend on any bug staying unfixed.
    #[test]
    fn a_panic_anywhere_fails_the_run_with_its_message() {
        let scenario = parse(SCENARIO).unwrap();
        assert!(run_with(&scenario, Sabotage::None, Recording::ALL).passed());
        let cases = [
            (
                Sabotage::Recorder,
                "the simulated event recorder panicked: sabotaged recorder, given: ",
            ),
            (
                Sabotage::StoreWrite,
                "the simulated store write panicked: sabotaged store write of a",
            ),
            (
                Sabotage::BackendEffect,
                "a simulator task panicked: sabotaged attach effect of v on a",
            ),
            (
                Sabotage::Runner,
                "the simulator panicked: sabotaged runner, at line 3",
            ),
        ];
        for (sabotage, message) in cases {
            let report = run_with(&scenario, sabotage, Recording::ALL);
            assert!(!report.passed(), "{sabotage:?}");
            let panic = report
                .violations
                .iter()
                .find(|v| v.message.starts_with(message))
                .unwrap_or_else(|| panic!("{sabotage:?}: {:#?}", report.violations));
            assert!(violation_line("x.scn", panic).contains(message));
        }
    }

    /// A panic is reported when it happens, and a restarted controller whose recorder panics
    /// again is reported again. (The controller itself contains a recorder's panic and carries
    /// on; the simulator's recorder reports its own.)
    #[test]
    fn each_recorder_panic_is_reported_when_it_happens() {
        let text = "node a\nvolume v single-node\nvolume w single-node\n\
            at 0s pod p on a uses v\nat 6s restart controller\nat 6500ms pod q on a uses w\n\
            run 10s\n";
        let report = run_with(&parse(text).unwrap(), Sabotage::Recorder, Recording::ALL);
        let panics: Vec<Duration> = report
            .violations
            .iter()
            .filter(|v| {
                v.message
                    .starts_with("the simulated event recorder panicked")
            })
            .map(|v| v.at)
            .collect();
        // Each generation's recorder panics on its first event, soon after it starts.
        assert!(
            panics.first().is_some_and(|t| *t < Duration::from_secs(1)),
            "{panics:?}"
        );
        assert!(
            panics
                .iter()
                .any(|t| *t > Duration::from_secs(6) && *t < Duration::from_secs(8)),
            "{panics:?}"
        );
    }

    /// An attach fault built in code with `times: 0` fails one call, as `times 1` does (the
    /// parser refuses `times 0`), where the fault queue alone would queue nothing.
    #[test]
    fn a_backend_fault_of_zero_times_fails_one_call() {
        let text = "node a\nvolume v single-node\nat 0s fail attach v on a\n\
            at 0s pod p on a uses v\nat 5s expect pod p running\nrun 10s\n";
        let once = parse(text).unwrap();
        let mut zero = once.clone();
        let Action::FailAttach { times, .. } = &mut zero.steps[0].action else {
            panic!("the first step is the fault: {:?}", zero.steps[0]);
        };
        *times = 0;
        let (once, zero) = (run(&once), run(&zero));
        assert!(once.passed(), "{:?}", once.violations);
        assert_eq!(once.attach_calls, 2);
        // The same run (its trace differs only in the step's line, which prints `times 0`).
        assert_eq!(zero.attach_calls, 2);
        assert_eq!(zero.converged, once.converged);
    }

    /// A list's changes are found walking it beside the old one, in order or not.
    #[test]
    fn list_changes_are_what_came_and_what_went() {
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        let changes = |before: &[&str], now: &[&str]| {
            let now: Vec<String> = now.iter().map(|n| n.to_string()).collect();
            let as_set = set_changes(&set(before), &mut now.iter());
            let walked = list_changes(&set(before), &mut now.iter());
            if now.is_sorted() && now.windows(2).all(|w| w[0] != w[1]) {
                assert_eq!(walked.as_ref(), Some(&as_set), "{now:?}");
            } else {
                assert_eq!(walked, None, "{now:?}");
            }
            as_set
        };
        let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(changes(&[], &[]), (vec![], vec![]));
        assert_eq!(
            changes(&["v1", "v3", "v5"], &["v0", "v1", "v4", "v5", "v6"]),
            (strings(&["v0", "v4", "v6"]), strings(&["v3"]))
        );
        assert_eq!(
            changes(&["a", "b"], &["c", "a", "c"]),
            (strings(&["c"]), strings(&["b"]))
        );
        assert_eq!(changes(&["a", "b"], &[]), (vec![], strings(&["a", "b"])));
    }

    #[test]
    fn agent_ticks_are_on_the_grid_and_move_forward() {
        let ms = Duration::from_millis;
        assert_eq!(next_tick(ms(0), None), ms(0));
        assert_eq!(next_tick(ms(1), None), ms(100));
        assert_eq!(next_tick(ms(100), None), ms(100));
        assert_eq!(next_tick(ms(100), Some(ms(100))), ms(200));
        assert_eq!(next_tick(ms(150), Some(ms(100))), ms(200));
        assert_eq!(next_tick(Duration::from_nanos(1), Some(ms(500))), ms(600));
        assert_eq!(next_tick(MAX_DURATION, None), MAX_DURATION);
        assert_eq!(next_tick(Duration::MAX, None), Duration::MAX);
        assert!(is_tick(ms(300)) && !is_tick(ms(310)));
    }
}
