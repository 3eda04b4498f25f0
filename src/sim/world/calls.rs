//! What the backend's calls do to the real attachments: attaches and detaches under way, their
//! effects (with injected faults and attach limits), an operator's detach, and the call counts.

use std::collections::BTreeSet;

use super::{Power, World};
use crate::core::calls::volume::Access;
use crate::sim::scenario::CallOp;

impl World {
    pub(crate) fn is_attached(&self, volume: &str, node: &str) -> bool {
        self.attached.get(volume).is_some_and(|n| n.contains(node))
    }

    /// Attached, or an attach call is under way: what the backend's verify and list report.
    pub(crate) fn may_be_attached(&self, volume: &str, node: &str) -> bool {
        self.is_attached(volume, node) || self.attaching(volume, node)
    }

    /// A call of `op` on `volume` and `node` started (`true`) or finished (`false`).
    pub(crate) fn under_way(&mut self, op: CallOp, volume: &str, node: &str, started: bool) {
        let calls = match op {
            CallOp::Attach => &mut self.attaching,
            CallOp::Detach => &mut self.detaching,
        };
        let key = (volume.to_string(), node.to_string());
        if started {
            *calls.entry(key).or_default() += 1;
        } else if let Some(count) = calls.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&key);
            }
        }
    }

    /// Whether an attach of `volume` to `node` is under way.
    pub(crate) fn attaching(&self, volume: &str, node: &str) -> bool {
        self.attaching
            .contains_key(&(volume.to_string(), node.to_string()))
    }

    /// How many volumes `node` holds or is being given, other than `volume`: what counts
    /// against its attach limit.
    pub(crate) fn holds_besides(&self, node: &str, volume: &str) -> u32 {
        let attached = self
            .attached
            .iter()
            .filter(|(v, nodes)| v.as_str() != volume && nodes.contains(node));
        let attaching = self
            .attaching
            .keys()
            .filter(|(v, n)| v != volume && n == node && !self.is_attached(v, n));
        u32::try_from(attached.count() + attaching.count()).unwrap_or(u32::MAX)
    }

    /// I5, and the machine's cap: an attach of `volume` to a node at its `attach-limit` is
    /// refused (`Some(limit)`), and one the controller planned although the node reported the
    /// limit (and the controller knew of everything on it: it never restarted) is a violation.
    pub(crate) fn over_limit(&mut self, volume: &str, node: &str) -> Option<u32> {
        let limit = self.nodes.get(node)?.attach_limit?;
        if self.is_attached(volume, node) || self.holds_besides(node, volume) < limit.limit {
            return None;
        }
        if limit.reported && !self.restarted {
            self.violation(format!(
                "I5: an attach of {volume} to {node} was planned past the node's reported limit \
                 of {}",
                limit.limit
            ));
        }
        Some(limit.limit)
    }

    /// Whether a detach of `volume` from `node` is under way.
    pub(crate) fn detaching(&self, volume: &str, node: &str) -> bool {
        self.detaching
            .contains_key(&(volume.to_string(), node.to_string()))
    }

    /// Takes the fault matching this call, if any: `Some(uncertain)`.
    pub(crate) fn take_fault(&mut self, op: CallOp, volume: &str, node: &str) -> Option<bool> {
        self.faults
            .take(|(o, v, n)| *o == op && v == volume && n == node)
    }

    /// An attach takes effect at the backend. I1: a single-node volume on two nodes at once.
    pub(crate) fn attach_effect(&mut self, volume: &str, node: &str) {
        let single = self.volumes.get(volume) != Some(&Access::MultiNode);
        let others: Vec<String> = self
            .attached
            .get(volume)
            .into_iter()
            .flatten()
            .filter(|n| *n != node)
            .cloned()
            .collect();
        if single && !others.is_empty() {
            self.violation(format!(
                "I1: single-node volume {volume} attached to {node} while attached to {}",
                others.join(",")
            ));
        }
        if self
            .attached
            .entry(volume.to_string())
            .or_default()
            .insert(node.to_string())
        {
            self.log(format!("backend: {volume} attached to {node}"));
            self.changed();
            self.touch(node, volume);
            self.mark(node);
        }
    }

    /// An operator detached `volume` from `node` behind the controller's back: no invariant
    /// is the controller's to keep here. While the backend cannot reach the node, nothing can
    /// tell the controller (see [`detached_by_hand`](World::detached_by_hand)).
    pub(crate) fn operator_detach(&mut self, volume: &str, node: &str) {
        if self.partitioned.contains(node) && self.is_attached(volume, node) {
            self.detached_by_hand
                .insert((volume.to_string(), node.to_string()));
        }
        self.unmounted(node, volume);
        let removed = self
            .attached
            .get_mut(volume)
            .is_some_and(|nodes| nodes.remove(node));
        if self.attached.get(volume).is_some_and(BTreeSet::is_empty) {
            self.attached.remove(volume);
        }
        if removed {
            self.log(format!("operator: {volume} detached from {node}"));
            self.changed();
            self.touch(node, volume);
        }
        self.mark(node);
    }

    /// A detach takes effect. I2: never while mounted on a node that is neither fenced nor
    /// allowed by configuration (a powered-off machine has nothing mounted, so a detach forced
    /// because the backend said `Off` is a violation exactly when the machine in fact runs);
    /// I4: never while the node's status still lists it for a live agent, which could start
    /// mounting it.
    ///
    /// `crashed_at_call`: the node was down when the controller made the call.
    pub(crate) fn detach_effect(
        &mut self,
        volume: &str,
        node: &str,
        listed: bool,
        crashed_at_call: bool,
    ) {
        let (power, mounted) = self.nodes.get(node).map_or((Power::Fenced, false), |n| {
            (n.power, n.mounted.contains(volume))
        });
        let forced_ok =
            self.force_detach_on_timeout && (power == Power::Crashed || crashed_at_call);
        if mounted && power != Power::Fenced && !forced_ok {
            self.violation(format!(
                "I2: {volume} detached from {node} while mounted there ({power:?}, not fenced)"
            ));
        }
        if power == Power::Up && listed {
            self.violation(format!(
                "I4: {volume} detached from {node} while its status still lists it"
            ));
        }
        self.unmounted(node, volume);
        let removed = self
            .attached
            .get_mut(volume)
            .is_some_and(|n| n.remove(node));
        if self.attached.get(volume).is_some_and(|n| n.is_empty()) {
            self.attached.remove(volume);
        }
        if removed {
            self.log(format!("backend: {volume} detached from {node}"));
            self.changed();
            self.touch(node, volume);
        }
        self.mark(node);
    }

    /// A controller forgot the attachment of `volume` to `node` on an operator's release. It
    /// may do so only once a verify started after the release found the volume gone: if the
    /// backend still holds it (or is still attaching it), the core forgot an attachment the
    /// backend has, which leaks it and lets the volume go to a second node.
    pub(crate) fn note_release(&mut self, volume: &str, node: &str) {
        if self.may_be_attached(volume, node) {
            self.violation(format!(
                "I1: the controller forgot {volume} on {node} on a release while the backend \
                 still holds it"
            ));
        }
    }

    pub(crate) fn count_call(&mut self, op: CallOp, volume: &str, node: &str) {
        *self
            .calls
            .entry((op, volume.to_string(), node.to_string()))
            .or_default() += 1;
    }

    pub(crate) fn total_calls(&self, op: CallOp) -> u64 {
        self.calls
            .iter()
            .filter(|((o, _, _), _)| *o == op)
            .map(|(_, c)| c)
            .sum()
    }
}
