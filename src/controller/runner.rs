//! Runs one planned operation through the backend or the store, and hands its result back to
//! the core.

use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, Span, debug, field, info_span, warn};

use super::deadline::{Deadlines, no_answer};
use super::metrics::{Ending, Metrics, op_label};
use super::outcomes::FailureKind;
use crate::config::CallKind;
use crate::core::operation::Operation;
use crate::core::outcome::Outcome;
use crate::domain::Domain;
use crate::traits::{AttachBackend, BackendError};
use crate::traits::{NodeStatusStore, StoreError, WriteReceipt};

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

/// A short label for logs and spans: `ok`, or the error's kind.
fn label<D: Domain>(outcome: &Outcome<D>) -> &'static str {
    failure(outcome).map_or("ok", FailureKind::as_str)
}

/// The kind of the error the call returned, if it failed.
pub(crate) fn failure<D: Domain>(outcome: &Outcome<D>) -> Option<FailureKind> {
    match error(outcome)? {
        Failure::Backend(e) => Some(backend_failure(e)),
        Failure::Store(e) => Some(store_failure(e)),
    }
}

fn error<D: Domain>(outcome: &Outcome<D>) -> Option<Failure<'_, D>> {
    match outcome {
        Outcome::Attach(Err(e))
        | Outcome::Detach(Err(e))
        | Outcome::Verify(Err(e))
        | Outcome::List(Err(e))
        | Outcome::CheckMachine(Err(e)) => Some(Failure::Backend(e)),
        Outcome::WriteStatus(Err(e))
        | Outcome::ReadStatus(Err(e))
        | Outcome::ListStatuses(Err(e)) => Some(Failure::Store(e)),
        _ => None,
    }
}

/// How the metrics count a call that answered `outcome`.
pub(crate) fn ending<D: Domain>(outcome: &Outcome<D>) -> Ending {
    if outcome.is_ok() {
        Ending::Succeeded
    } else {
        Ending::Failed
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
pub(crate) async fn execute<D: Domain>(op: Operation<D>, parts: Arc<Parts<D>>) -> Outcome<D> {
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
                Outcome::Attach(
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
                Outcome::Detach(
                    answer.unwrap_or_else(|after| Err(backend_timeout(CallKind::Detach, after))),
                )
            }
            Operation::Verify { node, volumes, .. } => {
                let call = backend.verify(&node, &volumes);
                let answer = deadlines
                    .run(CallKind::Verify, Some(&node), None, call)
                    .await;
                Outcome::Verify(
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
                Outcome::ReadStatus(
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
                Outcome::WriteStatus(answer)
            }
            Operation::ListStatuses { .. } => {
                let call = store.list();
                let answer = deadlines.run(CallKind::StoreList, None, None, call).await;
                Outcome::ListStatuses(
                    answer.unwrap_or_else(|after| Err(store_timeout(CallKind::StoreList, after))),
                )
            }
            Operation::CheckMachine { node, .. } => {
                let call = backend.machine_state(&node);
                let answer = deadlines
                    .run(CallKind::MachineState, Some(&node), None, call)
                    .await;
                Outcome::CheckMachine(
                    answer.unwrap_or_else(|after| {
                        Err(backend_timeout(CallKind::MachineState, after))
                    }),
                )
            }
            Operation::ListAttachments { .. } => {
                let call = backend.list();
                let answer = deadlines.run(CallKind::BackendList, None, None, call).await;
                Outcome::List(
                    answer
                        .unwrap_or_else(|after| Err(backend_timeout(CallKind::BackendList, after))),
                )
            }
        };
        let label = label(&result);
        this.record("outcome", label);
        match error(&result) {
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
    use crate::core::calls::backend::MachineState;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    /// The failure kind (and with it the span's `outcome` and the stream's `failure`) of every
    /// error a call can return, and of a success.
    #[test]
    fn every_error_has_its_failure_kind_and_label() {
        let cases: Vec<(Outcome<D>, Option<FailureKind>, &str)> = vec![
            (Outcome::Detach(Ok(())), None, "ok"),
            (
                Outcome::Attach(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                Outcome::Detach(Err(BackendError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (
                Outcome::Attach(Err(BackendError::attached_elsewhere("node-b", "x"))),
                Some(FailureKind::AttachedElsewhere),
                "attached-elsewhere",
            ),
            (
                Outcome::Attach(Err(BackendError::node_full("x"))),
                Some(FailureKind::NodeFull),
                "node-full",
            ),
            (
                Outcome::Verify(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                Outcome::List(Err(BackendError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (
                Outcome::WriteStatus(Err(StoreError::conflict(None))),
                Some(FailureKind::Conflict),
                "conflict",
            ),
            (
                Outcome::ReadStatus(Err(StoreError::not_found())),
                Some(FailureKind::NotFound),
                "not-found",
            ),
            (
                Outcome::ListStatuses(Err(StoreError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
            (
                Outcome::WriteStatus(Err(StoreError::uncertain("x"))),
                Some(FailureKind::Uncertain),
                "uncertain",
            ),
            (Outcome::CheckMachine(Ok(MachineState::Off)), None, "ok"),
            (
                Outcome::CheckMachine(Err(BackendError::transient("x"))),
                Some(FailureKind::Transient),
                "transient",
            ),
        ];
        for (result, failure, label) in cases {
            assert_eq!(super::failure(&result), failure, "{label}");
            assert_eq!(super::label(&result), label);
            let outcome = if failure.is_some() {
                Ending::Failed
            } else {
                Ending::Succeeded
            };
            assert_eq!(ending(&result), outcome, "{label}");
        }
    }
}
