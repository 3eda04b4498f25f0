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
    #[error("unknown statement `{0}` (expected set, node, volume, at or run)")]
    UnknownStatement(String),
    /// The word after `at <time>` is not an action.
    #[error(
        "unknown action `{0}` (expected pod, delete, force-delete, node, fail, hang, release, \
         partition, heal, restart or expect)"
    )]
    UnknownAction(String),
    /// The word after `expect` is not an expectation.
    #[error(
        "unknown expectation `{0}` (expected pod, attached, detached, reported, event, no-event, \
         calls or writes)"
    )]
    UnknownExpectation(String),
    /// The line ended too early.
    #[error("expected {expected}, found the end of the line")]
    Missing {
        /// What should have come next.
        expected: String,
    },
    /// A token is not one of the words allowed here.
    #[error("expected {expected}, found `{found}`")]
    Unexpected {
        /// What should have come instead.
        expected: String,
        /// What came.
        found: String,
    },
    /// The statement is complete but the line goes on.
    #[error("unexpected `{0}` after the end of the statement")]
    Extra(String),
    /// A token is not a duration.
    #[error("expected a duration like 150ms, 2s, 6m or 1h, found `{0}`")]
    BadDuration(String),
    /// A duration is longer than [`MAX_DURATION`](super::MAX_DURATION), the longest the
    /// simulator can add up with others without overflowing.
    #[error(
        "duration `{0}` is too long: a scenario's durations are at most {max} (100 years)",
        max = format_duration(MAX_DURATION)
    )]
    DurationTooLong(String),
    /// A token is not a whole number.
    #[error("expected a whole number, found `{0}`")]
    BadNumber(String),
    /// A number does not fit its field.
    #[error("number `{0}` is too large")]
    NumberOverflow(String),
    /// `times 0` would inject no failure, which is surely not what was meant.
    #[error("`times 0` injects nothing: use 1 or more")]
    ZeroTimes,
    /// A `set` key is unknown.
    #[error(
        "unknown setting `{0}` (expected reconcile-period, sync-period, max-wait-for-unmount, \
         force-detach-on-timeout, machine-fencing, cache-lag, status-cache-lag, attach-latency, detach-latency, \
         status-latency, seed, verify-batch, volumes-per-pass, max-attaches, max-detaches, \
         overdue-after, max-overdue, backend-rate or upstream-bug)"
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
    #[error("node `{name}` is already declared on line {first_line}")]
    DuplicateNode {
        /// The node.
        name: String,
        /// Where it was first declared.
        first_line: usize,
    },
    /// A volume is declared twice.
    #[error("volume `{name}` is already declared on line {first_line}")]
    DuplicateVolume {
        /// The volume.
        name: String,
        /// Where it was first declared.
        first_line: usize,
    },
    /// A step names a node no earlier line declares.
    #[error("node `{0}` is not declared (add `node {0}` before using it)")]
    UndeclaredNode(String),
    /// A step names a volume no earlier line declares.
    #[error("volume `{0}` is not declared (add `volume {0} single-node` before using it)")]
    UndeclaredVolume(String),
    /// A name contains a comma.
    #[error("`{0}` is not a name: names cannot contain commas")]
    BadName(String),
    /// A comma-separated list has an empty item.
    #[error("`{0}` is not a list of names like `a,b,c` (no spaces, no empty items)")]
    BadList(String),
    /// A list names the same volume twice.
    #[error("`{0}` appears twice in the list")]
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
