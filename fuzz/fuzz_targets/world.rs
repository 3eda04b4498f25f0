//! Random clusters and fault schedules through the simulator (the real controller and core),
//! checking invariants I1-I4 on every step and I3 after the faults stop and the world settles.
//! A violation panics with the scenario in the scenario-file format, ready to save and replay
//! with `cargo run --example simulate --features sim -- FILE --trace`.
#![no_main]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use arbitrary::Arbitrary;
use attach_detach::config::{BackendLoad, OverdueCalls, RateLimit};
use attach_detach::core::Access;
use attach_detach::sim::library::LIBRARY;
use attach_detach::sim::run;
use attach_detach::sim::scenario::{
    Action, AttachLimit, Scenario, Settings, Step, UpstreamBug, parse,
};
use libfuzzer_sys::fuzz_target;

/// A few bytes, a meaningful history: small name spaces so events collide on the same pods,
/// nodes and volumes, and time in 100 ms steps.
#[derive(Arbitrary, Debug)]
struct Input {
    /// Start from a bundled incident (its expectations dropped, its invariants kept) and mix
    /// the random events into it: deep states in a few bytes.
    base: Option<u8>,
    nodes: u8,
    /// One bit per volume: multi-node when set.
    multi: u8,
    volumes: u8,
    force_detach_on_timeout: bool,
    cache_lag_100ms: u8,
    attach_latency_100ms: u8,
    status_latency_10ms: u8,
    seed: u8,
    /// Backend load limits, sometimes: attaches, detaches (1 to 3 each), and a token bucket
    /// (a token every 100 ms times the third, bursts of 1 to 3; none when it is 0); calls are
    /// overdue after 1 to 3 s, 1 to 3 per class at most. The sim checks I6 (no class over its
    /// limit, plus its overdue calls) on every call, I7 (no call past its overdue time holds a
    /// slot others wait for) on every step, and I3 that everything settles.
    limits: Option<(u8, u8, u8, u8)>,
    /// Fencing without a human. Never together with `force_detach_on_timeout`: that lets I2
    /// excuse a detach from a crashed node, and with it a wrongly powered-off one.
    machine_fencing: bool,
    events: Vec<(u8, Event)>,
    /// One bit per node: it holds at most `limit` volumes (issue 13's attach limits).
    limited: u8,
    /// The limit, 1 to 3, and whether the node's facts report it (bit 2).
    limit: u8,
    /// One bit per volume: claimed, not attached (no backend call).
    claim_only: u8,
}

#[derive(Arbitrary, Debug)]
enum Event {
    Schedule {
        pod: u8,
        node: u8,
        volumes: u8,
    },
    Delete {
        pod: u8,
    },
    ForceDelete {
        pod: u8,
    },
    Crash {
        node: u8,
    },
    Recover {
        node: u8,
    },
    Fence {
        node: u8,
    },
    Unfence {
        node: u8,
    },
    FailAttach {
        volume: u8,
        node: u8,
        times: u8,
        uncertain: bool,
    },
    FailDetach {
        volume: u8,
        node: u8,
        times: u8,
        uncertain: bool,
    },
    FailStatus {
        node: u8,
        times: u8,
    },
    Restart,
    /// The node object is deleted (its machine runs on).
    DeleteNode {
        node: u8,
    },
    /// The node object is created again under the same name.
    CreateNode {
        node: u8,
    },
    /// The node's agent loses the API.
    StopReporting {
        node: u8,
    },
    /// The node's agent reaches the API again.
    ResumeReporting {
        node: u8,
    },
    /// The unmount of a volume hangs on a node.
    HangUnmount {
        volume: u8,
        node: u8,
    },
    /// A hung unmount ends.
    ReleaseUnmount {
        volume: u8,
        node: u8,
    },
    /// The backend cannot reach a node.
    Partition {
        node: u8,
    },
    /// The partition heals.
    Heal {
        node: u8,
    },
    /// The node's machine is powered off at the provider (no taint).
    PowerOff {
        node: u8,
    },
    /// The powered-off machine boots again.
    PowerOn {
        node: u8,
    },
}

fn planted() -> Option<UpstreamBug> {
    // PLANT_BUG=c1|c2|c3|c5|c6|l1 switches an upstream bug back in, to measure how fast the
    // fuzzer finds it.
    std::env::var("PLANT_BUG")
        .ok()
        .and_then(|b| match b.as_str() {
            "c1" => Some(UpstreamBug::C1),
            "c2" => Some(UpstreamBug::C2),
            "c3" => Some(UpstreamBug::C3),
            "c5" => Some(UpstreamBug::C5),
            "c6" => Some(UpstreamBug::C6),
            "l1" => Some(UpstreamBug::L1),
            _ => None,
        })
}

/// Failures injected per call target (the attach or detach of a pair, a node's status), at most.
const MAX_FAILURES: u32 = 6;

/// How long the world settles after the last event before the final invariants are checked:
/// longer than the bounded failures can take even when each comes at the longest backoff
/// (refused detaches count as failures and may already have pushed it to 2 min 2 s), so a
/// leak reported after it is no timer that was merely still running.
const SETTLE: Duration = Duration::from_secs(15 * 60);

fn build(input: &Input) -> Scenario {
    let base = input.base.and_then(|b| {
        let (_, text) = LIBRARY[usize::from(b) % LIBRARY.len()];
        let mut s = parse(text).ok()?;
        s.steps
            .retain(|step| !matches!(step.action, Action::Expect(_)));
        Some(s)
    });
    let mut attach_limits = BTreeMap::new();
    let mut claim_only = BTreeSet::new();
    let (node_names, volume_list, mut settings, mut steps) = match base {
        Some(s) => {
            attach_limits = s.attach_limits;
            claim_only = s.claim_only;
            (s.nodes, s.volumes, s.settings, s.steps)
        }
        None => {
            let nodes = (0..1 + input.nodes % 3).map(|n| format!("n{n}")).collect();
            let volumes = (0..1 + input.volumes % 3)
                .map(|v| {
                    let access = if input.multi & (1 << v) != 0 {
                        Access::MultiNode
                    } else {
                        Access::SingleNode
                    };
                    (format!("v{v}"), access)
                })
                .collect();
            let nodes: Vec<String> = nodes;
            for (i, n) in nodes.iter().enumerate() {
                if input.limited & (1 << i) != 0 {
                    let limit = AttachLimit {
                        limit: 1 + u32::from(input.limit % 3),
                        reported: input.limit & 4 == 0,
                    };
                    attach_limits.insert(n.clone(), limit);
                }
            }
            let volumes: Vec<(String, Access)> = volumes;
            for (i, (v, _)) in volumes.iter().enumerate() {
                if input.claim_only & (1 << i) != 0 {
                    claim_only.insert(v.clone());
                }
            }
            (nodes, volumes, Settings::default(), Vec::new())
        }
    };
    let node_count = node_names.len() as u8;
    let volume_count = volume_list.len() as u8;
    let node = |n: u8| node_names[usize::from(n % node_count)].clone();
    let volume = |v: u8| volume_list[usize::from(v % volume_count)].0.clone();
    settings.force_detach_on_timeout = input.force_detach_on_timeout;
    settings.machine_fencing = input.machine_fencing && !input.force_detach_on_timeout;
    // Short waits keep a run short; every timer still fires within the settling time.
    settings.max_wait_for_unmount = Duration::from_secs(30);
    settings.sync_period = Duration::from_secs(20);
    settings.cache_lag = Duration::from_millis(100 * u64::from(input.cache_lag_100ms % 20));
    settings.attach_latency =
        Duration::from_millis(100 * u64::from(input.attach_latency_100ms % 30));
    settings.status_latency = Duration::from_millis(10 * u64::from(input.status_latency_10ms % 50));
    settings.seed = u64::from(input.seed);
    // Half the runs spread the periodic verify over the sync period in slices of 1 to 4
    // attachments (issue 16), so a round meets nodes that come and go under it.
    settings.verify_batch = (input.seed & 0x80 != 0).then(|| 1 + usize::from(input.seed & 3));
    // A quarter of the runs look at one or two marked volumes a pass, so that a round of
    // marks spans passes that inputs, answers, reads and restarts come between.
    settings.volumes_per_pass =
        (input.seed & 0x60 == 0x60).then(|| 1 + usize::from((input.seed >> 2) & 1));
    if let Some((attaches, detaches, every, burst)) = input.limits {
        settings.backend_load = BackendLoad {
            max_attaches: Some(1 + usize::from(attaches % 3)),
            max_detaches: Some(1 + usize::from(detaches % 3)),
            rate: (every % 20 != 0).then(|| RateLimit {
                every: Duration::from_millis(100 * u64::from(every % 20)),
                burst: 1 + u32::from(burst % 3),
            }),
            // Calls overdue after 1 to 3 s, 1 to 3 of them per class (the high bits of the
            // limits' bytes): hung and slow calls give their slots back, and the bound is
            // reached. The sim checks I6 and I7 against them.
            overdue: Some(OverdueCalls {
                after: Duration::from_secs(1 + u64::from(attaches / 3 % 3)),
                max: 1 + usize::from(detaches / 3 % 3),
            }),
        };
    }
    if let Some(bug) = planted() {
        settings.upstream_bugs.insert(bug);
        settings.status_cache_lag = Duration::from_secs(5);
    }
    let mut at = Duration::ZERO;
    for (dt, event) in input.events.iter().take(40) {
        at += Duration::from_millis(100 * u64::from(*dt));
        let action = match event {
            Event::Schedule {
                pod,
                node: n,
                volumes,
            } => {
                let vs: Vec<String> = (0..volume_count)
                    // A bundled scenario may declare more volumes than the byte has bits
                    // (the 60-pod burst): only the first eight can be drawn.
                    .filter(|v| {
                        1u8.checked_shl(u32::from(*v))
                            .is_some_and(|bit| volumes & bit != 0)
                    })
                    .map(volume)
                    .collect();
                if vs.is_empty() {
                    continue;
                }
                Action::Schedule {
                    pod: format!("p{}", pod % 4),
                    node: node(*n),
                    volumes: vs,
                }
            }
            Event::Delete { pod } => Action::Delete {
                pod: format!("p{}", pod % 4),
            },
            Event::ForceDelete { pod } => Action::ForceDelete {
                pod: format!("p{}", pod % 4),
            },
            Event::Crash { node: n } => Action::Crash(node(*n)),
            Event::Recover { node: n } => Action::Recover(node(*n)),
            Event::Fence { node: n } => Action::Fence(node(*n)),
            Event::Unfence { node: n } => Action::Unfence(node(*n)),
            Event::FailAttach {
                volume: v,
                node: n,
                times,
                uncertain,
            } => Action::FailAttach {
                volume: volume(*v),
                node: node(*n),
                times: u32::from(1 + times % 3),
                uncertain: *uncertain,
            },
            Event::FailDetach {
                volume: v,
                node: n,
                times,
                uncertain,
            } => Action::FailDetach {
                volume: volume(*v),
                node: node(*n),
                times: u32::from(1 + times % 3),
                uncertain: *uncertain,
            },
            Event::FailStatus { node: n, times } => Action::FailStatus {
                node: node(*n),
                times: u32::from(1 + times % 3),
            },
            Event::Restart => Action::RestartController,
            Event::DeleteNode { node: n } => Action::DeleteNode(node(*n)),
            Event::CreateNode { node: n } => Action::CreateNode(node(*n)),
            Event::StopReporting { node: n } => Action::StopReporting(node(*n)),
            Event::ResumeReporting { node: n } => Action::ResumeReporting(node(*n)),
            Event::HangUnmount { volume: v, node: n } => Action::HangUnmount {
                volume: volume(*v),
                node: node(*n),
            },
            Event::ReleaseUnmount { volume: v, node: n } => Action::ReleaseUnmount {
                volume: volume(*v),
                node: node(*n),
            },
            Event::Partition { node: n } => Action::PartitionBackend(node(*n)),
            Event::Heal { node: n } => Action::HealBackend(node(*n)),
            Event::PowerOff { node: n } => Action::PowerOff(node(*n)),
            Event::PowerOn { node: n } => Action::PowerOn(node(*n)),
        };
        steps.push(Step {
            at,
            line: 0,
            action,
        });
    }
    // Interleave with the base incident's steps by time, keeping each list's order.
    steps.sort_by_key(|s| s.at);
    // Injected failures are bounded per call target, so that after the last event every
    // backoff runs out well within the settling time (six failures in a row back off 31.5 s in
    // all): a fault still queued then is no wait without an end, and must not be reported as
    // one. A base incident's counts are cut to three a statement, like the random ones.
    let mut budget: HashMap<String, u32> = HashMap::new();
    steps.retain_mut(|step| {
        let (key, times) = match &mut step.action {
            Action::FailAttach {
                volume,
                node,
                times,
                ..
            } => (format!("attach {volume} {node}"), times),
            Action::FailDetach {
                volume,
                node,
                times,
                ..
            } => (format!("detach {volume} {node}"), times),
            Action::FailStatus { node, times } => (format!("status {node}"), times),
            _ => return true,
        };
        let left = budget.entry(key).or_insert(MAX_FAILURES);
        *times = (*times).min(3).min(*left);
        *left -= *times;
        *times > 0
    });
    let last = steps.last().map_or(Duration::ZERO, |s| s.at);
    // What the new statements break is mended when the events stop (objects created again,
    // agents reaching the API, partitions healed, hung unmounts released), so that the final
    // check holds every node to converging, not only those the events left alone. (Crashes
    // stay: a crashed node rightly keeps its volumes. So do powered-off machines: with
    // machine fencing on, their volumes must move; without it, they rightly stay.)
    let mends = steps.iter().any(|s| {
        matches!(
            s.action,
            Action::DeleteNode(_)
                | Action::StopReporting(_)
                | Action::HangUnmount { .. }
                | Action::PartitionBackend(_)
        )
    });
    if mends {
        for n in &node_names {
            for action in [
                Action::CreateNode(n.clone()),
                Action::ResumeReporting(n.clone()),
                Action::HealBackend(n.clone()),
            ] {
                steps.push(Step {
                    at: last,
                    line: 0,
                    action,
                });
            }
            for (v, _) in &volume_list {
                let action = Action::ReleaseUnmount {
                    volume: v.clone(),
                    node: n.clone(),
                };
                steps.push(Step {
                    at: last,
                    line: 0,
                    action,
                });
            }
        }
    }
    for (i, step) in steps.iter_mut().enumerate() {
        step.line = i + 1;
    }
    Scenario {
        settings,
        nodes: node_names,
        volumes: volume_list,
        attach_limits,
        claim_only,
        steps,
        // Faults stop with the last event; the world then settles.
        run: Some(last + SETTLE),
    }
}

fuzz_target!(|input: Input| {
    let scenario = build(&input);
    let report = run(&scenario);
    if !report.passed() {
        panic!(
            "invariant violated: {:#?}\n--- scenario (save as a .scn file and replay):\n{}",
            report.violations,
            scenario.to_text()
        );
    }
});
