//! The incident library through the simulator: every scenario passes, replays byte for byte,
//! and each correction's scenario fails with the upstream bug switched back in.
#![cfg(feature = "sim")]

use attach_detach::sim::library::LIBRARY;
use attach_detach::sim::scenario::{UpstreamBug, parse};
use attach_detach::sim::{Report, run};

fn scenario_text(name: &str) -> &'static str {
    LIBRARY
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no bundled scenario {name}"))
        .1
}

fn run_named(name: &str, bug: Option<UpstreamBug>) -> Report {
    let mut scenario =
        parse(scenario_text(name)).unwrap_or_else(|e| panic!("{}", e.with_file(name)));
    if let Some(bug) = bug {
        scenario.settings.upstream_bugs.insert(bug);
    }
    run(&scenario)
}

#[test]
fn every_bundled_scenario_passes() {
    let mut failures = Vec::new();
    for (name, _) in LIBRARY {
        let report = run_named(name, None);
        if !report.passed() {
            failures.push(format!(
                "{name}: {:#?}\n{}",
                report.violations,
                report.trace.join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(LIBRARY.len() >= 16);
}

#[test]
fn a_run_replays_byte_for_byte() {
    for name in [
        "seed-000-failed-detach-pod-returns",
        "restart-between-status-and-detach",
    ] {
        let a = run_named(name, None);
        let b = run_named(name, None);
        assert_eq!(a, b, "{name} differs between two runs");
        assert!(!a.trace.is_empty());
    }
}

/// Each correction's scenario, with the upstream behaviour switched in, must fail: the scenario
/// would catch the bug if it came back.
#[test]
fn each_correction_scenario_fails_with_its_upstream_bug() {
    let cases = [
        ("seed-000-failed-detach-pod-returns", UpstreamBug::C1),
        ("uncertain-attach-holds-volume", UpstreamBug::C2),
        ("seed-004-node-dies-fence-first", UpstreamBug::C3),
        ("detach-waits-for-status-ack", UpstreamBug::C5),
        ("seed-002-stale-status-cache", UpstreamBug::C6),
    ];
    for (name, bug) in cases {
        let fixed = run_named(name, None);
        assert!(fixed.passed(), "{name} must pass: {:?}", fixed.violations);
        let buggy = run_named(name, Some(bug));
        assert!(
            !buggy.passed(),
            "{name} with upstream bug {bug} must fail, but passed:\n{}",
            buggy.trace.join("\n")
        );
    }
}

#[test]
fn a_seed_varies_latencies_reproducibly() {
    let text = scenario_text("seed-000-failed-detach-pod-returns");
    let seeded = |seed: u64| {
        let mut s = parse(text).unwrap();
        s.settings.seed = seed;
        run(&s)
    };
    let (a, b, c) = (seeded(7), seeded(7), seeded(8));
    assert_eq!(a, b, "same seed, same run");
    assert!(
        a.passed() && c.passed(),
        "{:?} {:?}",
        a.violations,
        c.violations
    );
    assert_ne!(a.trace, c.trace, "another seed, other latencies");
    assert_ne!(a.trace, seeded(0).trace, "seed 0 is the exact timeline");
}

/// The library's invariants hold whatever the latencies: each scenario under a few seeds, its
/// timed expectations dropped (they assume the exact timeline), invariants and the final I3
/// check kept.
#[test]
fn invariants_hold_under_jittered_latencies() {
    use attach_detach::sim::scenario::Action;
    let mut failures = Vec::new();
    for (name, text) in LIBRARY {
        for seed in 1..=4 {
            let mut s = parse(text).unwrap();
            s.steps
                .retain(|step| !matches!(step.action, Action::Expect(_)));
            s.settings.seed = seed;
            let report = run(&s);
            if !report.passed() {
                failures.push(format!("{name} seed {seed}: {:?}", report.violations));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A scenario file added to `examples/scenarios/` must be embedded too, or the main job and
/// these tests silently skip it.
#[test]
fn the_library_embeds_every_scenario_file() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/scenarios");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|f| f.strip_suffix(".scn").map(str::to_owned))
        .collect();
    files.sort();
    let embedded: Vec<String> = LIBRARY.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(files, embedded, "regenerate src/sim/library.rs");
}

/// A scenario built in code with a duration the parser would refuse is not simulated: the
/// report says why, and nothing panics.
#[test]
fn a_built_scenario_beyond_the_bounds_fails_without_running() {
    use attach_detach::sim::scenario::MAX_DURATION;
    let mut s = parse(scenario_text("attach-then-detach")).unwrap();
    s.settings.attach_latency = MAX_DURATION + std::time::Duration::from_millis(1);
    let report = run(&s);
    assert!(!report.passed());
    assert!(
        report.violations[0]
            .message
            .starts_with("not simulated: `set attach-latency` is "),
        "{:?}",
        report.violations
    );
    assert_eq!(report.attach_calls, 0);
}
