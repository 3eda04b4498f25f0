//! What a planned call answered, handed back to the core in one value.
//!
//! Every [`Operation`](crate::core::Operation) the core plans is one call to the backend or
//! the store; its answer comes back through [`Reconciler::finish`](crate::core::Reconciler::finish)
//! as an [`Outcome`] of the operation's kind. May import `core::calls` and `core::operation`.

use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError, MachineState};
use crate::core::calls::store::{NodeStatus, StoreError, WriteReceipt};
use crate::core::operation::OpKind;
use crate::domain::Domain;

/// Every node's status, as the store lists it.
type Statuses<D> = Vec<(<D as Domain>::Node, NodeStatus<D>)>;

/// What a planned call answered, one variant per [`OpKind`]: give it to
/// [`Reconciler::finish`](crate::core::Reconciler::finish) with the operation's id.
///
/// The variant must match the operation the id names (an `Operation::Attach` is answered
/// with `Outcome::Attach`, ...); another is refused with
/// [`ReconcilerError::WrongResult`](crate::core::ReconcilerError::WrongResult) and the
/// operation keeps waiting for its answer.
///
/// ```
/// use attach_detach::core::{OpKind, Outcome};
/// use attach_detach::traits::{AttachInfo, Revision, WriteReceipt};
/// type K8s = attach_detach::Ids<String, String, String, ()>;
///
/// let attached: Outcome<K8s> = Outcome::Attach(Ok(AttachInfo::default()));
/// assert_eq!(attached.kind(), OpKind::Attach);
/// assert!(attached.is_ok());
/// // A plain store write answers a revision; a receipt without facts wraps it.
/// let written: Outcome<K8s> = Outcome::WriteStatus(Ok(WriteReceipt::from(Revision::from(7))));
/// assert_eq!(written.kind(), OpKind::WriteStatus);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<D: Domain> {
    /// [`AttachBackend::attach`](crate::traits::AttachBackend::attach) answered.
    Attach(Result<AttachInfo, BackendError<D::Node>>),
    /// [`AttachBackend::detach`](crate::traits::AttachBackend::detach) answered.
    Detach(Result<(), BackendError<D::Node>>),
    /// [`AttachBackend::verify`](crate::traits::AttachBackend::verify) answered: the volumes
    /// asked about that are still attached to the node.
    Verify(Result<Vec<D::Volume>, BackendError<D::Node>>),
    /// [`AttachBackend::list`](crate::traits::AttachBackend::list) answered: every attachment
    /// the backend knows.
    List(Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>),
    /// A status write answered: the revision it created, with the node's facts when the store
    /// read them with the write
    /// ([`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts)).
    /// A plain [`NodeStatusStore::write`](crate::traits::NodeStatusStore::write) answers a
    /// [`Revision`](crate::traits::Revision): `WriteReceipt::from(revision)`.
    WriteStatus(Result<WriteReceipt<D>, StoreError>),
    /// [`NodeStatusStore::read`](crate::traits::NodeStatusStore::read) answered.
    ReadStatus(Result<NodeStatus<D>, StoreError>),
    /// [`NodeStatusStore::list`](crate::traits::NodeStatusStore::list) answered: every node's
    /// status.
    ListStatuses(Result<Statuses<D>, StoreError>),
    /// [`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state) answered.
    CheckMachine(Result<MachineState, BackendError<D::Node>>),
}

impl<D: Domain> Outcome<D> {
    /// The kind of operation this answers.
    pub fn kind(&self) -> OpKind {
        match self {
            Outcome::Attach(_) => OpKind::Attach,
            Outcome::Detach(_) => OpKind::Detach,
            Outcome::Verify(_) => OpKind::Verify,
            Outcome::List(_) => OpKind::List,
            Outcome::WriteStatus(_) => OpKind::WriteStatus,
            Outcome::ReadStatus(_) => OpKind::ReadStatus,
            Outcome::ListStatuses(_) => OpKind::ListStatuses,
            Outcome::CheckMachine(_) => OpKind::CheckMachine,
        }
    }

    /// Whether the call succeeded.
    pub fn is_ok(&self) -> bool {
        match self {
            Outcome::Attach(r) => r.is_ok(),
            Outcome::Detach(r) => r.is_ok(),
            Outcome::Verify(r) => r.is_ok(),
            Outcome::List(r) => r.is_ok(),
            Outcome::WriteStatus(r) => r.is_ok(),
            Outcome::ReadStatus(r) => r.is_ok(),
            Outcome::ListStatuses(r) => r.is_ok(),
            Outcome::CheckMachine(r) => r.is_ok(),
        }
    }

    /// The outcome to assume for a call of `kind` whose answer is lost because the task
    /// making it panicked (or died some other way): the call may have done anything.
    ///
    /// An attach or a detach may have taken effect, so it is
    /// [`Uncertain`](crate::traits::BackendError::Uncertain) and the core verifies before it
    /// relies on either state; a status write may have landed, so it is
    /// [`Uncertain`](crate::traits::StoreError::Uncertain) and the node's stored list counts as
    /// unknown until read; the reads (verify, list, read, list statuses, machine check) changed
    /// nothing, so they are transient failures, retried after their backoff. Every driver
    /// needs this: a lost answer must still end the operation, or what waits on it waits
    /// forever.
    ///
    /// ```
    /// use attach_detach::core::{OpKind, Outcome};
    /// use attach_detach::traits::BackendError;
    /// type K8s = attach_detach::Ids<String, String, String, ()>;
    ///
    /// let lost: Outcome<K8s> = Outcome::panicked(OpKind::Detach);
    /// assert!(matches!(lost, Outcome::Detach(Err(BackendError::Uncertain { .. }))));
    /// ```
    pub fn panicked(kind: OpKind) -> Self {
        let message = "the backend call panicked".to_string();
        match kind {
            OpKind::Attach => Outcome::Attach(Err(BackendError::uncertain(message))),
            OpKind::Detach => Outcome::Detach(Err(BackendError::uncertain(message))),
            OpKind::Verify => Outcome::Verify(Err(BackendError::transient(message))),
            OpKind::WriteStatus => Outcome::WriteStatus(Err(StoreError::uncertain(message))),
            OpKind::ReadStatus => Outcome::ReadStatus(Err(StoreError::transient(message))),
            OpKind::ListStatuses => Outcome::ListStatuses(Err(StoreError::transient(message))),
            OpKind::List => Outcome::List(Err(BackendError::transient(message))),
            OpKind::CheckMachine => Outcome::CheckMachine(Err(BackendError::transient(message))),
        }
    }
}
