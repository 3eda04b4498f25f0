//! What `examples/simulate.rs` does with its command line, through the library functions
//! behind it: which flags combine, each misuse refused with a clear message, and the seed
//! sweep naming seeds that replay exactly.
#![cfg(feature = "sim")]

use std::path::PathBuf;

use attach_detach::sim::cli::{Command, Options, UsageError, parse_args};
use attach_detach::sim::run;
use attach_detach::sim::scenario::parse;
use attach_detach::sim::seeds::{sweep, with_seed};

fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

fn options(line: &str) -> Options {
    match parse_args(args(line)) {
        Ok(Command::Run(options)) => options,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn flags_and_files() {
    assert_eq!(options(""), Options::default());
    assert_eq!(parse_args(args("--trace --help")), Ok(Command::Help));
    assert_eq!(parse_args(args("-h")), Ok(Command::Help));
    let o = options("--trace a.scn --seed 7 b.scn");
    assert!(o.trace);
    assert_eq!(o.seed, Some(7));
    assert_eq!(o.files, ["a.scn", "b.scn"]);
    assert_eq!(options("--seeds 50").seeds, Some(50));
    let o = options("--timeline out.svg --seed 3 x.scn");
    assert_eq!(o.timeline, Some(PathBuf::from("out.svg")));
    assert_eq!((o.seed, o.files.len()), (Some(3), 1));
    // After `--`, everything is a file, even what looks like a flag.
    assert_eq!(options("-- --trace").files, ["--trace"]);
}

#[test]
fn each_misuse_is_refused_with_its_reason() {
    let cases = [
        ("--seed", "--seed needs a value (a seed, a whole number)"),
        ("--seed -1 a.scn", "--seed takes a whole number, not `-1`"),
        (
            "--seeds ten a.scn",
            "--seeds takes a whole number, not `ten`",
        ),
        (
            "--seeds 99999999999999999999999",
            "--seeds takes a whole number, not `99999999999999999999999`",
        ),
        ("--seeds 0 a.scn", "--seeds 0 runs nothing: give 1 or more"),
        ("--seed 1 --seed 2 a.scn", "--seed is given twice"),
        (
            "--seed 1 --seeds 2 a.scn",
            "--seed K replays one seed and --seeds N sweeps 1..=N: give one of them",
        ),
        (
            "--timeline",
            "--timeline needs a value (the SVG file to write)",
        ),
        (
            "--timeline out.svg",
            "--timeline draws one run: give exactly one scenario FILE (given: 0); \
             the bundled library is not drawn",
        ),
        (
            "--timeline out.svg a.scn b.scn",
            "--timeline draws one run: give exactly one scenario FILE (given: 2)",
        ),
        (
            "--timeline out.svg --seeds 3 a.scn",
            "--timeline draws one run, --seeds N makes N: pick a seed with --seed K",
        ),
        ("--frobnicate", "unknown option `--frobnicate` (see --help)"),
    ];
    for (line, message) in cases {
        match parse_args(args(line)) {
            Err(e) => assert_eq!(e.to_string(), message, "{line}"),
            Ok(command) => panic!("{line} accepted: {command:?}"),
        }
    }
    assert_eq!(
        parse_args(args("--timeline a.svg a.scn b.scn")),
        Err(UsageError::TimelineNeedsOneFile { given: 2 })
    );
}

/// A scenario whose expectation holds on the exact timeline but not when the attach is slowed
/// by the jitter: the sweep names the seeds that fail, each replays exactly, the others pass.
#[test]
fn a_sweep_names_the_seeds_that_fail_and_each_replays() {
    let text = "set attach-latency 1s
        node a
        volume v single-node
        at 0s pod p on a uses v
        at 1100ms expect attached v a
        run 5s";
    let scenario = parse(text).unwrap();
    assert!(run(&scenario).passed(), "the exact timeline passes");
    let failures = sweep(&scenario, 20);
    assert!(
        !failures.is_empty() && failures.len() < 20,
        "some seeds slow the attach past 1.1 s, others do not: {:?}",
        failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
    for failure in &failures {
        assert!((1..=20).contains(&failure.seed));
        let replay = run(&with_seed(&scenario, failure.seed));
        assert_eq!(replay, failure.report, "seed {} replays", failure.seed);
        assert!(
            replay.violations[0]
                .message
                .starts_with("expected attached v a")
        );
    }
    let failing: Vec<u64> = failures.iter().map(|f| f.seed).collect();
    let passing = (1..=20).find(|s| !failing.contains(s)).unwrap();
    assert!(run(&with_seed(&scenario, passing)).passed());
    // A seed set in the file is overridden by the sweep, not added to.
    let mut seeded = scenario.clone();
    seeded.settings.seed = 12345;
    assert_eq!(
        sweep(&seeded, 20)
            .iter()
            .map(|f| f.seed)
            .collect::<Vec<_>>(),
        failing
    );
}

#[test]
fn the_new_scenarios_pass_under_twenty_seeds() {
    for name in [
        "node-deleted-and-recreated",
        "unmount-hangs",
        "unmount-hangs-until-fenced",
        "agent-stops-reporting",
        "backend-partition-one-node",
    ] {
        let text = attach_detach::sim::library::LIBRARY
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1;
        let failures = sweep(&parse(text).unwrap(), 20);
        assert!(
            failures.is_empty(),
            "{name}: {:?}",
            failures
                .iter()
                .map(|f| (f.seed, &f.report.violations))
                .collect::<Vec<_>>()
        );
    }
}
