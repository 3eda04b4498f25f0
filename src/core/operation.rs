//! Operations the core plans for a driver to run, and what it must remember about them.

use std::fmt;
use std::time::Duration;

use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::Revision;
use crate::core::calls::volume::{Access, DriverId};
use crate::domain::Domain;

/// Names one planned operation; its result is fed back under the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op#{}", self.0)
    }
}

/// The kinds of operation the core plans. Backoff is kept per kind, so that a failing attach does
/// not hold back a detach of the same volume (upstream 75209).
///
/// Exhaustive, like [`Operation`]: one kind per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Attach a volume to a node.
    Attach,
    /// Detach a volume from a node.
    Detach,
    /// Ask the backend which attachments of a node still exist.
    Verify,
    /// Write a node's reported attached volumes.
    WriteStatus,
    /// Read a node's status fresh.
    ReadStatus,
    /// List every node's status (restart recovery).
    ListStatuses,
    /// List every attachment the backend knows (restart recovery, and the periodic resync
    /// that finds attachments the core does not know of).
    List,
    /// Ask the backend whether a node's machine is powered off (`Config::machine_fencing`).
    CheckMachine,
}

impl OpKind {
    /// Every kind, in declaration order.
    pub const ALL: [OpKind; 8] = [
        OpKind::Attach,
        OpKind::Detach,
        OpKind::Verify,
        OpKind::WriteStatus,
        OpKind::ReadStatus,
        OpKind::ListStatuses,
        OpKind::List,
        OpKind::CheckMachine,
    ];
}

pub use crate::core::state::progress::ForceReason;

/// Work for the driver. Each finishes with exactly one
/// [`Reconciler::finish`](crate::core::Reconciler::finish) naming its id, with the
/// [`Outcome`](crate::core::Outcome) of its kind.
///
/// Deliberately not `#[non_exhaustive]`: a driver must carry out every operation and report
/// its result, or the core waits on it forever, so a new kind of operation is a breaking change
/// that a driver's `match` should fail to compile on, not fall into a wildcard arm.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation<D: Domain> {
    /// Attach `volume` to `node`; answer with [`Outcome::Attach`](crate::core::Outcome::Attach).
    Attach {
        /// Result id.
        id: OpId,
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// The volume's payload for the backend.
        payload: D::Payload,
    },
    /// Detach `volume` from `node`; answer with [`Outcome::Detach`](crate::core::Outcome::Detach).
    Detach {
        /// Result id.
        id: OpId,
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// The volume's payload for the backend.
        payload: D::Payload,
        /// Set when the detach goes ahead although the node may report the volume in use (it
        /// is fenced, its unmount wait expired with force-detach-on-timeout on, or it was
        /// deleted), and the backend must not refuse for that reason.
        ///
        /// Either way the core planned it only after a fresh read of the node
        /// ([`Operation::ReadStatus`]) justified it, so a driver just makes the call.
        force: Option<ForceReason>,
    },
    /// Read `node`'s status fresh from the store
    /// ([`NodeStatusStore::read`](crate::traits::NodeStatusStore::read), never a cache); answer
    /// with [`Outcome::ReadStatus`](crate::core::Outcome::ReadStatus). Planned before a write whose revision is unknown, and right before
    /// every detach, whose justification (the node's in-use list, its fence, its health) must not
    /// come from a view of unknown age.
    ReadStatus {
        /// Result id.
        id: OpId,
        /// The node.
        node: D::Node,
        /// Upstream's bug C6 (122413) only, with the `upstream-bugs` feature: read the
        /// orchestrator's cached copy of the node instead (a driver without one reads the
        /// store).
        #[cfg(feature = "upstream-bugs")]
        from_cache: bool,
    },
    /// Ask which of `volumes` are still attached to `node`; answer with
    /// [`Outcome::Verify`](crate::core::Outcome::Verify).
    Verify {
        /// Result id.
        id: OpId,
        /// The node.
        node: D::Node,
        /// The volumes believed attached there, with payloads.
        volumes: Vec<(D::Volume, D::Payload)>,
    },
    /// List every attachment the backend knows
    /// ([`AttachBackend::list`](crate::traits::AttachBackend::list)); answer with
    /// [`Outcome::List`](crate::core::Outcome::List). Planned every `Config::resync_period`, it finds attachments the core does
    /// not know of, such as one made by a call that a previous controller started and lost in a
    /// restart, which lands after the new one recovered.
    ListAttachments {
        /// Result id.
        id: OpId,
    },
    /// List every node's status ([`NodeStatusStore::list`](crate::traits::NodeStatusStore::list));
    /// answer with [`Outcome::ListStatuses`](crate::core::Outcome::ListStatuses). Planned once, by a new core, together with
    /// [`Operation::ListAttachments`]: nothing else is planned until both are handed back
    /// (restart recovery).
    ListStatuses {
        /// Result id.
        id: OpId,
    },
    /// Make the store's record of `node` list exactly `attached`, if the record is still at
    /// revision `expected` ([`NodeStatusStore::write`](crate::traits::NodeStatusStore::write), a
    /// compare-and-set); answer with [`Outcome::WriteStatus`](crate::core::Outcome::WriteStatus)
    /// (the revision as a receipt without facts), or, when `read_facts` is set and the store
    /// can, call
    /// [`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts)
    /// and answer with its receipt.
    WriteStatus {
        /// Result id.
        id: OpId,
        /// The node.
        node: D::Node,
        /// The complete list the node must report, sorted by volume. Shared with the core's
        /// record of the write: keep it or drop it, it copies nothing.
        attached: ReportedVolumes<D>,
        /// The revision the write is conditional on: the core's own acknowledged write, or a
        /// fresh read.
        expected: Revision,
        /// A detach waits for this write: the node's facts read with it would spare the fresh
        /// read the detach needs next.
        read_facts: bool,
    },
    /// Ask whether `node`'s machine is powered off
    /// ([`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state)); answer
    /// with [`Outcome::CheckMachine`](crate::core::Outcome::CheckMachine). Planned only with `Config::machine_fencing`, for an
    /// unhealthy, unfenced node whose volumes wait to be detached, one at a time per node and
    /// paced by `MachineFencing::interval`: two `Off` answers fence the node.
    CheckMachine {
        /// Result id.
        id: OpId,
        /// The node.
        node: D::Node,
    },
}

impl<D: Domain> Operation<D> {
    /// The id to report the result under.
    pub fn id(&self) -> OpId {
        match self {
            Operation::Attach { id, .. }
            | Operation::Detach { id, .. }
            | Operation::Verify { id, .. }
            | Operation::WriteStatus { id, .. }
            | Operation::ReadStatus { id, .. }
            | Operation::CheckMachine { id, .. }
            | Operation::ListStatuses { id }
            | Operation::ListAttachments { id } => *id,
        }
    }

    /// The kind of operation.
    pub fn kind(&self) -> OpKind {
        match self {
            Operation::Attach { .. } => OpKind::Attach,
            Operation::Detach { .. } => OpKind::Detach,
            Operation::Verify { .. } => OpKind::Verify,
            Operation::WriteStatus { .. } => OpKind::WriteStatus,
            Operation::ReadStatus { .. } => OpKind::ReadStatus,
            Operation::ListStatuses { .. } => OpKind::ListStatuses,
            Operation::ListAttachments { .. } => OpKind::List,
            Operation::CheckMachine { .. } => OpKind::CheckMachine,
        }
    }

    /// The node the operation is about; `None` for a listing of every attachment.
    pub fn node(&self) -> Option<&D::Node> {
        match self {
            Operation::Attach { node, .. }
            | Operation::Detach { node, .. }
            | Operation::Verify { node, .. }
            | Operation::WriteStatus { node, .. }
            | Operation::ReadStatus { node, .. }
            | Operation::CheckMachine { node, .. } => Some(node),
            Operation::ListAttachments { .. } | Operation::ListStatuses { .. } => None,
        }
    }
}

/// What the core remembers about a running operation, to apply its result.
#[derive(Clone, Debug)]
pub(crate) enum InFlight<D: Domain> {
    /// `access` is the volume's access mode when planned: the gate key the operation holds
    /// depends on it, and the mode may change while the operation runs.
    Attach {
        volume: D::Volume,
        node: D::Node,
        access: Access,
        /// Counted in the node's attaches under way (its pair had no record when planned).
        slot: bool,
        /// The driver whose attaches under way on the node it is counted in, with `slot`.
        driver: Option<DriverId>,
    },
    Detach {
        volume: D::Volume,
        node: D::Node,
        access: Access,
        force: Option<ForceReason>,
    },
    Verify {
        node: D::Node,
        /// The node's record's epoch as planned (`ActualState::epoch_of`): the generations
        /// below are numbers of that epoch, and say nothing once the node's record is made
        /// again or renumbered.
        epoch: u64,
        /// The generation of each attachment listed, as planned, sorted. No generation is
        /// handed out twice on a node in one epoch (`Standing`), so a record that still holds
        /// one of these is the record the verify listed, unchanged: no volume is kept here,
        /// where a clone of each was (an allocation each with `String` ids).
        checked: Vec<u32>,
    },
    WriteStatus {
        node: D::Node,
        /// The node object the write was planned for (`StatusBook::object`): an answer about
        /// an object deleted since says nothing of its successor of the same name.
        object: u64,
    },
    ReadStatus {
        node: D::Node,
        /// The node object the read was planned for, as for a write.
        object: u64,
        /// The detaches of the node waiting for this read, each with the reason it would be
        /// forced for.
        checks: Vec<(D::Volume, Option<ForceReason>)>,
        /// Upstream's bug C6: a read of a cache, to decide whether to skip a write.
        from_cache: bool,
    },
    ListStatuses,
    List,
    CheckMachine {
        node: D::Node,
        /// When the check was planned: the age of its answer counts from here.
        asked: Duration,
    },
}

impl<D: Domain> InFlight<D> {
    /// The volume an attach or detach is about.
    pub(crate) fn volume(&self) -> Option<&D::Volume> {
        match self {
            InFlight::Attach { volume, .. } | InFlight::Detach { volume, .. } => Some(volume),
            InFlight::Verify { .. }
            | InFlight::WriteStatus { .. }
            | InFlight::ReadStatus { .. }
            | InFlight::ListStatuses
            | InFlight::List
            | InFlight::CheckMachine { .. } => None,
        }
    }

    /// Whether this is an attach or detach planned while its volume was single-node: it holds
    /// the volume's gate key, which the running-operations table keeps
    /// ([`InFlightTable::holds_volume`](crate::core::plan::in_flight::InFlightTable::holds_volume)).
    pub(crate) fn holds_volume(&self) -> bool {
        matches!(
            self,
            InFlight::Attach {
                access: Access::SingleNode,
                ..
            } | InFlight::Detach {
                access: Access::SingleNode,
                ..
            }
        )
    }

    pub(crate) fn kind(&self) -> OpKind {
        match self {
            InFlight::Attach { .. } => OpKind::Attach,
            InFlight::Detach { .. } => OpKind::Detach,
            InFlight::Verify { .. } => OpKind::Verify,
            InFlight::WriteStatus { .. } => OpKind::WriteStatus,
            InFlight::ReadStatus { .. } => OpKind::ReadStatus,
            InFlight::ListStatuses => OpKind::ListStatuses,
            InFlight::List => OpKind::List,
            InFlight::CheckMachine { .. } => OpKind::CheckMachine,
        }
    }
}
