//! The operations a pass plans run together, a few dozen to a task, instead of one task each.
//!
//! A task per operation cost a spawn, a wake-up of the loop and a join each: with the in-memory
//! backend that was most of an operation's time. Together they share
//! those, and each operation keeps what made it safe alone:
//! - its own deadline and span ([`runner::execute`]);
//! - its own panic containment: a call that panics fails that operation, not its batch;
//! - its own answer, sent back the moment it ends: a call that hangs until its deadline holds
//!   back no other operation's result.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::{FutureExt, StreamExt, stream::FuturesUnordered};
use tokio::sync::mpsc;
use tracing::error;

use super::Joined;
use super::runner::{self, Parts};
use crate::core::operation::{OpId, Operation};
use crate::domain::Domain;

/// At most this many operations share a task. A pass that plans thousands (recovery, a node
/// drained at once) is spread over several, so that the runtime's workers share it.
pub(crate) const OPS_PER_TASK: usize = 32;

/// An operation's end, as sent to the loop.
pub(crate) type Finished<D> = (OpId, Joined<D>);

/// Runs `ops` at once, each through [`runner::execute`], and sends each one's end to `done` as
/// soon as it has one.
pub(crate) async fn run<D: Domain>(
    ops: Vec<Operation<D>>,
    parts: Arc<Parts<D>>,
    done: mpsc::UnboundedSender<Finished<D>>,
) {
    let mut calls: FuturesUnordered<_> = ops
        .into_iter()
        .map(|op| {
            let id = op.id();
            // Unwind safety: a panicking call leaves nothing of ours half changed; `Parts` is
            // shared read-only and its metrics are atomics.
            AssertUnwindSafe(runner::execute(op, Arc::clone(&parts)))
                .catch_unwind()
                .map(move |answer| match answer {
                    Ok(result) => (id, Joined::Done(result)),
                    Err(payload) => {
                        let message = panic_message(&*payload);
                        error!(%id, panic = %message, "an operation's call panicked");
                        (id, Joined::Panicked)
                    }
                })
        })
        .collect();
    while let Some(finished) = calls.next().await {
        // The loop holds a sender of its own, so it is gone only when the controller is; then
        // nobody waits for the answer.
        let _ = done.send(finished);
    }
}

/// The message a panic carried, as `panic!` formatted it.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_string()
    }
}
