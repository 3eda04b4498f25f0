//! One attachment's record, and a volume's list of them: what the controller believes about a
//! (volume, node) pair. The records are kept per volume; what the node's index holds of each
//! lives in `standing.rs`.

use smallvec::SmallVec;

use super::node::ActualNode;
use crate::core::state::progress::DetachProgress;
use crate::core::tables::dense_table::{DenseTable, Keyed};
use crate::domain::Domain;

/// What the controller believes about one (volume, node) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachState {
    /// The backend confirmed the attach.
    Attached,
    /// An attach or detach errored or timed out: the volume may or may not be attached. Never
    /// reported to the node, but it holds a single-node volume against other nodes.
    Uncertain,
    /// Not attached (no record).
    Detached,
}

/// One attachment record.
///
/// Kept small (12 bytes with `u32` ids, 4 of them its detach's progress): there is one per
/// attachment in the cluster. What only some attachments have, a device path or a pending
/// detach request, lives with the node (see
/// [`ActualState::device`] and [`ActualState::detach_requested_at`]), and so does the record's
/// generation, which the periodic verify reads node by node.
///
/// [`ActualState::device`]: crate::core::ActualState::device
/// [`ActualState::detach_requested_at`]: crate::core::ActualState::detach_requested_at
#[derive(Clone, Debug)]
pub struct Attachment<D: Domain> {
    pub(crate) node: D::Node,
    pub(crate) state: AttachState,
    /// Dropped from the node's report ahead of a detach.
    pub(crate) withheld: bool,
    /// Upstream 141385 (only with `c4_sticky_assumed_mount`): mounted until the report changes.
    #[cfg(feature = "upstream-bugs")]
    pub(crate) assumed_mounted: bool,
    /// An attach of the pair is known to have landed, and no attach of it was planned since:
    /// no call in flight can attach it again behind an operator's back. Only such an
    /// attachment may be released ([`Input::ReleaseVolume`](crate::core::Input)).
    pub(crate) landed: bool,
    /// How far its detach has come.
    pub(crate) detach: DetachProgress,
}

impl<D: Domain> Attachment<D> {
    /// The node.
    pub fn node(&self) -> &D::Node {
        &self.node
    }
    /// Attached or Uncertain.
    pub fn state(&self) -> AttachState {
        self.state
    }
    /// How far its detach has come ([`DetachProgress`]).
    pub fn detach(&self) -> DetachProgress {
        self.detach
    }
    /// Whether the node must list this volume in its status.
    pub fn is_reported(&self) -> bool {
        self.state == AttachState::Attached && !self.withheld
    }

    /// A new record on the node whose record is `on`: not withheld, and landed if Attached.
    pub(super) fn new(node: D::Node, state: AttachState, on: &ActualNode<D>) -> Self {
        #[cfg(not(feature = "upstream-bugs"))]
        let _ = on;
        Attachment {
            node,
            state,
            withheld: false,
            #[cfg(feature = "upstream-bugs")]
            assumed_mounted: on.in_use.is_none(),
            landed: state == AttachState::Attached,
            detach: DetachProgress::default(),
        }
    }

    /// An attach of it landed: Attached, reported again, and no attach of it in flight.
    pub(super) fn confirm(&mut self) {
        self.state = AttachState::Attached;
        self.withheld = false;
        self.landed = true;
    }
}

/// The attachments of `volume`, made empty first if it has none.
pub(super) fn attachments_of<'a, D: Domain>(
    volumes: &'a mut DenseTable<VolumeAttachments<D>>,
    volume: &D::Volume,
) -> &'a mut SmallVec<[Attachment<D>; 1]> {
    &mut volumes
        .get_or_make(volume, |volume| VolumeAttachments {
            volume: volume.clone(),
            list: SmallVec::new(),
        })
        .list
}

/// The attachments of one volume (a volume is rarely on more than one node).
#[derive(Debug)]
pub(super) struct VolumeAttachments<D: Domain> {
    /// The key of [`ActualState::volumes`](super::ActualState::volumes).
    pub(super) volume: D::Volume,
    pub(super) list: SmallVec<[Attachment<D>; 1]>,
}

impl<D: Domain> Keyed for VolumeAttachments<D> {
    type Key = D::Volume;
    fn key(&self) -> &D::Volume {
        &self.volume
    }
}
