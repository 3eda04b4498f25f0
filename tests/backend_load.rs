//! Fair and bounded backend load through the simulator: a 1,000-pod burst while volumes move.
//! With separate limits for attaches and detaches, the detaches that free the moving volumes
//! finish early in the burst; with one shared queue and limit (upstream-bug `l2`, a single
//! worker pool), the same detaches wait behind the whole burst, and the test's assertion fails.
#![cfg(all(feature = "sim", feature = "upstream-bugs"))]

use std::fmt::Write;
use std::time::Duration;

use attach_detach::sim::scenario::{UpstreamBug, parse};
use attach_detach::sim::timeline::Happening;
use attach_detach::sim::{Report, run};

const MOVING: usize = 40;
const BURST: usize = 1_000;
const BURST_AT: Duration = Duration::from_secs(30);

/// 40 volumes run on m1; at 30 s their pods move to m2 (each volume must be detached from m1)
/// while 1,000 new pods, one volume each, start on 20 nodes. Every backend call takes 2 s; at
/// most 10 attaches and 10 detaches run at once (no call hangs: one is overdue only after 5 s).
fn burst_scenario() -> String {
    let mut s = String::from(
        "set attach-latency 2s\nset detach-latency 2s\nset max-attaches 10\nset max-detaches 10\n\
         set overdue-after 5s\n",
    );
    s.push_str("node m1\nnode m2\n");
    for n in 0..20 {
        writeln!(s, "node n{n:02}").unwrap();
    }
    for i in 0..MOVING {
        writeln!(s, "volume v{i:02} single-node").unwrap();
    }
    for j in 0..BURST {
        writeln!(s, "volume w{j:04} single-node").unwrap();
    }
    for i in 0..MOVING {
        writeln!(s, "at 0s pod a{i:02} on m1 uses v{i:02}").unwrap();
    }
    for i in 0..MOVING {
        writeln!(s, "at 30s delete pod a{i:02}").unwrap();
        writeln!(s, "at 30s pod b{i:02} on m2 uses v{i:02}").unwrap();
    }
    for j in 0..BURST {
        writeln!(s, "at 30s pod p{j:04} on n{:02} uses w{j:04}", j % 20).unwrap();
    }
    s.push_str("run 20m\n");
    s
}

/// When each moving volume's detach from m1 finished, and when the burst's last attach did.
fn detaches_and_burst_end(report: &Report) -> (Vec<Duration>, Duration) {
    let mut detached = Vec::new();
    let mut burst_end = Duration::ZERO;
    for record in &report.timeline {
        if let Happening::Attachment {
            volume,
            node,
            state,
        } = &record.what
        {
            if volume.starts_with('v') && node == "m1" && state.is_none() {
                detached.push(record.at);
            }
            if volume.starts_with('w') && state.is_some() {
                burst_end = burst_end.max(record.at);
            }
        }
    }
    (detached, burst_end)
}

/// The detaches progress during the burst: the first within 10 s of its start, and all of them
/// within its first quarter.
fn detaches_progress_during_the_burst(report: &Report) -> Result<(), String> {
    let (detached, burst_end) = detaches_and_burst_end(report);
    println!(
        "detaches finished {:?} .. {:?}; burst {BURST_AT:?} .. {burst_end:?}",
        detached.iter().min(),
        detached.iter().max()
    );
    if detached.len() != MOVING {
        return Err(format!("{} of {MOVING} detaches finished", detached.len()));
    }
    let first = detached.iter().min().unwrap();
    let last = detached.iter().max().unwrap();
    let quarter = BURST_AT + (burst_end - BURST_AT) / 4;
    if *first > BURST_AT + Duration::from_secs(10) || *last > quarter {
        return Err(format!(
            "detaches finished between {first:?} and {last:?}; the burst ran from {BURST_AT:?} \
             to {burst_end:?}, its first quarter ends at {quarter:?}"
        ));
    }
    Ok(())
}

#[test]
fn detaches_progress_throughout_a_thousand_pod_burst() {
    let scenario = parse(&burst_scenario()).unwrap();
    let report = run(&scenario);
    assert!(report.passed(), "{:?}", report.violations);
    let (_, burst_end) = detaches_and_burst_end(&report);
    // The limit is what paces the burst: 1,000 attaches, 10 at a time, 2 s each.
    assert!(
        burst_end >= BURST_AT + Duration::from_secs(195),
        "{burst_end:?}"
    );
    assert_eq!(report.attach_calls, (MOVING * 2 + BURST) as u64);
    detaches_progress_during_the_burst(&report).unwrap();
}

#[test]
fn with_one_shared_queue_the_detaches_wait_for_the_burst() {
    let mut scenario = parse(&burst_scenario()).unwrap();
    scenario.settings.upstream_bugs.insert(UpstreamBug::L2);
    let report = run(&scenario);
    // Everything still settles (the queue is fair, only not to the detaches)...
    assert!(report.passed(), "{:?}", report.violations);
    // ...but the detaches come after the burst: the assertion above bites.
    let error = detaches_progress_during_the_burst(&report).unwrap_err();
    assert!(error.contains("detaches finished between"), "{error}");
}

/// 200 volumes move from m1 to m2 at once under small limits, while every call takes 1.5 s,
/// longer than the simulator's overdue time (1 s): slow calls give their slots back and up to
/// 16 more per class run. A node holding ten more volumes crashes during the moves, and its
/// pods are moved too; its volumes stay until it is fenced. Every invariant holds throughout,
/// I6 and I7 included, and everything moves.
fn moves_with_a_crash() -> String {
    let mut s = String::from(
        "set attach-latency 1500ms\nset detach-latency 1500ms\nset max-attaches 4\n\
         set max-detaches 4\nset seed 7\nnode m1\nnode m2\nnode n1\nnode c1\n",
    );
    for i in 0..200 {
        writeln!(s, "volume v{i:03} single-node").unwrap();
    }
    for i in 0..10 {
        writeln!(s, "volume u{i} single-node").unwrap();
    }
    for i in 0..200 {
        writeln!(s, "at 0s pod a{i:03} on m1 uses v{i:03}").unwrap();
    }
    for i in 0..10 {
        writeln!(s, "at 0s pod c{i} on c1 uses u{i}").unwrap();
    }
    for i in 0..200 {
        writeln!(s, "at 5m delete pod a{i:03}").unwrap();
        writeln!(s, "at 5m pod b{i:03} on m2 uses v{i:03}").unwrap();
    }
    s.push_str("at 302s node c1 crash\n");
    for i in 0..10 {
        writeln!(s, "at 310s force-delete pod c{i}").unwrap();
        writeln!(s, "at 310s pod d{i} on n1 uses u{i}").unwrap();
    }
    s.push_str("at 8m node c1 fence\nrun 15m\n");
    s
}

#[test]
fn two_hundred_moves_with_a_crash_under_small_limits() {
    let report = run(&parse(&moves_with_a_crash()).unwrap());
    assert!(report.passed(), "{:#?}", report.violations);
    // Each volume attached twice (m1, m2) and ten attached twice (c1, n1); each detached once.
    assert_eq!(report.attach_calls, 420);
    assert_eq!(report.detach_calls, 210);
    let end = |prefix: char, node: &str| {
        report
            .timeline
            .iter()
            .filter(|r| matches!(&r.what, Happening::Pod { pod, node: n, phase: attach_detach::sim::timeline::PodPhase::Running } if pod.starts_with(prefix) && n == node))
            .map(|r| r.at)
            .max()
    };
    // The 200 moves, 4 detaches and 4 attaches at a time plus the overdue ones, at 1.5 s a
    // call: done within five minutes of starting.
    let moved = end('b', "m2").expect("the moved pods run");
    assert!(moved < Duration::from_secs(10 * 60), "{moved:?}");
    let fenced = end('d', "n1").expect("the crashed node's pods run elsewhere");
    assert!(fenced >= Duration::from_secs(8 * 60), "{fenced:?}");
}
