//! The simulator's command line (`examples/simulate.rs`), parsed here so that its rules are
//! tested: which flags combine, and a typed error with a clear message for each misuse.

use std::path::PathBuf;

use thiserror::Error;

/// The usage text `--help` prints.
pub const USAGE: &str = "\
usage: simulate [--trace] [--seed K | --seeds N] [--timeline OUT.svg] [FILE...]

  no FILE            run the bundled incident library
  --trace            print every run's trace after the summary
  --seed K           run with jitter seed K (backend and store latencies vary by +-50%,
                     reproducibly; 0 is the exact timeline), whatever the file sets
  --seeds N          run each scenario under jitter seeds 1..=N and name every seed that
                     fails, to replay with --seed K
  --timeline OUT.svg draw the run of exactly one FILE as an SVG timeline

exit status: 0 all pass, 1 a violation (or a failing seed), 2 bad input";

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
    #[error("{flag} takes a whole number, not `{value}`")]
    BadNumber {
        /// The flag.
        flag: &'static str,
        /// What was given.
        value: String,
    },
    /// `--seeds 0` would run nothing.
    #[error("--seeds 0 runs nothing: give 1 or more")]
    NoSeeds,
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
    #[error("unknown option `{0}` (see --help)")]
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
                let value = number(&mut args, "--seeds", "how many seeds, 1 or more")?;
                if value == 0 {
                    return Err(UsageError::NoSeeds);
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
