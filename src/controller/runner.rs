//! Runs one planned operation through the backend or the store, and hands its result back to
//! the core.

use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, Span, debug, field, info_span, warn};

use super::deadline::{Deadlines, no_answer};
use super::metrics::{Metrics, Outcome, op_label};
use super::outcomes::FailureKind;
use crate::config::CallKind;
use crate::core::calls::backend::MachineState;
use crate::core::input::ReconcilerError;
use crate::core::operation::OpKind;
use crate::core::operation::{OpId, Operation};
use crate::core::reconciler::Reconciler;
use crate::domain::Domain;
use crate::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use crate::traits::{NodeStatus, NodeStatusStore, StoreError, WriteReceipt};

/// Every node's status, as the store lists it.
type Statuses<D> = Vec<(<D as Domain>::Node, NodeStatus<D>)>;

/// What a finished operation returned, typed by its kind.
pub(crate) enum OpResult<D: Domain> {
    Attach(Result<AttachInfo, BackendError<D::Node>>),
    Detach(Result<(), BackendError<D::Node>>),
    Verify(Result<Vec<D::Volume>, BackendError<D::Node>>),
    WriteStatus(Result<WriteReceipt<D>, StoreError>),
    ReadStatus(Result<NodeStatus<D>, StoreError>),
    ListStatuses(Result<Statuses<D>, StoreError>),
    List(Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>),
    CheckMachine(Result<MachineState, BackendError<D::Node>>),
}

fn backend_failure<N>(e: &BackendError<N>) -> FailureKind {
    match e {
        BackendError::Transient { .. } => FailureKind::Transient,
        BackendError::Uncertain { .. } => FailureKind::Uncertain,
        BackendError::AttachedElsewhere { .. } => FailureKind::AttachedElsewhere,
        BackendError::NodeFull { .. } => FailureKind::NodeFull,
    }
}

fn store_failure(e: &StoreError) -> FailureKind {
    match e {
        StoreError::Conflict { .. } => FailureKind::Conflict,
        StoreError::NotFound { .. } => FailureKind::NotFound,
        StoreError::Transient { .. } => FailureKind::Transient,
        StoreError::Uncertain { .. } => FailureKind::Uncertain,
    }
}

impl<D: Domain> OpResult<D> {
    /// The result to assume when the task running the operation panicked: the call may have
    /// done anything, so attach and detach are uncertain and the node's stored list unknown.
    pub(crate) fn panicked(kind: OpKind) -> Self {
        let message = "the backend call panicked".to_string();
        match kind {
            OpKind::Attach => OpResult::Attach(Err(BackendError::uncertain(message))),
            OpKind::Detach => OpResult::Detach(Err(BackendError::uncertain(message))),
            OpKind::Verify => OpResult::Verify(Err(BackendError::transient(message))),
            OpKind::WriteStatus => OpResult::WriteStatus(Err(StoreError::uncertain(message))),
            OpKind::ReadStatus => OpResult::ReadStatus(Err(StoreError::transient(message))),
            OpKind::ListStatuses => OpResult::ListStatuses(Err(StoreError::transient(message))),
            OpKind::List => OpResult::List(Err(BackendError::transient(message))),
            OpKind::CheckMachine => OpResult::CheckMachine(Err(BackendError::transient(message))),
        }
    }

    /// A short label for logs and spans: `ok`, or the error's kind.
    fn label(&self) -> &'static str {
        self.failure().map_or("ok", FailureKind::as_str)
    }

    /// The kind of the error the call returned, if it failed.
    pub(crate) fn failure(&self) -> Option<FailureKind> {
        match self.error()? {
            Failure::Backend(e) => Some(backend_failure(e)),
            Failure::Store(e) => Some(store_failure(e)),
        }
    }

    fn error(&self) -> Option<Failure<'_, D>> {
        match self {
            OpResult::Attach(Err(e))
            | OpResult::Detach(Err(e))
            | OpResult::Verify(Err(e))
            | OpResult::List(Err(e))
            | OpResult::CheckMachine(Err(e)) => Some(Failure::Backend(e)),
            OpResult::WriteStatus(Err(e))
            | OpResult::ReadStatus(Err(e))
            | OpResult::ListStatuses(Err(e)) => Some(Failure::Store(e)),
            _ => None,
        }
    }

    pub(crate) fn outcome(&self) -> Outcome {
        match self.error() {
            Some(_) => Outcome::Failed,
            None => Outcome::Succeeded,
        }
    }

    /// Hands the result to the core under `id`.
    pub(crate) fn feed(
        self,
        core: &mut Reconciler<D>,
        now: Duration,
        id: OpId,
    ) -> Result<(), ReconcilerError<D>> {
        match self {
            OpResult::Attach(r) => core.attach_finished(now, id, r),
            OpResult::Detach(r) => core.detach_finished(now, id, r),
            OpResult::Verify(r) => core.verify_finished(now, id, r),
            OpResult::WriteStatus(r) => core.status_written_with(now, id, r),
            OpResult::ReadStatus(r) => core.status_read(now, id, r),
            OpResult::ListStatuses(r) => core.statuses_listed(now, id, r),
            OpResult::List(r) => core.list_finished(now, id, r),
            OpResult::CheckMachine(r) => core.machine_checked(now, id, r),
        }
    }
}

/// A failed call's error, from the backend or the store.
enum Failure<'a, D: Domain> {
    Backend(&'a BackendError<D::Node>),
    Store(&'a StoreError),
}

/// The span an operation runs in: `op`, `id`, `volume`, `node` now, `outcome` when it ends.
fn span_for<D: Domain>(op: &Operation<D>) -> Span {
    let kind = op_label(op.kind());
    let span = info_span!(
        "operation",
        op = kind,
        id = op.id().0,
        volume = field::Empty,
        node = field::Empty,
        outcome = field::Empty,
    );
    if let Some(node) = op.node() {
        span.record("node", field::debug(node));
    }
    match op {
        Operation::Attach { volume, .. } | Operation::Detach { volume, .. } => {
            span.record("volume", field::debug(volume));
        }
        Operation::Verify { volumes, .. } => {
            span.record("volume", field::debug(&volumes.len()));
        }
        Operation::WriteStatus { attached, .. } => {
            span.record("volume", field::debug(&attached.len()));
        }
        Operation::ListAttachments { .. }
        | Operation::ListStatuses { .. }
        | Operation::ReadStatus { .. }
        | Operation::CheckMachine { .. } => {}
    }
    span
}

/// A backend call that got no answer in time: an attach or a detach may still take effect, so
/// it is uncertain; a verify only reads, so it is transient.
fn backend_timeout<N>(kind: CallKind, after: Duration) -> BackendError<N> {
    let message = no_answer(after);
    if kind.may_take_effect() {
        BackendError::uncertain(message)
    } else {
        BackendError::transient(message)
    }
}

/// What an operation runs against.
pub(crate) struct Parts<D: Domain> {
    pub(crate) backend: Arc<dyn AttachBackend<D>>,
    pub(crate) store: Arc<dyn NodeStatusStore<D>>,
    /// Where reads `from_cache` go (upstream's bug C6 only); the store when `None`.
    #[cfg(feature = "upstream-bugs")]
    pub(crate) cache: Option<Arc<dyn NodeStatusStore<D>>>,
    pub(crate) deadlines: Deadlines<D>,
    pub(crate) metrics: Arc<Metrics>,
}

/// A store call that got no answer in time: a write may still land (uncertain), a read or a
/// listing did nothing (transient).
fn store_timeout(kind: CallKind, after: Duration) -> StoreError {
    if kind == CallKind::StatusWrite {
        StoreError::uncertain(no_answer(after))
    } else {
        StoreError::transient(no_answer(after))
    }
}

/// Runs `op` to completion, its call within its deadline. Every decision was the core's: this
/// only makes the one call the operation names.
pub(crate) async fn execute<D: Domain>(op: Operation<D>, parts: Arc<Parts<D>>) -> OpResult<D> {
    let span = span_for(&op);
    let this = span.clone();
    async move {
        let Parts {
            backend,
            store,
            #[cfg(feature = "upstream-bugs")]
            cache,
            deadlines,
            metrics,
        } = &*parts;
        let result = match op {
            Operation::Attach {
                volume,
                node,
                payload,
                ..
            } => {
                let call = backend.attach(&volume, &node, &payload);
                let answer = deadlines
                    .run(CallKind::Attach, Some(&node), Some(&volume), call)
                    .await;
                OpResult::Attach(
                    answer.unwrap_or_else(|after| Err(backend_timeout(CallKind::Attach, after))),
                )
            }
            Operation::Detach {
                volume,
                node,
                payload,
                ..
            } => {
                let call = backend.detach(&volume, &node, &payload);
                let answer = deadlines
                    .run(CallKind::Detach, Some(&node), Some(&volume), call)
                    .await;
                OpResult::Detach(
                    answer.unwrap_or_else(|after| Err(backend_timeout(CallKind::Detach, after))),
                )
            }
            Operation::Verify { node, volumes, .. } => {
                let call = backend.verify(&node, &volumes);
                let answer = deadlines
                    .run(CallKind::Verify, Some(&node), None, call)
                    .await;
                OpResult::Verify(
                    answer.unwrap_or_else(|after| Err(backend_timeout(CallKind::Verify, after))),
                )
            }
            Operation::ReadStatus {
                node,
                #[cfg(feature = "upstream-bugs")]
                from_cache,
                ..
            } => {
                #[cfg(feature = "upstream-bugs")]
                let source = match cache {
                    Some(cache) if from_cache => cache,
                    _ => store,
                };
                #[cfg(not(feature = "upstream-bugs"))]
                let source = store;
                let call = source.read(&node);
                let answer = deadlines
                    .run(CallKind::StatusRead, Some(&node), None, call)
                    .await;
                OpResult::ReadStatus(
                    answer.unwrap_or_else(|after| Err(store_timeout(CallKind::StatusRead, after))),
                )
            }
            Operation::WriteStatus {
                node,
                attached,
                expected,
                read_facts,
                ..
            } => {
                metrics.store_write();
                let call = async {
                    if read_facts {
                        store.write_reading_facts(&node, &attached, expected).await
                    } else {
                        store
                            .write(&node, &attached, expected)
                            .await
                            .map(WriteReceipt::from)
                    }
                };
                let answer = deadlines
                    .run(CallKind::StatusWrite, Some(&node), None, call)
                    .await
                    .unwrap_or_else(|after| Err(store_timeout(CallKind::StatusWrite, after)));
                if matches!(answer, Err(StoreError::Conflict { .. })) {
                    metrics.store_write_conflict();
                }
                OpResult::WriteStatus(answer)
            }
            Operation::ListStatuses { .. } => {
                let call = store.list();
                let answer = deadlines.run(CallKind::StoreList, None, None, call).await;
                OpResult::ListStatuses(
                    answer.unwrap_or_else(|after| Err(store_timeout(CallKind::StoreList, after))),
                )
            }
            Operation::CheckMachine { node, .. } => {
                let call = backend.machine_state(&node);
                let answer = deadlines
                    .run(CallKind::MachineState, Some(&node), None, call)
                    .await;
                OpResult::CheckMachine(
                    answer.unwrap_or_else(|after| {
                        Err(backend_timeout(CallKind::MachineState, after))
                    }),
                )
            }
            Operation::ListAttachments { .. } => {
                let call = backend.list();
                let answer = deadlines.run(CallKind::BackendList, None, None, call).await;
                OpResult::List(
                    answer
                        .unwrap_or_else(|after| Err(backend_timeout(CallKind::BackendList, after))),
                )
            }
        };
        let label = result.label();
        this.record("outcome", label);
        match result.error() {
            Some(Failure::Backend(error)) => warn!(%error, "operation failed"),
            Some(Failure::Store(error)) => warn!(%error, "operation failed"),
            None => debug!(outcome = label, "operation finished"),
        }
        result
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    /// The failure kind (and with it the span's `outcome` and the stream's `failure`) of every
    /// error a call can return, and of a success.
    #[test]
    fn every_error_has_its_failure_kind_and_label() {
        let cases: Vec<(OpResult<D>, Option<FailureKind>, &str)> = vec![
            (OpResult::Detach(Ok(())), None, "ok"),
            (
                OpResult::Attach(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                OpResult::Detach(Err(BackendError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (
                OpResult::Attach(Err(BackendError::attached_elsewhere("node-b", "x"))),
                Some(FailureKind::AttachedElsewhere),
                "attached-elsewhere",
            ),
            (
                OpResult::Attach(Err(BackendError::node_full("x"))),
                Some(FailureKind::NodeFull),
                "node-full",
            ),
            (
                OpResult::Verify(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                OpResult::List(Err(BackendError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (
                OpResult::WriteStatus(Err(StoreError::conflict(None))),
                Some(FailureKind::Conflict),
                "conflict",
            ),
            (
                OpResult::ReadStatus(Err(StoreError::not_found())),
                Some(FailureKind::NotFound),
                "not-found",
            ),
            (
                OpResult::ListStatuses(Err(StoreError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                OpResult::WriteStatus(Err(StoreError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (OpResult::CheckMachine(Ok(MachineState::Off)), None, "ok"),
            (
                OpResult::CheckMachine(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
        ];
        for (result, failure, label) in cases {
            assert_eq!(result.failure(), failure, "{label}");
            assert_eq!(result.label(), label);
            let outcome = if failure.is_some() {
                Outcome::Failed
            } else {
                Outcome::Succeeded
            };
            assert_eq!(result.outcome(), outcome, "{label}");
        }
    }
}
