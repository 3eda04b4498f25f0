//! The managed nodes: each with the slots of the workloads placed on it. A node arriving wakes
//! the workloads that waited for it; a node leaving sends its workloads back to waiting.

use super::placement::unwant;
use super::{DesiredState, sort_dedup, sorted};
use crate::core::tables::dense_table::{self, Keyed};
use crate::core::tables::slot_table::Slot;
use crate::domain::Domain;

/// A managed node, with the slots of the workloads placed on it (unordered): a workload
/// leaving is found by comparing numbers, not ids ([`SlotTable`]).
///
/// [`SlotTable`]: crate::core::tables::slot_table::SlotTable
#[derive(Debug)]
pub(super) struct NodeEntry<D: Domain> {
    /// The node itself: the key of [`DesiredState::nodes`].
    pub(super) node: D::Node,
    pub(super) placed: Vec<Slot>,
}

impl<D: Domain> Keyed for NodeEntry<D> {
    type Key = D::Node;
    fn key(&self) -> &D::Node {
        &self.node
    }
}

impl<D: Domain> DesiredState<D> {
    /// Starts managing `node` (idempotent). Workloads that waited for it, and for nothing else,
    /// are placed. Returns the volumes whose desired nodes changed.
    pub(crate) fn add_node(&mut self, node: D::Node) -> Vec<D::Volume> {
        if self.nodes.contains_key(&node) {
            return Vec::new();
        }
        self.nodes.insert(NodeEntry {
            node: node.clone(),
            placed: Vec::new(),
        });
        let waiting = sorted(self.pending_on_node.get(&node));
        self.wake(waiting)
    }

    /// Stops managing `node` (a no-op for a node not managed). Workloads placed on it wait for
    /// it again, so the volumes they needed are no longer desired there. Returns the volumes
    /// whose desired nodes changed.
    pub(crate) fn remove_node(&mut self, node: &D::Node) -> Vec<D::Volume> {
        let Some((entry, at)) = self.nodes.remove_moving(node) else {
            return Vec::new();
        };
        // The entry that was last sits where this one was: its workloads must say so.
        if let Some(moved) = self.nodes.at(at) {
            for &slot in &moved.placed {
                self.workloads.at_mut(slot).node = dense_table::slot(at);
            }
        }
        let mut placed: Vec<D::Workload> = entry
            .placed
            .iter()
            .map(|&slot| self.workloads.at(slot).workload.clone())
            .collect();
        placed.sort();
        let mut changed = Vec::new();
        for workload in placed {
            if let Some(slot) = self.workloads.vacate(&workload) {
                // Its node's entry is gone: only the volumes are left to undo.
                let placed = self.workloads.vacated(slot);
                unwant(
                    &mut self.volumes,
                    &mut self.pairs,
                    placed,
                    &entry.node,
                    &mut changed,
                );
                let placement = self.placement_of_vacated(slot, entry.node.clone());
                self.pend(workload, placement, None);
            }
        }
        sort_dedup(changed)
    }

    /// Whether `node` is managed.
    pub fn has_node(&self, node: &D::Node) -> bool {
        self.nodes.contains_key(node)
    }

    /// Every managed node, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = &D::Node> {
        self.nodes.iter().map(|entry| &entry.node)
    }
}
