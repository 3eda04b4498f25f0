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
