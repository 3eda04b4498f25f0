//! What can be wrong with a scenario: a line the parser refuses ([`ParseError`]), or a scenario
//! built in code that the simulator cannot run ([`ScenarioError`]).

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use super::{MAX_DURATION, format_duration};

/// A scenario that could not be parsed, and the line to fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {kind}")]
pub struct ParseError {
    /// The 1-based line of the offending statement.
    pub line: usize,
    /// What is wrong with it.
    pub kind: ParseErrorKind,
}

impl ParseError {
    /// The error in the `file:line: message` form editors and terminals link to.
    pub fn with_file(&self, file: impl fmt::Display) -> String {
        format!("{file}:{}: {}", self.line, self.kind)
    }
}

/// What is wrong with a statement; each message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The first word of a line is not a statement.
    #[error("unknown statement `{}` (expected set, node, volume, at or run)", Escaped(.0))]
    UnknownStatement(String),
    /// The word after `at <time>` is not an action.
    #[error(
        "unknown action `{}` (expected pod, delete, force-delete, node, fail, hang, release, \
         partition, heal, restart or expect)",
        Escaped(.0)
    )]
    UnknownAction(String),
    /// The word after `expect` is not an expectation.
    #[error(
        "unknown expectation `{}` (expected pod, attached, detached, reported, event, no-event, \
         calls or writes)",
        Escaped(.0)
    )]
    UnknownExpectation(String),
    /// The line ended too early.
    #[error("expected {expected}, found the end of the line")]
    Missing {
        /// What should have come next.
        expected: String,
    },
    /// A token is not one of the words allowed here.
    #[error("expected {expected}, found `{}`", Escaped(.found))]
    Unexpected {
        /// What should have come instead.
        expected: String,
        /// What came.
        found: String,
    },
    /// The statement is complete but the line goes on.
    #[error("unexpected `{}` after the end of the statement", Escaped(.0))]
    Extra(String),
    /// A token is not a duration.
    #[error("expected a duration like 150ms, 2s, 6m or 1h, found `{}`", Escaped(.0))]
    BadDuration(String),
    /// A duration is longer than [`MAX_DURATION`](super::MAX_DURATION), the longest the
    /// simulator can add up with others without overflowing.
    #[error(
        "duration `{}` is too long: a scenario's durations are at most {max} (100 years)",
        Escaped(.0),
        max = format_duration(MAX_DURATION)
    )]
    DurationTooLong(String),
    /// A token is not a whole number.
    #[error("expected a whole number, found `{}`", Escaped(.0))]
    BadNumber(String),
    /// A number does not fit its field.
    #[error("number `{}` is too large", Escaped(.0))]
    NumberOverflow(String),
    /// `times 0` would inject no failure, which is surely not what was meant.
    #[error("`times 0` injects nothing: use 1 or more")]
    ZeroTimes,
    /// A line is not UTF-8: the byte at `column` (1-based, counted in bytes from the start of
    /// the line) begins no valid character.
    #[error("the text is not UTF-8 (byte {column} of the line is not part of a valid character)")]
    InvalidUtf8 {
        /// Where on the line, in bytes from 1.
        column: usize,
    },
    /// A `set` key is unknown.
    #[error(
        "unknown setting `{}` (expected reconcile-period, sync-period, max-wait-for-unmount, \
         force-detach-on-timeout, machine-fencing, cache-lag, status-cache-lag, attach-latency, detach-latency, \
         status-latency, seed, verify-batch, volumes-per-pass, max-attaches, max-detaches, \
         overdue-after, max-overdue, backend-rate or upstream-bug)",
        Escaped(.0)
    )]
    UnknownSetting(String),
    /// A setting is given twice, so one of the two lines is a mistake.
    #[error("`{key}` is already set on line {first_line}")]
    DuplicateSetting {
        /// The key (with the bug name for `upstream-bug`).
        key: String,
        /// Where it was first set.
        first_line: usize,
    },
    /// Settings apply to the whole run, so they cannot follow the first step.
    #[error("`set` must come before the first `at` line (line {first_at_line})")]
    SetAfterAt {
        /// The first `at` line.
        first_at_line: usize,
    },
    /// A node is declared twice.
    #[error("node `{}` is already declared on line {first_line}", Escaped(.name))]
    DuplicateNode {
        /// The node.
        name: String,
        /// Where it was first declared.
        first_line: usize,
    },
    /// A volume is declared twice.
    #[error("volume `{}` is already declared on line {first_line}", Escaped(.name))]
    DuplicateVolume {
        /// The volume.
        name: String,
        /// Where it was first declared.
        first_line: usize,
    },
    /// A step names a node no earlier line declares.
    #[error("node `{n}` is not declared (add `node {n}` before using it)", n = Escaped(.0))]
    UndeclaredNode(String),
    /// A step names a volume no earlier line declares.
    #[error(
        "volume `{v}` is not declared (add `volume {v} single-node` before using it)",
        v = Escaped(.0)
    )]
    UndeclaredVolume(String),
    /// A name contains a comma.
    #[error("`{}` is not a name: names cannot contain commas", Escaped(.0))]
    BadName(String),
    /// A comma-separated list has an empty item.
    #[error("`{}` is not a list of names like `a,b,c` (no spaces, no empty items)", Escaped(.0))]
    BadList(String),
    /// A name contains a control character (a NUL, an escape, ...): names go into traces,
    /// violations and the timeline picture.
    #[error("`{}` is not a name: names cannot contain control characters", Escaped(.0))]
    ControlCharacter(String),
    /// A list names the same volume twice.
    #[error("`{}` appears twice in the list", Escaped(.0))]
    DuplicateInList(String),
    /// `none` is the empty list in `expect reported`, so it cannot be a volume.
    #[error("`none` cannot name a volume: `expect reported <node> none` means the empty list")]
    ReservedVolumeName,
    /// An option such as `times` or `uncertain` is given twice.
    #[error("`{0}` is given twice")]
    DuplicateOption(&'static str),
    /// An `at` line is earlier than the one before it.
    #[error(
        "time goes backwards: `at {}` comes after `at {}` on line {previous_line}",
        format_duration(*.at),
        format_duration(*.previous)
    )]
    TimeGoesBackwards {
        /// This line's time.
        at: Duration,
        /// The previous `at` line's time.
        previous: Duration,
        /// The previous `at` line.
        previous_line: usize,
    },
    /// A second `run` line.
    #[error("`run` is already given on line {first_line}")]
    DuplicateRun {
        /// The first `run` line.
        first_line: usize,
    },
    /// `run` ends before a step it follows.
    #[error(
        "`run {}` ends before the step `at {}` on line {step_line}",
        format_duration(*.run),
        format_duration(*.step_at)
    )]
    RunTooShort {
        /// The run length.
        run: Duration,
        /// The latest step's time.
        step_at: Duration,
        /// The latest step's line.
        step_line: usize,
    },
    /// A step lies beyond a `run` given earlier.
    #[error(
        "step `at {}` lies beyond `run {}` on line {run_line}",
        format_duration(*.at),
        format_duration(*.run)
    )]
    StepAfterRun {
        /// This step's time.
        at: Duration,
        /// The run length.
        run: Duration,
        /// The `run` line.
        run_line: usize,
    },
}

/// A `str` shown in a message with its control and other invisible characters escaped as Rust
/// writes them (`\0`, `\u{1b}`, `\u{202e}`) and a backslash doubled, so that a scenario's bytes
/// never reach a terminal raw and no escape can be forged. Quotes and printable text, whatever
/// the script, stay as they are.
pub(crate) struct Escaped<'a>(pub(crate) &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        // `escape_debug` starts every escape with a backslash followed by what it stands for;
        // of those, only the quotes are given back as they were.
        let mut chars = self.0.escape_debug();
        while let Some(c) = chars.next() {
            if c != '\\' {
                f.write_char(c)?;
                continue;
            }
            match chars.next() {
                Some(quote @ ('\'' | '"')) => f.write_char(quote)?,
                Some(kind) => {
                    f.write_char('\\')?;
                    f.write_char(kind)?;
                }
                None => f.write_char('\\')?,
            }
        }
        Ok(())
    }
}

/// A scenario built in code, not parsed, that the simulator refuses to run: [`parse`] never
/// returns one, since it rejects the same values line by line.
///
/// [`parse`]: super::parse
///
/// ```
/// use std::time::Duration;
/// use attach_detach::sim::scenario::{Scenario, ScenarioError};
/// let mut scenario = Scenario::default();
/// scenario.settings.cache_lag = Duration::MAX;
/// assert!(matches!(scenario.validate(), Err(ScenarioError::TooLong { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A duration is longer than [`MAX_DURATION`](super::MAX_DURATION).
    #[error(
        "{what} is {}, longer than {max} (100 years), the longest a scenario may use",
        format_duration(*.value),
        max = format_duration(MAX_DURATION)
    )]
    TooLong {
        /// Which duration: `set cache-lag`, `the step on line 7`, `run`.
        what: String,
        /// Its value.
        value: Duration,
    },
}
