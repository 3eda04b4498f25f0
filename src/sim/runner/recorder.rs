//! The controller's event recorder in a run: it writes each event into the world (trace,
//! timeline, the pods a Multi-Attach or node-full event named, claims in doubt), and fails the run
//! if it panics.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::controller::EventRecorder;
use crate::core::event::Event;
use crate::core::explain::Wait;
use crate::sim::SimIds;
use crate::sim::timeline::Happening;
use crate::sim::world::World;

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
        | Event::ClaimReleased { node, .. }
        | Event::WaitExplained { node, .. } => Some(node),
        Event::NodePoweredOff { node } | Event::MachineCheckFailed { node, .. } => Some(node),
        Event::CallTimedOut { node, .. } => node.as_ref(),
        Event::ClaimInDoubt { .. } => None,
    }
}

pub(super) struct Recorder {
    pub(super) world: Arc<Mutex<World>>,
    pub(super) epoch: Instant,
    pub(super) multi_attach: Arc<Mutex<BTreeSet<String>>>,
    /// The pods named in node-full events.
    pub(super) node_full: Arc<Mutex<BTreeSet<String>>>,
    pub(super) sabotaged: bool,
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
        // Every reachable wait has a name; one the core cannot name is a bug in it.
        if let Event::WaitExplained { explanation, .. } = event {
            if let Some(pair) = explanation.waits().find(|p| p.wait == Wait::Unknown) {
                w.violation(format!("a wait the controller cannot explain: {pair}"));
            }
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
                crate::sim::panics::message(payload.as_ref())
            ));
            drop(w);
            std::panic::resume_unwind(payload);
        }
    }
}
