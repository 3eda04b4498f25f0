//! The core's decisions, and the order of what it plans and says, do not depend on the kind of
//! its ids nor on how they hash.
//!
//! The core keeps ids in hash tables. If it ever planned operations or raised events in a
//! table's iteration order, two runs of one history could differ: with [`Name`] ids (hashed by
//! address) from run to run, and with any id type whenever its hash changes. A failure would then
//! not replay. And some of its paths are taken for `Name`s alone (a pointer walk of a node's
//! list, a status list edited from the node's older one). So the same seeded histories are
//! driven with ids of five kinds ([`attach_detach::sim::id_kinds`]); every operation planned
//! and every event raised, as text, must be the same in all five. The `ids` fuzz target drives
//! the same comparison from the fuzzer's bytes.
//!
//! [`Name`]: attach_detach::Name

use attach_detach::sim::id_kinds::{Seeded, Shape, compare_kinds};

#[test]
fn the_same_history_plans_the_same_whatever_the_ids_kind_and_hash_order() {
    let mut planned = 0;
    for seed in 0..60u64 {
        match compare_kinds(|| Seeded::new(seed), Shape::default()) {
            Ok(run) => planned += run.attaches,
            Err(divergence) => panic!("seed {seed}: {divergence}"),
        }
    }
    // The histories do something: attaches are planned, and more than a few.
    assert!(planned > 300, "{planned} attaches planned in 60 histories");
}

#[test]
fn a_node_holding_more_names_than_the_pointer_walk_covers_plans_the_same() {
    // Two nodes and 160 volumes, workloads of up to three: the node's lists grow past the
    // 64 names a walk by pointer covers, and searches of them go by order.
    let shape = Shape {
        nodes: 2,
        volumes: 160,
        workloads: 200,
        volumes_per_workload: 3,
        steps: 3_000,
    };
    let mut attaches = 0;
    for seed in 0..4u64 {
        match compare_kinds(|| Seeded::new(seed), shape) {
            Ok(run) => attaches += run.attaches,
            Err(divergence) => panic!("seed {seed}: {divergence}"),
        }
    }
    assert!(attaches > 200, "{attaches} attaches planned in 4 histories");
}
