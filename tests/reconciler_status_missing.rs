//! The core when the store has no status for a node (NotFound) or the node object is gone:
//! nothing waits for a status write that can never be planned.

use std::time::Duration;

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::core::{Input, NodeFacts, OpId, Operation, Outcome, Reconciler, VolumeSpec};
use attach_detach::traits::{AttachInfo, MachineState, NodeStatus, Revision, StoreError};

type D = Ids<&'static str, &'static str, &'static str, ()>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn unmounted() -> NodeFacts<&'static str> {
    NodeFacts {
        in_use: Some(vec![]),
        ..NodeFacts::default()
    }
}

/// Polls every 100 ms from `from` for `span`, answering operations with `answer`; returns every
/// operation planned, with its time.
fn run(
    core: &mut Reconciler<D>,
    from: Duration,
    span: Duration,
    mut answer: impl FnMut(&mut Reconciler<D>, Duration, &Operation<D>),
) -> Vec<(Duration, Operation<D>)> {
    let mut planned = Vec::new();
    let mut now = from;
    while now <= from + span {
        for op in core.poll(now) {
            answer(core, now, &op);
            planned.push((now, op));
        }
        now += ms(100);
    }
    planned
}

/// Attaches succeed, status reads and writes get `status` (a read then finds what the core
/// wrote, and nothing in use), detaches succeed.
fn answer_with(
    status: impl Fn(&'static str) -> Result<(), StoreError>,
) -> impl FnMut(&mut Reconciler<D>, Duration, &Operation<D>) {
    move |core, now, op| {
        let id: OpId = op.id();
        match op {
            Operation::Attach { .. } => core
                .finish(now, id, Outcome::Attach(Ok(AttachInfo::default())))
                .unwrap(),
            Operation::Detach { .. } => core.finish(now, id, Outcome::Detach(Ok(()))).unwrap(),
            Operation::Verify { volumes, .. } => core
                .finish(
                    now,
                    id,
                    Outcome::Verify(Ok(volumes.iter().map(|(v, _)| *v).collect())),
                )
                .unwrap(),
            Operation::WriteStatus { node, expected, .. } => {
                let written = status(node)
                    .map(|()| Revision::from(expected.text().parse::<u64>().unwrap_or(0) + 1));
                core.finish(now, id, Outcome::WriteStatus(written.map(Into::into)))
                    .unwrap()
            }
            Operation::ReadStatus { node, .. } => {
                let read = status(node).map(|()| NodeStatus {
                    attached: core
                        .status()
                        .stored(node)
                        .map(|l| l.to_vec())
                        .unwrap_or_default(),
                    in_use: Some(vec![]),
                    fenced: Some(false),
                    healthy: Some(true),
                    revision: core
                        .status()
                        .revision(node)
                        .cloned()
                        .unwrap_or(Revision::from(0)),
                });
                core.finish(now, id, Outcome::ReadStatus(read)).unwrap()
            }
            Operation::ListAttachments { .. } => {
                core.finish(now, id, Outcome::List(Ok(vec![]))).unwrap()
            }
            Operation::ListStatuses { .. } => core
                .finish(now, id, Outcome::ListStatuses(Ok(vec![])))
                .unwrap(),
            // A backend that does not support the question, as by default.
            Operation::CheckMachine { .. } => core
                .finish(now, id, Outcome::CheckMachine(Ok(MachineState::Unknown)))
                .unwrap(),
        }
    }
}

/// Registers vol-1 and node-a (with `facts`), and places w1 there using vol-1.
fn place_w1(core: &mut Reconciler<D>, facts: NodeFacts<&'static str>) {
    let refused = core.handle_all([
        Input::SetVolume {
            volume: "vol-1",
            spec: VolumeSpec::single_node(()),
        },
        Input::NodeUpdated {
            node: "node-a",
            facts,
        },
        Input::WorkloadScheduled {
            workload: "w1",
            node: "node-a",
            volumes: vec!["vol-1"],
        },
    ]);
    assert!(refused.is_empty(), "{refused:?}");
}

/// vol-1 attached to node-a, whose status write then found no node in the store.
fn attached_with_status_missing() -> Reconciler<D> {
    let mut core = Reconciler::<D>::new(Config::default());
    place_w1(&mut core, unmounted());
    let ops = run(
        &mut core,
        ms(0),
        ms(1000),
        answer_with(|_| Err(StoreError::not_found())),
    );
    // The new node's revision is unknown: one read, which finds no node, and no write.
    let store_calls = ops
        .iter()
        .filter(|(_, op)| {
            matches!(
                op,
                Operation::WriteStatus { .. } | Operation::ReadStatus { .. }
            )
        })
        .count();
    assert_eq!(store_calls, 1, "{ops:?}");
    assert!(core.status().is_missing(&"node-a"));
    core
}

#[test]
fn a_node_seen_again_after_not_found_is_rewritten_even_with_workloads_on_it() {
    let mut core = attached_with_status_missing();
    // Its workloads stay, and the orchestrator never removed the node: the update alone must
    // bring the status back (upstream 50721).
    core.handle(Input::NodeUpdated {
        node: "node-a",
        facts: unmounted(),
    })
    .unwrap();
    let ops = run(&mut core, ms(2000), ms(1000), answer_with(|_| Ok(())));
    let written: Vec<_> = ops
        .iter()
        .filter_map(|(_, op)| match op {
            Operation::WriteStatus { attached, .. } => Some(attached.volumes().to_vec()),
            _ => None,
        })
        .collect();
    assert_eq!(written, vec![vec!["vol-1"]]);
}

/// No status write is awaited for a node the store lacks; the fresh read decides, and a read
/// that finds no node justifies no unforced detach: the node object may have been deleted
/// while its machine runs (a world-fuzz finding: such a detach landed under a new mount). The
/// deletion reaching the core then blocks it for a human, or forces it where deleted nodes
/// count as fenced (next test).
#[test]
fn a_detach_from_a_node_the_store_lacks_awaits_no_write_and_the_read_holds_it_back() {
    let mut core = attached_with_status_missing();
    core.handle(Input::WorkloadRemoved { workload: "w1" })
        .unwrap();
    let ops = run(
        &mut core,
        ms(2000),
        Duration::from_secs(60),
        answer_with(|_| Err(StoreError::not_found())),
    );
    assert!(
        ops.iter()
            .any(|(_, op)| matches!(op, Operation::ReadStatus { .. })),
        "{ops:?}"
    );
    assert!(
        !ops.iter()
            .any(|(_, op)| matches!(op, Operation::WriteStatus { .. } | Operation::Detach { .. })),
        "{ops:?}"
    );
    assert!(!core.actual().is_empty());
}

#[test]
fn a_forced_detach_from_a_deleted_node_does_not_wait_for_its_status() {
    let config = Config {
        deleted_node_is_fenced: true,
        ..Config::default()
    };
    let mut core = Reconciler::<D>::new(config.clone());
    place_w1(&mut core, NodeFacts::default());
    run(&mut core, ms(0), ms(1000), answer_with(|_| Ok(())));
    assert_eq!(
        core.status().stored(&"node-a").map(|list| list.len()),
        Some(1),
        "attached and reported"
    );

    // The node is deleted with its workload; unheard from, it counts as mounted, so only the
    // opt-in that a deleted node's machine is gone may detach it, and its status cannot be
    // written any more.
    assert!(
        core.handle_all([
            Input::WorkloadRemoved { workload: "w1" },
            Input::NodeRemoved { node: "node-a" },
        ])
        .is_empty()
    );
    let after = config.max_wait_for_unmount + Duration::from_secs(10);
    let ops = run(&mut core, ms(2000), after, answer_with(|_| Ok(())));
    assert!(
        ops.iter()
            .any(|(_, op)| matches!(op, Operation::Detach { force: Some(_), .. })),
        "{ops:?}"
    );
    assert!(core.actual().is_empty());
}
