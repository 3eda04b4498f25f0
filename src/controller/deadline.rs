//! Every call to the outside has a deadline: a hung backend or store costs the calls it hangs
//! their timeout, never a volume (or, at start-up, the whole controller) forever.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;

use super::metrics::Metrics;
use crate::config::{CallKind, CallTimeouts};
use crate::core::event::Event;
use crate::domain::Domain;

/// Puts its deadline on each call, and counts and reports the calls that miss it.
///
/// Shared by the operation tasks, the recovery listings and the status writer. A timeout is
/// reported as an [`Event::CallTimedOut`] on a channel the controller's loop drains before it
/// takes in the result of the call's task, so the event is recorded (in the loop, like every
/// other event) before the failure it caused.
pub(crate) struct Deadlines<D: Domain> {
    limits: CallTimeouts,
    metrics: Option<Arc<Metrics>>,
    events: Option<mpsc::UnboundedSender<Event<D>>>,
}

impl<D: Domain> Clone for Deadlines<D> {
    fn clone(&self) -> Self {
        Deadlines {
            limits: self.limits,
            metrics: self.metrics.clone(),
            events: self.events.clone(),
        }
    }
}

impl<D: Domain> Deadlines<D> {
    pub(crate) fn new(limits: CallTimeouts) -> Self {
        Deadlines {
            limits,
            metrics: None,
            events: None,
        }
    }

    pub(crate) fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    pub(crate) fn set_events(&mut self, events: mpsc::UnboundedSender<Event<D>>) {
        self.events = Some(events);
    }

    /// Awaits `call` until the deadline of `kind`: its answer, or `Err(waited)` when it had none
    /// by then (the call is dropped, the timeout counted and reported).
    pub(crate) async fn run<T>(
        &self,
        kind: CallKind,
        node: Option<&D::Node>,
        volume: Option<&D::Volume>,
        call: impl Future<Output = T>,
    ) -> Result<T, Duration> {
        let limit = self.limits.of(kind);
        let mut call = pin!(call);
        // A call that answers at once (an in-memory backend, a cache) needs no timer: polling
        // it first saves building one per call (about 70 ns each on the project's machine, 1 to
        // 2 % of an operation with the in-memory backend). The deadline starts after this poll.
        if let Poll::Ready(answer) = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
            return Ok(answer);
        }
        match tokio::time::timeout(limit, call).await {
            Ok(answer) => Ok(answer),
            Err(_) => {
                if let Some(metrics) = &self.metrics {
                    metrics.call_timed_out(kind);
                }
                if let Some(events) = &self.events {
                    // The loop may be gone (shut down, crashed); the count above stands.
                    let _ = events.send(Event::CallTimedOut {
                        call: kind,
                        node: node.cloned(),
                        volume: volume.cloned(),
                        after: limit,
                    });
                }
                Err(limit)
            }
        }
    }
}

/// The message of the error a timed-out call becomes.
pub(crate) fn no_answer(after: Duration) -> String {
    format!("no answer within {after:?}")
}
