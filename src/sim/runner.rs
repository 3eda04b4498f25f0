//! Runs a scenario: the real controller and core on tokio's paused clock, against the simulated
//! world, with invariants checked as things happen and expectations at their times.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::SimIds;
use super::backend::SimBackend;
use super::scenario::{Action, CallOp, Expectation, PodState, Scenario, UpstreamBug};
use super::store::SimStore;
use super::world::{Fault, Phase, Power, SimNode, SimPod, Violation, World, fmt_time, join};
use crate::actual::NodeFacts;
use crate::config::{Config, UpstreamBugs};
use crate::controller::{
    Controller, ControllerHandle, EventRecorder, Input, ShutdownReport, World as Start,
};
use crate::event::Event;
use crate::memory::MemoryStore;
use crate::volume::VolumeSpec;

/// How often node agents look at their node, as kubelet's volume manager does.
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
    /// Every step, one line each.
    pub trace: Vec<String>,
}

impl Report {
    /// Whether every invariant and expectation held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Turns the scenario's settings into the core's configuration.
pub fn config_of(scenario: &Scenario) -> Config {
    let s = &scenario.settings;
    let on = |b: UpstreamBug| s.upstream_bugs.contains(&b);
    Config {
        reconcile_period: s.reconcile_period,
        sync_period: s.sync_period,
        max_wait_for_unmount: s.max_wait_for_unmount,
        force_detach_on_timeout: s.force_detach_on_timeout,
        upstream_bugs: UpstreamBugs {
            c1_lose_report_on_failed_detach: on(UpstreamBug::C1),
            c2_ignore_uncertain_holder: on(UpstreamBug::C2),
            c3_force_detach_unfenced: on(UpstreamBug::C3),
            c4_sticky_assumed_mount: on(UpstreamBug::C4),
            c5_detach_before_status_ack: on(UpstreamBug::C5),
            c6_diff_against_stale_read: on(UpstreamBug::C6),
        },
        ..Config::default()
    }
}

/// Runs `scenario` to the end on a fresh single-threaded runtime with a paused clock. The same
/// scenario gives the same report, byte for byte.
///
/// Panics if the controller refuses the scenario's settings: check
/// [`config_of`]`(scenario).validate()` first.
pub fn run(scenario: &Scenario) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    // The epoch must be read on the paused clock, inside the runtime.
    runtime.block_on(async { Sim::new(scenario).run(scenario).await })
}

/// The running controller.
struct Slot {
    handle: ControllerHandle<SimIds>,
    task: JoinHandle<ShutdownReport<SimIds>>,
}

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

struct Recorder {
    world: Arc<Mutex<World>>,
    epoch: Instant,
    multi_attach: Arc<Mutex<BTreeSet<String>>>,
}

impl EventRecorder<SimIds> for Recorder {
    fn record(&self, event: &Event<SimIds>) {
        if let Event::MultiAttach { workloads, .. } = event {
            self.multi_attach.lock().extend(workloads.iter().cloned());
        }
        let mut w = self.world.lock();
        w.now = self.epoch.elapsed();
        w.log(format!("event {}: {event}", event.reason()));
    }
}

struct Sim {
    epoch: Instant,
    world: Arc<Mutex<World>>,
    store: MemoryStore<SimIds>,
    cache: Arc<dyn crate::store::NodeStatusStore<SimIds>>,
    backend: SimBackend,
    config: Config,
    status_latency: Duration,
    multi_attach: Arc<Mutex<BTreeSet<String>>>,
    slot: Arc<Mutex<Option<Slot>>>,
    forward: mpsc::UnboundedSender<(Instant, Input<SimIds>)>,
    forward_rx: Option<mpsc::UnboundedReceiver<(Instant, Input<SimIds>)>>,
    cache_lag: Duration,
    generation: std::cell::Cell<u64>,
}

impl Sim {
    fn new(scenario: &Scenario) -> Self {
        let epoch = Instant::now();
        let mut world = World {
            force_detach_on_timeout: scenario.settings.force_detach_on_timeout,
            // Any fixed non-zero state works for xorshift; a seed of 0 means no jitter.
            rng: scenario.settings.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ..World::default()
        };
        let store = MemoryStore::new();
        for node in &scenario.nodes {
            world.nodes.insert(
                node.clone(),
                SimNode {
                    power: Power::Up,
                    mounted: BTreeSet::new(),
                    in_use: BTreeSet::new(),
                },
            );
            store.add_node(node.clone());
        }
        for (volume, access) in &scenario.volumes {
            world.volumes.insert(volume.clone(), *access);
        }
        let world = Arc::new(Mutex::new(world));
        let cache = Arc::new(store.cached(scenario.settings.status_cache_lag));
        let backend = SimBackend {
            world: Arc::clone(&world),
            store: store.clone(),
            epoch,
            attach_latency: scenario.settings.attach_latency,
            detach_latency: scenario.settings.detach_latency,
        };
        let (forward, forward_rx) = mpsc::unbounded_channel();
        Sim {
            epoch,
            world,
            store,
            cache,
            backend,
            config: config_of(scenario),
            status_latency: scenario.settings.status_latency,
            multi_attach: Arc::default(),
            slot: Arc::new(Mutex::new(None)),
            forward,
            forward_rx: Some(forward_rx),
            cache_lag: scenario.settings.cache_lag,
            generation: std::cell::Cell::new(0),
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
                },
            );
        }
        for (name, node) in &w.nodes {
            start = start.node(name.clone(), facts_of(node));
        }
        for (name, pod) in &w.pods {
            if matches!(pod.phase, Phase::Pending | Phase::Running) {
                start = start.workload(name.clone(), pod.node.clone(), pod.volumes.clone());
            }
        }
        start
    }

    fn start_controller(&self) {
        let generation = self.generation.get() + 1;
        self.generation.set(generation);
        let store = Arc::new(SimStore {
            inner: Arc::new(self.store.clone()),
            world: Arc::clone(&self.world),
            epoch: self.epoch,
            latency: self.status_latency,
            traced: true,
        });
        let diff_source = Arc::new(SimStore {
            inner: Arc::clone(&self.cache),
            world: Arc::clone(&self.world),
            epoch: self.epoch,
            latency: self.status_latency,
            traced: false,
        });
        let recorder = Arc::new(Recorder {
            world: Arc::clone(&self.world),
            epoch: self.epoch,
            multi_attach: Arc::clone(&self.multi_attach),
        });
        let controller = Controller::new(
            self.config.clone(),
            Arc::new(self.backend.clone()),
            store,
            self.snapshot(),
        )
        .expect("valid settings (see `run`), and a world naming only declared nodes and volumes")
        .with_recorder(recorder)
        .with_status_diff_source(diff_source);
        let (handle, task) = controller.spawn();
        *self.slot.lock() = Some(Slot { handle, task });
        self.log(format!("controller started (generation {generation})"));
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
        let _ = self.forward.send((Instant::now() + self.cache_lag, input));
    }

    fn spawn_forwarder(&mut self) -> JoinHandle<()> {
        let mut rx = self.forward_rx.take().expect("one forwarder");
        let slot = Arc::clone(&self.slot);
        let world = Arc::clone(&self.world);
        let epoch = self.epoch;
        tokio::spawn(async move {
            while let Some((due, input)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                // Whichever controller runs now gets it: one started since has listed a world
                // that may not contain this change yet.
                let handle = slot.lock().as_ref().map(|s| s.handle.clone());
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
        let forwarder = self.spawn_forwarder();
        self.start_controller();
        let last_step = scenario.steps.last().map_or(Duration::ZERO, |s| s.at);
        let end = scenario.run.unwrap_or(last_step + SETTLE);
        let mut steps = scenario.steps.iter().peekable();
        let mut next_agent = Duration::ZERO;
        loop {
            let next_step = steps.peek().map(|s| s.at);
            let next = next_step.map_or(next_agent, |s| s.min(next_agent));
            if next > end {
                break;
            }
            tokio::time::sleep_until(self.epoch + next).await;
            self.refresh_listed();
            while let Some(step) = steps.next_if(|s| s.at <= next) {
                self.world.lock().now = next;
                self.apply(step.line, &step.action).await;
            }
            if next_agent <= next {
                self.agents();
                next_agent += AGENT_PERIOD;
            }
        }
        tokio::time::sleep_until(self.epoch + end).await;
        self.refresh_listed();
        let multi = self.multi_attach.lock().clone();
        {
            let mut w = self.world.lock();
            w.now = end;
            w.check_final(&multi);
        }
        if let Some(slot) = self.slot.lock().take() {
            slot.task.abort();
        }
        forwarder.abort();
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
            trace: std::mem::take(&mut w.trace),
        }
    }

    fn refresh_listed(&self) {
        let mut w = self.world.lock();
        let nodes: Vec<String> = w.nodes.keys().cloned().collect();
        for node in nodes {
            let listed = self
                .store
                .status(&node)
                .map(|s| s.attached.into_iter().map(|r| r.volume).collect())
                .unwrap_or_default();
            w.listed.insert(node, listed);
        }
    }

    fn agents(&self) {
        let nodes: Vec<String> = self.world.lock().nodes.keys().cloned().collect();
        for node in nodes {
            let report = {
                let mut w = self.world.lock();
                w.now = self.now();
                let gone_before: BTreeSet<String> = gone(&w);
                let report = w.agent(&node);
                let removed: Vec<String> = gone(&w).difference(&gone_before).cloned().collect();
                (report, removed)
            };
            let (in_use, removed) = report;
            for pod in removed {
                self.tell(Input::WorkloadRemoved { workload: pod });
            }
            if let Some(in_use) = in_use {
                // The agent's own status update: fresh in the store, lagging in the cache.
                self.store.set_in_use(&node, in_use);
                let facts = facts_of(&self.world.lock().nodes[&node]);
                self.tell(Input::NodeUpdated { node, facts });
            }
        }
    }

    async fn apply(&self, line: usize, action: &Action) {
        self.log(format!("step (line {line}): {action}"));
        match action {
            Action::Schedule { pod, node, volumes } => self.deliver(Delivery::Schedule {
                pod: pod.clone(),
                node: node.clone(),
                volumes: volumes.clone(),
            }),
            Action::Delete { pod } => self.deliver(Delivery::Delete { pod: pod.clone() }),
            Action::ForceDelete { pod } => self.force_delete(pod),
            Action::Crash(node) => self.power(node, Power::Crashed),
            Action::Recover(node) => self.power(node, Power::Up),
            Action::Fence(node) => {
                let pods: Vec<String> = {
                    let w = self.world.lock();
                    w.pods
                        .iter()
                        .filter(|(_, p)| p.node == *node && p.phase != Phase::Gone)
                        .map(|(name, _)| name.clone())
                        .collect()
                };
                for pod in pods {
                    self.force_delete(&pod);
                }
                self.power(node, Power::Fenced);
            }
            Action::Unfence(node) => self.power(node, Power::Up),
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
                crate::store::StoreError::Transient {
                    message: "injected by the scenario".into(),
                },
            ),
            Action::RestartController => {
                // A crash, not a shutdown: calls in flight are lost to it.
                let old = self.slot.lock().take();
                if let Some(old) = old {
                    old.task.abort();
                    let _ = old.task.await;
                }
                self.start_controller();
            }
            Action::Expect(expectation) => self.expect(line, expectation),
        }
    }

    fn fault(&self, op: CallOp, volume: &str, node: &str, times: u32, uncertain: bool) {
        self.world.lock().faults.push(Fault {
            op,
            volume: volume.to_string(),
            node: node.to_string(),
            times,
            uncertain,
        });
    }

    fn force_delete(&self, pod: &str) {
        self.deliver(Delivery::ForceDelete {
            pod: pod.to_string(),
        });
    }

    fn power(&self, node: &str, power: Power) {
        let facts = {
            let mut w = self.world.lock();
            let Some(n) = w.nodes.get_mut(node) else {
                return;
            };
            if n.power == power {
                return;
            }
            if power == Power::Fenced || (n.power == Power::Fenced && power == Power::Up) {
                // Fenced means powered off; it comes back from a clean boot.
                n.mounted.clear();
                n.in_use.clear();
            }
            n.power = power;
            let facts = facts_of(n);
            w.changed();
            facts
        };
        self.tell(Input::NodeUpdated {
            node: node.to_string(),
            facts,
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

/// A delivery lands in the world; returns what the controller must be told.
fn land(w: &mut World, delivery: Delivery) -> Option<Input<SimIds>> {
    match delivery {
        Delivery::Schedule { pod, node, volumes } => {
            w.pods.insert(
                pod.clone(),
                SimPod {
                    node: node.clone(),
                    volumes: volumes.clone(),
                    phase: Phase::Pending,
                },
            );
            w.changed();
            Some(Input::WorkloadScheduled {
                workload: pod,
                node,
                volumes,
            })
        }
        Delivery::Delete { pod } => {
            if let Some(p) = w.pods.get_mut(&pod) {
                if p.phase != Phase::Gone {
                    p.phase = Phase::Terminating;
                }
            }
            None
        }
        Delivery::ForceDelete { pod } => match w.pods.get_mut(&pod) {
            Some(p) if p.phase != Phase::Gone => {
                p.phase = Phase::Gone;
                w.changed();
                Some(Input::WorkloadRemoved { workload: pod })
            }
            _ => None,
        },
    }
}

fn gone(w: &World) -> BTreeSet<String> {
    w.pods
        .iter()
        .filter(|(_, p)| p.phase == Phase::Gone)
        .map(|(n, _)| n.clone())
        .collect()
}

fn facts_of(node: &SimNode) -> NodeFacts<String> {
    NodeFacts {
        healthy: node.power == Power::Up,
        fenced: node.power == Power::Fenced,
        in_use: Some(node.in_use.iter().cloned().collect()),
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

/// The summary table's header.
pub fn summary_header() -> String {
    format!(
        "{:<44} {:<6} {:>10} {:>7} {:>7} {:>7}",
        "scenario", "result", "converged", "attach", "detach", "writes"
    )
}
