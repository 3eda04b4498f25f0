//! Pending detach requests: when the controller first wanted each attachment gone, kept with
//! the node (few attachments have one), and the set of nodes that hold any.

use std::time::Duration;

use super::ActualState;
use super::sorted::{find, put_sparse};
use crate::core::tables::spares::Spares;
use crate::domain::Domain;

/// The emptied lists of detach requests kept for reuse ([`Spares`]).
pub(super) type RequestSpares<D> = Spares<Box<Vec<(<D as Domain>::Volume, Duration)>>>;

impl<D: Domain> ActualState<D> {
    /// When the controller first wanted the attachment of `volume` to `node` gone.
    pub fn detach_requested_at(&self, volume: &D::Volume, node: &D::Node) -> Option<Duration> {
        let n = self.nodes.get(node)?;
        let requested = n.detach_requested.as_slice();
        let i = find(requested, volume).ok()?;
        Some(requested[i].1)
    }

    /// The controller wants the attachment gone: returns when it first did, `now` if this is
    /// the first time. Nothing happens without an attachment record.
    #[inline]
    pub(crate) fn request_detach(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        now: Duration,
    ) -> Duration {
        let Some(n) = self.nodes.get_mut(node) else {
            return now;
        };
        match find(n.detach_requested.as_slice(), volume) {
            Ok(i) => n.detach_requested.as_slice()[i].1,
            Err(_) => {
                if find(&n.attached, volume).is_ok() {
                    if n.detach_requested.as_slice().is_empty() {
                        self.requesting.insert(node.clone());
                    }
                    put_sparse(
                        &mut n.detach_requested,
                        volume,
                        Some(now),
                        &mut self.request_spares,
                    );
                }
                now
            }
        }
    }

    /// Every pending detach request: (volume, node, when first wanted), in no set order. Only
    /// the nodes that have one are looked at: at a million attachments a look at every node
    /// (once a sync, for stuck detaches) was a millisecond's pause.
    pub(crate) fn detach_requests(
        &self,
    ) -> impl Iterator<Item = (&D::Volume, &D::Node, Duration)> + '_ {
        self.requesting.iter().flat_map(|node| {
            let requested = self
                .nodes
                .get(node)
                .map_or(&[][..], |n| n.detach_requested.as_slice());
            requested
                .iter()
                .map(move |(volume, since)| (volume, node, *since))
        })
    }

    /// The attachment is wanted again: a later detach waits for the unmount afresh.
    pub(crate) fn cancel_detach_request(&mut self, volume: &D::Volume, node: &D::Node) {
        // Only a node in `requesting` has a request to cancel. That set is small and hot; the
        // node table is not, and every look at an attached volume where it is wanted comes here.
        if !self.requesting.contains(node) {
            return;
        }
        if let Some(n) = self.nodes.get_mut(node) {
            put_sparse(
                &mut n.detach_requested,
                volume,
                None,
                &mut self.request_spares,
            );
            if n.detach_requested.as_slice().is_empty() {
                self.requesting.remove(node);
            }
        }
    }
}
