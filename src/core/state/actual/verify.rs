//! The periodic verify's side of the actual state: the ring of nodes with attachments that it
//! walks, and what its answers are matched against, each node's standings and the epoch of
//! their generations.

use super::ActualState;
use super::node::{ActualNode, OUT_OF_RING};
use super::standing::Standing;
use crate::core::tables::dense_table::DenseTable;
use crate::core::tables::verify_ring::VerifyRing;
use crate::domain::Domain;

/// Takes the node at `pos` out of the verify ring (nothing for [`OUT_OF_RING`]), keeping the
/// positions of the nodes the ring moves true.
pub(super) fn leave_ring<D: Domain>(
    ring: &mut VerifyRing<D::Node>,
    nodes: &mut DenseTable<ActualNode<D>>,
    pos: u32,
) {
    if pos == OUT_OF_RING {
        return;
    }
    ring.remove(pos, |moved, at| {
        if let Some(n) = nodes.get_mut(moved) {
            n.ring_pos = at;
        }
    });
}

impl<D: Domain> ActualState<D> {
    /// The epoch of `node`'s generations ([`ActualNode::epoch`]); 0, never an epoch, for a
    /// node with no record.
    pub(crate) fn epoch_of(&self, node: &D::Node) -> u64 {
        self.nodes.get(node).map_or(0, |n| n.epoch)
    }

    /// Spends every node's generations ([`Reconciler::spend_generations`]); returns how many
    /// nodes with records had some left.
    ///
    /// [`Reconciler::spend_generations`]: crate::core::Reconciler::spend_generations
    #[cfg(feature = "internals")]
    pub(crate) fn spend_generations(&mut self) -> usize {
        let mut left = 0;
        for n in self.nodes.iter_mut() {
            if !n.attached.is_empty() && n.generations < ActualNode::<D>::MAX_GENERATION {
                left += 1;
            }
            n.generations = ActualNode::<D>::MAX_GENERATION;
        }
        left
    }

    /// Sets `node`'s generation counter, as if `generations` had been handed out there: for
    /// tests of what comes after years of them.
    #[cfg(test)]
    pub(crate) fn set_generations(&mut self, node: &D::Node, generations: u32) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.generations = generations;
        }
    }

    /// Every attachment on `node`, in volume order, with what the node's index holds of it.
    pub(crate) fn standings_on(&self, node: &D::Node) -> &[(D::Volume, Standing)] {
        self.nodes.get(node).map_or(&[], |n| &n.attached)
    }

    /// Drops `node`'s record and its place in the verify ring.
    pub(super) fn forget_node(&mut self, node: &D::Node) {
        let Some(gone) = self.nodes.remove(node) else {
            return;
        };
        self.requesting.remove(node);
        leave_ring(&mut self.ring, &mut self.nodes, gone.ring_pos);
    }

    /// Starts a round of the periodic verify: [`next_to_verify`](Self::next_to_verify) walks
    /// every node again from the first.
    pub(crate) fn restart_verify_round(&mut self) {
        self.ring.restart();
    }

    /// The next node this verify round has not reached (every node in the ring has
    /// attachments), with how many it holds; `None` once it reached them all. Nodes that gain
    /// their first attachment during a round are reached in it too.
    pub(crate) fn next_to_verify(&mut self) -> Option<(D::Node, usize)> {
        let node = self.ring.next()?;
        let attached = self.nodes.get(&node).map_or(0, |n| n.attached.len());
        Some((node, attached))
    }

    /// Whether this verify round has reached every node.
    pub(crate) fn verify_round_done(&self) -> bool {
        self.ring.is_done()
    }
}
