//! The core when the store has no status for a node (NotFound) or the node object is gone:
//! nothing waits for a status write that can never be planned.

use std::time::Duration;

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::core::{Input, NodeFacts, Operation, Outcome, Reconciler, VolumeSpec};
use attach_detach::testkit::{Harness, echo_store};
use attach_detach::traits::StoreError;

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

/// Polls every 100 ms from `from` for `span`, answering operations by `rule`; returns every
/// operation planned, with its time.
fn run<R>(
    h: &mut Harness<D>,
    from: Duration,
    span: Duration,
    rule: R,
) -> Vec<(Duration, Operation<D>)>
where
    R: FnMut(Duration, &Reconciler<D>, &Operation<D>) -> Option<Outcome<D>>,
{
    h.now = from;
    h.run_for(span, ms(100), rule)
}

/// Registers vol-1 and node-a (with `facts`), and places w1 there using vol-1.
fn place_w1(h: &mut Harness<D>, facts: NodeFacts<&'static str>) {
    let refused = h.core.handle_all([
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
fn attached_with_status_missing() -> Harness<D> {
    let mut h = Harness::<D>::new(Config::default());
    place_w1(&mut h, unmounted());
    let ops = run(
        &mut h,
        ms(0),
        ms(1000),
        echo_store(|_| Err(StoreError::not_found())),
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
    assert!(h.core.status().is_missing(&"node-a"));
    h
}

#[test]
fn a_node_seen_again_after_not_found_is_rewritten_even_with_workloads_on_it() {
    let mut h = attached_with_status_missing();
    // Its workloads stay, and the orchestrator never removed the node: the update alone must
    // bring the status back (upstream 50721).
    h.handle(Input::NodeUpdated {
        node: "node-a",
        facts: unmounted(),
    })
    .unwrap();
    let ops = run(&mut h, ms(2000), ms(1000), echo_store(|_| Ok(())));
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
    let mut h = attached_with_status_missing();
    h.handle(Input::WorkloadRemoved { workload: "w1" }).unwrap();
    let ops = run(
        &mut h,
        ms(2000),
        Duration::from_secs(60),
        echo_store(|_| Err(StoreError::not_found())),
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
    assert!(!h.core.actual().is_empty());
}

#[test]
fn a_forced_detach_from_a_deleted_node_does_not_wait_for_its_status() {
    let config = Config {
        deleted_node_is_fenced: true,
        ..Config::default()
    };
    let mut h = Harness::<D>::new(config.clone());
    place_w1(&mut h, NodeFacts::default());
    run(&mut h, ms(0), ms(1000), echo_store(|_| Ok(())));
    assert_eq!(
        h.core.status().stored(&"node-a").map(|list| list.len()),
        Some(1),
        "attached and reported"
    );

    // The node is deleted with its workload; unheard from, it counts as mounted, so only the
    // opt-in that a deleted node's machine is gone may detach it, and its status cannot be
    // written any more.
    assert!(
        h.core
            .handle_all([
                Input::WorkloadRemoved { workload: "w1" },
                Input::NodeRemoved { node: "node-a" },
            ])
            .is_empty()
    );
    let after = config.max_wait_for_unmount + Duration::from_secs(10);
    let ops = run(&mut h, ms(2000), after, echo_store(|_| Ok(())));
    assert!(
        ops.iter()
            .any(|(_, op)| matches!(op, Operation::Detach { force: Some(_), .. })),
        "{ops:?}"
    );
    assert!(h.core.actual().is_empty());
}
