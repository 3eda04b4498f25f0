//! Reconciler cases: upstream's reconciler_test.go cases, then one test per correction. Each
//! correction's scenario runs twice, once with the upstream bug switched back in, to show that
//! the test bites.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::config::UpstreamBugs;
use crate::core::calls::store::StatusFacts;
use crate::core::state::desired::{DesiredError, Missing};
use crate::domain::Ids;
use crate::testkit::{Harness, backend_failure, describe as render, node_status, store_failure};

type T = Ids<&'static str, &'static str, &'static str>;

const TICK: Duration = Duration::from_millis(100);

mod admission_tests;

mod claim_recovery_tests;

mod detach_progress;

mod driver_limits;

mod explain;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A node in the test store: its agent's facts, its list, its revision.
type Stored = (NodeFacts<&'static str>, Vec<ReportedVolume<T>>, u64);

/// What the harness keeps beside the core: a log, and a store whose reads answer with what the
/// tests told the core about each node (its in-use list, fence, health) and what the core
/// wrote.
#[derive(Debug, Default)]
struct World {
    /// Every operation planned so far, rendered.
    log: Vec<String>,
    /// The store: each node's facts as its agent last reported them, list and revision.
    store: BTreeMap<&'static str, Stored>,
    /// What the backend says of each node's machine (`Running` when not set).
    machines: BTreeMap<&'static str, crate::core::calls::backend::MachineState>,
}

/// A reconciler on virtual time, with helpers to finish operations, and the [`World`] that
/// answers them.
type H = Harness<T, World>;

fn transient() -> BackendError<&'static str> {
    BackendError::transient("injected")
}

fn uncertain() -> BackendError<&'static str> {
    BackendError::uncertain("timed out")
}

impl H {
    /// A core without the periodic listing (this harness has no backend to list); the tests of
    /// the listing turn it on and answer it themselves.
    fn new(config: Config) -> Self {
        H::with_resync(Config {
            resync_period: None,
            ..config
        })
    }

    /// A core that has recovered from an empty store and backend.
    fn with_resync(config: Config) -> Self {
        let mut h = H::recovering(config);
        for op in h.poll_at(Duration::ZERO) {
            h.ok(op);
        }
        assert!(!h.core.is_recovering());
        h
    }

    /// A new core, still to recover.
    fn recovering(config: Config) -> Self {
        H::with_world(Reconciler::new(config), World::default())
    }

    /// What a fresh read of `node` finds.
    fn read(&self, node: &'static str) -> Result<NodeStatus<T>, StoreError> {
        let (facts, attached, revision) =
            self.world.store.get(node).ok_or(StoreError::not_found())?;
        Ok(node_status(attached.clone(), facts, *revision))
    }

    /// A core with `bugs` switched back in (they need the `upstream-bugs` feature; without it
    /// only `UpstreamBugs::NONE` is accepted).
    fn with_bugs(bugs: UpstreamBugs) -> Self {
        #[cfg(feature = "upstream-bugs")]
        let config = Config {
            upstream_bugs: bugs,
            ..Config::default()
        };
        #[cfg(not(feature = "upstream-bugs"))]
        let config = {
            assert_eq!(bugs, UpstreamBugs::NONE, "needs the upstream-bugs feature");
            Config::default()
        };
        H::new(config)
    }

    fn node(&mut self, node: &'static str, in_use: &[&'static str]) {
        self.facts(node, true, false, Some(in_use));
    }

    fn facts(
        &mut self,
        node: &'static str,
        healthy: bool,
        fenced: bool,
        in_use: Option<&[&'static str]>,
    ) {
        let facts = NodeFacts {
            healthy,
            fenced,
            in_use: in_use.map(<[_]>::to_vec),
            attach_limit: None,
            driver_limits: Vec::new(),
        };
        self.world
            .store
            .entry(node)
            .or_insert((facts.clone(), Vec::new(), 1))
            .0 = facts.clone();
        self.input(Input::NodeUpdated { node, facts });
    }

    /// Feeds one input; the core must take it.
    fn input(&mut self, input: Input<T>) {
        self.handle(input).unwrap();
    }

    fn rwo(&mut self, volume: &'static str) {
        self.input(Input::SetVolume {
            volume,
            spec: VolumeSpec::single_node(()),
        });
    }

    fn rwx(&mut self, volume: &'static str) {
        self.input(Input::SetVolume {
            volume,
            spec: VolumeSpec::multi_node(()),
        });
    }

    fn pod(&mut self, pod: &'static str, node: &'static str, volumes: &[&'static str]) {
        self.input(Input::WorkloadScheduled {
            workload: pod,
            node,
            volumes: volumes.to_vec(),
        });
    }

    fn unpod(&mut self, pod: &'static str) {
        self.input(Input::WorkloadRemoved { workload: pod });
    }

    fn unnode(&mut self, node: &'static str) {
        self.input(Input::NodeRemoved { node });
    }

    fn unvolume(&mut self, volume: &'static str) {
        self.input(Input::VolumeRemoved { volume });
    }

    /// One reconcile period later, a pass, with every operation it plans.
    fn tick_raw(&mut self) -> Vec<Operation<T>> {
        let ops = self.poll_at(self.now + TICK);
        self.world.log.extend(ops.iter().map(render));
        ops
    }

    /// One reconcile period later, a pass; the fresh reads it plans are answered from the
    /// store at once (and logged), and while they were, another pass follows a period later.
    /// Returns the other operations.
    fn tick(&mut self) -> Vec<Operation<T>> {
        let mut planned = Vec::new();
        loop {
            let mut read = false;
            for op in self.tick_raw() {
                if op.kind() == OpKind::ReadStatus {
                    read = true;
                    self.ok(op);
                } else {
                    planned.push(op);
                }
            }
            if !read {
                return planned;
            }
        }
    }

    fn tick_names(&mut self) -> Vec<String> {
        self.tick().iter().map(render).collect()
    }

    /// Advances `d` tick by tick, finishing every operation with success. Returns what was
    /// planned, less the periodic verifies (they confirm every attachment here) and the fresh
    /// reads (answered from the store).
    fn run_ok(&mut self, d: Duration) -> Vec<String> {
        let end = self.now + d;
        let mut seen = Vec::new();
        while self.now < end {
            for op in self.tick() {
                if !matches!(op.kind(), OpKind::Verify | OpKind::ReadStatus) {
                    seen.push(render(&op));
                }
                self.ok(op);
            }
        }
        seen
    }

    /// A pass whose operations all succeed except the first of `kind`, which is returned.
    fn tick_taking(&mut self, kind: OpKind) -> Operation<T> {
        let mut taken = None;
        for op in self.tick() {
            if taken.is_none() && op.kind() == kind {
                taken = Some(op);
            } else {
                self.ok(op);
            }
        }
        taken.unwrap_or_else(|| panic!("no {kind:?} planned"))
    }

    /// Passes whose operations all succeed until one plans `kind`; that one is returned.
    /// Fresh reads are answered on the way.
    fn run_until_taking(&mut self, kind: OpKind) -> Operation<T> {
        for _ in 0..100 {
            let mut taken = None;
            for op in self.tick() {
                if taken.is_none() && op.kind() == kind {
                    taken = Some(op);
                } else {
                    self.ok(op);
                }
            }
            if let Some(op) = taken {
                return op;
            }
        }
        panic!("no {kind:?} planned in 100 passes")
    }

    fn ok(&mut self, op: Operation<T>) {
        let outcome = match op {
            Operation::Attach { volume, .. } => Outcome::Attach(Ok(AttachInfo {
                device: Some(format!("/dev/{volume}")),
            })),
            Operation::Detach { .. } => Outcome::Detach(Ok(())),
            Operation::Verify { ref volumes, .. } => {
                Outcome::Verify(Ok(volumes.iter().map(|(v, _)| *v).collect()))
            }
            Operation::WriteStatus {
                node, ref attached, ..
            } => {
                let entry =
                    self.world
                        .store
                        .entry(node)
                        .or_insert((NodeFacts::default(), Vec::new(), 1));
                entry.1 = attached.to_vec();
                entry.2 += 1;
                Outcome::WriteStatus(Ok(Revision::from(entry.2).into()))
            }
            Operation::ReadStatus { node, .. } => Outcome::ReadStatus(self.read(node)),
            Operation::ListAttachments { .. } => Outcome::List(Ok(Vec::new())),
            Operation::ListStatuses { .. } => Outcome::ListStatuses(Ok(Vec::new())),
            Operation::CheckMachine { node, .. } => {
                let state = self
                    .world
                    .machines
                    .get(node)
                    .copied()
                    .unwrap_or(crate::core::calls::backend::MachineState::Running);
                Outcome::CheckMachine(Ok(state))
            }
        };
        self.finish(op.id(), outcome).unwrap();
    }

    /// Answers the verify `op`: of the volumes it asks about, the backend lists `attached`.
    fn verified(&mut self, op: Operation<T>, attached: &[&'static str]) {
        let Operation::Verify { id, .. } = op else {
            panic!("not a verify: {}", render(&op));
        };
        self.finish(id, Outcome::Verify(Ok(attached.to_vec())))
            .unwrap();
    }

    fn fail(&mut self, op: Operation<T>, error: BackendError<&'static str>) {
        let Some(outcome) = backend_failure(&op, error) else {
            panic!("use fail_status for {}", render(&op));
        };
        self.finish(op.id(), outcome).unwrap();
    }

    fn fail_status(&mut self, op: Operation<T>, error: StoreError) {
        match store_failure(&op, error) {
            Some(outcome) if op.kind() != OpKind::ListStatuses => {
                self.finish(op.id(), outcome).unwrap()
            }
            _ => panic!("not a store call: {}", render(&op)),
        }
    }

    fn stored(&self, node: &'static str) -> Option<Vec<&'static str>> {
        self.core
            .status()
            .stored(&node)
            .map(|l| l.volumes().to_vec())
    }

    fn count(&self, prefix: &str) -> usize {
        self.world
            .log
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// Replaces `from_pod` (using single-node `volume` on `from`) by `to_pod` on `to`, and
    /// checks that the volume is detached from `from` before it is attached to `to`.
    fn moves_apart(
        &mut self,
        from_pod: &'static str,
        to_pod: &'static str,
        volume: &'static str,
        from: &'static str,
        to: &'static str,
    ) {
        self.unpod(from_pod);
        self.pod(to_pod, to, &[volume]);
        let seen = self.run_ok(secs(5));
        let detach = seen
            .iter()
            .position(|op| *op == format!("detach {volume} {from}"));
        let attach = seen
            .iter()
            .position(|op| *op == format!("attach {volume} {to}"));
        assert!(
            matches!((detach, attach), (Some(d), Some(a)) if d < a),
            "{seen:?}"
        );
    }

    /// v1's detach from fenced n1 failed; a release's verify is under way when n1 is unfenced
    /// (the release is void), fenced again and released again: that verify, returned, was
    /// planned before the second release.
    fn released_behind_a_running_verify() -> (Self, Operation<T>) {
        let mut h = H::attached_rwo(UpstreamBugs::default());
        h.facts("n1", false, true, Some(&["v1"]));
        h.unpod("p1");
        let detach = h.run_until_taking(OpKind::Detach);
        h.fail(detach, transient());
        let release = |h: &mut H| {
            h.core.handle(Input::ReleaseVolume {
                volume: "v1",
                node: "n1",
            })
        };
        assert_eq!(release(&mut h), Ok(()));
        let early = h.run_until_taking(OpKind::Verify);
        h.facts("n1", false, false, Some(&["v1"]));
        h.facts("n1", false, true, Some(&["v1"]));
        assert_eq!(release(&mut h), Ok(()));
        (h, early)
    }

    /// v1 attached to n1 for p1; then n1 unhealthy and still using it, and p1 gone.
    fn unhealthy_still_using(config: Config) -> Self {
        let mut h = H::new(config);
        h.node("n1", &[]);
        h.rwo("v1");
        h.pod("p1", "n1", &["v1"]);
        h.run_ok(secs(1));
        h.facts("n1", false, false, Some(&["v1"]));
        h.unpod("p1");
        h
    }

    /// n1 runs p1 with v1 attached, reported and acknowledged.
    fn attached_rwo(bugs: UpstreamBugs) -> Self {
        let mut h = H::with_bugs(bugs);
        h.node("n1", &[]);
        h.node("n2", &[]);
        h.rwo("v1");
        h.pod("p1", "n1", &["v1"]);
        h.run_ok(secs(1));
        assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
        assert_eq!(h.stored("n1"), Some(vec!["v1"]));
        h
    }
}

// ---- upstream reconciler_test.go cases ----------------------------------------------------------

#[test]
fn nothing_desired_plans_nothing_and_sleeps() {
    let mut h = H::new(Config::default());
    assert_eq!(h.core.next_deadline(), None);
    assert!(h.tick().is_empty());
    h.node("n1", &[]);
    // The new node's status is read once (its revision is unknown); it already holds the
    // empty list, so nothing is written, and nothing is left to do.
    assert!(h.run_ok(secs(1)).is_empty());
    assert_eq!(h.world.log, vec!["read n1"]);
    assert_eq!(
        h.core.next_deadline(),
        None,
        "no attachment: not even a sync is due"
    );
}

#[test]
fn one_desired_volume_attaches_then_is_reported() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let ops = h.tick_raw();
    assert_eq!(
        ops.iter().map(render).collect::<Vec<_>>(),
        vec!["attach v1 n1", "read n1"],
        "a node whose revision is unknown is read before it is written"
    );
    for op in ops {
        h.ok(op);
    }
    assert_eq!(h.tick_names(), vec!["write n1 [v1]"]);
    assert_eq!(
        h.core.actual().report(&"n1").to_vec()[0].device.as_deref(),
        Some("/dev/v1")
    );
    assert!(h.run_ok(secs(5)).is_empty(), "settled: no further work");
    let deadline = h.core.next_deadline().unwrap();
    assert!(
        deadline >= secs(60),
        "only the sync timer remains, got {deadline:?}"
    );
}

#[test]
fn attach_then_detach_when_unmounted() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    assert_eq!(
        h.run_ok(secs(1)),
        vec!["write n1 []", "detach v1 n1"],
        "the removal is written before the detach"
    );
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    assert!(h.core.actual().is_empty());
}

#[test]
fn mounted_volume_waits_for_unmount_then_detaches() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n1", &["v1"]);
    h.unpod("p1");
    assert!(
        h.run_ok(secs(30)).is_empty(),
        "mounted on a healthy node: wait"
    );
    h.node("n1", &[]);
    assert_eq!(h.run_ok(secs(1)), vec!["write n1 []", "detach v1 n1"]);
}

/// Another writer lists v1 on n1 again after the core's removal was acknowledged, and the fresh
/// read before the detach sees it: the agent may start mounting it, so that read justifies
/// nothing. The core writes the removal again, and only a read after that clears the detach.
#[test]
fn a_fresh_read_that_lists_the_volume_again_justifies_nothing() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let write = h.tick().pop().unwrap();
    assert_eq!(render(&write), "write n1 []");
    h.ok(write);
    let read = h.tick_raw().pop().expect("the read before the detach");
    assert_eq!(render(&read), "read n1");
    let n1 = h.world.store.get_mut("n1").unwrap();
    n1.1 = vec![ReportedVolume {
        volume: "v1",
        device: None,
    }];
    n1.2 += 1;
    h.ok(read);
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(h.world.log, vec!["write n1 []", "read n1", "detach v1 n1"]);
}

/// A clearance from a fresh read is for the next pass, however long the reconcile period: with
/// passes 3 s apart the detach still goes (a fixed time-to-live shorter than the period would
/// re-read the node for ever).
#[test]
fn a_long_reconcile_period_still_detaches_after_the_fresh_read() {
    let mut h = H::new(Config {
        reconcile_period: secs(3),
        ..Config::default()
    });
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(10));
    h.unpod("p1");
    h.run_ok(secs(30));
    assert_eq!(h.count("read n1"), 2, "{:?}", h.world.log);
    assert_eq!(h.count("detach"), 1, "{:?}", h.world.log);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
}

#[test]
fn a_write_that_did_nothing_leaves_the_store_known_and_holds_the_detach() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let write = h.tick().pop().unwrap();
    h.fail_status(write, StoreError::transient("apiserver down"));
    assert_eq!(
        h.stored("n1"),
        Some(vec!["v1"]),
        "still the last acknowledged list"
    );
    for _ in 0..4 {
        assert!(
            h.tick().is_empty(),
            "backoff, and the store still lists v1: no detach"
        );
    }
    assert_eq!(h.run_ok(secs(1)), vec!["write n1 []", "detach v1 n1"]);
}

#[test]
fn detach_mounted_on_unhealthy_node_after_timeout_when_configured() {
    let mut h = H::unhealthy_still_using(Config {
        force_detach_on_timeout: true,
        ..Config::default()
    });
    let early = h.run_ok(secs(359));
    assert!(early.is_empty(), "within max-wait-for-unmount: {early:?}");
    assert_eq!(
        h.run_ok(secs(2)),
        vec!["write n1 []", "detach v1 n1 forced:timeout"]
    );
}

#[test]
fn status_write_failure_holds_the_detach() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let ops = h.tick();
    assert_eq!(
        ops.iter().map(render).collect::<Vec<_>>(),
        vec!["write n1 []"]
    );
    h.fail_status(
        ops.into_iter().next().unwrap(),
        StoreError::uncertain("apiserver timed out"),
    );
    assert_eq!(
        h.stored("n1"),
        None,
        "a write that may have landed leaves the store unknown"
    );
    // Backoff: nothing for 500 ms, and certainly no detach.
    for _ in 0..4 {
        assert!(h.tick().is_empty());
    }
    assert_eq!(h.run_ok(secs(1)), vec!["write n1 []", "detach v1 n1"]);
}

#[test]
fn rwx_attaches_to_two_nodes_at_once() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwx("v2");
    h.pod("p1", "n1", &["v2"]);
    h.pod("p2", "n2", &["v2"]);
    let names = h.tick_names();
    assert_eq!(&names[..2], &["attach v2 n1", "attach v2 n2"]);
}

#[test]
fn rwo_on_two_nodes_reports_multi_attach_once_then_moves() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.core.take_events();
    h.pod("p2", "n2", &["v1"]);
    assert!(h.run_ok(secs(10)).is_empty());
    let events = h.core.take_events();
    assert_eq!(events.len(), 1, "once per episode: {events:?}");
    let Event::MultiAttach {
        volume,
        node,
        workloads,
        holders,
    } = &events[0]
    else {
        panic!("expected Multi-Attach, got {events:?}");
    };
    assert_eq!(
        (*volume, *node, workloads.as_slice()),
        ("v1", "n2", &["p2"][..])
    );
    assert_eq!(holders[0].node, "n1");
    assert_eq!(holders[0].workloads, vec!["p1"]);
    assert_eq!(events[0].reason(), "MultiAttachVolume");
    assert_eq!(
        events[0].to_string(),
        r#"Multi-Attach error for volume "v1": Volume is already used by workload(s) ["p1"] on node(s) ["n1"]"#
    );
    h.unpod("p1");
    assert_eq!(
        h.run_ok(secs(1)),
        vec![
            "write n1 []",
            "detach v1 n1",
            "attach v1 n2",
            "write n2 [v1]"
        ]
    );
}

/// A single-node volume wanted on two nodes in the same pass: the look plans the attach to
/// one, and meets it running when it comes to the other. The attach's success must have the
/// volume looked at again, or the second workload's Multi-Attach is never reported.
#[test]
fn the_attach_a_look_planned_reports_the_multi_attach_it_left_when_it_lands() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.run_ok(secs(1));
    h.pod("p1", "n1", &["v1"]);
    h.pod("p2", "n2", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    let Operation::Attach { node: first, .. } = &attach else {
        unreachable!("taken by kind")
    };
    let other = if *first == "n1" { "n2" } else { "n1" };
    h.core.take_events();
    h.ok(attach);
    assert!(h.run_ok(secs(1)).iter().all(|op| op.starts_with("write")));
    let events = h.core.take_events();
    let multi: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::MultiAttach { node, .. } => Some(*node),
            _ => None,
        })
        .collect();
    assert_eq!(multi, vec![other], "{events:?}");
}

#[test]
fn multi_attach_text_without_workloads_after_force_delete() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    // The node dies; its pod is force-deleted; the replacement lands on n2.
    h.facts("n1", false, false, None);
    h.unpod("p1");
    h.pod("p1b", "n2", &["v1"]);
    h.run_ok(secs(1));
    let events = h.core.take_events();
    let multi: Vec<_> = events
        .iter()
        .filter(|e| e.reason() == "MultiAttachVolume")
        .collect();
    assert_eq!(multi.len(), 1);
    assert!(
        multi[0]
            .to_string()
            .contains("already exclusively attached to one node ([\"n1\"])"),
        "{}",
        multi[0]
    );
}

#[test]
fn detach_on_out_of_service_node_skips_the_unmount_wait() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    h.pod("p1b", "n2", &["v1"]);
    let unfenced = h.run_ok(secs(3600));
    assert!(
        unfenced.is_empty(),
        "no taint: never detached: {unfenced:?}"
    );
    h.facts("n1", false, true, Some(&["v1"]));
    assert_eq!(
        h.run_ok(secs(1)),
        vec![
            "write n1 []",
            "detach v1 n1 forced:out-of-service",
            "attach v1 n2",
            "write n2 [v1]"
        ]
    );
}

#[test]
fn healthy_node_is_never_force_detached() {
    let mut h = H::new(Config {
        force_detach_on_timeout: true,
        ..Config::default()
    });
    h.node("n1", &["v1"]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.unpod("p1");
    let healthy = h.run_ok(secs(3600));
    assert!(healthy.is_empty(), "upstream 110721: {healthy:?}");
}

#[test]
fn detach_failure_then_pod_back_on_same_node_is_reported_without_more_detaches() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    assert_eq!(h.run_ok(TICK), vec!["write n1 []"]);
    let ops = h.tick();
    assert_eq!(
        ops.iter().map(render).collect::<Vec<_>>(),
        vec!["detach v1 n1"]
    );
    h.fail(ops.into_iter().next().unwrap(), transient());
    h.pod("p1", "n1", &["v1"]);
    assert_eq!(h.run_ok(secs(10)), vec!["write n1 [v1]"]);
    assert_eq!(h.stored("n1"), Some(vec!["v1"]));
    assert_eq!(h.count("detach"), 1);
}

#[test]
fn attach_timeout_is_uncertain_and_retried_after_backoff() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, uncertain());
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Uncertain);
    assert!(
        h.core.actual().report(&"n1").is_empty(),
        "uncertain is not reported"
    );
    assert!(
        h.run_ok(Duration::from_millis(300))
            .iter()
            .all(|o| !o.starts_with("attach"))
    );
    assert!(h.run_ok(secs(1)).contains(&"attach v1 n1".to_string()));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
}

#[test]
fn attach_backoff_does_not_delay_a_detach() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwx("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, uncertain());
    h.unpod("p1");
    // The uncertain attachment is detached at once, although attach is in backoff (75209).
    assert!(h.run_ok(TICK * 2).contains(&"detach v1 n1".to_string()));
}

#[test]
fn dangling_attach_error_marks_the_named_node_uncertain() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n2", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, BackendError::attached_elsewhere("n1", "dangling"));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Uncertain);
    // n1 does not need it and reports nothing in use: detach it there, then attach to n2.
    let seen = h.run_ok(secs(2));
    assert_eq!(seen, vec!["detach v1 n1", "attach v1 n2", "write n2 [v1]"]);
}

#[test]
fn sync_verifies_and_reattaches_what_the_backend_lost() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.run_ok(secs(58));
    let mut verify = None;
    while verify.is_none() {
        verify = h.tick().into_iter().find(|o| o.kind() == OpKind::Verify);
    }
    let Some(Operation::Verify { id, volumes, .. }) = verify else {
        unreachable!()
    };
    assert_eq!(volumes, vec![("v1", ())]);
    h.core
        .finish(h.now, id, Outcome::Verify(Ok(vec![])))
        .unwrap();
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    assert_eq!(
        h.run_ok(secs(1)),
        vec!["attach v1 n1", "write n1 []", "write n1 [v1]"]
    );
}

/// A verify's answer is walked beside the node's sorted list, so it is sorted first: a backend
/// may answer in any order, leave volumes out anywhere, and list volumes the core never asked
/// about. Only the volume left out is taken as gone.
#[test]
fn a_verify_answer_in_any_order_drops_exactly_the_volumes_it_leaves_out() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    let volumes = ["v1", "v2", "v3", "v4", "v5"];
    for volume in volumes {
        h.rwo(volume);
    }
    h.pod("p1", "n1", &volumes);
    h.run_ok(secs(58));
    let Operation::Verify {
        id, volumes: asked, ..
    } = h.run_until_taking(OpKind::Verify)
    else {
        unreachable!()
    };
    assert_eq!(asked.len(), 5);
    // Out of order, v3 left out, and names the core never asked about before, between and
    // after the node's own.
    let answer = vec!["v5", "v0", "v4", "v2", "v35", "v1", "v9", "v4"];
    h.core
        .finish(h.now, id, Outcome::Verify(Ok(answer)))
        .unwrap();
    for volume in volumes {
        let expected = if volume == "v3" {
            AttachState::Detached
        } else {
            AttachState::Attached
        };
        assert_eq!(h.core.actual().state(&volume, &"n1"), expected, "{volume}");
    }
}

/// A verify answer is about the backend as it was when the verify listed it: an attachment
/// that changed since (here a detach that errored, so it may or may not have run) is not
/// settled by it. Taken as news, the stale "not attached" would drop a record whose volume
/// may still be attached.
#[test]
fn a_verify_answer_about_an_attachment_changed_since_it_was_planned_is_ignored() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    // The first round of the periodic verify is a sync period in.
    h.run_ok(secs(58));
    let verify = h.run_until_taking(OpKind::Verify);
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, uncertain());
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Uncertain);
    let Operation::Verify { id, node, volumes } = verify else {
        unreachable!()
    };
    assert_eq!((node, volumes), ("n1", vec![("v1", ())]));
    h.core
        .finish(h.now, id, Outcome::Verify(Ok(vec![])))
        .unwrap();
    assert_eq!(
        h.core.actual().state(&"v1", &"n1"),
        AttachState::Uncertain,
        "still held: only a detach or a later verify settles it"
    );
}

/// A verify answer is about the attachment it listed. One planned before the pair was
/// detached and attached again (a new record, whose generation starts again where the old
/// one's did) is about the old record: its stale "not attached" must not drop the new one,
/// or the core would take an attached single-node volume for free and grant it elsewhere.
#[test]
fn a_verify_answer_is_not_taken_for_an_attachment_made_again_since() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.run_ok(secs(58));
    let verify = h.run_until_taking(OpKind::Verify);
    h.unpod("p1");
    h.run_ok(secs(5));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    h.pod("p3", "n1", &["v1"]);
    h.run_ok(secs(1));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    // The verify listed n1 while v1 was detached there, and says so.
    let Operation::Verify { id, volumes, .. } = verify else {
        unreachable!()
    };
    assert_eq!(volumes, vec![("v1", ())]);
    h.core
        .finish(h.now, id, Outcome::Verify(Ok(vec![])))
        .unwrap();
    assert_eq!(
        h.core.actual().state(&"v1", &"n1"),
        AttachState::Attached,
        "the answer was about the record before the detach"
    );
    // Moved on to n2, v1 is detached from n1 first, not attached beside it.
    h.moves_apart("p3", "p4", "v1", "n1", "n2");
}

/// Records' generations are kept in 31 bits. Once more than 2^31 had been handed out (about
/// 350 million moves in one process), a new record could take the generation of a record a
/// running verify listed, on the same node: the answer, which never listed the new record,
/// then dropped it, and its single-node volume was free to be attached elsewhere. Now a node
/// out of generations renumbers its records 1 up, which hands out again the numbers a running
/// verify may have listed; the node's new epoch tells the answer so.
#[test]
fn a_verify_answer_is_not_taken_for_a_record_whose_generation_came_round_again() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.rwo("v0");
    h.rwo("v2");
    h.run_ok(secs(58));
    let Operation::Verify { id, volumes, .. } = h.run_until_taking(OpKind::Verify) else {
        unreachable!()
    };
    assert_eq!(volumes, vec![("v1", ())]);
    let generation = |h: &H, volume: &str| {
        let standings = h.core.actual.standings_on(&"n1");
        standings
            .iter()
            .find(|(v, _)| *v == volume)
            .unwrap()
            .1
            .generation()
    };
    assert_eq!(generation(&h, "v1"), 1, "the verify listed v1 at 1");
    // v0 is attached to n1 after the verify was planned: the verify never listed it.
    h.pod("p2", "n1", &["v0"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.ok(attach);
    assert_eq!(h.core.actual().state(&"v0", &"n1"), AttachState::Attached);
    // Years of moves later, as far as n1's generations go: its 31 bits are spent, and v2's
    // new record (its attach answered) is the draw that renumbers n1's records, 1 up in
    // volume order: v0 takes 1, the number the verify listed for v1.
    h.core.actual.set_generations(&"n1", (1 << 31) - 1);
    h.pod("p3", "n1", &["v2"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.ok(attach);
    assert_eq!(generation(&h, "v0"), 1);
    h.core
        .finish(h.now, id, Outcome::Verify(Ok(vec!["v1"])))
        .unwrap();
    assert_eq!(
        h.core.actual().state(&"v0", &"n1"),
        AttachState::Attached,
        "the verify never listed v0"
    );
    // v0 moved to n2 is detached from n1 first, not attached beside it.
    h.moves_apart("p2", "p4", "v0", "n1", "n2");
}

/// A node object deleted and made again under the same name while a write of its status runs:
/// the write's acknowledgement is about the old object. Taken for the new one, the core
/// believed the new object listed the node's volumes and never wrote them, so its agent never
/// mounted them.
#[test]
fn a_status_write_acknowledged_for_a_deleted_node_object_is_not_taken_for_its_successor() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.rwo("v2");
    h.pod("p2", "n1", &["v2"]);
    let write = h.run_until_taking(OpKind::WriteStatus);
    assert_eq!(render(&write), "write n1 [v1,v2]");
    let Operation::WriteStatus { id, .. } = write else {
        unreachable!()
    };
    // The object goes; a new one of the same name comes, with an empty status.
    h.unnode("n1");
    h.world.store.remove("n1");
    h.node("n1", &[]);
    // The write landed on the old object.
    h.core
        .finish(
            h.now,
            id,
            Outcome::WriteStatus(Ok(Revision::from(9).into())),
        )
        .unwrap();
    h.run_ok(secs(5));
    assert_eq!(
        h.world.store["n1"].1.len(),
        2,
        "the new object lists v1 and v2"
    );
    assert_eq!(h.stored("n1"), Some(vec!["v1", "v2"]));
}

/// The same for a fresh read answered across the deletion: what it found may be the old
/// object's.
#[test]
fn a_status_read_answered_across_a_node_objects_deletion_is_not_taken_for_its_successor() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.rwo("v2");
    h.pod("p2", "n1", &["v2"]);
    h.run_ok(secs(1));
    assert_eq!(h.stored("n1"), Some(vec!["v1", "v2"]));
    // The read before v2's detach finds n1 listing v1.
    h.unpod("p2");
    let read = {
        let mut read = None;
        for _ in 0..20 {
            for op in h.tick_raw() {
                if read.is_none() && op.kind() == OpKind::ReadStatus {
                    read = Some(op);
                } else {
                    h.ok(op);
                }
            }
            if read.is_some() {
                break;
            }
        }
        read.expect("a fresh read of n1")
    };
    let old = h.read("n1");
    assert_eq!(old.as_ref().map(|s| s.attached.len()), Ok(1));
    // The object goes; a new one of the same name comes, with an empty status.
    h.unnode("n1");
    h.world.store.remove("n1");
    h.node("n1", &[]);
    let Operation::ReadStatus { id, .. } = read else {
        unreachable!()
    };
    h.core.finish(h.now, id, Outcome::ReadStatus(old)).unwrap();
    h.run_ok(secs(5));
    assert_eq!(h.world.store["n1"].1.len(), 1, "the new object lists v1");
    assert_eq!(h.stored("n1"), Some(vec!["v1"]));
}

/// The same at a restart: the store's listing was taken before the node object was deleted
/// and made again, and holds the old object's status.
#[test]
fn a_status_listed_at_a_restart_before_its_node_object_was_deleted_is_not_taken_for_its_successor()
{
    let mut h = H::recovering(Config {
        resync_period: None,
        ..Config::default()
    });
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let listed = vec![ReportedVolume {
        volume: "v1",
        device: None,
    }];
    h.world.store.get_mut("n1").unwrap().1 = listed;
    h.world.store.get_mut("n1").unwrap().2 = 5;
    let old = h.read("n1").unwrap();
    let ops = h.core.poll(h.now);
    // While the listings run, the object goes and a new one comes, with an empty status.
    h.unnode("n1");
    h.world.store.remove("n1");
    h.node("n1", &[]);
    for op in ops {
        match op {
            Operation::ListStatuses { id } => h
                .core
                .finish(
                    h.now,
                    id,
                    Outcome::ListStatuses(Ok(vec![("n1", old.clone())])),
                )
                .unwrap(),
            Operation::ListAttachments { id } => h
                .core
                .finish(
                    h.now,
                    id,
                    Outcome::List(Ok(vec![BackendAttachment {
                        volume: "v1",
                        node: "n1",
                        spec: VolumeSpec::single_node(()),
                    }])),
                )
                .unwrap(),
            other => panic!("recovery planned {}", render(&other)),
        }
    }
    assert!(!h.core.is_recovering());
    let seen = h.run_ok(secs(5));
    assert_eq!(
        h.world.store["n1"].1.len(),
        1,
        "the new object lists v1: {seen:?}"
    );
    assert_eq!(h.stored("n1"), Some(vec!["v1"]));
    assert_eq!(h.count("attach"), 0, "v1 was attached all along");
}

/// A volume made multi-node while its single-node detach runs: the detach holds the volume's
/// gate key, a multi-node look asks the attachment's. The look found nothing running, listed
/// the volume in the node's status again, and the agent could mount it under the detach.
#[test]
fn a_volume_made_multi_node_while_its_detach_runs_is_not_reported_under_the_detach() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let detach = h.run_until_taking(OpKind::Detach);
    assert_eq!(h.stored("n1"), Some(vec![]));
    h.rwx("v1");
    h.pod("p2", "n1", &["v1"]);
    let seen = h.run_ok(secs(1));
    assert_eq!(
        h.stored("n1"),
        Some(vec![]),
        "listed while its detach runs: {seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|op| op.starts_with("detach") || op.starts_with("attach")),
        "nothing else starts on v1 while its detach runs: {seen:?}"
    );
    // The detach's end decides: then v1 is attached again and listed.
    h.ok(detach);
    let seen = h.run_ok(secs(2));
    assert!(seen.contains(&"attach v1 n1".to_string()), "{seen:?}");
    assert_eq!(h.stored("n1"), Some(vec!["v1"]));
}

#[test]
fn a_burst_on_one_node_is_one_write() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    let volumes = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for (i, v) in volumes.iter().enumerate() {
        h.rwo(v);
        h.pod(
            ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"][i],
            "n1",
            &[v],
        );
    }
    let ops = h.tick_raw();
    let reads_first = ops
        .iter()
        .filter(|o| o.kind() == OpKind::ReadStatus)
        .count();
    assert_eq!(
        reads_first, 1,
        "one store call per node, however many volumes"
    );
    for op in ops {
        h.ok(op);
    }
    assert_eq!(h.tick_names(), vec!["write n1 [a,b,c,d,e,f,g,h]"]);
}

#[test]
fn api_misuse_is_a_typed_error_and_changes_nothing() {
    let mut h = H::new(Config {
        max_pending_workloads: 1,
        ..Config::default()
    });
    // Out of order is no misuse: a workload on a node not seen yet waits for it.
    assert_eq!(
        h.core.handle(Input::WorkloadScheduled {
            workload: "p",
            node: "nowhere",
            volumes: vec![]
        }),
        Ok(())
    );
    // But only so many may wait.
    assert_eq!(
        h.core.handle(Input::WorkloadScheduled {
            workload: "q",
            node: "n1",
            volumes: vec!["unknown"]
        }),
        Err(ReconcilerError::Desired(DesiredError::TooManyPending {
            workload: "q",
            missing: vec![Missing::Node("n1"), Missing::Volume("unknown")],
            limit: 1
        }))
    );
    assert!(h.core.desired().pending(&"q").is_none(), "nothing changed");
    h.unpod("p");
    // A relist cannot end that did not start.
    assert_eq!(
        h.core.handle(Input::RelistDone { kind: Kind::Node }),
        Err(ReconcilerError::NoRelist { kind: Kind::Node })
    );
    h.node("n1", &[]);
    assert_eq!(
        h.core
            .finish(h.now, OpId(99), Outcome::Attach(Ok(AttachInfo::default()))),
        Err(ReconcilerError::UnknownOperation { id: OpId(99) })
    );
    h.rwo("v1");
    h.pod("p", "n1", &["v1"]);
    let attach = h
        .tick()
        .into_iter()
        .find(|o| o.kind() == OpKind::Attach)
        .unwrap();
    let id = attach.id();
    assert_eq!(
        h.core.finish(h.now, id, Outcome::Detach(Ok(()))),
        Err(ReconcilerError::WrongResult {
            id,
            actual: OpKind::Attach,
            given: OpKind::Detach
        })
    );
    // The attach is still running and can finish normally.
    h.ok(attach);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    // Its node is deleted under it: accepted, and the workload waits for the node again.
    h.unnode("n1");
    assert_eq!(
        h.core.desired().pending(&"p").map(|p| p.missing),
        Some(vec![Missing::Node("n1")])
    );
    assert!(!h.core.desired().is_desired(&"v1", &"n1"));
}

#[test]
fn finish_refuses_every_other_kind_and_keeps_the_operation_waiting_unchanged() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p", "n1", &["v1"]);
    let attach = h
        .tick()
        .into_iter()
        .find(|o| o.kind() == OpKind::Attach)
        .unwrap();
    let id = attach.id();
    let before = format!("{:?}", h.core);
    for kind in OpKind::ALL {
        if kind == OpKind::Attach {
            continue;
        }
        // Any answer of another kind: the lost-answer one stands for each.
        let wrong = Outcome::<T>::panicked(kind);
        assert_eq!(wrong.kind(), kind);
        assert_eq!(
            h.core.finish(h.now, id, wrong),
            Err(ReconcilerError::WrongResult {
                id,
                actual: OpKind::Attach,
                given: kind
            }),
            "{kind:?}"
        );
        assert_eq!(format!("{:?}", h.core), before, "{kind:?} changed the core");
    }
    assert!(h.core.take_events().is_empty(), "a refusal tells no one");
    // The attach still waits for its answer, takes it once, and not twice.
    h.core
        .finish(h.now, id, Outcome::Attach(Ok(AttachInfo::default())))
        .unwrap();
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    assert_eq!(
        h.core
            .finish(h.now, id, Outcome::Attach(Ok(AttachInfo::default()))),
        Err(ReconcilerError::UnknownOperation { id })
    );
}

#[test]
fn recovery_trusts_the_store_and_marks_unknown_attachments_uncertain() {
    let mut h = H::new(Config::default());
    h.rwo("v1");
    h.rwo("v2");
    h.core.recover_status(
        "n1",
        vec![ReportedVolume {
            volume: "v1",
            device: Some("/dev/v1".into()),
        }],
        Revision::from(1),
    );
    recover_one(&mut h.core, "v1", "n1");
    recover_one(&mut h.core, "v2", "n1");
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    assert_eq!(h.core.actual().state(&"v2", &"n1"), AttachState::Uncertain);
    h.node("n1", &[]);
    h.pod("p1", "n1", &["v1", "v2"]);
    // v1 is already reported; v2 is confirmed by an attach, then reported.
    assert_eq!(h.run_ok(secs(1)), vec!["attach v2 n1", "write n1 [v1,v2]"]);
}

#[test]
fn removed_node_is_rewritten_when_it_comes_back() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n1", &["v1"]);
    h.unpod("p1");
    // The node object is deleted and recreated under the same name, with an empty status
    // (upstream 50721): what it must report is written afresh.
    h.unnode("n1");
    h.world.store.remove("n1");
    assert!(
        h.run_ok(secs(1)).is_empty(),
        "nothing to write to, nothing unmounted"
    );
    h.node("n1", &["v1"]);
    h.pod("p1", "n1", &["v1"]);
    assert_eq!(h.run_ok(secs(1)), vec!["write n1 [v1]"]);
}

// ---- corrections --------------------------------------------------------------------------------

/// Seed 000: the detach fails after the volume left the report; the pod comes back to the node.
fn c1_scenario(bugs: UpstreamBugs) -> H {
    let mut h = H::attached_rwo(bugs);
    h.unpod("p1");
    h.run_ok(TICK); // write n1 []
    let detach = h.tick().into_iter().next().expect("detach planned");
    h.fail(detach, transient());
    h.pod("p1b", "n1", &["v1"]);
    h.run_ok(secs(30));
    h
}

#[test]
fn c1_failed_detach_is_reported_again_when_the_pod_returns() {
    let h = c1_scenario(UpstreamBugs::default());
    assert_eq!(
        h.stored("n1"),
        Some(vec!["v1"]),
        "the node can mount it again"
    );
}

#[test]
#[cfg(feature = "upstream-bugs")]
fn c1_bites_with_upstream_bug() {
    let h = c1_scenario(UpstreamBugs {
        c1_lose_report_on_failed_detach: true,
        ..UpstreamBugs::default()
    });
    assert_eq!(
        h.stored("n1"),
        Some(vec![]),
        "upstream never re-reports it: the pod is stuck in ContainerCreating"
    );
}

#[test]
fn c1_backoff_causes_no_status_churn() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let start = h.world.log.len();
    let end = h.now + secs(60);
    let mut detaches = 0;
    while h.now < end {
        for op in h.tick() {
            if op.kind() == OpKind::Detach {
                detaches += 1;
                h.fail(op, transient());
            } else {
                h.ok(op);
            }
        }
    }
    let writes = h.world.log[start..]
        .iter()
        .filter(|l| l.starts_with("write"))
        .count();
    // Backoff 0.5, 1, 2, 4, 8, 16, 32 s: seven attempts in a minute, two writes each at most.
    assert!(detaches <= 8, "{detaches} detach attempts");
    assert!(
        writes <= 2 * detaches + 1,
        "{writes} writes for {detaches} attempts"
    );
    // Upstream's rejected fix (72914) wrote about 15 times a second: 900 a minute.
}

fn c2_scenario(bugs: UpstreamBugs) -> H {
    let mut h = H::with_bugs(bugs);
    h.node("n1", &[]);
    h.node("n2", &["v1"]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, uncertain());
    // n1 still reports v1 in use: its agent may have it. The pod is rescheduled to n2.
    h.node("n1", &["v1"]);
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(10));
    h
}

#[test]
fn c2_uncertain_attachment_holds_a_single_node_volume() {
    let mut h = c2_scenario(UpstreamBugs::default());
    assert_eq!(h.count("attach v1 n2"), 0, "never on two nodes at once");
    let events = h.core.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::MultiAttach { node: "n2", .. }))
    );
}

#[test]
#[cfg(feature = "upstream-bugs")]
fn c2_bites_with_upstream_bug() {
    let h = c2_scenario(UpstreamBugs {
        c2_ignore_uncertain_holder: true,
        ..UpstreamBugs::default()
    });
    assert_eq!(
        h.count("attach v1 n2"),
        1,
        "upstream attaches it to a second node"
    );
}

fn c3_scenario(bugs: UpstreamBugs) -> H {
    // Seed 004: n1 dies with the volume mounted, the pod is force-deleted, a replacement waits.
    let mut h = H::attached_rwo(bugs);
    h.node("n1", &["v1"]);
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    h.pod("p1b", "n2", &["v1"]);
    h.run_ok(secs(7 * 60));
    h
}

#[test]
fn c3_unfenced_node_keeps_its_volume_by_default() {
    let h = c3_scenario(UpstreamBugs::default());
    assert_eq!(h.count("detach"), 0);
    assert_eq!(h.count("attach v1 n2"), 0);
}

#[test]
#[cfg(feature = "upstream-bugs")]
fn c3_bites_with_upstream_bug() {
    let h = c3_scenario(UpstreamBugs {
        c3_force_detach_unfenced: true,
        ..UpstreamBugs::default()
    });
    assert_eq!(
        h.count("detach v1 n1 forced:timeout"),
        1,
        "two kernels may now write"
    );
}

fn c4_scenario(bugs: UpstreamBugs) -> H {
    // After a restart: the store lists v1 on n1, where a pod still needs it; the node has not
    // reported yet, so v1 counts as mounted. Its first report says nothing is in use; then the
    // pod goes.
    let mut h = H::with_bugs(bugs);
    h.rwo("v1");
    h.core.recover_status(
        "n1",
        vec![ReportedVolume {
            volume: "v1",
            device: None,
        }],
        Revision::from(1),
    );
    h.facts("n1", true, false, None);
    h.pod("p1", "n1", &["v1"]);
    assert!(h.run_ok(secs(5)).is_empty(), "needed where it is");
    h.node("n1", &[]);
    h.run_ok(secs(1));
    h.unpod("p1");
    h.run_ok(secs(1));
    h
}

#[test]
fn c4_first_in_use_report_is_followed() {
    let h = c4_scenario(UpstreamBugs::default());
    assert_eq!(h.world.log, vec!["write n1 []", "read n1", "detach v1 n1"]);
}

#[test]
#[cfg(feature = "upstream-bugs")]
fn c4_bites_with_upstream_bug() {
    let h = c4_scenario(UpstreamBugs {
        c4_sticky_assumed_mount: true,
        ..UpstreamBugs::default()
    });
    assert_eq!(
        h.count("detach"),
        0,
        "upstream waits for a report change that never comes"
    );
}

/// Issue 9, bug 7: a node registered with `NodeFacts::default()` and never heard from again
/// (as in the README's embedding example) must not keep a removed workload's volume
/// forever. Not heard from counts as mounted, so the core cannot clear the detach itself; it
/// plans an unforced detach, which a driver confirms with a fresh read of the node's in-use list before the call.
#[test]
fn not_heard_from_leaves_the_detach_to_a_fresh_read() {
    let mut h = H::new(Config::default());
    h.facts("n1", true, false, None);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.unpod("p1");
    h.run_ok(secs(1));
    // The core never heard from the node, but the store holds its agent's report, which the
    // fresh read before the detach finds: nothing in use.
    assert_eq!(
        h.world.log,
        vec![
            "attach v1 n1",
            "read n1",
            "write n1 [v1]",
            "write n1 []",
            "read n1"
        ],
        "no in-use report in the store either: held back"
    );
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    h.world.store.get_mut("n1").unwrap().0.in_use = Some(vec![]);
    h.world.log.clear();
    // Without a new report to the core, the re-check timer reads the node again.
    h.run_ok(h.core.config().unmount_recheck);
    assert_eq!(h.world.log, vec!["read n1", "detach v1 n1"]);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
}

fn c5_scenario(bugs: UpstreamBugs) -> Vec<String> {
    let mut h = H::attached_rwo(bugs);
    h.unpod("p1");
    // Do not acknowledge the status write: what is planned meanwhile?
    let mut planned = Vec::new();
    for _ in 0..5 {
        planned.extend(h.tick_names());
    }
    planned
}

#[test]
fn c5_detach_waits_for_the_status_acknowledgement() {
    assert_eq!(c5_scenario(UpstreamBugs::default()), vec!["write n1 []"]);
}

#[test]
#[cfg(feature = "upstream-bugs")]
fn c5_bites_with_upstream_bug() {
    let planned = c5_scenario(UpstreamBugs {
        c5_detach_before_status_ack: true,
        ..UpstreamBugs::default()
    });
    assert!(planned.contains(&"detach v1 n1".to_string()), "{planned:?}");
}

#[test]
fn idle_pass_does_nothing_and_next_deadline_is_the_sync() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    let deadline = h.core.next_deadline().unwrap();
    assert!(deadline > h.now + secs(30));
    assert!(h.core.poll(h.now + TICK).is_empty());
    assert_eq!(h.core.next_deadline(), Some(deadline));
}

#[test]
fn a_detach_waits_for_the_write_that_drops_its_volume() {
    // Only the volumes waiting for a node's write are looked at again when it ends. A write
    // already in flight when the volume was withheld still lists it: its acknowledgement must
    // not let the detach go, the next write's must.
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.pod("p2", "n1", &["v2"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.ok(attach);
    let in_flight = h.tick_taking(OpKind::WriteStatus);
    assert_eq!(render(&in_flight), "write n1 [v1,v2]");
    h.unpod("p1");
    assert!(h.tick().is_empty(), "v1 withheld; the node's write is busy");
    h.ok(in_flight);
    let write = h.tick();
    assert_eq!(
        write.iter().map(render).collect::<Vec<_>>(),
        ["write n1 [v2]"]
    );
    for op in write {
        h.ok(op);
    }
    assert_eq!(h.count("detach"), 0);
    assert_eq!(h.tick_names(), vec!["detach v1 n1"]);
    assert_eq!(h.stored("n1"), Some(vec!["v2"]));
}

// ---- issue 9: waits with a certain end, verify settling Uncertain, API traps --------------------

/// Bug 1: the attach lands after its workload left. The node's stored list never had the
/// volume, so no status write is coming; the detach must not wait for one.
#[test]
fn an_attach_landing_after_its_workload_left_is_detached_at_once() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.run_ok(secs(1));
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.unpod("p1");
    h.run_ok(secs(1));
    h.ok(attach);
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(
        h.world.log,
        vec!["read n1", "detach v1 n1"],
        "no write needed, none awaited: only the fresh read before the detach"
    );
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    assert_eq!(h.core.next_deadline(), None, "nothing left waiting");
}

/// Bug 3: the detach keeps erroring after doing its work; the periodic verify says the volume
/// is gone, which settles the Uncertain attachment.
#[test]
fn verify_settles_an_uncertain_detach_as_detached() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, uncertain());
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Uncertain);
    // Every later detach errors the same way; the verify reports nothing attached on n1.
    let mut attached_on_n2 = false;
    for _ in 0..(70 * 10) {
        for op in h.tick() {
            match op {
                Operation::Detach { .. } => h.fail(op, uncertain()),
                Operation::Verify { id, node: "n1", .. } => {
                    let now = h.now;
                    h.core.finish(now, id, Outcome::Verify(Ok(vec![]))).unwrap();
                }
                Operation::Attach { node: "n2", .. } => {
                    attached_on_n2 = true;
                    h.ok(op);
                }
                op => h.ok(op),
            }
        }
    }
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    assert!(attached_on_n2, "the waiting workload got its volume");
}

/// A watcher may deliver a volume's deletion before its workloads': the volume goes, its
/// workloads wait for it again, and it is detached only by the usual safe path (never while
/// the node reports it in use).
#[test]
fn a_volume_removed_in_use_sends_its_workloads_back_to_waiting() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n1", &["v1"]);
    h.unvolume("v1");
    assert_eq!(
        h.core.desired().pending(&"p1").map(|p| p.missing),
        Some(vec![Missing::Volume("v1")])
    );
    assert!(!h.core.desired().is_desired(&"v1", &"n1"));
    h.run_ok(secs(5));
    assert_eq!(h.count("detach"), 0, "still mounted: {:?}", h.world.log);
    // Removing it again, or one never seen, is a no-op.
    h.unvolume("v1");
    h.unvolume("v9");
    // Registered again: the workload is placed again, and nothing moved.
    h.rwo("v1");
    assert!(h.core.desired().is_desired(&"v1", &"n1"));
    assert_eq!(h.core.desired().pending_len(), 0);
    h.world.log.clear();
    h.run_ok(secs(5));
    assert_eq!(h.stored("n1"), Some(vec!["v1"]));
    assert_eq!(
        h.count("attach") + h.count("detach"),
        0,
        "{:?}",
        h.world.log
    );
    // Removed for good, then its workload: the pod's deletion after its volume's.
    h.unvolume("v1");
    h.unpod("p1");
    h.node("n1", &[]);
    h.run_ok(secs(5));
    assert_eq!(h.count("detach v1 n1"), 1);
    assert!(h.core.actual().is_empty());
    assert!(
        h.core.desired().spec(&"v1").is_none(),
        "forgotten once detached"
    );
}

/// Volume churn does not grow the core's state: a removed volume is detached, then forgotten,
/// and new workloads wait for it until it is registered again.
#[test]
fn a_removed_volume_is_detached_then_forgotten() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    h.unvolume("v1");
    h.pod("p2", "n2", &["v1"]);
    assert_eq!(
        h.core.desired().pending(&"p2").map(|p| p.missing),
        Some(vec![Missing::Volume("v1")])
    );
    assert!(
        h.core.desired().spec(&"v1").is_some(),
        "kept for the detach"
    );
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, transient());
    h.run_ok(secs(5));
    assert_eq!(h.count("detach v1 n1"), 2);
    assert!(h.core.actual().is_empty());
    assert!(
        h.core.desired().spec(&"v1").is_none(),
        "forgotten once detached"
    );
    assert_eq!(h.core.actual().volumes_with_records(), 0, "no entry left");
    assert_eq!(h.count("attach v1 n2"), 0, "p2 waits");
    // Registered again, it is a fresh volume with no backoff left from before, and the
    // workload that waited for it gets it.
    h.rwo("v1");
    assert_eq!(h.core.desired().pending_len(), 0);
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(h.count("attach v1 n2"), 1);
}

/// A volume removed while its attach runs is kept until the attach ends: forgotten before,
/// the attach that lands would leave an attachment the core has no payload to detach.
#[test]
fn a_volume_removed_while_its_attach_runs_is_detached_then_forgotten() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.run_until_taking(OpKind::Attach);
    h.unpod("p1");
    h.unvolume("v1");
    h.run_ok(secs(1));
    assert!(
        h.core.desired().spec(&"v1").is_some(),
        "kept while its attach runs"
    );
    h.ok(attach);
    h.world.log.clear();
    h.run_ok(secs(5));
    assert_eq!(h.count("detach v1 n1"), 1, "{:?}", h.world.log);
    assert!(h.core.actual().is_empty());
    assert!(
        h.core.desired().spec(&"v1").is_none(),
        "forgotten once detached"
    );
}

/// A volume detached while wanted elsewhere (a move) keeps its entry in the actual state for
/// the attach that comes next, which finds it instead of remaking it; a volume detached while
/// wanted nowhere loses it, and so does one that stops being wanted before its attach.
#[test]
fn a_moving_volume_keeps_its_entry_and_an_idle_one_does_not() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1"]);
    h.pod("p2", "n1", &["v2"]);
    h.run_ok(secs(1));
    assert_eq!(h.core.actual().volumes_with_records(), 2);
    // A move: between its detach and its attach, v1 is attached nowhere and keeps its entry.
    h.unpod("p1");
    h.pod("p1b", "n2", &["v1"]);
    let detach = h.run_until_taking(OpKind::Detach);
    h.ok(detach);
    assert_eq!(h.core.actual().len(), 1, "only v2 attached");
    assert_eq!(h.core.actual().volumes_with_records(), 2, "v1's entry kept");
    h.run_ok(secs(1));
    assert_eq!(h.count("attach v1 n2"), 1);
    assert_eq!(h.core.actual().len(), 2);
    // Idle: v2 is wanted nowhere when its detach lands, and its entry goes with it.
    h.unpod("p2");
    h.run_ok(secs(5));
    assert_eq!(h.core.actual().len(), 1);
    assert_eq!(
        h.core.actual().volumes_with_records(),
        1,
        "v2's entry dropped"
    );
    // Wanted at its detach, then wanted nowhere before its attach: the next look drops it.
    h.unpod("p1b");
    h.pod("p1c", "n1", &["v1"]);
    let detach = h.run_until_taking(OpKind::Detach);
    h.ok(detach);
    assert_eq!(
        h.core.actual().volumes_with_records(),
        1,
        "kept for the attach"
    );
    h.unpod("p1c");
    h.world.log.clear();
    h.run_ok(secs(5));
    assert_eq!(h.count("attach v1 n1"), 0);
    assert!(h.core.actual().is_empty());
    assert_eq!(h.core.actual().volumes_with_records(), 0, "no entry left");
}

#[test]
fn a_volume_attached_twice_cannot_become_single_node() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwx("v1");
    h.pod("p1", "n1", &["v1"]);
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(1));
    assert_eq!(
        h.core.handle(Input::SetVolume {
            volume: "v1",
            spec: VolumeSpec::single_node(())
        }),
        Err(ReconcilerError::AccessConflict {
            volume: "v1",
            nodes: vec!["n1", "n2"]
        })
    );
    assert_eq!(
        h.core.desired().spec(&"v1").map(|s| s.access),
        Some(Access::MultiNode),
        "unchanged"
    );
    h.unpod("p2");
    h.run_ok(secs(1));
    h.rwo("v1");
}

/// A node deleted while it holds a single-node volume: by default the volume stays (its machine
/// may still run), and a human is told once why.
#[test]
fn a_deleted_node_pins_its_volume_and_says_so_once() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    h.unnode("n1");
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(60));
    assert_eq!(h.count("detach"), 0);
    let blocked: Vec<_> = h
        .core
        .take_events()
        .into_iter()
        .filter(|e| e.reason() == "DetachBlocked")
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    // The node comes back and reports nothing in use: the volume is freed.
    h.node("n1", &[]);
    h.run_ok(secs(1));
    assert_eq!(h.count("detach v1 n1"), 1);
    assert_eq!(h.count("attach v1 n2"), 1);
}

/// With `deleted_node_is_fenced`, a deleted node's volumes move: a forced detach that the
/// driver confirms with a fresh read finding no such node.
#[test]
fn a_deleted_node_counts_as_fenced_when_configured() {
    let mut h = H::new(Config {
        deleted_node_is_fenced: true,
        ..Config::default()
    });
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.unpod("p1");
    h.unnode("n1");
    h.pod("p2", "n2", &["v1"]);
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(
        h.count("detach v1 n1 forced:node-deleted"),
        1,
        "{:?}",
        h.world.log
    );
    assert_eq!(h.count("attach v1 n2"), 1);
}

/// Bug 6: huge durations in the configuration never overflow the core's time arithmetic.
#[test]
fn huge_durations_do_not_overflow() {
    let mut h = H::new(Config {
        reconcile_period: Duration::MAX,
        sync_period: Duration::MAX,
        max_wait_for_unmount: Duration::MAX,
        force_detach_on_timeout: true,
        backoff: crate::config::BackoffConfig {
            initial: Duration::MAX,
            max: Duration::MAX,
        },
        ..Config::default()
    });
    h.facts("n1", false, false, Some(&[]));
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, transient());
    assert_eq!(
        h.core.next_deadline(),
        Some(Duration::MAX),
        "saturated, not wrapped"
    );
    let retried = h.core.poll(Duration::MAX);
    assert_eq!(retried.len(), 1, "the attach is retried at the end of time");
    h.ok(retried.into_iter().next().unwrap_or_else(|| unreachable!()));
    h.now = Duration::MAX - TICK;
    h.tick();
    h.unpod("p1");
    h.facts("n1", false, false, Some(&["v1"]));
    let _ = h.core.poll(Duration::MAX);
    let _ = h.core.next_deadline();
}

// ---- review findings (issue 9): each asserted the broken behaviour before its fix ---------------

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// An access change while an attach runs: the attach releases the gate key it took, not one
/// computed from the new mode; before, `Volume(v1)` stayed "running" and v1 never moved again.
#[test]
fn an_access_change_during_an_attach_leaks_no_gate_key() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.rwx("v1");
    h.ok(attach);
    h.run_ok(secs(1));
    h.rwo("v1");
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    h.world.log.clear();
    h.run_ok(secs(60));
    assert_eq!(h.count("detach v1 n1"), 1, "{:?}", h.world.log);
    assert_eq!(h.count("attach v1 n2"), 1, "{:?}", h.world.log);
}

/// Narrowing is refused while attaches run; before, both finished and the single-node volume
/// was attached to two nodes.
#[test]
fn narrowing_is_refused_while_attaches_run() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwx("v1");
    h.pod("p1", "n1", &["v1"]);
    h.pod("p2", "n2", &["v1"]);
    let attaches: Vec<_> = h
        .tick()
        .into_iter()
        .filter(|op| op.kind() == OpKind::Attach)
        .collect();
    assert_eq!(attaches.len(), 2);
    assert!(matches!(
        h.core.handle(Input::SetVolume {
            volume: "v1",
            spec: VolumeSpec::single_node(())
        }),
        Err(ReconcilerError::AccessConflict { .. })
    ));
    h.unpod("p2");
    let first = attaches
        .into_iter()
        .next()
        .unwrap_or_else(|| unreachable!());
    assert!(
        matches!(
            h.core.handle(Input::SetVolume {
                volume: "v1",
                spec: VolumeSpec::single_node(())
            }),
            Err(ReconcilerError::AccessConflict { .. })
        ),
        "one attach still runs"
    );
    h.ok(first);
}

/// With `force_detach_on_timeout`, a node that crashed before it ever reported is escalated
/// to a forced detach after the unmount wait, as before the not-heard-from change; in between,
/// the unforced detaches are refused by the fresh read.
#[test]
fn a_node_never_heard_from_is_still_force_detached_on_timeout() {
    let mut h = H::new(Config {
        force_detach_on_timeout: true,
        ..Config::default()
    });
    h.facts("n1", true, false, None);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.facts("n1", false, false, None);
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    h.world.log.clear();
    let end = h.now + secs(1800);
    while h.now < end {
        for op in h.tick() {
            match &op {
                Operation::Detach { force: None, .. } => h.fail(op, transient()),
                _ => h.ok(op),
            }
        }
    }
    assert_eq!(
        h.count("detach v1 n1 forced:timeout"),
        1,
        "{:?}",
        h.world.log
    );
    assert_eq!(h.count("attach v1 n2"), 1);
}

/// Node churn does not grow the status book or the gate: a removed node's record and its
/// status backoff go with it.
#[test]
fn node_churn_leaves_no_status_record_or_backoff_behind() {
    let mut h = H::new(Config::default());
    for i in 0..100 {
        let n = leak(format!("n{i}"));
        h.node(n, &[]);
        let read = h.tick_raw().pop().expect("the new node is read");
        h.fail_status(read, StoreError::transient("x"));
        h.unnode(n);
        h.run_ok(secs(1));
        h.node(leak(format!("m{i}")), &[]);
        h.run_ok(secs(1));
        h.unnode(leak(format!("m{i}")));
    }
    h.run_ok(secs(1));
    assert_eq!(h.core.status().len(), 0);
    assert_eq!(h.core.calls.gate.len(), 0);
}

/// A deleted node's blocked episode ends when the verify settles the attachment.
#[test]
fn a_blocked_pair_is_forgotten_with_its_attachment() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    h.unnode("n1");
    h.run_ok(secs(1));
    assert_eq!(h.core.detaches.blocked(), 1);
    let end = h.now + secs(120);
    while h.now < end {
        for op in h.tick() {
            if let Operation::Verify { id, .. } = op {
                let now = h.now;
                h.core.finish(now, id, Outcome::Verify(Ok(vec![]))).unwrap();
            } else {
                h.ok(op);
            }
        }
    }
    assert!(h.core.actual().is_empty());
    assert_eq!(h.core.detaches.blocked(), 0);
}

/// A volume only the store lists at recovery, with no spec anywhere, cannot be detached; a
/// human is told once why instead of nothing at all.
#[test]
fn a_recovered_volume_without_a_spec_is_reported_blocked() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.core.recover_status(
        "n1",
        vec![ReportedVolume {
            volume: "gone",
            device: None,
        }],
        Revision::from(1),
    );
    h.run_ok(secs(600));
    let blocked: Vec<_> = h
        .core
        .take_events()
        .into_iter()
        .filter(|e| e.reason() == "DetachBlocked")
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
}

/// A volume only the backend knows at recovery is adopted to be detached, then forgotten.
#[test]
fn a_volume_only_the_backend_knows_is_detached_then_forgotten() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    recover_one(&mut h.core, "stray", "n1");
    h.run_ok(secs(5));
    assert_eq!(h.count("detach stray n1"), 1, "{:?}", h.world.log);
    assert!(
        h.core.desired().spec(&"stray").is_none(),
        "forgotten once detached"
    );
}

/// A volume made dirty over and over while it waits keeps one timer, not one per dirtying.
#[test]
fn a_waiting_volume_keeps_one_timer() {
    let mut h = H::new(Config {
        force_detach_on_timeout: true,
        ..Config::default()
    });
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    // A pod on n2 comes and goes: each time v1 is looked at again, its unmount wait on n1
    // asks for the same wake.
    for _ in 0..100 {
        h.pod("p2", "n2", &["v1"]);
        h.tick();
        h.unpod("p2");
        h.tick();
    }
    assert!(
        h.core.schedule.timers() <= 2,
        "{}",
        h.core.schedule.timers()
    );
}

/// An unhealthy node that still reports the volume in use, with forcing off, says why the
/// volume does not move (seed 004's wait for a fence).
#[test]
fn an_unhealthy_unfenced_node_says_why_its_volume_stays() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    h.core.take_events();
    h.run_ok(secs(60));
    let reasons: Vec<_> = h.core.take_events().iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, vec!["DetachBlocked"]);
}

// ---- inputs in any order, relists ---------------------------------------------------------------

/// The backend's listing names `volume` on `node` (single-node), alone: no store listing
/// goes with it here.
fn recover_one(r: &mut Reconciler<T>, volume: &'static str, node: &'static str) {
    let attachment = BackendAttachment {
        volume,
        node,
        spec: VolumeSpec::single_node(()),
    };
    r.recover_attachment(
        attachment,
        &mut StoreListed::new(0),
        &mut SettledVolumes::new(0),
    );
    // As the end of recovery does for every volume it could not note settled.
    r.schedule.mark(volume);
}

fn waiting_for(h: &H, w: &'static str) -> Option<Vec<Missing<T>>> {
    h.core.desired().pending(&w).map(|p| p.missing)
}

/// A pod seen before its node and its volume plans nothing until both are known, then attaches
/// as if the inputs had come in order.
#[test]
fn a_workload_before_its_node_and_volume_waits_then_attaches() {
    let mut h = H::new(Config::default());
    h.pod("p1", "n1", &["v1"]);
    assert_eq!(
        waiting_for(&h, "p1"),
        Some(vec![Missing::Node("n1"), Missing::Volume("v1")])
    );
    assert!(h.run_ok(secs(1)).is_empty());
    h.node("n1", &[]);
    assert_eq!(waiting_for(&h, "p1"), Some(vec![Missing::Volume("v1")]));
    assert!(h.run_ok(secs(1)).is_empty(), "nothing to attach yet");
    assert_eq!(
        h.world.log,
        vec!["read n1"],
        "only the new node's status is read"
    );
    h.rwo("v1");
    assert_eq!(waiting_for(&h, "p1"), None);
    assert_eq!(h.run_ok(secs(1)), vec!["attach v1 n1", "write n1 [v1]"]);
    assert!(
        h.core
            .take_events()
            .iter()
            .all(|e| e.reason() != "WorkloadWaiting")
    );
}

/// A wait that outlives `pending_workload_warning` is named once, with what it waits for; the
/// core wakes for it on its own (the warning time is a deadline), and a wait that ends sooner
/// is never reported.
#[test]
fn a_long_wait_is_named_once_in_an_event() {
    let warn = secs(120);
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.run_ok(secs(1));
    assert_eq!(h.core.next_deadline(), None);
    h.pod("quick", "n2", &[]);
    h.pod("p1", "n1", &["v9"]);
    let seen_at = h.core.next_deadline().unwrap();
    let stamped = h.now + TICK;
    assert!(seen_at <= stamped, "the next pass stamps the waits");
    h.tick();
    assert_eq!(
        h.core.desired().pending(&"p1").unwrap().since,
        Some(stamped)
    );
    assert_eq!(
        h.core.next_deadline(),
        Some(stamped + warn),
        "wakes for the warning"
    );
    h.node("n2", &[]);
    h.run_ok(secs(1));
    assert_eq!(h.core.next_deadline(), Some(stamped + warn));
    // A driver sleeps until the deadline and polls then.
    h.now = stamped + warn;
    h.core.poll(h.now);
    let waiting: Vec<_> = h
        .core
        .take_events()
        .into_iter()
        .filter(|e| e.reason() == "WorkloadWaiting")
        .collect();
    assert_eq!(
        waiting,
        vec![Event::WorkloadWaiting {
            workload: "p1",
            node: "n1",
            missing: vec![Missing::Volume("v9")],
            waited: warn,
        }]
    );
    assert!(waiting[0].is_warning());
    assert_eq!(
        waiting[0].to_string(),
        "Workload \"p1\" scheduled on node \"n1\" has waited 120s for volume \"v9\" unknown to \
         the controller; its volumes are attached once they are known"
    );
    assert_eq!(
        h.core.next_deadline(),
        None,
        "reported once, then nothing to wake for"
    );
    h.run_ok(secs(600));
    assert!(h.core.take_events().is_empty());
    // The volume comes: the wait ends, the volume attaches.
    h.rwo("v9");
    assert_eq!(h.run_ok(secs(1)), vec!["attach v9 n1", "write n1 [v9]"]);
}

/// A node deleted under its workloads: they wait for it, their volumes are no longer desired
/// there (so the deleted-node rule holds them, with one `DetachBlocked`), and when the node
/// comes back they are placed again and nothing moved.
#[test]
fn a_node_deleted_under_its_workloads_gets_them_back_when_it_returns() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.core.take_events();
    h.unnode("n1");
    assert_eq!(waiting_for(&h, "p1"), Some(vec![Missing::Node("n1")]));
    assert!(!h.core.desired().is_desired(&"v1", &"n1"));
    h.world.log.clear();
    h.run_ok(secs(60));
    assert_eq!(h.count("detach"), 0);
    let blocked = h.core.take_events();
    assert_eq!(
        blocked.iter().map(Event::reason).collect::<Vec<_>>(),
        vec!["DetachBlocked"]
    );
    // Replayed, the deletion changes nothing more.
    h.unnode("n1");
    h.node("n1", &["v1"]);
    assert_eq!(waiting_for(&h, "p1"), None);
    assert!(h.core.desired().is_desired(&"v1", &"n1"));
    h.run_ok(secs(5));
    assert_eq!(
        h.count("detach") + h.count("attach"),
        0,
        "{:?}",
        h.world.log
    );
    assert_eq!(
        h.stored("n1"),
        Some(vec!["v1"]),
        "rewritten for the new object"
    );
}

/// With `deleted_node_is_fenced`, a node deleted with its workload still on it frees the
/// volume for a workload elsewhere, as when the workload went first.
#[test]
fn a_deleted_node_with_workloads_counts_as_fenced_when_configured() {
    let mut h = H::new(Config {
        deleted_node_is_fenced: true,
        ..Config::default()
    });
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.unnode("n1");
    h.pod("p2", "n2", &["v1"]);
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(
        h.count("detach v1 n1 forced:node-deleted"),
        1,
        "{:?}",
        h.world.log
    );
    assert_eq!(h.count("attach v1 n2"), 1);
}

fn relist(h: &mut H, kind: Kind, upserts: Vec<Input<T>>) {
    let inputs = std::iter::once(Input::RelistStarted { kind })
        .chain(upserts)
        .chain([Input::RelistDone { kind }]);
    let refused = h.core.handle_all(inputs);
    assert!(refused.is_empty(), "{refused:?}");
}

fn node_input(node: &'static str) -> Input<T> {
    Input::NodeUpdated {
        node,
        facts: NodeFacts {
            in_use: Some(vec![]),
            ..NodeFacts::default()
        },
    }
}

fn volume_input(volume: &'static str) -> Input<T> {
    Input::SetVolume {
        volume,
        spec: VolumeSpec::single_node(()),
    }
}

fn workload_input(
    workload: &'static str,
    node: &'static str,
    volumes: &[&'static str],
) -> Input<T> {
    Input::WorkloadScheduled {
        workload,
        node,
        volumes: volumes.to_vec(),
    }
}

/// A relist of workloads removes those not listed, placed or waiting; nodes and volumes stay.
#[test]
fn a_workload_relist_removes_the_workloads_not_listed() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.rwo("v2");
    h.pod("p2", "n2", &["v2"]);
    h.pod("waits", "n9", &[]);
    h.run_ok(secs(1));
    relist(
        &mut h,
        Kind::Workload,
        vec![workload_input("p2", "n2", &["v2"])],
    );
    assert!(h.core.desired().placement(&"p1").is_none());
    assert!(h.core.desired().placement(&"p2").is_some());
    assert_eq!(h.core.desired().pending_len(), 0, "a waiting one goes too");
    assert!(h.core.desired().has_node(&"n1") && h.core.desired().is_registered(&"v1"));
    assert!(h.core.removed_nodes().is_empty());
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(h.world.log, vec!["write n1 []", "read n1", "detach v1 n1"]);
}

/// A relist of volumes unregisters those not listed: their workloads wait for them, and they
/// are detached (once unmounted) and forgotten.
#[test]
fn a_volume_relist_removes_the_volumes_not_listed() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.rwo("v2");
    h.rwo("v3");
    h.pod("p2", "n2", &["v2"]);
    h.run_ok(secs(1));
    relist(
        &mut h,
        Kind::Volume,
        vec![volume_input("v2"), volume_input("v3")],
    );
    assert!(!h.core.desired().is_registered(&"v1"));
    assert!(h.core.desired().is_registered(&"v2") && h.core.desired().is_registered(&"v3"));
    assert_eq!(waiting_for(&h, "p1"), Some(vec![Missing::Volume("v1")]));
    assert!(h.core.desired().placement(&"p2").is_some());
    h.world.log.clear();
    h.run_ok(secs(1));
    assert_eq!(h.world.log, vec!["write n1 []", "read n1", "detach v1 n1"]);
    h.run_ok(secs(1));
    assert!(h.core.desired().spec(&"v1").is_none(), "forgotten");
}

/// A relist of nodes removes those not listed, with the same effect as their removal: the
/// workloads on them wait, the driver is told which nodes went.
#[test]
fn a_node_relist_drops_a_node_with_workloads_on_it() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n3", &[]);
    h.run_ok(secs(1));
    relist(&mut h, Kind::Node, vec![node_input("n2")]);
    assert_eq!(h.core.removed_nodes(), &["n1", "n3"], "in id order");
    assert!(!h.core.desired().has_node(&"n1") && !h.core.desired().has_node(&"n3"));
    assert!(h.core.desired().has_node(&"n2"));
    assert_eq!(waiting_for(&h, "p1"), Some(vec![Missing::Node("n1")]));
    assert!(!h.core.desired().is_desired(&"v1", &"n1"));
    assert!(
        h.core.desired().is_registered(&"v1"),
        "other kinds are unaffected"
    );
    // The volume stays on the deleted node (its machine may still run), and says so.
    h.run_ok(secs(10));
    assert_eq!(h.count("detach"), 0);
    // The next input call starts a fresh list of removed nodes.
    h.pod("p9", "n2", &[]);
    assert!(h.core.removed_nodes().is_empty());
    // The node comes back: its workload is placed again.
    h.node("n1", &["v1"]);
    assert_eq!(waiting_for(&h, "p1"), None);
    assert!(h.core.desired().is_desired(&"v1", &"n1"));
}

/// A second `RelistStarted` before the `RelistDone` starts over: what the first saw no longer
/// counts. Upserts of the kind outside a relist, and of other kinds, count for nothing.
#[test]
fn a_restarted_relist_forgets_what_the_first_saw() {
    let mut h = H::new(Config::default());
    for n in ["n1", "n2", "n3"] {
        h.node(n, &[]);
    }
    h.rwo("v1");
    let refused = h.core.handle_all([
        Input::RelistStarted { kind: Kind::Node },
        node_input("n1"),
        node_input("n2"),
        // The watcher lost its stream and lists again.
        Input::RelistStarted { kind: Kind::Node },
        node_input("n2"),
        volume_input("v1"),
        Input::RelistDone { kind: Kind::Node },
    ]);
    assert!(refused.is_empty());
    let mut nodes: Vec<_> = h.core.desired().nodes().copied().collect();
    nodes.sort();
    assert_eq!(nodes, vec!["n2"]);
    assert!(h.core.desired().is_registered(&"v1"));
    // Done ends it: another Done needs another Start.
    assert_eq!(
        h.core.handle(Input::RelistDone { kind: Kind::Node }),
        Err(ReconcilerError::NoRelist { kind: Kind::Node })
    );
    assert_eq!(
        h.core.desired().node_count(),
        1,
        "nothing removed by the refused one"
    );
}

/// An upsert the core refuses during a relist still counts its object as seen: the object
/// exists, and removing it for a content the core could not take would be far worse.
#[test]
fn a_refused_upsert_during_a_relist_still_counts_as_seen() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwx("v1");
    h.pod("p1", "n1", &["v1"]);
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(1));
    let refused = h.core.handle_all([
        Input::RelistStarted { kind: Kind::Volume },
        volume_input("v1"),
        Input::RelistDone { kind: Kind::Volume },
    ]);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].index, 1);
    assert!(matches!(
        refused[0].error,
        ReconcilerError::AccessConflict { .. }
    ));
    assert!(h.core.desired().is_registered(&"v1"));
    assert_eq!(h.core.desired().len(), 2, "both still want it");
}

// ---- per-node attach limits (issue 13) ----------------------------------------------------------

impl H {
    /// A healthy node that reports nothing in use and holds at most `limit` volumes.
    fn limited(&mut self, node: &'static str, limit: Option<u32>) {
        let facts = NodeFacts {
            in_use: Some(Vec::new()),
            attach_limit: limit,
            ..NodeFacts::default()
        };
        self.world
            .store
            .entry(node)
            .or_insert((facts.clone(), Vec::new(), 1))
            .0 = facts.clone();
        self.input(Input::NodeUpdated { node, facts });
    }

    fn attaches(ops: &[Operation<T>]) -> Vec<String> {
        ops.iter()
            .filter(|op| op.kind() == OpKind::Attach)
            .map(render)
            .collect()
    }

    fn node_full_events(&mut self) -> Vec<(String, Vec<&'static str>)> {
        self.core
            .take_events()
            .into_iter()
            .filter_map(|e| match e {
                Event::NodeFull {
                    volume, workloads, ..
                } => Some((volume.to_string(), workloads)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn attach_limit_counts_attaching_and_uncertain_and_is_never_passed() {
    let mut h = H::new(Config::default());
    h.limited("n1", Some(2));
    for (pod, volume) in [("p1", "v1"), ("p2", "v2"), ("p3", "v3")] {
        h.rwo(volume);
        h.pod(pod, "n1", &[volume]);
    }
    let ops = h.tick();
    assert_eq!(H::attaches(&ops), vec!["attach v1 n1", "attach v2 n1"]);
    assert_eq!(
        h.node_full_events(),
        vec![("v3".to_string(), vec!["p3"])],
        "the waiting workload is named once"
    );
    assert_eq!(h.core.waiting_for_room(), 1);
    let mut ops = ops.into_iter().filter(|op| op.kind() == OpKind::Attach);
    let (a1, a2) = (ops.next().unwrap(), ops.next().unwrap());
    // An attach that may have taken effect keeps its room: v1 is Uncertain on n1.
    h.fail(a1, uncertain());
    assert!(
        H::attaches(&h.tick()).is_empty(),
        "two attaching or maybe attached"
    );
    // One that certainly did nothing frees it, and the waiting volume takes it.
    h.fail(a2, transient());
    let ops = h.tick();
    assert_eq!(H::attaches(&ops), vec!["attach v3 n1"]);
    assert!(
        h.node_full_events().is_empty(),
        "the same wait: no new event"
    );
    for op in ops {
        h.ok(op);
    }
    // v2, retried after its backoff, now waits for room in turn, named once.
    h.run_ok(secs(5));
    assert_eq!(h.core.actual().volumes_on(&"n1").count(), 2);
    assert_eq!(h.count("attach v2 n1"), 1, "no attach past the limit");
    assert_eq!(h.node_full_events(), vec![("v2".to_string(), vec!["p2"])]);
    // The pod using v3 leaves: v3 is detached, and v2 gets its room.
    h.unpod("p3");
    let planned = h.run_ok(secs(5));
    assert!(planned.contains(&"attach v2 n1".to_string()), "{planned:?}");
    assert_eq!(h.core.waiting_for_room(), 0);
}

#[test]
fn a_raised_limit_lets_the_waiting_attach_go_at_once() {
    let mut h = H::new(Config::default());
    h.limited("n1", Some(1));
    for (pod, volume) in [("p1", "v1"), ("p2", "v2")] {
        h.rwo(volume);
        h.pod(pod, "n1", &[volume]);
    }
    assert_eq!(h.run_ok(secs(2)), vec!["attach v1 n1", "write n1 [v1]"]);
    h.limited("n1", Some(2));
    assert_eq!(h.run_ok(secs(1)), vec!["attach v2 n1", "write n1 [v1,v2]"]);
    // Lowering the limit below what the node holds detaches nothing: it only holds back
    // new attaches.
    h.limited("n1", Some(0));
    h.rwo("v3");
    h.pod("p3", "n1", &["v3"]);
    assert!(h.run_ok(secs(2)).is_empty());
    assert_eq!(h.core.actual().volumes_on(&"n1").count(), 2);
}

#[test]
fn a_node_full_answer_backs_off_the_node_not_the_volume() {
    let mut h = H::new(Config::default());
    h.limited("n1", None);
    h.limited("n2", None);
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.run_until_taking(OpKind::Attach);
    h.fail(attach, BackendError::node_full("16 disks attached"));
    let events = h.node_full_events();
    assert_eq!(events, vec![("v1".to_string(), vec!["p1"])]);
    // Another volume for the same node waits for the node's backoff, with no call.
    h.pod("p2", "n1", &["v2"]);
    assert!(H::attaches(&h.tick()).is_empty());
    assert_eq!(h.node_full_events(), vec![("v2".to_string(), vec!["p2"])]);
    // The first volume, wanted elsewhere, goes at once: its own gate is not backing off.
    h.unpod("p1");
    h.pod("p1b", "n2", &["v1"]);
    assert_eq!(H::attaches(&h.tick()), vec!["attach v1 n2"]);
    // After the node's backoff, n1 is tried again, and a success ends its backoff.
    let again = h.run_until_taking(OpKind::Attach);
    assert_eq!(render(&again), "attach v2 n1");
    assert!(
        h.now <= secs(2),
        "retried after the first backoff, at {:?}",
        h.now
    );
    h.ok(again);
    assert_eq!(h.core.waiting_for_room(), 0);
}

#[test]
fn claim_free_volumes_do_not_count_against_the_limit() {
    let mut h = H::new(Config::default());
    h.limited("n1", Some(1));
    h.rwo("v1");
    h.input(Input::SetVolume {
        volume: "local",
        spec: VolumeSpec::single_node(()).without_attach(),
    });
    h.pod("p1", "n1", &["local", "v1"]);
    let planned = h.run_ok(secs(2));
    assert_eq!(
        planned,
        vec!["attach v1 n1", "write n1 [local]", "write n1 [local,v1]"],
        "the claim is granted at once, the attach under the limit of one"
    );
}

#[test]
fn a_claim_is_granted_and_released_without_a_backend_call() {
    let mut h = H::new(Config::default());
    h.node("n1", &["share"]);
    h.node("n2", &[]);
    h.input(Input::SetVolume {
        volume: "share",
        spec: VolumeSpec::single_node(()).without_attach(),
    });
    h.pod("p1", "n1", &["share"]);
    assert_eq!(h.run_ok(secs(1)), vec!["write n1 [share]"]);
    assert_eq!(
        h.core.actual().state(&"share", &"n1"),
        AttachState::Attached
    );
    // A second node waits, with a Multi-Attach event, while the first holds the claim.
    h.pod("p2", "n2", &["share"]);
    h.run_ok(secs(1));
    assert!(
        h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::MultiAttach { node: "n2", .. }))
    );
    // Released only once n1's agent stopped using it, through the store's acknowledgement and
    // a fresh read: then granted to n2, and never a backend call.
    h.unpod("p1");
    assert!(h.run_ok(secs(2)).is_empty(), "n1 still uses it");
    h.node("n1", &[]);
    assert_eq!(h.run_ok(secs(2)), vec!["write n1 []", "write n2 [share]"]);
    assert_eq!(
        h.core.actual().state(&"share", &"n1"),
        AttachState::Detached
    );
    assert!(
        h.world.log.iter().any(|l| l == "read n1"),
        "a fresh read first"
    );
    assert_eq!(h.count("attach") + h.count("detach") + h.count("verify"), 0);
    // Whether it needs an attach cannot change while it is claimed.
    let refused = h.core.handle(Input::SetVolume {
        volume: "share",
        spec: VolumeSpec::single_node(()),
    });
    assert_eq!(
        refused,
        Err(ReconcilerError::AttachModeConflict {
            volume: "share",
            nodes: vec!["n2"]
        })
    );
    assert!(!h.core.desired().spec(&"share").unwrap().attach_required);
}

// ---- stuck detaches and an operator's release (issue 13) -------------------------------------

#[test]
fn a_stuck_detach_is_named_once_and_released_only_from_a_fenced_node() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    // n1 dies with the volume mounted; its pod is force-deleted.
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    let release = |h: &mut H| {
        h.core.handle(Input::ReleaseVolume {
            volume: "v1",
            node: "n1",
        })
    };
    let refused = |reason| {
        Err(ReconcilerError::ReleaseRefused {
            volume: "v1",
            node: "n1",
            reason,
        })
    };
    assert_eq!(release(&mut h), refused(ReleaseRefusal::NotFenced));
    assert_eq!(
        h.core.handle(Input::ReleaseVolume {
            volume: "v2",
            node: "n1"
        }),
        Err(ReconcilerError::ReleaseRefused {
            volume: "v2",
            node: "n1",
            reason: ReleaseRefusal::NotAttached
        })
    );
    h.run_ok(secs(9 * 60));
    assert!(
        h.core.stuck_detaches(h.now).is_empty(),
        "not yet ten minutes"
    );
    h.run_ok(secs(2 * 60));
    let stuck = h.core.stuck_detaches(h.now);
    assert_eq!(stuck.len(), 1);
    assert!(stuck[0].waited >= secs(10 * 60));
    let named = |h: &mut H| {
        h.core
            .take_events()
            .iter()
            .filter(|e| matches!(e, Event::DetachStuck { volume: "v1", .. }))
            .count()
    };
    assert_eq!(named(&mut h), 1);
    h.run_ok(secs(3 * 60));
    assert_eq!(named(&mut h), 0, "once per episode");
    // Fenced: the forced detach is tried and fails; a workload wanting it there blocks a
    // release, then the operator releases it.
    h.facts("n1", false, true, Some(&["v1"]));
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, transient());
    h.pod("p9", "n1", &["v1"]);
    assert_eq!(
        release(&mut h),
        refused(ReleaseRefusal::StillWanted {
            workloads: vec!["p9"]
        })
    );
    h.unpod("p9");
    assert_eq!(release(&mut h), Ok(()));
    let before = h.count("detach v1 n1");
    // Forgetting is irreversible: a verify of n1 planned after the release decides. Until it
    // answers, no detach is planned and the release is listed as pending.
    let verify = h.run_until_taking(OpKind::Verify);
    assert_eq!(render(&verify), "verify n1 [v1]");
    let stuck = h.core.stuck_detaches(h.now);
    assert!(stuck[0].release_pending, "{stuck:?}");
    // The operator detached it by hand: the backend no longer lists it.
    h.verified(verify, &[]);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    h.run_ok(secs(1));
    assert_eq!(h.count("detach v1 n1"), before, "no detach call");
    assert!(h.core.stuck_detaches(h.now).is_empty());
    assert!(
        h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::VolumeReleased { volume: "v1", .. }))
    );
}

/// The attach landed after the operator looked (issue 66): the verify that decides the
/// release finds the volume attached, so the release is dropped with an event, and the
/// volume is detached as any, forced since the node is fenced.
#[test]
fn a_release_the_backend_contradicts_is_dropped_and_the_detach_goes_ahead() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, true, Some(&["v1"]));
    h.unpod("p1");
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, transient());
    h.input(Input::ReleaseVolume {
        volume: "v1",
        node: "n1",
    });
    let verify = h.run_until_taking(OpKind::Verify);
    h.verified(verify, &["v1"]);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    let events = h.core.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::ReleaseRefused {
                volume: "v1",
                node: "n1",
                reason: ReleaseRefusal::BackendStillAttached
            }
        )),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::VolumeReleased { .. }))
    );
    let planned = h.run_ok(secs(5));
    assert!(
        planned.contains(&"detach v1 n1 forced:out-of-service".to_string()),
        "{planned:?}"
    );
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
}

/// A verify planned before the release came may have looked at the backend before the
/// operator acted, or before an attach landed: it decides nothing about the release. The next
/// verify does. A failed verify decides nothing either: the release waits, listed as pending,
/// and the node is verified again after a backoff.
#[test]
fn only_a_verify_planned_after_the_release_decides_it() {
    let (mut h, early) = H::released_behind_a_running_verify();
    h.verified(early, &["v1"]);
    assert!(
        !h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::ReleaseRefused { .. })),
        "the early verify decides nothing"
    );
    // The next verify fails (the backend cannot reach the node): still pending, and visible.
    let failed = h.run_until_taking(OpKind::Verify);
    h.fail(failed, transient());
    let stuck = h.core.stuck_detaches(h.now);
    assert_eq!(
        stuck
            .iter()
            .map(|s| (s.volume, s.node, s.release_pending))
            .collect::<Vec<_>>(),
        vec![("v1", "n1", true)]
    );
    assert!(
        !h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::DetachStuck { .. })),
        "named as stuck only after stuck_after"
    );
    // Retried after a backoff, never in a busy loop, and no detach meanwhile.
    let detaches = h.count("detach v1 n1");
    let planned = h.tick_names();
    assert!(planned.is_empty(), "{planned:?}");
    let retry = h.run_until_taking(OpKind::Verify);
    assert_eq!(h.count("detach v1 n1"), detaches);
    h.verified(retry, &[]);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    assert!(
        h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::VolumeReleased { volume: "v1", .. }))
    );
}

/// The backend still lists the volume, so the release is dropped, and the forced detach that
/// goes ahead instead reads the node fresh first: its fence was lifted in the store (the core
/// hears of it late), so nothing is detached or forgotten.
#[test]
fn a_release_whose_fence_was_lifted_before_the_read_forgets_nothing() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, true, Some(&["v1"]));
    h.unpod("p1");
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, transient());
    h.core
        .handle(Input::ReleaseVolume {
            volume: "v1",
            node: "n1",
        })
        .unwrap();
    // The fence is lifted in the store before the fresh read, and the core hears it late.
    h.world.store.get_mut("n1").unwrap().0.fenced = false;
    h.run_ok(secs(3));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Attached);
    assert!(
        !h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::VolumeReleased { .. }))
    );
}

/// A release while the forced detach it would replace runs is refused: the detach may land
/// after, or fail and be retried, and either way the volume is not the operator's to settle.
/// Once the detach has failed, the same release is taken.
#[test]
fn a_release_is_refused_while_the_detach_runs() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, true, Some(&["v1"]));
    h.unpod("p1");
    let detach = h.run_until_taking(OpKind::Detach);
    let release = |h: &mut H| {
        h.core.handle(Input::ReleaseVolume {
            volume: "v1",
            node: "n1",
        })
    };
    assert_eq!(
        release(&mut h),
        Err(ReconcilerError::ReleaseRefused {
            volume: "v1",
            node: "n1",
            reason: ReleaseRefusal::OperationRunning
        })
    );
    h.fail(detach, transient());
    assert_eq!(release(&mut h), Ok(()));
}

#[test]
fn an_attach_that_may_still_land_cannot_be_released() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.run_until_taking(OpKind::Attach);
    h.fail(attach, uncertain());
    h.facts("n1", false, true, Some(&[]));
    h.unpod("p1");
    let refused = h.core.handle(Input::ReleaseVolume {
        volume: "v1",
        node: "n1",
    });
    assert_eq!(
        refused,
        Err(ReconcilerError::ReleaseRefused {
            volume: "v1",
            node: "n1",
            reason: ReleaseRefusal::AttachMayLand
        })
    );
}

#[test]
fn claims_and_releases_leave_no_backend_slot_taken() {
    use crate::config::BackendLoad;
    let mut h = H::new(Config {
        backend_load: BackendLoad {
            max_attaches: Some(1),
            max_detaches: Some(1),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    });
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.input(Input::SetVolume {
        volume: "share",
        spec: VolumeSpec::single_node(()).without_attach(),
    });
    h.rwo("v1");
    // The claim moves back and forth; none of it takes the one detach slot.
    for (pod, node) in [("p1", "n1"), ("p2", "n2"), ("p3", "n1")] {
        h.pod(pod, node, &["share"]);
        h.run_ok(secs(2));
        assert_eq!(
            h.core.actual().state(&"share", &node),
            AttachState::Attached
        );
        h.unpod(pod);
    }
    // An operator's release from a fenced node gives its slot back too.
    h.pod("p4", "n1", &["v1"]);
    h.run_ok(secs(2));
    h.facts("n1", false, true, Some(&["v1"]));
    h.unpod("p4");
    let detach = h.run_until_taking(OpKind::Detach);
    h.fail(detach, transient());
    h.input(Input::ReleaseVolume {
        volume: "v1",
        node: "n1",
    });
    h.run_ok(secs(2));
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    let q = h.core.backend_queue(h.now);
    assert_eq!(
        (q.detach.in_flight, q.detach.reserved, q.detach.queued),
        (0, 0, 0)
    );
    // And a real detach still gets the slot.
    h.facts("n1", true, false, Some(&[]));
    h.pod("p5", "n1", &["v1"]);
    h.run_ok(secs(2));
    h.unpod("p5");
    let planned = h.run_ok(secs(2));
    assert!(planned.contains(&"detach v1 n1".to_string()), "{planned:?}");
}
mod machine_fencing;

// ---- the periodic verify, spread over the period (issue 16) ----------------------------------

/// Six nodes with two attached volumes each, settled.
fn six_nodes(config: Config) -> H {
    const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];
    const VOLUMES: [&str; 12] = [
        "v01", "v02", "v03", "v04", "v05", "v06", "v07", "v08", "v09", "v10", "v11", "v12",
    ];
    let mut h = H::new(config);
    for (i, node) in NODES.iter().enumerate() {
        h.node(node, &[]);
        for volume in &VOLUMES[2 * i..2 * i + 2] {
            h.rwo(volume);
            h.pod(volume, node, &[volume]);
        }
    }
    h.run_ok(secs(1));
    assert_eq!(h.core.actual().len(), 12);
    h
}

/// The nodes verified in one pass `d` from now, every operation succeeding.
fn verified_in_pass_at(h: &mut H, d: Duration) -> Vec<&'static str> {
    h.now += d - TICK;
    let mut nodes = Vec::new();
    for op in h.tick() {
        if let Operation::Verify { node, .. } = &op {
            nodes.push(*node);
        }
        h.ok(op);
    }
    nodes
}

/// [`six_nodes`]; then `rounds` sync periods tick by tick, every operation succeeding.
/// Returns each verify: (time since the first round started, node).
fn verify_times(config: Config, rounds: u32) -> Vec<(Duration, &'static str)> {
    let period = config.sync_period;
    let mut h = six_nodes(config);
    let mut verifies = Vec::new();
    let mut start = None;
    let end = h.now + period * (rounds + 1);
    while h.now < end {
        for op in h.tick() {
            if let Operation::Verify { node, .. } = &op {
                let at = *start.get_or_insert(h.now);
                verifies.push((h.now - at, *node));
            }
            h.ok(op);
        }
    }
    verifies
}

#[test]
fn the_periodic_verify_is_spread_over_the_period_in_slices_of_whole_nodes() {
    let verifies = verify_times(
        Config {
            verify_batch: 4,
            ..Config::default()
        },
        2,
    );
    let at = |s: u64, n: &'static str| (secs(s), n);
    // 12 attachments in slices of 4 (two nodes each): three slices, 20 s apart, then the next
    // round a period after the first began.
    assert_eq!(
        verifies[..9],
        [
            at(0, "n1"),
            at(0, "n2"),
            at(20, "n3"),
            at(20, "n4"),
            at(40, "n5"),
            at(40, "n6"),
            at(60, "n1"),
            at(60, "n2"),
            at(80, "n3"),
        ]
    );
}

#[test]
fn a_cluster_within_one_batch_is_verified_in_one_pass_as_before() {
    let verifies = verify_times(Config::default(), 1);
    let first: Vec<_> = verifies.iter().take_while(|(t, _)| t.is_zero()).collect();
    assert_eq!(first.len(), 6, "every node in the round's first pass");
    assert_eq!(verifies[6].0, secs(60), "the next round a period later");
}

/// The verifies of the first whole round (the first to start with `n1`, after whatever the
/// set-up's passes left under way), with when each was planned from the round's start, the
/// core polled at each of its deadlines (as the driver does), every operation succeeding.
fn verify_times_at_deadlines(config: Config) -> Vec<(Duration, &'static str)> {
    let period = config.sync_period;
    let mut h = six_nodes(config);
    let mut verifies = Vec::new();
    let mut start = None;
    while let Some(due) = h.core.next_deadline() {
        if start.is_some_and(|at| due >= at + period) {
            break;
        }
        h.now = h.now.max(due);
        for op in h.core.poll(h.now) {
            if let Operation::Verify { node, .. } = &op {
                if start.is_none() && *node == "n1" {
                    start = Some(h.now);
                }
                if let Some(at) = start {
                    verifies.push((h.now - at, *node));
                }
            }
            h.ok(op);
        }
    }
    verifies
}

#[test]
fn verify_slices_keep_to_the_batch_even_closer_than_a_reconcile_period() {
    // Six slices of one node in 300 ms are 50 ms apart, half a reconcile period: the driver
    // wakes for them at the core's deadline. Held to the reconcile period, the round had three
    // slices of two nodes, each pass twice what `verify_batch` asks.
    let verifies = verify_times_at_deadlines(Config {
        verify_batch: 2,
        sync_period: Duration::from_millis(300),
        ..Config::default()
    });
    let at = |m: u64, n: &'static str| (Duration::from_millis(m), n);
    assert_eq!(
        verifies,
        [
            at(0, "n1"),
            at(50, "n2"),
            at(100, "n3"),
            at(150, "n4"),
            at(200, "n5"),
            at(250, "n6"),
        ]
    );
}

#[test]
fn at_the_default_periods_a_million_attachments_get_slices_of_the_batch() {
    // The benches verify with a sync period of a century, so they never showed it: held to
    // the 100 ms reconcile period, 60 s fit 600 slices, and a million attachments took
    // slices of 1,667 where `verify_batch` asked for 1,000 (the default then; 250 now).
    let config = Config::default();
    let round = VerifyRound::paced(Duration::ZERO, 1_000_000, &config);
    assert_eq!(round.per_slice, config.verify_batch);
    assert_eq!(round.interval, Duration::from_millis(15));
    // Past 6,000 slices in the period they grow, still at least the least gap apart.
    let round = VerifyRound::paced(Duration::ZERO, 10_000_000, &config);
    assert_eq!(round.per_slice, 1_667);
    assert_eq!(round.interval, MIN_VERIFY_SLICE_GAP);
    // A round of nothing still takes one slice.
    let round = VerifyRound::paced(Duration::ZERO, 0, &config);
    assert_eq!((round.per_slice, round.interval), (1, config.sync_period));
}

#[test]
fn a_verify_slice_between_two_passes_plans_the_slice_alone() {
    // Slices 50 ms apart, passes 100 ms apart. A pod scheduled just after a pass waits for
    // the next pass (a reconcile period after the last), not for the slice between them.
    let mut h = six_nodes(Config {
        verify_batch: 2,
        sync_period: Duration::from_millis(300),
        ..Config::default()
    });
    // Poll at each deadline until a round starts: its first slice (n1) is planned by the
    // pass that starts it.
    let pass = loop {
        let due = h.core.next_deadline().expect("a round is under way");
        h.now = h.now.max(due);
        let ops = h.core.poll(h.now);
        let started = ops
            .iter()
            .any(|op| matches!(op, Operation::Verify { node: "n1", .. }));
        for op in ops {
            h.ok(op);
        }
        if started {
            break h.now;
        }
    };
    h.rwo("v13");
    h.pod("v13", "n1", &["v13"]);
    let slice = h.core.next_deadline().expect("the next slice");
    assert_eq!(
        slice,
        pass + Duration::from_millis(50),
        "the slice comes first"
    );
    h.now = slice;
    let planned: Vec<String> = h.core.poll(h.now).iter().map(render).collect();
    assert!(
        planned.iter().all(|op| op.starts_with("verify")) && !planned.is_empty(),
        "only the slice: {planned:?}"
    );
    assert_eq!(
        h.core.next_deadline(),
        Some(pass + Duration::from_millis(100)),
        "the pass is still a reconcile period after the last"
    );
    h.now = pass + Duration::from_millis(100);
    let planned: Vec<String> = h.core.poll(h.now).iter().map(render).collect();
    assert!(
        planned.contains(&"attach v13 n1".to_string()),
        "the pass plans the attach: {planned:?}"
    );
}

#[test]
fn slices_grow_when_the_period_is_too_short_to_space_them_the_least_gap_apart() {
    // A batch of one attachment would need 12 slices in 30 ms; slices are at least 10 ms
    // apart, so there are 3 slices of 4 (two nodes each), and the round still ends within
    // the period.
    let verifies = verify_times_at_deadlines(Config {
        verify_batch: 1,
        sync_period: MIN_VERIFY_SLICE_GAP * 3,
        ..Config::default()
    });
    let gap = |k: u32| MIN_VERIFY_SLICE_GAP * k;
    assert_eq!(
        verifies,
        [
            (gap(0), "n1"),
            (gap(0), "n2"),
            (gap(1), "n3"),
            (gap(1), "n4"),
            (gap(2), "n5"),
            (gap(2), "n6"),
        ]
    );
}

#[test]
fn a_round_still_under_way_when_the_next_is_due_goes_on_from_where_it_was() {
    // Three slices of two nodes, 20 s apart. The driver polls late: the round's first slice at
    // 60 s, then nothing until 125 s, past the next round's start. Started over, the round
    // would verify n1 and n2 again and, were the driver late every period, never reach n5
    // and n6; it goes on instead.
    let mut h = six_nodes(Config {
        verify_batch: 4,
        ..Config::default()
    });
    let start = h.core.next_deadline().expect("the sync is due") - h.now;
    assert_eq!(verified_in_pass_at(&mut h, start), ["n1", "n2"]);
    assert_eq!(verified_in_pass_at(&mut h, secs(65)), ["n3", "n4"]);
    // Slices are counted from the round's (re)start, not from the late pass.
    let next = h.core.next_deadline().expect("the round's next slice");
    assert_eq!(next, h.now + secs(20));
    assert_eq!(verified_in_pass_at(&mut h, secs(20)), ["n5", "n6"]);
    // That round is done; the next one starts from the first node again.
    let again = h.core.next_deadline().expect("the next sync") - h.now;
    assert_eq!(verified_in_pass_at(&mut h, again), ["n1", "n2"]);
}

/// `poll_into` appends what `poll` would return, and `drain_events_into` appends the events
/// oldest first and leaves none behind: a driver may reuse both lists.
#[test]
fn poll_into_and_drain_events_into_append_what_poll_and_take_events_return() {
    let run = |reuse: bool| {
        let mut h = H::new(Config::default());
        h.rwo("v1");
        h.rwo("v2");
        h.node("n1", &[]);
        h.pod("p1", "n1", &["v1", "v2"]);
        // What the driver's list already holds stays first.
        let mut ops = vec![Operation::ListAttachments { id: OpId(u64::MAX) }];
        h.now += TICK;
        if reuse {
            h.core.poll_into(h.now, &mut ops);
        } else {
            ops.extend(h.core.poll(h.now));
        }
        let planned: Vec<String> = ops.iter().map(render).collect();
        for op in ops.into_iter().skip(1) {
            h.ok(op);
        }
        let mut events = vec![Event::NodePoweredOff { node: "before" }];
        if reuse {
            h.core.drain_events_into(&mut events);
        } else {
            events.extend(h.core.take_events());
        }
        assert!(h.core.take_events().is_empty(), "nothing left behind");
        (planned, events)
    };
    let (planned, events) = run(true);
    assert_eq!((planned.clone(), events.clone()), run(false));
    assert_eq!(planned, ["list", "attach v1 n1", "attach v2 n1", "read n1"]);
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0], Event::NodePoweredOff { node: "before" });
}

/// The core's event list keeps its room between drains, unless a burst grew it: then it is
/// dropped, or a start-up's event per attach would stay allocated for good.
#[test]
fn drained_events_leave_room_for_a_pass_not_a_burst() {
    let mut h = H::new(Config::default());
    let mut out = Vec::new();
    for (burst, kept) in [(10, true), (KEPT_EVENTS + 1, false)] {
        h.core
            .events
            .extend((0..burst).map(|_| Event::NodePoweredOff { node: "n1" }));
        h.core.drain_events_into(&mut out);
        assert_eq!(out.len(), burst);
        out.clear();
        assert_eq!(h.core.events.capacity() >= burst, kept, "burst of {burst}");
        assert!(h.core.events.capacity() <= KEPT_EVENTS);
    }
}

/// A burst gives back the room of its running operations once it settles, though no pass
/// follows the last acknowledgement (a pass trims at its start): a settled core keeps no
/// burst's peak. The last pass of a start-up plans one status write per node.
#[test]
fn a_settled_burst_gives_back_the_room_of_its_operations() {
    let mut h = H::new(Config::default());
    let name =
        |prefix: &str, i: usize| -> &'static str { Box::leak(format!("{prefix}{i}").into()) };
    for i in 0..300 {
        let (node, volume) = (name("n", i), name("v", i));
        h.node(node, &[]);
        h.rwo(volume);
        h.pod(name("p", i), node, &[volume]);
    }
    let mut peak = 0;
    let end = h.now + Duration::from_secs(5);
    while h.now < end {
        let ops = h.tick();
        peak = peak.max(h.core.calls.in_flight.capacity());
        for op in ops {
            h.ok(op);
        }
    }
    assert!(peak >= 300, "the burst ran at once: room for {peak}");
    assert_eq!(h.stored("n299"), Some(vec!["v299"]), "settled");
    let room = h.core.calls.in_flight.capacity();
    assert!(
        room <= 64,
        "room for {room} running operations kept after the burst"
    );
}

/// Room that inputs alone grew, with no operation to end (300 workloads waiting for a node
/// that never came, then removed), goes back within `TRIM_EVERY_PASSES` passes, though no
/// single pass trims any more: here the periodic sync's passes, one a second.
#[test]
fn room_grown_by_inputs_alone_goes_back_within_a_few_passes() {
    let mut h = H::new(Config {
        sync_period: Duration::from_secs(1),
        ..Config::default()
    });
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p", "n1", &["v1"]);
    h.run_ok(secs(2));
    let name = |i: usize| -> &'static str { Box::leak(format!("w{i}").into()) };
    for i in 0..300 {
        h.pod(name(i), "nowhere", &[]);
    }
    assert_eq!(h.core.desired().pending_len(), 300);
    let peak = h.core.desired().pending_capacity();
    for i in 0..300 {
        h.unpod(name(i));
    }
    h.run_ok(secs(u64::from(TRIM_EVERY_PASSES) + 2));
    let room = h.core.desired().pending_capacity();
    assert!(
        room <= 64,
        "room for {room} waiting workloads kept (peak {peak}) after the passes"
    );
}

/// A long pass (a restart's first, a resync's) is reconciled in warmed batches: every volume
/// of it, each once, in order, whether the batches divide it evenly or not, and a volume
/// settled by the batch before is left alone.
#[test]
fn a_long_pass_reconciles_every_volume_once_in_order() {
    for count in [WARM_FROM - 1, WARM_FROM, 4 * WARM_BATCH + 1, 100] {
        // One pass: fewer volumes than a pass may look at.
        let per_pass = Config::default().volumes_per_pass;
        assert!(count <= per_pass);
        let (mut h, volumes) = one_workload_on_many_volumes(per_pass, count);
        let ops = h.tick_raw();
        let attached: Vec<_> = ops
            .iter()
            .filter_map(|op| match op {
                Operation::Attach { volume, .. } => Some(*volume),
                _ => None,
            })
            .collect();
        assert_eq!(
            attached, volumes,
            "{count} volumes: one attach each, in order"
        );
        for op in ops {
            h.ok(op);
        }
        // Each finished attach marked its volume again: the next long pass finds them settled.
        let settled = h.run_ok(secs(5));
        assert_eq!(settled, vec![format!("write n1 [{}]", volumes.join(","))]);
        assert_eq!(h.core.actual().report(&"n1").len(), count);
    }
}

/// Every kind of key, borrowed, finds exactly its owned key: the same ids under another
/// variant are another key, and an operation's end frees its key by reference.
#[test]
fn each_borrowed_gate_key_variant_matches_its_own_variant_only() {
    type S = Ids<String, String, String>;
    let (v, n) = ("pv-1".to_string(), "n1".to_string());
    let owned: Vec<GateKey<S>> = vec![
        GateKey::Volume(v.clone()),
        GateKey::Attachment(v.clone(), n.clone()),
        GateKey::Status(n.clone()),
        GateKey::Verify(n.clone()),
        GateKey::List,
        GateKey::StoreList,
        GateKey::NodeCapacity(n.clone()),
    ];
    let borrowed: Vec<GateKeyRef<'_, S>> = vec![
        GateKeyRef::Volume(&v),
        GateKeyRef::Attachment(&v, &n),
        GateKeyRef::Status(&n),
        GateKeyRef::Verify(&n),
        GateKeyRef::List,
        GateKeyRef::StoreList,
        GateKeyRef::NodeCapacity(&n),
    ];
    for (i, key) in owned.iter().enumerate() {
        for (j, other) in borrowed.iter().enumerate() {
            assert_eq!(other.equivalent(key), i == j, "{key:?} against variant {j}");
        }
        assert_eq!(&borrowed[i].to_owned(), key);
        let mut gate: OperationGate<GateKey<S>> = OperationGate::new(Config::default().backoff);
        gate.start(key.clone());
        for (j, other) in borrowed.iter().enumerate() {
            assert_eq!(gate.is_running(other), i == j, "{key:?} running, asked {j}");
        }
        gate.succeeded(&borrowed[i], OpKind::Attach);
        assert!(!gate.is_running(&borrowed[i]), "{key:?} freed by reference");
    }
}

#[test]
fn a_borrowed_gate_key_finds_its_owned_key_and_no_other() {
    type S = Ids<String, String, String>;
    let (v, n, m) = ("pv-1".to_string(), "n1".to_string(), "n2".to_string());
    let mut gate: OperationGate<GateKey<S>> = OperationGate::new(Config::default().backoff);
    gate.start(GateKey::Volume(v.clone()));
    gate.start(GateKey::Attachment(v.clone(), n.clone()));
    gate.start(GateKey::Status(n.clone()));
    let single = gate_key_ref::<S>(Access::SingleNode, &v, &m);
    assert!(
        gate.is_running(&single),
        "a single-node volume's key ignores the node"
    );
    assert!(gate.is_running(&gate_key_ref::<S>(Access::MultiNode, &v, &n)));
    assert_eq!(
        gate.may_start(
            &gate_key_ref::<S>(Access::MultiNode, &v, &n),
            OpKind::Attach,
            Duration::ZERO
        ),
        Err(None)
    );
    // The same ids under another variant, or another node, are another key.
    assert!(!gate.is_running(&gate_key_ref::<S>(Access::MultiNode, &v, &m)));
    for (key, owned) in [
        (
            gate_key_ref::<S>(Access::MultiNode, &v, &m),
            GateKey::Attachment(v.clone(), n.clone()),
        ),
        (
            gate_key_ref::<S>(Access::MultiNode, &m, &n),
            GateKey::Attachment(v.clone(), n.clone()),
        ),
        (
            gate_key_ref::<S>(Access::SingleNode, &n, &n),
            GateKey::Status(n.clone()),
        ),
        (
            gate_key_ref::<S>(Access::SingleNode, &n, &n),
            GateKey::Verify(n.clone()),
        ),
        (
            gate_key_ref::<S>(Access::MultiNode, &v, &n),
            GateKey::Volume(v.clone()),
        ),
    ] {
        assert!(!key.equivalent(&owned), "{owned:?}");
    }
    gate.succeeded(&single, OpKind::Attach);
    assert!(!gate.is_running(&single));
    assert!(!gate.is_running(&gate_key_ref::<S>(Access::SingleNode, &n, &n)));
    // A failure's backoff is found borrowed too.
    gate.failed(
        GateKey::Volume(v.clone()),
        OpKind::Attach,
        Duration::ZERO,
        &"failed",
    );
    assert!(matches!(
        gate.may_start(&single, OpKind::Attach, Duration::ZERO),
        Err(Some(_))
    ));
    assert_eq!(
        gate.may_start(&single, OpKind::Detach, Duration::ZERO),
        Ok(())
    );
}

/// A core that looks at `per_pass` marked volumes a pass, with one workload on `n1` using
/// `count` new volumes (`v000`, `v001`, ...): a round of `count` marks for the next pass.
fn one_workload_on_many_volumes(per_pass: usize, count: usize) -> (H, Vec<&'static str>) {
    let mut h = H::new(Config {
        volumes_per_pass: per_pass,
        ..Config::default()
    });
    h.node("n1", &[]);
    let volumes: Vec<&'static str> = (0..count)
        .map(|i| &*Box::leak(format!("v{i:03}").into_boxed_str()))
        .collect();
    for &v in &volumes {
        h.rwo(v);
    }
    h.pod("p1", "n1", &volumes);
    (h, volumes)
}

/// A pass looks at `volumes_per_pass` marked volumes at most: more make a round, whose next
/// pass is due at once, in mark order; the marks made meanwhile (each finished attach marks
/// its volume) wait for the round's end, and so do the node's status calls (here the read
/// its first write needs), after which one write names every attachment.
#[test]
fn a_round_of_marks_is_looked_at_a_budget_a_pass_and_written_once_at_its_end() {
    let (mut h, volumes) = one_workload_on_many_volumes(4, 10);
    let mut passes = Vec::new();
    let mut ops = h.tick_raw();
    loop {
        let rendered: Vec<String> = ops.iter().map(render).collect();
        passes.push(rendered);
        for op in ops {
            h.ok(op);
        }
        // The round's next pass is due now, not a reconcile period later.
        if h.core.next_deadline() != Some(h.now) {
            break;
        }
        ops = h.core.poll(h.now);
        assert!(passes.len() < 10, "the round never ends: {passes:?}");
    }
    let attaches = |from: usize, to: usize| -> Vec<String> {
        volumes[from..to]
            .iter()
            .map(|v| format!("attach {v} n1"))
            .collect()
    };
    // The node's first write needs its revision: a read, at the round's end only.
    let mut last = attaches(8, 10);
    last.push("read n1".to_string());
    assert_eq!(passes, vec![attaches(0, 4), attaches(4, 8), last]);
    // Then one write of every attachment, and nothing more.
    let settled = h.run_ok(secs(5));
    assert_eq!(settled, vec![format!("write n1 [{}]", volumes.join(","))]);
}

/// A driver that polls only on its own tick gets a round's passes one a tick: still every
/// volume in turn, in mark order.
#[test]
fn a_round_polled_on_a_tick_reaches_every_volume_in_order() {
    let (mut h, volumes) = one_workload_on_many_volumes(3, 7);
    let mut attached = Vec::new();
    for _ in 0..3 {
        for op in h.tick_raw() {
            if let Operation::Attach { volume, .. } = &op {
                attached.push(*volume);
            }
            // Unanswered: nothing but the round decides what the next pass looks at.
        }
    }
    assert_eq!(attached, volumes);
}

/// Node `n1` holds `vd` for `p0`, settled; six more volumes are registered, unused. Then `p0`
/// goes, and the pass after it plans `n1`'s write without `vd` (returned, unanswered).
fn a_detach_waiting_for_its_write_beside_six_idle_volumes() -> (H, Vec<&'static str>, Operation<T>)
{
    let mut h = H::new(Config {
        volumes_per_pass: 2,
        ..Config::default()
    });
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.rwo("vd");
    let fresh: Vec<&'static str> = (0..6)
        .map(|i| &*Box::leak(format!("v{i}").into_boxed_str()))
        .collect();
    for &v in &fresh {
        h.rwo(v);
    }
    h.pod("p0", "n1", &["vd"]);
    h.run_ok(secs(5));
    assert_eq!(h.stored("n1"), Some(vec!["vd"]));
    h.unpod("p0");
    let mut ops = h.tick_raw();
    assert_eq!(ops.iter().map(render).collect::<Vec<_>>(), ["write n1 []"]);
    (h, fresh, ops.remove(0))
}

/// `ops` rendered, sorted.
fn planned(ops: &[Operation<T>]) -> Vec<String> {
    let mut rendered: Vec<String> = ops.iter().map(render).collect();
    rendered.sort();
    rendered
}

/// The round's next pass, due at once.
fn next_pass_of_the_round(h: &mut H) -> Vec<Operation<T>> {
    assert_eq!(
        h.core.next_deadline(),
        Some(h.now),
        "the round goes on at once"
    );
    h.core.poll(h.now)
}

/// Answers `ops` and runs on: every `fresh` volume ends attached to `n2` and listed in its
/// status, and `vd` detached from `n1`.
fn answer_and_settle(
    h: &mut H,
    ops: impl IntoIterator<Item = Operation<T>>,
    fresh: &[&'static str],
) {
    for op in ops {
        h.ok(op);
    }
    h.run_ok(secs(5));
    for v in fresh {
        assert_eq!(
            h.core.actual().state(v, &"n2"),
            AttachState::Attached,
            "{v}"
        );
    }
    assert_eq!(h.core.actual().state(&"vd", &"n1"), AttachState::Detached);
    assert_eq!(h.stored("n2"), Some(fresh.to_vec()));
}

/// A fresh read's clearance that arrives during a round is used by the pass right after it,
/// which looks at the cleared volume beside its own share of the round, not at the whole rest
/// of the round: a clearance arriving during a round of a million marks once made one pass
/// look at all of them.
#[test]
fn a_clearance_arriving_during_a_round_joins_the_next_pass_not_the_rest_of_the_round() {
    let (mut h, fresh, write) = a_detach_waiting_for_its_write_beside_six_idle_volumes();
    h.ok(write);
    let mut ops = h.tick_raw();
    assert_eq!(planned(&ops), ["read n1"]);
    let read = ops.remove(0);
    // A round of six marks begins while the read runs.
    h.pod("p1", "n2", &fresh);
    let first = h.tick_raw();
    assert_eq!(planned(&first), ["attach v0 n2", "attach v1 n2"]);
    h.ok(read);
    let next = next_pass_of_the_round(&mut h);
    assert_eq!(
        planned(&next),
        ["attach v2 n2", "attach v3 n2", "detach vd n1"],
        "the cleared detach goes with the round's next share, and no more"
    );
    answer_and_settle(&mut h, first.into_iter().chain(next), &fresh);
}

/// The same for the facts a status write read: the pass after its answer looks at the
/// volumes whose detaches waited for the write beside its share of the round, and the detach
/// the facts justify goes without a read.
#[test]
fn a_write_s_facts_arriving_during_a_round_join_the_next_pass_not_the_rest_of_the_round() {
    let (mut h, fresh, write) = a_detach_waiting_for_its_write_beside_six_idle_volumes();
    let Operation::WriteStatus {
        id,
        attached,
        read_facts,
        ..
    } = write
    else {
        unreachable!("a write")
    };
    assert!(
        read_facts,
        "a detach waits for the write: its facts are asked for"
    );
    h.pod("p1", "n2", &fresh);
    let first = h.tick_raw();
    assert_eq!(planned(&first), ["attach v0 n2", "attach v1 n2"]);
    let entry = h.world.store.get_mut("n1").expect("n1 was written");
    entry.1 = attached.to_vec();
    entry.2 += 1;
    let revision = Revision::from(entry.2);
    let facts = StatusFacts {
        in_use: Some(Vec::new()),
        fenced: Some(false),
        healthy: Some(true),
    };
    let receipt = WriteReceipt {
        revision,
        facts: Some(facts),
    };
    h.core
        .finish(h.now, id, Outcome::WriteStatus(Ok(receipt)))
        .unwrap();
    let next = next_pass_of_the_round(&mut h);
    assert_eq!(
        planned(&next),
        ["attach v2 n2", "attach v3 n2", "detach vd n1"],
        "the detach the facts justify goes with the round's next share, and no more"
    );
    answer_and_settle(&mut h, first.into_iter().chain(next), &fresh);
}

/// A clearance that arrives just before a round begins is used by the round's first pass,
/// though the cleared volume's mark falls outside that pass's share (`vd` sorts after `v5`).
#[test]
fn a_clearance_arriving_as_a_round_begins_joins_its_first_pass() {
    let (mut h, fresh, write) = a_detach_waiting_for_its_write_beside_six_idle_volumes();
    h.ok(write);
    let mut ops = h.tick_raw();
    assert_eq!(planned(&ops), ["read n1"]);
    h.ok(ops.remove(0));
    h.pod("p1", "n2", &fresh);
    let first = h.tick_raw();
    assert_eq!(
        planned(&first),
        ["attach v0 n2", "attach v1 n2", "detach vd n1"],
        "the cleared detach goes with the round's first share"
    );
    answer_and_settle(&mut h, first, &fresh);
}

/// Nothing is attached for a claim-only volume, so no attach or detach event may say so
/// (issue 66): a claim is granted and released under events of its own.
#[test]
fn a_claim_raises_claim_events_not_attach_or_detach_events() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.input(Input::SetVolume {
        volume: "share",
        spec: VolumeSpec::single_node(()).without_attach(),
    });
    h.pod("p1", "n1", &["share"]);
    h.run_ok(secs(1));
    h.unpod("p1");
    h.run_ok(secs(2));
    assert_eq!(
        h.core.actual().state(&"share", &"n1"),
        AttachState::Detached
    );
    let reasons: Vec<&str> = h.core.take_events().iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, vec!["ClaimGranted", "ClaimReleased"]);
}
