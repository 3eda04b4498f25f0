//! Panics in a simulated run: every one fails the run with its message instead of vanishing.
//!
//! Tokio keeps a spawned task's panic inside its `JoinHandle`, and the controller turns a panic
//! in one of its operation tasks into an uncertain result; either way a run could pass although
//! something panicked. The runner therefore joins what it spawns (the controller, the forwarder,
//! the backend's effects) and the simulated backend and store report a panic in their own code
//! before it unwinds into the controller.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use super::world::World;

/// The message a panic was raised with, or a placeholder for a payload that is not text.
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

/// The panic message of a task that ended with `error`, or `None` if it was cancelled.
pub(crate) fn of_join_error(error: JoinError) -> Option<String> {
    error
        .try_into_panic()
        .ok()
        .map(|payload| message(payload.as_ref()))
}

/// The simulator's own background tasks, kept so that their panics can be collected.
#[derive(Clone, Default)]
pub(crate) struct Tasks(Arc<Mutex<JoinSet<()>>>);

impl Tasks {
    /// Spawns `task` on the current runtime.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.lock().spawn(task);
    }

    /// The panic messages of the tasks that ended since the last call, in the order joined.
    pub(crate) fn reap(&self) -> Vec<String> {
        let mut panics = Vec::new();
        let mut set = self.0.lock();
        while let Some(joined) = set.try_join_next() {
            if let Err(error) = joined {
                panics.extend(of_join_error(error));
            }
        }
        panics
    }

    /// Stops every task still running.
    pub(crate) fn abort_all(&self) {
        self.0.lock().abort_all();
    }
}

/// Runs `future` (a call into a simulated double) so that a panic in it is recorded in the
/// world as a violation naming `what`, then unwinds on as it would have.
pub(crate) fn guarded<F: Future>(
    world: &Arc<Mutex<World>>,
    epoch: Instant,
    what: &'static str,
    future: F,
) -> Guarded<F> {
    Guarded {
        future: Box::pin(future),
        world: Arc::clone(world),
        epoch,
        what,
    }
}

/// See [`guarded`].
pub(crate) struct Guarded<F> {
    future: Pin<Box<F>>,
    world: Arc<Mutex<World>>,
    epoch: Instant,
    what: &'static str,
}

impl<F: Future> Future for Guarded<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // `Guarded` is `Unpin` (the future is boxed), so it can be borrowed plainly.
        let this = &mut *self;
        match catch_unwind(AssertUnwindSafe(|| this.future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                {
                    // A lock held by the panicking code was released while unwinding.
                    let mut w = this.world.lock();
                    w.now = this.epoch.elapsed();
                    w.violation(format!(
                        "the simulated {} panicked: {}",
                        this.what,
                        message(payload.as_ref())
                    ));
                }
                resume_unwind(payload)
            }
        }
    }
}
