//! One history, its choices the fuzzer's bytes, driven through cores with ids of five kinds
//! (`String`s, `Name`s interned in two orders, integers under two hashes): everything planned,
//! answered and raised must read the same in all five (`attach_detach::sim::id_kinds`).
//!
//! The world fuzzer's simulator names things with `String`s only, so the paths the core takes
//! for `Name`s alone (a pointer walk of a node's short lists, a status list edited from the
//! node's older one) are reached here: the first bytes size the world, up to one node holding
//! more names than the walk covers, and pace the core. Bytes alone rarely get a node that far
//! (each report spends a byte on each volume attached there), so one bit of the pace byte has
//! a seed taken from the bytes carry the history on once they are spent.
#![no_main]

use std::time::Duration;

use attach_detach::config::{BackendLoad, Config, OverdueCalls, RateLimit};
use attach_detach::sim::id_kinds::{FromBytes, Seeded, Shape, Then, compare_kinds, history_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [nodes, volumes, workloads, per_workload, pace, choices @ ..] = data else {
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
    // With bit 0x20, a seed from every byte carries the history on for this many choices
    // more (a few thousand steps, as the big-world test of `tests/hash_order.rs` takes).
    let more = if pace & 0x20 != 0 { CARRIED_ON } else { 0 };
    let seed = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let choices = || Then::new(FromBytes::new(choices), Seeded::new(seed), more);
    if let Err(divergence) = compare_kinds(choices, shape, &config(*pace)) {
        panic!("{divergence}");
    }
});

/// The choices a seed makes once the bytes are spent, when the pace byte asks for it.
const CARRIED_ON: u32 = 8_000;

/// The history's configuration from one byte: its low two bits cap a pass's volumes (none, or
/// 1, 2 or 4: every mark then makes a round), the next two the attaches and detaches at once
/// (none, or 1 to 3), and the next a rate of a call a second in bursts of two; bit 0x40 makes
/// calls overdue after a second instead of 15. (Bit 0x20 is the seed's, above.)
fn config(pace: u8) -> Config {
    let base = history_config();
    let volumes_per_pass = match pace & 3 {
        0 => base.volumes_per_pass,
        k => 1 << (k - 1),
    };
    let limit = match (pace >> 2) & 3 {
        0 => None,
        k => Some(usize::from(k)),
    };
    Config {
        volumes_per_pass,
        backend_load: BackendLoad {
            max_attaches: limit,
            max_detaches: limit,
            rate: (pace & 0x10 != 0).then_some(RateLimit {
                every: Duration::from_secs(1),
                burst: 2,
            }),
            // Calls overdue after a second with bit 0x40: slots freed by time must be planned
            // alike whatever the ids.
            overdue: Some(OverdueCalls {
                after: Duration::from_secs(if pace & 0x40 != 0 { 1 } else { 15 }),
                max: 2,
            }),
        },
        ..base
    }
}
