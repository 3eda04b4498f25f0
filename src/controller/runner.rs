//! Runs one planned operation through the backend or the store, and hands its result back to
//! the core.

use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, Span, debug, field, info_span, warn};

use super::deadline::{Deadlines, no_answer};
use super::metrics::Outcome;
use super::status_writer::{StatusWriter, WriteOutcome};
use crate::backend::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use crate::config::CallKind;
use crate::domain::Domain;
use crate::gate::OpKind;
use crate::operation::{OpId, Operation};
use crate::reconciler::{Reconciler, ReconcilerError};
use crate::store::StoreError;

/// What a finished operation returned, typed by its kind.
pub(crate) enum OpResult<D: Domain> {
    Attach(Result<AttachInfo, BackendError<D::Node>>),
    Detach(Result<(), BackendError<D::Node>>),
    Verify(Result<Vec<D::Volume>, BackendError<D::Node>>),
    WriteStatus(Result<WriteOutcome, StoreError>),
    List(Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>),
}

fn backend_label<N>(e: &BackendError<N>) -> &'static str {
    match e {
        BackendError::Transient { .. } => "transient",
        BackendError::Uncertain { .. } => "uncertain",
        BackendError::AttachedElsewhere { .. } => "attached-elsewhere",
    }
}

fn store_label(e: &StoreError) -> &'static str {
    match e {
        StoreError::Conflict { .. } => "conflict",
        StoreError::NotFound { .. } => "not-found",
        StoreError::Transient { .. } => "transient",
        StoreError::Uncertain { .. } => "uncertain",
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
            OpKind::List => OpResult::List(Err(BackendError::transient(message))),
        }
    }

    /// A short label for logs and spans: `ok`, `skipped-stale`, or the error's kind.
    fn label(&self) -> &'static str {
        match self {
            OpResult::Attach(Err(e))
            | OpResult::Detach(Err(e))
            | OpResult::Verify(Err(e))
            | OpResult::List(Err(e)) => backend_label(e),
            OpResult::WriteStatus(Err(e)) => store_label(e),
            OpResult::WriteStatus(Ok(WriteOutcome::SkippedStale)) => "skipped-stale",
            OpResult::WriteStatus(Ok(WriteOutcome::AlreadyCurrent { .. })) => "already-current",
            _ => "ok",
        }
    }

    fn error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpResult::Attach(Err(e))
            | OpResult::Detach(Err(e))
            | OpResult::Verify(Err(e))
            | OpResult::List(Err(e)) => Some(e),
            OpResult::WriteStatus(Err(e)) => Some(e),
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
            OpResult::WriteStatus(r) => core.status_finished(now, id, r.map(|_| ())),
            OpResult::List(r) => core.list_finished(now, id, r),
        }
    }
}

/// The span an operation runs in: `op`, `id`, `volume`, `node` now, `outcome` when it ends.
fn span_for<D: Domain>(op: &Operation<D>) -> Span {
    let kind = match op.kind() {
        OpKind::Attach => "attach",
        OpKind::Detach => "detach",
        OpKind::Verify => "verify",
        OpKind::WriteStatus => "write_status",
        OpKind::List => "list",
    };
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
        Operation::ListAttachments { .. } => {}
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

/// Runs `op` to completion, each call within its deadline.
pub(crate) async fn execute<D: Domain>(
    op: Operation<D>,
    backend: Arc<dyn AttachBackend<D>>,
    writer: Arc<StatusWriter<D>>,
    deadlines: Arc<Deadlines<D>>,
) -> OpResult<D> {
    let span = span_for(&op);
    let this = span.clone();
    async move {
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
                force,
                ..
            } => {
                // Every detach, forced or not, is confirmed by a fresh read of the facts that
                // justify it (in use, fenced, healthy).
                let safe = writer.verify_safe_to_detach(&node, &volume, force).await;
                OpResult::Detach(match safe {
                    Ok(()) => {
                        let call = backend.detach(&volume, &node, &payload);
                        deadlines
                            .run(CallKind::Detach, Some(&node), Some(&volume), call)
                            .await
                            .unwrap_or_else(|after| Err(backend_timeout(CallKind::Detach, after)))
                    }
                    Err(message) => Err(BackendError::transient(message)),
                })
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
            Operation::WriteStatus { node, attached, .. } => {
                OpResult::WriteStatus(writer.write(&node, &attached).await)
            }
            Operation::ListAttachments { .. } => OpResult::List(backend.list().await),
        };
        let label = result.label();
        this.record("outcome", label);
        match result.error() {
            Some(error) => warn!(%error, "operation failed"),
            None => debug!(outcome = label, "operation finished"),
        }
        result
    }
    .instrument(span)
    .await
}
