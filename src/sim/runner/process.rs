//! The controller as a process in a run: listed from the world and started, crashed (its calls
//! in flight finish but their answers are lost), and watched for a panic.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::agents::facts_of;
use super::recorder::Recorder;
use super::{Recording, Sabotage, Sim, config_of};
use crate::controller::{Controller, ShutdownReport, World as Start};
use crate::core::calls::volume::VolumeSpec;
use crate::memory::MemoryStore;
use crate::sim::SimIds;
use crate::sim::backend::{CallLoad, SimBackend};
use crate::sim::panics::{self, Tasks};
use crate::sim::scenario::Scenario;
use crate::sim::store::SimStore;
use crate::sim::timeline::Happening;
use crate::sim::world::{Phase, SimNode, World};

impl Sim {
    pub(super) fn new(scenario: &Scenario, sabotage: Sabotage, recording: Recording) -> Self {
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
                as Arc<dyn crate::traits::NodeStatusStore<SimIds>>
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

    pub(super) fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    pub(super) fn log(&self, line: String) {
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
                    driver: None,
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

    pub(super) fn start_controller(&mut self) {
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
    pub(super) async fn stop_controller(&mut self) {
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
    pub(super) fn reap(&self) {
        for message in self.tasks.reap() {
            let mut w = self.world.lock();
            w.now = self.epoch.elapsed();
            w.violation(format!("a simulator task panicked: {message}"));
        }
    }

    /// The controller's task ended: it never does on its own (no handle is dropped or shut
    /// down), so it panicked, which fails the run.
    pub(super) fn controller_ended(
        &mut self,
        ended: Result<ShutdownReport<SimIds>, tokio::task::JoinError>,
    ) {
        self.controller = None;
        *self.slot.lock() = None;
        match ended {
            Err(error) => self.panicked("the controller", error),
            Ok(_) => self.log("controller stopped on its own".to_string()),
        }
    }
}
