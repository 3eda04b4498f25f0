//! Tests of the runner: a panic anywhere fails the run, the store lists walked for what
//! changed, and the agents' grid.

use super::agents::{list_changes, set_changes};
use super::clock::{is_tick, next_tick};
use super::*;
use crate::sim::scenario::{Action, MAX_DURATION, parse};

const SCENARIO: &str = "node a\nvolume v single-node\n\
    at 0s pod p on a uses v\nat 5s expect pod p running\nrun 10s\n";

/// Wherever a panic happens, the run fails with a violation carrying its message, and the
/// simulator prints it: the parts are made to panic on purpose, so the test does not
/// depend on any bug staying unfixed.
#[test]
fn a_panic_anywhere_fails_the_run_with_its_message() {
    let scenario = parse(SCENARIO).unwrap();
    assert!(run_with(&scenario, Sabotage::None, Recording::ALL).passed());
    let cases = [
        (
            Sabotage::Recorder,
            "the simulated event recorder panicked: sabotaged recorder, given: ",
        ),
        (
            Sabotage::StoreWrite,
            "the simulated store write panicked: sabotaged store write of a",
        ),
        (
            Sabotage::BackendEffect,
            "a simulator task panicked: sabotaged attach effect of v on a",
        ),
        (
            Sabotage::Runner,
            "the simulator panicked: sabotaged runner, at line 3",
        ),
    ];
    for (sabotage, message) in cases {
        let report = run_with(&scenario, sabotage, Recording::ALL);
        assert!(!report.passed(), "{sabotage:?}");
        let panic = report
            .violations
            .iter()
            .find(|v| v.message.starts_with(message))
            .unwrap_or_else(|| panic!("{sabotage:?}: {:#?}", report.violations));
        assert!(violation_line("x.scn", panic).contains(message));
    }
}

/// A panic is reported when it happens, and a restarted controller whose recorder panics
/// again is reported again. (The controller itself contains a recorder's panic and carries
/// on; the simulator's recorder reports its own.)
#[test]
fn each_recorder_panic_is_reported_when_it_happens() {
    let text = "node a\nvolume v single-node\nvolume w single-node\n\
        at 0s pod p on a uses v\nat 6s restart controller\nat 6500ms pod q on a uses w\n\
        run 10s\n";
    let report = run_with(&parse(text).unwrap(), Sabotage::Recorder, Recording::ALL);
    let panics: Vec<Duration> = report
        .violations
        .iter()
        .filter(|v| {
            v.message
                .starts_with("the simulated event recorder panicked")
        })
        .map(|v| v.at)
        .collect();
    // Each generation's recorder panics on its first event, soon after it starts.
    assert!(
        panics.first().is_some_and(|t| *t < Duration::from_secs(1)),
        "{panics:?}"
    );
    assert!(
        panics
            .iter()
            .any(|t| *t > Duration::from_secs(6) && *t < Duration::from_secs(8)),
        "{panics:?}"
    );
}

/// An attach fault built in code with `times: 0` fails one call, as `times 1` does (the
/// parser refuses `times 0`), where the fault queue alone would queue nothing.
#[test]
fn a_backend_fault_of_zero_times_fails_one_call() {
    let text = "node a\nvolume v single-node\nat 0s fail attach v on a\n\
        at 0s pod p on a uses v\nat 5s expect pod p running\nrun 10s\n";
    let once = parse(text).unwrap();
    let mut zero = once.clone();
    let Action::FailAttach { times, .. } = &mut zero.steps[0].action else {
        panic!("steps[0] is the fault: {:?}", zero.steps[0]);
    };
    *times = 0;
    let (once, zero) = (run(&once), run(&zero));
    assert!(once.passed(), "{:?}", once.violations);
    assert_eq!(once.attach_calls, 2);
    // The same run (its trace differs only in the step's line, which prints `times 0`).
    assert_eq!(zero.attach_calls, 2);
    assert_eq!(zero.converged, once.converged);
}

/// A list's changes are found walking it beside the old one, in order or not.
#[test]
fn list_changes_are_what_came_and_what_went() {
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    let changes = |before: &[&str], now: &[&str]| {
        let now: Vec<String> = now.iter().map(|n| n.to_string()).collect();
        let as_set = set_changes(&set(before), &mut now.iter());
        let walked = list_changes(&set(before), &mut now.iter());
        if now.is_sorted() && now.windows(2).all(|w| w[0] != w[1]) {
            assert_eq!(walked.as_ref(), Some(&as_set), "{now:?}");
        } else {
            assert_eq!(walked, None, "{now:?}");
        }
        as_set
    };
    let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(changes(&[], &[]), (vec![], vec![]));
    assert_eq!(
        changes(&["v1", "v3", "v5"], &["v0", "v1", "v4", "v5", "v6"]),
        (strings(&["v0", "v4", "v6"]), strings(&["v3"]))
    );
    assert_eq!(
        changes(&["a", "b"], &["c", "a", "c"]),
        (strings(&["c"]), strings(&["b"]))
    );
    assert_eq!(changes(&["a", "b"], &[]), (vec![], strings(&["a", "b"])));
}

#[test]
fn agent_ticks_are_on_the_grid_and_move_forward() {
    let ms = Duration::from_millis;
    assert_eq!(next_tick(ms(0), None), ms(0));
    assert_eq!(next_tick(ms(1), None), ms(100));
    assert_eq!(next_tick(ms(100), None), ms(100));
    assert_eq!(next_tick(ms(100), Some(ms(100))), ms(200));
    assert_eq!(next_tick(ms(150), Some(ms(100))), ms(200));
    assert_eq!(next_tick(Duration::from_nanos(1), Some(ms(500))), ms(600));
    assert_eq!(next_tick(MAX_DURATION, None), MAX_DURATION);
    assert_eq!(next_tick(Duration::MAX, None), Duration::MAX);
    assert!(is_tick(ms(300)) && !is_tick(ms(310)));
}

/// `expect wait` is checked against the running controller's explanation: a Multi-Attach wait
/// names its holder, and an expectation the answer does not bear out fails with that answer
/// on one line; with no controller running there is no answer.
#[test]
fn expect_wait_holds_when_the_controller_explains_so() {
    let scenario = parse(
        "node n1\nnode n2\nnode n3\nvolume d single-node\n\
         at 0s pod a on n1 uses d\nat 2s pod b on n2 uses d\n\
         at 5s expect wait b held-elsewhere n1\nat 5s expect wait d settled n1\n\
         at 5s expect wait b held-elsewhere n2\nat 5s expect wait b unmount\n\
         at 6s node n3 delete\nat 6s pod c on n3 uses d\nat 7s expect wait c missing\n\
         at 10s delete pod a\nat 15s expect wait b settled\nrun 20s\n",
    )
    .unwrap();
    let report = run_with(&scenario, Sabotage::None, Recording::NONE);
    let failed: Vec<(Option<usize>, &str)> = report
        .violations
        .iter()
        .map(|v| (v.line, v.message.as_str()))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:#?}");
    assert_eq!(failed[0].0, Some(9));
    assert_eq!(failed[1].0, Some(10));
    assert!(
        failed[1]
            .1
            .contains("waiting for it to be detached from [\"n1\"] (Multi-Attach)")
            && !failed[1].1.contains('\n'),
        "{}",
        failed[1].1
    );
}
