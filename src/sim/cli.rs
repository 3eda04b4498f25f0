//! The simulator's command line (`examples/simulate.rs`), here so that its rules are tested:
//! which flags combine, a typed error with a clear message for each misuse ([`parse_args`]),
//! and what a run writes where and the exit status it ends with ([`main`]).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::library::LIBRARY;
use super::scenario::{self, Escaped, Scenario};
use super::seeds::{SeedFailure, sweep_with_progress, with_seed};
use super::timeline::render_svg;
use super::{Recording, config_of, run_recording, summary_header, summary_line, violation_line};

/// The usage text `--help` prints.
pub const USAGE: &str = "\
usage: simulate [--trace] [--seed K | --seeds N] [--timeline OUT.svg] [FILE...]

  no FILE            run the bundled incident library
  --trace            print every run's trace after the summary
  --seed K           run with jitter seed K (backend and store latencies vary by +-50%,
                     reproducibly; 0 is the exact timeline), whatever the file sets
  --seeds N          run each scenario under jitter seeds 1..=N (N at most 1000000) and
                     name every seed that fails, to replay with --seed K; a long sweep
                     shows its progress on stderr
  --timeline OUT.svg draw the run of exactly one FILE as an SVG timeline

exit status: 0 all pass, 1 a violation (or a failing seed), 2 bad input or an output
that cannot be written, 141 the output was closed (a pipe to `head`): the run stops quietly";

/// The most seeds `--seeds` sweeps: a million runs of each scenario (the bundled library takes
/// about a tenth of a second a seed, so a day). More is surely a slip of the keyboard.
pub const MAX_SEEDS: u64 = 1_000_000;

/// The exit status when the output was closed before the run ended, as a pipe to `head` does:
/// the run stops quietly, with the status a shell reports for a tool a closed pipe stopped
/// (128 + `SIGPIPE`).
pub const EXIT_OUTPUT_CLOSED: u8 = 141;

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Options {
    /// Print each run's trace.
    pub trace: bool,
    /// Run every scenario with this jitter seed instead of its own.
    pub seed: Option<u64>,
    /// Rerun every scenario under jitter seeds `1..=N`.
    pub seeds: Option<u64>,
    /// Draw the (single) scenario's run here.
    pub timeline: Option<PathBuf>,
    /// Scenario files; none means the bundled library.
    pub files: Vec<String>,
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Print [`USAGE`] and stop.
    Help,
    /// Run scenarios.
    Run(Options),
}

/// A command line the simulator refuses (exit status 2).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum UsageError {
    /// A flag that takes a value came last.
    #[error("{flag} needs a value ({expected})")]
    MissingValue {
        /// The flag.
        flag: &'static str,
        /// What the value is.
        expected: &'static str,
    },
    /// A flag's value is not a whole number.
    #[error("{flag} takes a whole number, not `{}`", Escaped(.value))]
    BadNumber {
        /// The flag.
        flag: &'static str,
        /// What was given.
        value: String,
    },
    /// `--seeds 0` would run nothing.
    #[error("--seeds 0 runs nothing: give 1 or more")]
    NoSeeds,
    /// `--seeds` beyond [`MAX_SEEDS`].
    #[error(
        "--seeds {given} is more than a sweep runs: give at most {MAX_SEEDS} (each seed reruns \
         every scenario)"
    )]
    TooManySeeds {
        /// What was given (whole digits, perhaps past what a `u64` holds).
        given: String,
    },
    /// A flag given twice.
    #[error("{0} is given twice")]
    Twice(&'static str),
    /// `--seed` and `--seeds` together.
    #[error("--seed K replays one seed and --seeds N sweeps 1..=N: give one of them")]
    SeedAndSeeds,
    /// `--timeline` draws one run.
    #[error(
        "--timeline draws one run: give exactly one scenario FILE (given: {given}){}",
        if *.given == 0 { "; the bundled library is not drawn" } else { "" }
    )]
    TimelineNeedsOneFile {
        /// How many files were given.
        given: usize,
    },
    /// `--timeline` with `--seeds`: which of the N runs?
    #[error("--timeline draws one run, --seeds N makes N: pick a seed with --seed K")]
    TimelineWithSeeds,
    /// An option the simulator does not know.
    #[error("unknown option `{}` (see --help)", Escaped(.0))]
    UnknownOption(String),
}

/// Parses the arguments after the program name.
///
/// ```
/// use attach_detach::sim::cli::{parse_args, Command, UsageError};
/// let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
/// let Command::Run(options) = parse_args(args("--seeds 20 a.scn")).unwrap() else { panic!() };
/// assert_eq!((options.seeds, options.files.len()), (Some(20), 1));
/// assert_eq!(
///     parse_args(args("--timeline out.svg a.scn b.scn")),
///     Err(UsageError::TimelineNeedsOneFile { given: 2 })
/// );
/// ```
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, UsageError> {
    let mut options = Options::default();
    let mut args = args.into_iter();
    let mut only_files = false;
    while let Some(arg) = args.next() {
        if only_files || !arg.starts_with('-') || arg == "-" {
            options.files.push(arg);
            continue;
        }
        match arg.as_str() {
            "--" => only_files = true,
            "-h" | "--help" => return Ok(Command::Help),
            "--trace" => options.trace = true,
            "--seed" => {
                let value = number(&mut args, "--seed", "a seed, a whole number")?;
                if options.seed.replace(value).is_some() {
                    return Err(UsageError::Twice("--seed"));
                }
            }
            "--seeds" => {
                let value = match number(&mut args, "--seeds", "how many seeds, 1 or more") {
                    // All digits, yet past a u64: more than any sweep.
                    Err(UsageError::BadNumber { value, .. })
                        if value.bytes().all(|b| b.is_ascii_digit()) =>
                    {
                        return Err(UsageError::TooManySeeds { given: value });
                    }
                    other => other?,
                };
                if value == 0 {
                    return Err(UsageError::NoSeeds);
                }
                if value > MAX_SEEDS {
                    return Err(UsageError::TooManySeeds {
                        given: value.to_string(),
                    });
                }
                if options.seeds.replace(value).is_some() {
                    return Err(UsageError::Twice("--seeds"));
                }
            }
            "--timeline" => {
                let path = args.next().ok_or(UsageError::MissingValue {
                    flag: "--timeline",
                    expected: "the SVG file to write",
                })?;
                if options.timeline.replace(PathBuf::from(path)).is_some() {
                    return Err(UsageError::Twice("--timeline"));
                }
            }
            _ => return Err(UsageError::UnknownOption(arg)),
        }
    }
    if options.seed.is_some() && options.seeds.is_some() {
        return Err(UsageError::SeedAndSeeds);
    }
    if options.timeline.is_some() {
        if options.seeds.is_some() {
            return Err(UsageError::TimelineWithSeeds);
        }
        if options.files.len() != 1 {
            return Err(UsageError::TimelineNeedsOneFile {
                given: options.files.len(),
            });
        }
    }
    Ok(Command::Run(options))
}

/// The next argument as the whole-number value of `flag`.
fn number(
    args: &mut impl Iterator<Item = String>,
    flag: &'static str,
    expected: &'static str,
) -> Result<u64, UsageError> {
    let value = args
        .next()
        .ok_or(UsageError::MissingValue { flag, expected })?;
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UsageError::BadNumber { flag, value });
    }
    value
        .parse()
        .map_err(|_| UsageError::BadNumber { flag, value })
}

/// Where [`main`] writes, and how often a long sweep says how far it is.
pub struct Console<'a> {
    /// The summary, the violations and the traces: what a pipe reads.
    pub out: &'a mut dyn Write,
    /// Errors and the sweep's progress.
    pub err: &'a mut dyn Write,
    /// How long a sweep of one scenario runs before it says how far it is, and between two
    /// such lines.
    pub progress_every: Duration,
}

/// Runs the simulator's command line (the arguments after the program name) and returns its
/// exit status ([`USAGE`] lists them).
///
/// A write to `out` that fails ends the run at once: quietly with [`EXIT_OUTPUT_CLOSED`] if
/// the reader went away (a broken pipe), with a message on `err` and status 2 otherwise.
/// Writes to `err` that fail are ignored.
pub fn main(args: impl IntoIterator<Item = String>, console: Console<'_>) -> u8 {
    let Console {
        out,
        err,
        progress_every,
    } = console;
    match run_command(args, out, &mut *err, progress_every) {
        Ok(status) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OUTPUT_CLOSED,
        Err(e) => {
            let _ = writeln!(err, "simulate: cannot write the output: {e}");
            2
        }
    }
}

/// [`main`], with the errors of writes to `out` returned.
fn run_command(
    args: impl IntoIterator<Item = String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    progress_every: Duration,
) -> io::Result<u8> {
    let options = match parse_args(args) {
        Ok(Command::Help) => {
            writeln!(out, "{USAGE}")?;
            return Ok(0);
        }
        Ok(Command::Run(options)) => options,
        Err(e) => {
            let _ = writeln!(err, "simulate: {e}\n\n{USAGE}");
            return Ok(2);
        }
    };
    let Some(parsed) = read_scenarios(&options, err) else {
        return Ok(2);
    };
    match options.seeds {
        Some(count) => sweep_seeds(&parsed, count, out, err, progress_every),
        None => run_once(&parsed, &options, out, err),
    }
}

/// The scenarios to run, named, parsed and seeded as the options say: the files, or the
/// bundled library. `None` after saying on `err` what is wrong with one.
fn read_scenarios(options: &Options, err: &mut dyn Write) -> Option<Vec<(String, Scenario)>> {
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    if options.files.is_empty() {
        inputs.extend(
            LIBRARY
                .iter()
                .map(|(n, t)| (n.to_string(), t.as_bytes().to_vec())),
        );
    }
    for file in &options.files {
        match std::fs::read(file) {
            Ok(bytes) => inputs.push((file.clone(), bytes)),
            Err(e) => {
                let _ = writeln!(err, "{}: cannot read: {e}", Escaped(file));
                return None;
            }
        }
    }
    let mut parsed = Vec::new();
    for (name, bytes) in &inputs {
        let s = match scenario::parse_bytes(bytes) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(err, "{}", e.with_file(Escaped(name)));
                return None;
            }
        };
        if let Err(e) = config_of(&s).validate() {
            let _ = writeln!(
                err,
                "{}: the controller refuses these settings: {e}",
                Escaped(name)
            );
            return None;
        }
        let s = match options.seed {
            Some(seed) => with_seed(&s, seed),
            None => s,
        };
        parsed.push((name.clone(), s));
    }
    Some(parsed)
}

/// Runs each scenario once, prints the summary, and draws the timeline if asked.
fn run_once(
    parsed: &[(String, Scenario)],
    options: &Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<u8> {
    writeln!(out, "{}", summary_header())?;
    let mut failed = 0;
    let mut details = Vec::new();
    let mut reports = Vec::new();
    // The trace and the picture grow with every status write's list: kept only when asked for.
    let recording = Recording {
        trace: options.trace,
        timeline: options.timeline.is_some(),
    };
    for (name, s) in parsed {
        let report = run_recording(s, recording);
        writeln!(out, "{}", summary_line(name, &report))?;
        if options.trace {
            details.push(format!("--- trace of {name}"));
            details.extend(report.trace.iter().cloned());
        }
        if !report.passed() {
            failed += 1;
            // A panic in the controller or the simulator is one of these too.
            details.extend(report.violations.iter().map(|v| violation_line(name, v)));
        }
        reports.push(report);
    }
    for line in details {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "{} passed, {} failed", parsed.len() - failed, failed)?;
    if let (Some(path), [(name, s)], [report]) = (&options.timeline, parsed, &reports[..]) {
        let svg = render_svg(&scenario_title(name), s, report);
        if let Err(e) = std::fs::write(path, svg) {
            let _ = writeln!(err, "{}: cannot write the timeline: {e}", path.display());
            return Ok(2);
        }
        writeln!(out, "timeline of {name} written to {}", path.display())?;
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// Runs each scenario under seeds 1..=count and names the seeds that fail, saying on `err`
/// how far a sweep is once it has run for `progress_every`, and again each time as long.
fn sweep_seeds(
    parsed: &[(String, Scenario)],
    count: u64,
    out: &mut dyn Write,
    err: &mut dyn Write,
    progress_every: Duration,
) -> io::Result<u8> {
    let mut failing_scenarios = 0;
    for (index, (name, s)) in parsed.iter().enumerate() {
        let mut last = Instant::now();
        let progress = |seed, failures: &[SeedFailure]| {
            if last.elapsed() >= progress_every {
                last = Instant::now();
                let _ = writeln!(
                    err,
                    "simulate: {name} ({} of {} scenarios): {seed} of {count} seeds run, {} \
                     failing",
                    index + 1,
                    parsed.len(),
                    failures.len()
                );
            }
        };
        // Only the violations of a failing seed are printed.
        let failures = sweep_with_progress(s, count, Recording::NONE, progress);
        if failures.is_empty() {
            writeln!(out, "{name:<44} pass under seeds 1..={count}")?;
            continue;
        }
        failing_scenarios += 1;
        let seeds: Vec<String> = failures.iter().map(|f| f.seed.to_string()).collect();
        writeln!(
            out,
            "{name:<44} FAIL under {} of {count} seeds: {}",
            failures.len(),
            seeds.join(", ")
        )?;
        for failure in &failures {
            for v in &failure.report.violations {
                writeln!(
                    out,
                    "  --seed {}: {}",
                    failure.seed,
                    violation_line(name, v)
                )?;
            }
        }
    }
    writeln!(
        out,
        "{} of {} scenarios pass under seeds 1..={count}{}",
        parsed.len() - failing_scenarios,
        parsed.len(),
        if failing_scenarios > 0 {
            " (replay a failing seed with --seed K FILE)"
        } else {
            ""
        }
    )?;
    Ok(if failing_scenarios == 0 { 0 } else { 1 })
}

/// The scenario's name for the picture's heading: its file name without directory or `.scn`.
fn scenario_title(file: &str) -> String {
    let base = Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |f| f.to_string_lossy().into_owned());
    base.strip_suffix(".scn")
        .map_or(base.clone(), str::to_string)
}
