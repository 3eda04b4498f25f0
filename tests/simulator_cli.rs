//! What `examples/simulate.rs` does with its command line, through the library functions
//! behind it: which flags combine, each misuse refused with a clear message, and the seed
//! sweep naming seeds that replay exactly.
#![cfg(feature = "sim")]

use std::path::PathBuf;

use std::io::{self, Write};
use std::time::Duration;

use attach_detach::sim::cli::{
    Command, Console, EXIT_OUTPUT_CLOSED, MAX_SEEDS, Options, UsageError, main, parse_args,
};
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
            "--seeds 99999999999999999999999 is more than a sweep runs: give at most 1000000 \
             (each seed reruns every scenario)",
        ),
        (
            "--seeds 1000001 a.scn",
            "--seeds 1000001 is more than a sweep runs: give at most 1000000 (each seed reruns \
             every scenario)",
        ),
        ("--seeds 1\u{0}", "--seeds takes a whole number, not `1\\0`"),
        ("--\u{1b}[2J", "unknown option `--\\u{1b}[2J` (see --help)"),
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
    assert_eq!(
        options(&format!("--seeds {MAX_SEEDS}")).seeds,
        Some(MAX_SEEDS)
    );
}

/// What [`main`] wrote to its two streams, and its exit status.
struct Ran {
    status: u8,
    out: String,
    err: String,
}

/// Runs [`main`] on `line`, its standard output written to `out`, progress lines as often as
/// `progress_every`.
fn run_main(line: &str, out: &mut dyn Write, progress_every: Duration) -> (u8, String) {
    let mut err = Vec::new();
    let status = main(
        args(line),
        Console {
            out,
            err: &mut err,
            progress_every,
        },
    );
    (status, String::from_utf8(err).unwrap())
}

fn ran(line: &str) -> Ran {
    let mut out = Vec::new();
    let (status, err) = run_main(line, &mut out, Duration::from_secs(3600));
    Ran {
        status,
        out: String::from_utf8(out).unwrap(),
        err,
    }
}

/// A scenario file in a directory of this test's own, removed with it.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!("simulator-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const PASSES: &str = "node a\nvolume v single-node\nat 0s pod p on a uses v\n\
    at 5s expect pod p running\nrun 10s\n";

/// An output that takes `room` bytes, then fails every write as a pipe whose reader has gone
/// (`simulate | head`).
struct ClosedAfter {
    room: usize,
    kind: io::ErrorKind,
}

impl Write for ClosedAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::Error::from(self.kind));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `simulate | head`: once the reader goes, the run stops quietly with status 141, as a Unix
/// tool stopped by the closed pipe would, where it panicked (status 101, a panic message on
/// stderr). Any other failing write is said on stderr, status 2.
#[test]
fn a_closed_output_stops_the_run_quietly() {
    let file = TempFile::new("passes.scn", PASSES.as_bytes());
    let cases = [
        (String::new(), 100),
        (format!("--trace {}", file.path()), 200),
        (format!("--seeds 3 {0} {0}", file.path()), 10),
    ];
    for (line, room) in cases {
        let mut out = ClosedAfter {
            room,
            kind: io::ErrorKind::BrokenPipe,
        };
        let (status, err) = run_main(&line, &mut out, Duration::from_secs(3600));
        assert_eq!((status, err.as_str()), (EXIT_OUTPUT_CLOSED, ""), "{line}");
    }
    let mut full = ClosedAfter {
        room: 10,
        kind: io::ErrorKind::StorageFull,
    };
    let (status, err) = run_main(file.path(), &mut full, Duration::from_secs(60));
    assert_eq!(status, 2);
    assert!(
        err.starts_with("simulate: cannot write the output: "),
        "{err}"
    );
}

/// A sweep says on stderr how far it is, once it has run for the progress interval and again
/// each time as long (here: after every seed); stdout has the results only.
#[test]
fn a_sweep_shows_its_progress_on_stderr() {
    let file = TempFile::new("sweep.scn", PASSES.as_bytes());
    let mut out = Vec::new();
    let (status, err) = run_main(
        &format!("--seeds 3 {}", file.path()),
        &mut out,
        Duration::ZERO,
    );
    assert_eq!(status, 0, "{err}");
    let name = file.path();
    let expected: String = (1..=3)
        .map(|seed| {
            format!("simulate: {name} (1 of 1 scenarios): {seed} of 3 seeds run, 0 failing\n")
        })
        .collect();
    assert_eq!(err, expected);
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("pass under seeds 1..=3"), "{out}");
    assert!(!out.contains("seeds run"), "{out}");
    // An absurd sweep is refused before anything runs, as other bad command lines are.
    let refused = ran(&format!("--seeds 18446744073709551615 {}", file.path()));
    assert_eq!((refused.status, refused.out.as_str()), (2, ""));
    assert!(
        refused
            .err
            .starts_with("simulate: --seeds 18446744073709551615 is more than a sweep runs"),
        "{}",
        refused.err
    );
}

/// A file that is not UTF-8 is refused on the line where it is not, a control character in it
/// is shown escaped, and a good file runs.
#[test]
fn bad_files_are_refused_with_their_line() {
    let good = TempFile::new("good.scn", PASSES.as_bytes());
    let ok = ran(good.path());
    assert_eq!(ok.status, 0, "{}", ok.err);
    assert!(ok.out.ends_with("1 passed, 0 failed\n"), "{}", ok.out);
    let latin1 = TempFile::new("latin1.scn", b"node a\n# caf\xe9\n");
    let refused = ran(latin1.path());
    assert_eq!((refused.status, refused.out.as_str()), (2, ""));
    assert_eq!(
        refused.err,
        format!(
            "{}:2: the text is not UTF-8 (byte 6 of the line is not part of a valid character)\n",
            latin1.path()
        )
    );
    let nul = TempFile::new("nul.scn", b"node a\0\n");
    let refused = ran(nul.path());
    assert_eq!(refused.status, 2);
    assert_eq!(
        refused.err,
        format!(
            "{}:1: `a\\0` is not a name: names cannot contain control characters\n",
            nul.path()
        )
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
