//! Pod changes in the orchestrator's API: they land in the world at once and reach the
//! controller after the cache lag, in order, through the forwarder.

use std::sync::Arc;

use super::Sim;
use super::clock::instant;
use crate::core::input::Input;
use crate::sim::SimIds;
use crate::sim::timeline::{Happening, PodPhase};
use crate::sim::world::World;

/// A pod change in the orchestrator's API. Node agents see it at once (kubelet watches its own
/// pods directly); the controller sees it after the cache lag, which lets an agent mount for a
/// pod the controller has not heard of yet. Verify-safe-to-detach covers that window.
pub(super) enum Delivery {
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

impl Sim {
    /// A pod change lands in the world now; the controller hears of it after the lag.
    pub(super) fn deliver(&self, delivery: Delivery) {
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
    pub(super) fn tell(&self, input: Input<SimIds>) {
        let due = instant(self.epoch, self.now().saturating_add(self.cache_lag));
        let _ = self.forward.send((due, input));
    }

    pub(super) fn spawn_forwarder(&mut self) {
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
