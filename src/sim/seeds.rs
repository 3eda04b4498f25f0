//! One scenario under many jitter seeds: the scenario's `seed` setting varies every backend
//! call's latency between half and one and a half of its setting, reproducibly, so a sweep over
//! seeds explores other interleavings of the same incident, and a failing seed replays exactly.

use super::runner::{Recording, Report, run_recording};
use super::scenario::Scenario;

/// `scenario` with its jitter seed set to `seed` (0: the exact timeline, no jitter).
pub fn with_seed(scenario: &Scenario, seed: u64) -> Scenario {
    let mut seeded = scenario.clone();
    seeded.settings.seed = seed;
    seeded
}

/// A seed under which the scenario failed, and what its run found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedFailure {
    /// The seed: `set seed <it>` in the file, or `simulate --seed <it>`, replays the run.
    pub seed: u64,
    /// The failed run.
    pub report: Report,
}

/// Runs `scenario` under seeds `1..=count`, in order, and returns the runs that failed.
///
/// ```
/// use attach_detach::sim::{scenario::parse, seeds::sweep};
/// let scenario = parse("node a\nvolume v single-node\nat 0s pod p on a uses v\nat 5s expect pod p running\nrun 10s\n").unwrap();
/// assert!(sweep(&scenario, 3).is_empty());
/// ```
pub fn sweep(scenario: &Scenario, count: u64) -> Vec<SeedFailure> {
    sweep_with_progress(scenario, count, Recording::ALL, |_, _| {})
}

/// [`sweep`], each run keeping what `recording` asks for, and calling `progress` after each
/// seed's run with the seed and the failures so far, so that a long sweep can say how far it
/// is.
pub fn sweep_with_progress(
    scenario: &Scenario,
    count: u64,
    recording: Recording,
    mut progress: impl FnMut(u64, &[SeedFailure]),
) -> Vec<SeedFailure> {
    let mut failures = Vec::new();
    for seed in 1..=count {
        let report = run_recording(&with_seed(scenario, seed), recording);
        if !report.passed() {
            failures.push(SeedFailure { seed, report });
        }
        progress(seed, &failures);
    }
    failures
}
