//! The reconciler's side of backend load admission ([`crate::core::rules::admission`]): the queue heads
//! offered first in each pass, the slots of detaches that no longer need them given back, and
//! the public view of the queues.

use std::time::Duration;

use super::Reconciler;
use crate::core::operation::Operation;
use crate::core::rules::admission::QueueStats;
use crate::core::state::progress::DetachStage;
use crate::domain::Domain;

impl<D: Domain> Reconciler<D> {
    /// The backend load at `now`: attach and detach calls under way, detaches holding a slot
    /// for their fresh read, what waits for a slot or a token and for how long, and the tokens
    /// left (see [`BackendLoad`](crate::config::BackendLoad)). All zero but `in_flight` when
    /// the load is unbounded.
    ///
    /// A queue that stays long, or an oldest wait that keeps growing, means the limits are
    /// below what the cluster asks of the backend: raise them if the backend allows.
    pub fn backend_queue(&self, now: Duration) -> QueueStats {
        self.calls.admission.stats(now)
    }

    /// Offers the capacity free at `now` to the queued detaches and attaches, a head of each
    /// class in turn, each queue in its order: each head popped has its volume reconciled now (and not again with the
    /// rest of `dirty`), where it is admitted if it still asks. A head that does not ask (no
    /// longer wanted, waiting for something else) leaves the queue. Each round pops one entry,
    /// so this ends; it stops when a class has no slot or the bucket no token.
    pub(super) fn admit_queued(
        &mut self,
        now: Duration,
        dirty: &mut Vec<D::Volume>,
        ops: &mut Vec<Operation<D>>,
    ) {
        // Slots whose detach no longer needs them are offered too, and those of calls that
        // hang past their time (see `OverdueCalls`).
        self.release_idle_slots();
        self.calls.admission.mark_overdue(now);
        // The classes take turns (detaches first at the start), across passes too: under a
        // shared bucket neither takes every token while the other waits.
        let mut offered = true;
        while offered {
            offered = false;
            for class in self.calls.admission.order() {
                if let Some((volume, _node)) = self.calls.admission.offer(class, now) {
                    offered = true;
                    if let Ok(i) = dirty.binary_search(&volume) {
                        dirty.remove(i);
                    }
                    self.reconcile_volume(now, &volume, ops);
                    self.calls.admission.withdraw(class);
                }
            }
        }
    }

    /// Gives back the slot of each detach admitted to its fresh read that no longer holds it:
    /// neither waiting for a read of its node, nor carried by a read in flight, nor cleared by
    /// one for this pass (a read that held it back, a detach no longer wanted, a clearance
    /// unused). At the start of a pass, so that the slot is offered in it, and at its end, so
    /// that [`next_deadline`](Self::next_deadline) sees it free.
    pub(super) fn release_idle_slots(&mut self) {
        let (actual, in_flight) = (&self.actual, &self.calls.in_flight);
        self.calls.admission.release_unless(|volume, node, read| {
            read.is_some_and(|id| in_flight.contains_key(&id))
                || actual.get(volume, node).is_some_and(|a| {
                    matches!(
                        a.detach.stage,
                        DetachStage::ReadWanted { .. } | DetachStage::Cleared { .. }
                    )
                })
        });
    }
}
