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

use std::time::Duration;

use attach_detach::config::{BackendLoad, Config, RateLimit};
use attach_detach::sim::id_kinds::{Seeded, Shape, compare_kinds, history_config};

/// Compares the histories of `seeds` in `shape` under `config`; returns the attaches planned.
fn attaches_compared(seeds: std::ops::Range<u64>, shape: Shape, config: &Config) -> usize {
    let mut attaches = 0;
    for seed in seeds {
        match compare_kinds(|| Seeded::new(seed), shape, config) {
            Ok(run) => attaches += run.attaches,
            Err(divergence) => panic!("seed {seed}: {divergence}"),
        }
    }
    attaches
}

#[test]
fn the_same_history_plans_the_same_whatever_the_ids_kind_and_hash_order() {
    let planned = attaches_compared(0..60, Shape::default(), &history_config());
    // The histories do something: attaches are planned, and more than a few.
    assert!(planned > 300, "{planned} attaches planned in 60 histories");
}

#[test]
fn a_node_holding_more_names_than_the_pointer_walk_covers_plans_the_same() {
    // Two nodes and 160 volumes, workloads of up to three: the node's lists grow past the 64
    // names a walk by pointer covers, and searches of them go by order.
    let shape = Shape {
        nodes: 2,
        volumes: 160,
        workloads: 200,
        volumes_per_workload: 3,
        steps: 3_000,
    };
    let attaches = attaches_compared(0..4, shape, &history_config());
    assert!(attaches > 200, "{attaches} attaches planned in 4 histories");
}

#[test]
fn paced_passes_and_a_loaded_backend_plan_the_same() {
    // One volume a pass (every mark makes a round) and one attach and one detach at a time,
    // a call a second: the queues and rounds order what is planned, not the ids.
    let config = Config {
        volumes_per_pass: 1,
        backend_load: BackendLoad {
            max_attaches: Some(1),
            max_detaches: Some(1),
            rate: Some(RateLimit {
                every: Duration::from_secs(1),
                burst: 2,
            }),
            ..BackendLoad::UNBOUNDED
        },
        ..history_config()
    };
    let planned = attaches_compared(0..30, Shape::default(), &config);
    assert!(planned > 100, "{planned} attaches planned in 30 histories");
}
