//! One history, its choices the fuzzer's bytes, driven through cores with ids of five kinds
//! (`String`s, `Name`s interned in two orders, integers under two hashes): everything planned,
//! answered and raised must read the same in all five (`attach_detach::sim::id_kinds`).
//!
//! The world fuzzer's simulator names things with `String`s only, so the paths the core takes
//! for `Name`s alone (a pointer walk of a node's short lists, a status list edited from the
//! node's older one) are reached here: the first bytes size the world, up to one node holding
//! more names than the walk covers.
#![no_main]

use attach_detach::sim::id_kinds::{FromBytes, Shape, compare_kinds};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [nodes, volumes, workloads, per_workload, choices @ ..] = data else {
        return;
    };
    let shape = Shape {
        nodes: 1 + u32::from(nodes % 6),
        volumes: 1 + u32::from(*volumes),
        workloads: 1 + u32::from(*workloads),
        volumes_per_workload: 1 + u32::from(per_workload % 4),
        // The bytes end a history first: a step takes one byte or more (a node's report, one
        // for each volume attached there).
        steps: usize::MAX,
    };
    if let Err(divergence) = compare_kinds(|| FromBytes::new(choices), shape) {
        panic!("{divergence}");
    }
});
