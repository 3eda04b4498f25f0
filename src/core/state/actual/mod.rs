//! Actual state of world: what is attached where, what nodes mount, and what each must report.
//!
//! [`ActualState`] and its read-only view live here; its parts and the ways it changes live
//! beside it, one concept a file:
//!
//! - `record.rs`: one attachment's record ([`Attachment`], [`AttachState`]), kept per volume.
//! - `standing.rs`: what a node's index holds of each attachment there: the reported flag and
//!   the record's generation.
//! - `node.rs`: a node's record ([`ActualNode`]) and the [`NodeFacts`] the orchestrator feeds in.
//! - `sorted.rs`: the lists sorted by volume that a node's record keeps.
//! - `change.rs`: the records changing as the core's operations finish.
//! - `requests.rs`: when the controller first wanted each attachment gone.
//! - `report.rs`: the list each node must report, and which nodes' lists changed.
//! - `verify.rs`: the ring of nodes the periodic verify walks, and what its answers are matched
//!   against.
//! - `recover.rs`: taking in the store's listing at a restart.

use rustc_hash::FxHashSet;

use crate::core::tables::dense_table::DenseTable;
use crate::core::tables::line_warm::warm_lines;
use crate::core::tables::marks::Marks;
use crate::core::tables::spares::Spares;
use crate::core::tables::verify_ring::VerifyRing;
use crate::domain::Domain;

mod change;
mod node;
mod record;
mod recover;
mod report;
mod requests;
mod sorted;
mod standing;
mod verify;

#[cfg(test)]
mod tests;

pub(crate) use node::ActualNode;
pub use node::NodeFacts;
pub use record::{AttachState, Attachment};

use record::VolumeAttachments;
use requests::RequestSpares;

/// The actual state of world.
///
/// Attachments are kept per volume (a volume is rarely on more than one node) with an index per
/// node. A volume is reported when it is Attached and not withheld for a coming detach; the
/// node's index carries that flag beside each volume, so a node's report is read from one sorted
/// list instead of one lookup per volume in the cluster-wide table.
///
/// It changes only as the core's operations finish and the orchestrator's nodes report; read it
/// through [`Reconciler::actual`](crate::core::Reconciler::actual).
#[derive(Debug)]
pub struct ActualState<D: Domain> {
    volumes: DenseTable<VolumeAttachments<D>>,
    nodes: DenseTable<ActualNode<D>>,
    /// The nodes with a pending detach request: exactly those whose `detach_requested` list
    /// is not empty.
    requesting: FxHashSet<D::Node>,
    /// Every node of `nodes` with something attached, in the order the periodic verify walks
    /// them. Only those: a verify slice used to pass over the nodes with nothing attached one
    /// lookup each, and a long run of them (thousands of nodes without volumes) was a pause.
    ring: VerifyRing<D::Node>,
    /// Nodes whose reported list may have changed since last taken.
    report_changed: Marks<D::Node>,
    /// The last report generation handed out ([`report_generation`](Self::report_generation)):
    /// never renumbered, as the status book keeps them. Nodes' epochs are drawn from it too.
    report_generations: u64,
    len: usize,
    /// Emptied lists of detach requests, for the next node that gets one.
    request_spares: RequestSpares<D>,
}

impl<D: Domain> Default for ActualState<D> {
    fn default() -> Self {
        ActualState {
            volumes: DenseTable::default(),
            nodes: DenseTable::default(),
            requesting: FxHashSet::default(),
            ring: VerifyRing::default(),
            report_changed: Marks::default(),
            report_generations: 0,
            len: 0,
            request_spares: Spares::default(),
        }
    }
}

impl<D: Domain> ActualState<D> {
    /// Brings the records of `volumes` into the cache before a batch reads them
    /// ([`DenseTable::warm`]).
    pub(crate) fn warm<'a>(&self, volumes: impl IntoIterator<Item = &'a D::Volume>)
    where
        D::Volume: 'a,
    {
        self.volumes.warm(volumes);
    }

    /// Reads `node`'s record and every line of its attached list, which a move searches and
    /// walks ([`warm`](Self::warm) for nodes).
    pub(crate) fn warm_node(&self, node: &D::Node) {
        if let Some(n) = self.nodes.get(node) {
            warm_lines(&n.attached);
        }
    }

    /// The state of (`volume`, `node`).
    pub fn state(&self, volume: &D::Volume, node: &D::Node) -> AttachState {
        self.get(volume, node)
            .map_or(AttachState::Detached, |a| a.state)
    }

    /// The record of (`volume`, `node`), if any.
    pub fn get(&self, volume: &D::Volume, node: &D::Node) -> Option<&Attachment<D>> {
        self.volumes
            .get(volume)?
            .list
            .iter()
            .find(|a| a.node == *node)
    }

    pub(crate) fn get_mut(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<&mut Attachment<D>> {
        self.volumes
            .get_mut(volume)?
            .list
            .iter_mut()
            .find(|a| a.node == *node)
    }

    /// Every node `volume` is attached (or maybe attached) to.
    pub fn attachments(&self, volume: &D::Volume) -> &[Attachment<D>] {
        self.volumes.get(volume).map_or(&[], |a| a.list.as_slice())
    }

    /// Volumes attached (or maybe attached) to `node`, in order.
    pub fn volumes_on(&self, node: &D::Node) -> impl Iterator<Item = &D::Volume> {
        self.nodes.get(node).into_iter().flat_map(|n| n.volumes())
    }

    /// What the backend returned when attaching `volume` to `node` (e.g. a device path).
    pub fn device(&self, volume: &D::Volume, node: &D::Node) -> Option<&str> {
        self.nodes.get(node)?.devices.get(volume)
    }

    /// Every node with an attachment or known facts.
    pub fn nodes(&self) -> impl Iterator<Item = &D::Node> {
        self.nodes.iter().map(|n| &n.node)
    }

    /// Number of attachment records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is attached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
