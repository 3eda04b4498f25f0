//! The stream of finished operations a [`ControllerHandle`](super::ControllerHandle) hands out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::broadcast;

use super::metrics::Ending;
use crate::core::operation::OpId;
use crate::core::operation::OpKind;
use crate::domain::Domain;

/// Finished operations a subscriber may fall behind by before it starts missing the oldest.
///
/// At about 90,000 operations a second (the in-memory benchmark) that is 10 ms of work; a real
/// backend is far slower. A subscriber that falls further behind is told how many it missed.
pub const OUTCOME_BUFFER: usize = 1024;

/// Why a finished operation [failed](Ending::Failed): the kind of the error its call
/// returned (the error itself went to the core, which decides what follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The call failed and did nothing
    /// ([`BackendError::Transient`](crate::traits::BackendError::Transient),
    /// [`StoreError::Transient`](crate::traits::StoreError::Transient)).
    Transient,
    /// The call may or may not have taken effect: an error that says so, or no answer by its
    /// deadline ([`CallTimeouts`](crate::config::CallTimeouts)) for a call that changes
    /// something.
    Uncertain,
    /// The backend refused the attach: the volume is attached to another node.
    AttachedElsewhere,
    /// The backend refused the attach: the node can hold no more volumes.
    NodeFull,
    /// The store's revision no longer matched the one the write expected.
    Conflict,
    /// The store has no such node.
    NotFound,
    /// The call panicked; the driver handed the core the most cautious error for its kind.
    Panicked,
}

impl FailureKind {
    /// A short lowercase label: `transient`, `uncertain`, `attached-elsewhere`, `node-full`, `conflict`,
    /// `not-found`, `panicked` (the `outcome` field of the operation's tracing span).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Transient => "transient",
            FailureKind::Uncertain => "uncertain",
            FailureKind::AttachedElsewhere => "attached-elsewhere",
            FailureKind::NodeFull => "node-full",
            FailureKind::Conflict => "conflict",
            FailureKind::NotFound => "not-found",
            FailureKind::Panicked => "panicked",
        }
    }
}

/// One operation the controller finished, as [`ControllerHandle::outcomes`] reports it.
///
/// [`ControllerHandle::outcomes`]: super::ControllerHandle::outcomes
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationFinished<D: Domain> {
    /// The core's id for it.
    pub id: OpId,
    /// What it was.
    pub kind: OpKind,
    /// The volume, for an attach or a detach.
    pub volume: Option<D::Volume>,
    /// The node; `None` for a listing.
    pub node: Option<D::Node>,
    /// How it ended.
    pub outcome: Ending,
    /// For a [failed](Ending::Failed) one, what kind of error its call returned.
    pub failure: Option<FailureKind>,
    /// From its start to its end (or to its abandonment), on tokio's clock: virtual time in a
    /// test on a paused clock.
    pub duration: Duration,
}

/// The sending side, owned by the controller's loop. Handles keep only a [`Weak`] reference,
/// so the stream ends ([`broadcast::error::RecvError::Closed`]) when the controller stops.
pub(crate) type OutcomeSender<D> = Arc<broadcast::Sender<OperationFinished<D>>>;

/// A new sender with room for [`OUTCOME_BUFFER`] outcomes per subscriber.
pub(crate) fn channel<D: Domain>() -> OutcomeSender<D> {
    Arc::new(broadcast::channel(OUTCOME_BUFFER).0)
}

/// A receiver on `sender`, or one that is already closed if the controller is gone.
pub(crate) fn subscribe<D: Domain>(
    sender: &Weak<broadcast::Sender<OperationFinished<D>>>,
) -> broadcast::Receiver<OperationFinished<D>> {
    match sender.upgrade() {
        Some(sender) => sender.subscribe(),
        // The controller stopped: a receiver whose sender is gone reports `Closed` at once.
        None => broadcast::channel(1).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_labels_are_the_spans_outcomes() {
        let labels = [
            (FailureKind::Transient, "transient"),
            (FailureKind::Uncertain, "uncertain"),
            (FailureKind::AttachedElsewhere, "attached-elsewhere"),
            (FailureKind::NodeFull, "node-full"),
            (FailureKind::Conflict, "conflict"),
            (FailureKind::NotFound, "not-found"),
            (FailureKind::Panicked, "panicked"),
        ];
        for (kind, label) in labels {
            assert_eq!(kind.as_str(), label);
        }
    }
}
