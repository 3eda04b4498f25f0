//! Driving the core by hand in tests: a [`Reconciler`] on virtual time, with the answers to
//! its operations given one by one or by a rule (feature `testkit`, which `sim` turns on).
//!
//! The core plans every call as an [`Operation`] and waits for its [`Outcome`]. A test of the
//! core, of a driver, or of a model of the world around them needs the same loop each time:
//! poll at the next deadline, answer what was planned (or hold some answers back, as a slow
//! backend would), hand each answer to [`Reconciler::finish`], and look at what was planned.
//! [`Harness`] is that loop, so that each test says only what its world answers.
//!
//! A rule is any `FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>`: the
//! time, the core as it is before the answer, and the operation; `None` leaves the operation
//! running, to be answered later with [`Harness::finish`]. [`echo`] is the rule of a world
//! where every call succeeds and the store holds what the core last wrote; [`echo_store`]
//! lets the store's answers fail.
//!
//! For a world of its own, a test builds its answers from the pieces here: a [`FakeStore`]
//! with compare-and-set revisions, [`backend_failure`] and [`store_failure`] for a call that
//! fails, [`Held`] for operations answered later or out of order (answer each with
//! [`Harness::finish`]), and [`describe`] for a log a test can compare against.
//!
//! ```
//! use std::time::Duration;
//! use attach_detach::config::Config;
//! use attach_detach::core::{Input, NodeFacts, Operation, VolumeSpec};
//! use attach_detach::testkit::{Harness, echo};
//! type D = attach_detach::Ids<&'static str, &'static str, &'static str, ()>;
//!
//! let mut h = Harness::<D>::new(Config::default());
//! h.handle(Input::NodeUpdated { node: "n1", facts: NodeFacts::default() }).unwrap();
//! h.handle(Input::SetVolume { volume: "v1", spec: VolumeSpec::single_node(()) }).unwrap();
//! h.handle(Input::WorkloadScheduled { workload: "w", node: "n1", volumes: vec!["v1"] }).unwrap();
//! let planned = h.run_until_quiet(Duration::from_secs(10), echo());
//! assert!(planned.iter().any(|(_, op)| matches!(op, Operation::Attach { .. })));
//! assert_eq!(h.core.status().stored(&"n1").map(|l| l.len()), Some(1), "reported");
//! ```

use std::time::Duration;

mod world;

pub use world::{
    FakeStore, Held, StoredNode, backend_failure, describe, listed, node_status, store_failure,
};

use crate::config::Config;
use crate::core::{Input, OpId, Operation, Outcome, Reconciler, ReconcilerError};
use crate::domain::Domain;
use crate::traits::{AttachInfo, MachineState, NodeStatus, Revision, StoreError};

/// A [`Reconciler`] on virtual time, driven by hand or by a rule, with the test's world `W`
/// beside it: what the test's fake store and backend hold, its log, anything its answers need.
/// A test adds its own steps as methods of `Harness<Its, World>`.
#[derive(Debug)]
pub struct Harness<D: Domain, W = ()> {
    /// The core under test; read its views, or call it directly.
    pub core: Reconciler<D>,
    /// The virtual time of the last poll (or set by the test).
    pub now: Duration,
    /// The test's world.
    pub world: W,
}

impl<D: Domain> Harness<D> {
    /// A new core with `config`, at time zero. It has not recovered yet: its first poll plans
    /// the recovery listings.
    pub fn new(config: Config) -> Self {
        Harness::from_core(Reconciler::new(config))
    }

    /// A harness around `core`, at time zero.
    pub fn from_core(core: Reconciler<D>) -> Self {
        Harness::with_world(core, ())
    }
}

impl<D: Domain, W> Harness<D, W> {
    /// A harness around `core` and the test's `world`, at time zero.
    pub fn with_world(core: Reconciler<D>, world: W) -> Self {
        Harness {
            core,
            now: Duration::ZERO,
            world,
        }
    }

    /// Hands `input` to the core.
    pub fn handle(&mut self, input: Input<D>) -> Result<(), ReconcilerError<D>> {
        self.core.handle(input)
    }

    /// Polls at `at` (or now, if `at` is earlier: time never goes back) and returns what the
    /// core planned, unanswered.
    pub fn poll_at(&mut self, at: Duration) -> Vec<Operation<D>> {
        self.now = self.now.max(at);
        self.core.poll(self.now)
    }

    /// Hands the core `outcome` for the operation `id`, now.
    pub fn finish(&mut self, id: OpId, outcome: Outcome<D>) -> Result<(), ReconcilerError<D>> {
        self.core.finish(self.now, id, outcome)
    }

    /// Answers each of `ops` by `rule`, now; returns those it left running.
    ///
    /// # Panics
    ///
    /// If the core refuses an answer: the rule answered an operation with an outcome of
    /// another kind, a mistake in the test.
    pub fn answer<R>(
        &mut self,
        ops: impl IntoIterator<Item = Operation<D>>,
        mut rule: R,
    ) -> Vec<Operation<D>>
    where
        R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
    {
        let mut running = Vec::new();
        for op in ops {
            self.answer_one(op, &mut rule, &mut running);
        }
        running
    }

    fn answer_one<R>(&mut self, op: Operation<D>, rule: &mut R, running: &mut Vec<Operation<D>>)
    where
        R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
    {
        match rule(self.now, &self.core, &op) {
            Some(outcome) => {
                if let Err(error) = self.core.finish(self.now, op.id(), outcome) {
                    panic!("the core refused the answer to {op:?}: {error}");
                }
            }
            None => running.push(op),
        }
    }

    /// Polls every `step` from now through `now + span`, answering by `rule` as each
    /// operation is planned; returns every operation planned, with the time it was, in order.
    /// Ends with `now` at the last poll.
    pub fn run_for<R>(
        &mut self,
        span: Duration,
        step: Duration,
        mut rule: R,
    ) -> Vec<(Duration, Operation<D>)>
    where
        R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
    {
        assert!(!step.is_zero(), "a run needs a step");
        let end = self.now + span;
        let mut planned = Vec::new();
        let mut at = self.now;
        while at <= end {
            self.now = at;
            self.poll_and_answer(&mut rule, &mut planned);
            at += step;
        }
        planned
    }

    /// Polls at each deadline the core asks for that falls before `before`, answering by
    /// `rule`, until none does; returns every operation planned, with its time, in order.
    pub fn run_until_quiet<R>(
        &mut self,
        before: Duration,
        mut rule: R,
    ) -> Vec<(Duration, Operation<D>)>
    where
        R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
    {
        let mut planned = Vec::new();
        while let Some(due) = self.core.next_deadline().filter(|d| *d < before) {
            self.now = self.now.max(due);
            self.poll_and_answer(&mut rule, &mut planned);
        }
        planned
    }

    fn poll_and_answer<R>(&mut self, rule: &mut R, planned: &mut Vec<(Duration, Operation<D>)>)
    where
        R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
    {
        for op in self.core.poll(self.now) {
            if let Some(outcome) = rule(self.now, &self.core, &op) {
                if let Err(error) = self.core.finish(self.now, op.id(), outcome) {
                    panic!("the core refused the answer to {op:?}: {error}");
                }
            }
            planned.push((self.now, op));
        }
    }
}

/// The answer of a world where every call succeeds and the store holds what the core last
/// wrote: attaches and detaches succeed; a verify finds every volume it asks about; a write
/// creates the revision after the one it expected; a read finds the list and revision the
/// core last wrote (or read), nothing in use, the node healthy and unfenced; both listings are
/// empty; a machine check answers `Unknown` (a backend that cannot tell).
pub fn echo_outcome<D: Domain>(core: &Reconciler<D>, op: &Operation<D>) -> Outcome<D> {
    match op {
        Operation::Attach { .. } => Outcome::Attach(Ok(AttachInfo::default())),
        Operation::Detach { .. } => Outcome::Detach(Ok(())),
        Operation::Verify { volumes, .. } => {
            Outcome::Verify(Ok(volumes.iter().map(|(v, _)| v.clone()).collect()))
        }
        Operation::WriteStatus { expected, .. } => {
            let next = expected.text().parse::<u64>().unwrap_or(0) + 1;
            Outcome::WriteStatus(Ok(Revision::from(next).into()))
        }
        Operation::ReadStatus { node, .. } => Outcome::ReadStatus(Ok(NodeStatus {
            attached: core
                .status()
                .stored(node)
                .map(|l| l.to_vec())
                .unwrap_or_default(),
            in_use: Some(Vec::new()),
            fenced: Some(false),
            healthy: Some(true),
            revision: core
                .status()
                .revision(node)
                .cloned()
                .unwrap_or(Revision::from(0)),
        })),
        Operation::ListAttachments { .. } => Outcome::List(Ok(Vec::new())),
        Operation::ListStatuses { .. } => Outcome::ListStatuses(Ok(Vec::new())),
        Operation::CheckMachine { .. } => Outcome::CheckMachine(Ok(MachineState::Unknown)),
    }
}

/// The rule of [`echo_outcome`]'s world: every operation answered at once.
pub fn echo<D: Domain>() -> impl FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>
{
    |_, core, op| Some(echo_outcome(core, op))
}

/// [`echo`], with a store whose reads and writes of a node answer `store(node)`'s error
/// when it gives one (say, [`StoreError::not_found`] for a node the store lacks).
pub fn echo_store<D: Domain>(
    store: impl Fn(&D::Node) -> Result<(), StoreError>,
) -> impl FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>> {
    move |_, core, op| {
        let failed = match op {
            Operation::WriteStatus { node, .. } => {
                store(node).err().map(|e| Outcome::WriteStatus(Err(e)))
            }
            Operation::ReadStatus { node, .. } => {
                store(node).err().map(|e| Outcome::ReadStatus(Err(e)))
            }
            _ => None,
        };
        Some(failed.unwrap_or_else(|| echo_outcome(core, op)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{AttachState, NodeFacts, VolumeSpec};
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    fn placed() -> Harness<D> {
        let mut h = Harness::<D>::new(Config::default());
        h.handle(Input::NodeUpdated {
            node: "n1",
            facts: NodeFacts::default(),
        })
        .unwrap();
        h.handle(Input::SetVolume {
            volume: "v1",
            spec: VolumeSpec::single_node(()),
        })
        .unwrap();
        h.handle(Input::WorkloadScheduled {
            workload: "w",
            node: "n1",
            volumes: vec!["v1"],
        })
        .unwrap();
        h
    }

    /// The example of docs/embedding.md: an answer held back, then given by hand.
    #[test]
    fn a_rule_may_leave_an_operation_running_for_the_test_to_finish() {
        let mut h = placed();
        let step = Duration::from_millis(100);
        let planned = h.run_for(Duration::from_secs(1), step, |_, core, op| {
            (!matches!(op, Operation::Attach { .. })).then(|| echo_outcome(core, op))
        });
        assert_eq!(h.now, Duration::from_secs(1), "the last poll");
        let attaches: Vec<_> = planned
            .iter()
            .filter(|(_, op)| matches!(op, Operation::Attach { .. }))
            .collect();
        assert_eq!(attaches.len(), 1, "one attach, still running: {planned:?}");
        assert_eq!(h.core.in_flight(), 1);
        let (_, attach) = attaches[0];
        h.now += Duration::from_secs(1);
        h.finish(attach.id(), Outcome::panicked(attach.kind()))
            .unwrap();
        assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Uncertain);
        assert_eq!(
            h.finish(attach.id(), Outcome::Attach(Ok(AttachInfo::default()))),
            Err(ReconcilerError::UnknownOperation { id: attach.id() })
        );
    }

    #[test]
    fn echo_store_fails_the_store_calls_it_is_told_to() {
        let mut h = placed();
        let planned = h.run_until_quiet(
            Duration::from_secs(2),
            echo_store(|_| Err(StoreError::not_found())),
        );
        assert!(
            planned
                .iter()
                .any(|(_, op)| matches!(op, Operation::Attach { .. }))
        );
        assert!(h.core.status().is_missing(&"n1"));
        let mut h = placed();
        h.run_until_quiet(Duration::from_secs(2), echo());
        assert_eq!(h.core.status().stored(&"n1").map(|l| l.len()), Some(1));
    }
}
