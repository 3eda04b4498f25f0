//! What a graceful shutdown tells its caller: which operations ended and which were cut off.

use super::metrics::Ending;
use crate::core::operation::OpKind;
use crate::core::operation::{OpId, Operation};
use crate::domain::Domain;

/// One operation, as a shutdown report lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationSummary<D: Domain> {
    /// The core's id for it.
    pub id: OpId,
    /// Attach, detach, verify or status write.
    pub kind: OpKind,
    /// The volume, for an attach or a detach (a verify or a status write is about a whole node).
    pub volume: Option<D::Volume>,
    /// The node; `None` for a listing.
    pub node: Option<D::Node>,
    /// How it ended.
    pub outcome: Ending,
}

impl<D: Domain> OperationSummary<D> {
    /// A summary of `op`, not ended yet (`outcome` is set when it ends).
    pub(crate) fn of(op: &Operation<D>) -> Self {
        let volume = match op {
            Operation::Attach { volume, .. } | Operation::Detach { volume, .. } => {
                Some(volume.clone())
            }
            Operation::Verify { .. }
            | Operation::WriteStatus { .. }
            | Operation::ReadStatus { .. }
            | Operation::CheckMachine { .. }
            | Operation::ListStatuses { .. }
            | Operation::ListAttachments { .. } => None,
        };
        OperationSummary {
            id: op.id(),
            kind: op.kind(),
            volume,
            node: op.node().cloned(),
            outcome: Ending::Abandoned,
        }
    }
}

/// The result of [`ControllerHandle::shutdown`](crate::controller::ControllerHandle::shutdown).
///
/// An abandoned attach or detach may still complete in the backend; the next controller's
/// recovery reads the backend and the store and finds it either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport<D: Domain> {
    /// Operations that were running when the shutdown began and ended within the grace period,
    /// in the order they ended.
    pub finished: Vec<OperationSummary<D>>,
    /// Operations still running when the grace period ran out, by id.
    pub abandoned: Vec<OperationSummary<D>>,
}

impl<D: Domain> Default for ShutdownReport<D> {
    fn default() -> Self {
        ShutdownReport {
            finished: Vec::new(),
            abandoned: Vec::new(),
        }
    }
}
