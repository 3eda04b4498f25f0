//! A volume's payload is copied into the calls the core plans, and nowhere else. Kubernetes'
//! CSI payload is three strings: a copy on each of a move's five looks at its volume cost the move
//! 15 allocations.

use std::cell::Cell;
use std::collections::BTreeMap;

use super::*;
use crate::domain::Ids;

thread_local! {
    /// Copies of [`Counted`] made on this thread (each test runs on its own thread).
    static COPIES: Cell<usize> = const { Cell::new(0) };
}

/// A payload that counts its copies.
#[derive(Debug, PartialEq)]
struct Counted;

impl Clone for Counted {
    fn clone(&self) -> Self {
        COPIES.with(|copies| copies.set(copies.get() + 1));
        Counted
    }
}

fn copies() -> usize {
    COPIES.with(Cell::get)
}

type T = Ids<&'static str, &'static str, &'static str, Counted>;

/// A core on virtual time whose calls all succeed at once, with a store of each node's list.
struct Run {
    r: Reconciler<T>,
    now: Duration,
    /// Each node's list and revision, as the core wrote them.
    store: BTreeMap<&'static str, (Vec<ReportedVolume<T>>, u64)>,
    /// Payload copies the planned calls carry: one per attach or detach, one per verified
    /// volume.
    carried: usize,
    /// Attaches and detaches planned.
    calls: usize,
}

impl Run {
    fn new() -> Self {
        let mut run = Run {
            r: Reconciler::new(Config {
                resync_period: None,
                ..Config::default()
            }),
            now: Duration::ZERO,
            store: BTreeMap::new(),
            carried: 0,
            calls: 0,
        };
        run.settle();
        assert!(!run.r.is_recovering());
        run
    }

    fn input(&mut self, input: Input<T>) {
        self.r.handle(input).unwrap();
    }

    /// Passes a period apart, every call answered at once, until three in a row plan nothing.
    fn settle(&mut self) {
        let mut quiet = 0;
        for _ in 0..1_000 {
            let ops = self.r.poll(self.now);
            quiet = if ops.is_empty() { quiet + 1 } else { 0 };
            if quiet == 3 {
                return;
            }
            for op in ops {
                self.answer(op);
            }
            self.now += Duration::from_millis(100);
        }
        panic!("the core did not settle in 1,000 passes");
    }

    fn answer(&mut self, op: Operation<T>) {
        let now = self.now;
        match op {
            Operation::Attach { id, .. } => {
                self.carried += 1;
                self.calls += 1;
                self.r
                    .finish(now, id, Outcome::Attach(Ok(AttachInfo { device: None })))
                    .unwrap();
            }
            Operation::Detach { id, .. } => {
                self.carried += 1;
                self.calls += 1;
                self.r.finish(now, id, Outcome::Detach(Ok(()))).unwrap();
            }
            Operation::Verify { id, volumes, .. } => {
                self.carried += volumes.len();
                let attached = volumes.into_iter().map(|(v, _)| v).collect();
                self.r
                    .finish(now, id, Outcome::Verify(Ok(attached)))
                    .unwrap();
            }
            Operation::WriteStatus {
                id, node, attached, ..
            } => {
                let entry = self.store.entry(node).or_default();
                entry.0 = attached.to_vec();
                entry.1 += 1;
                let revision = Revision::from(entry.1);
                self.r
                    .finish(now, id, Outcome::WriteStatus(Ok(revision.into())))
                    .unwrap();
            }
            Operation::ReadStatus { id, node, .. } => {
                let (attached, revision) = self.store.get(node).cloned().unwrap_or_default();
                let status = NodeStatus {
                    attached,
                    in_use: Some(Vec::new()),
                    fenced: Some(false),
                    healthy: Some(true),
                    revision: Revision::from(revision),
                };
                self.r
                    .finish(now, id, Outcome::ReadStatus(Ok(status)))
                    .unwrap();
            }
            Operation::ListAttachments { id } => {
                self.r
                    .finish(now, id, Outcome::List(Ok(Vec::new())))
                    .unwrap();
            }
            Operation::ListStatuses { id } => {
                self.r
                    .finish(now, id, Outcome::ListStatuses(Ok(Vec::new())))
                    .unwrap();
            }
            Operation::CheckMachine { id, .. } => {
                let running = crate::core::calls::backend::MachineState::Running;
                self.r
                    .finish(now, id, Outcome::CheckMachine(Ok(running)))
                    .unwrap();
            }
        }
    }
}

/// A recovered core with two nodes, n1 and n2, and the volume v1 of `spec`.
fn two_nodes_and(spec: VolumeSpec<Counted>) -> Run {
    let mut run = Run::new();
    for node in ["n1", "n2"] {
        run.input(Input::NodeUpdated {
            node,
            facts: NodeFacts {
                healthy: true,
                fenced: false,
                in_use: Some(Vec::new()),
                attach_limit: None,
                driver_limits: Vec::new(),
            },
        });
    }
    run.input(Input::SetVolume { volume: "v1", spec });
    run
}

/// Places `workload`, using v1, on `node`, and lets the core settle.
fn place(run: &mut Run, workload: &'static str, node: &'static str) {
    run.input(Input::WorkloadScheduled {
        workload,
        node,
        volumes: vec!["v1"],
    });
    run.settle();
}

/// A workload and its single-node volume move between two nodes: a detach and an attach, each
/// carrying one copy of the payload, and no other copy made (each of the move's five looks at
/// the volume copied the whole spec: seven copies in all).
#[test]
fn a_move_copies_the_payload_only_into_its_two_calls() {
    let mut run = two_nodes_and(VolumeSpec::single_node(Counted));
    place(&mut run, "p1", "n1");
    assert_eq!(run.r.actual().state(&"v1", &"n1"), AttachState::Attached);

    let (before, carried, calls) = (copies(), run.carried, run.calls);
    run.input(Input::WorkloadRemoved { workload: "p1" });
    place(&mut run, "p2", "n2");
    assert_eq!(run.r.actual().state(&"v1", &"n2"), AttachState::Attached);
    assert!(
        run.r.actual().get(&"v1", &"n1").is_none(),
        "detached from n1"
    );
    assert_eq!(run.calls - calls, 2, "one detach and one attach");
    assert_eq!(
        copies() - before,
        run.carried - carried,
        "payload copies beyond those the planned calls carry"
    );
}

/// The same for a multi-node volume attached to a second node while it stays on the first (six
/// copies when each look copied the spec).
#[test]
fn a_shared_volume_copies_the_payload_only_into_its_attaches() {
    let mut run = two_nodes_and(VolumeSpec::multi_node(Counted));
    let before = copies();
    place(&mut run, "p1", "n1");
    place(&mut run, "p2", "n2");
    assert_eq!(run.r.actual().attachments(&"v1").len(), 2);
    assert_eq!(run.calls, 2, "two attaches");
    assert_eq!(copies() - before, run.carried);
}

/// An attach that must wait for room on its node plans no call, and copies nothing.
#[test]
fn an_attach_waiting_for_room_copies_no_payload() {
    let mut run = Run::new();
    run.input(Input::NodeUpdated {
        node: "n1",
        facts: NodeFacts {
            healthy: true,
            fenced: false,
            in_use: Some(Vec::new()),
            attach_limit: Some(1),
            driver_limits: Vec::new(),
        },
    });
    let before = copies();
    for (workload, volume) in [("p1", "v1"), ("p2", "v2")] {
        run.input(Input::SetVolume {
            volume,
            spec: VolumeSpec::single_node(Counted),
        });
        run.input(Input::WorkloadScheduled {
            workload,
            node: "n1",
            volumes: vec![volume],
        });
        run.settle();
    }
    assert_eq!(run.r.actual().volumes_on(&"n1").count(), 1, "room for one");
    assert_eq!(run.calls, 1, "one attach");
    assert_eq!(copies() - before, run.carried);
}
