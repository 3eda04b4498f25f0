//! The bundled incident library: every seed incident and upstream test case as a scenario file
//! under `examples/scenarios/`, embedded so the simulator runs them with no files at hand.

/// (name, scenario text) of every bundled scenario, in name order.
pub const LIBRARY: &[(&str, &str)] = &[
    ("attach-then-detach", include_str!("../../examples/scenarios/attach-then-detach.scn")),
    ("attach-timeout-retries", include_str!("../../examples/scenarios/attach-timeout-retries.scn")),
    ("detach-waits-for-status-ack", include_str!("../../examples/scenarios/detach-waits-for-status-ack.scn")),
    ("force-detach-on-timeout-opt-in", include_str!("../../examples/scenarios/force-detach-on-timeout-opt-in.scn")),
    ("no-detach-without-taint", include_str!("../../examples/scenarios/no-detach-without-taint.scn")),
    ("out-of-service-detaches-at-once", include_str!("../../examples/scenarios/out-of-service-detaches-at-once.scn")),
    ("restart-between-status-and-detach", include_str!("../../examples/scenarios/restart-between-status-and-detach.scn")),
    ("restart-during-attach", include_str!("../../examples/scenarios/restart-during-attach.scn")),
    ("rwo-two-nodes-multi-attach", include_str!("../../examples/scenarios/rwo-two-nodes-multi-attach.scn")),
    ("rwx-two-nodes", include_str!("../../examples/scenarios/rwx-two-nodes.scn")),
    ("seed-000-failed-detach-pod-returns", include_str!("../../examples/scenarios/seed-000-failed-detach-pod-returns.scn")),
    ("seed-002-stale-status-cache", include_str!("../../examples/scenarios/seed-002-stale-status-cache.scn")),
    ("seed-004-node-dies-fence-first", include_str!("../../examples/scenarios/seed-004-node-dies-fence-first.scn")),
    ("status-failure-isolated-per-node", include_str!("../../examples/scenarios/status-failure-isolated-per-node.scn")),
    ("status-write-fails-before-detach", include_str!("../../examples/scenarios/status-write-fails-before-detach.scn")),
    ("uncertain-attach-holds-volume", include_str!("../../examples/scenarios/uncertain-attach-holds-volume.scn")),
];
