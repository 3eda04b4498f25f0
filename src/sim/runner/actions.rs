//! The scenario's actions applied to the world: pods, faults, power, node objects, agents'
//! reports, hung unmounts, partitions and controller restarts.

use super::agents::facts_of;
use super::delivery::Delivery;
use super::{Sabotage, Sim};
use crate::core::input::Input;
use crate::sim::scenario::{Action, CallOp};
use crate::sim::timeline::{Happening, NodeChange};
use crate::sim::world::Power;

impl Sim {
    pub(super) async fn apply(&mut self, line: usize, action: &Action) {
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
                crate::core::calls::store::StoreError::transient("injected by the scenario"),
            ),
            Action::RestartController => {
                // A crash, not a shutdown: calls in flight are lost to it.
                self.world.lock().restarted = true;
                self.stop_controller().await;
                self.start_controller();
            }
            Action::Expect(expectation) => self.expect(line, expectation).await,
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
}
