//! Incident scenarios: a line-based script that replays an outage against the simulator.
//!
//! Incidents are reported as a story ("the detach failed, the pod came back to the same node, and
//! it never started"). Writing that story as a script lets the simulator replay it exactly, lets a
//! fuzzer print the schedules it finds in the same form, and keeps each upstream bug as a small
//! regression file. This module only parses: text in, typed [`Scenario`] out. It never panics,
//! whatever the input, and every error names its line.
//!
//! # Format
//!
//! One statement a line; `#` starts a comment that runs to the end of the line; blank lines are
//! ignored; tokens are separated by whitespace. A `<time>` is a duration since the start of the
//! scenario, written as a whole number and a unit: `150ms`, `2s`, `6m`, `1h` (a bare `0` is also
//! accepted). Names are any token without whitespace, commas or `#`. The text is UTF-8; a
//! byte-order mark at its start is skipped.
//!
//! ```text
//! set <key> <value>        keys and defaults: reconcile-period 100ms, sync-period 60s,
//!                          max-wait-for-unmount 6m, force-detach-on-timeout off (on|off),
//!                          cache-lag 0ms, status-cache-lag 0ms, attach-latency 200ms,
//!                          detach-latency 200ms, status-latency 10ms, seed 0 (u64;
//!                          non-zero: backend latencies vary by ±50%, reproducibly)
//! set upstream-bug <c1..c6> on|off
//!                          re-enable the reproduction of an upstream bug
//! node <name>
//! volume <name> single-node|multi-node
//! at <time> pod <p> on <node> uses <v>[,<v>...]
//! at <time> delete pod <p>          graceful: the node agent unmounts, then the pod is gone
//! at <time> force-delete pod <p>    gone from the API at once; a live agent unmounts later
//! at <time> node <n> crash|recover  crash: agent stops, nothing unmounts, node unhealthy
//! at <time> node <n> fence|unfence  fence: out-of-service; its pods are force-deleted
//! at <time> fail attach|detach <v> on <n> [times <k>] [uncertain]
//!                                   uncertain: the call errors but the backend did it
//! at <time> fail status <n> [times <k>]
//! at <time> restart controller      in-flight calls are lost to it; it recovers from store
//!                                   and backend
//! at <time> expect pod <p> running|pending|gone
//! at <time> expect attached|detached <v> <n>
//! at <time> expect reported <n> <v>[,<v>...]|none      exact list in the store
//! at <time> expect event multi-attach <p>
//! at <time> expect no-event multi-attach <p>
//! at <time> expect calls attach|detach <v> <n> =|<=|>= <k>
//! at <time> expect writes <n> =|<=|>= <k>
//! run <time>                        how long to simulate in total (else the runner decides)
//! ```
//!
//! Every duration is at most 876000h (100 years, [`MAX_DURATION`]); a longer one, such as
//! `at 18446744073709551615s`, is refused with [`ParseErrorKind::DurationTooLong`], so that no
//! sum of a scenario's durations can overflow in the simulator, the driver or the core. A
//! scenario built in code gets the same check from [`Scenario::validate`], which the runner
//! applies before it simulates anything.
//!
//! `times <k>` defaults to 1 and must be at least 1. The parser also checks what needs no
//! simulation: settings come before the first `at` line and are set once; nodes and volumes are
//! declared once, before an `at` line uses them (pods need no declaration); `at` times never go
//! backwards; there is at most one `run`, and no step lies beyond it. The name `none` cannot name a
//! volume, since `expect reported <n> none` means the empty list.
//!
//! # Example
//!
//! The first incident of the upstream fact sheet (kubernetes#49053, seed 000): a detach fails, the
//! pod returns to the same node, and the volume must be reported again so that the pod can start.
//!
//! ```
//! use std::time::Duration;
//! use attach_detach::sim::scenario::{parse, Action, Expectation, PodState};
//!
//! let scenario = parse(
//!     "
//! ## kubernetes#49053: detach fails, pod comes back to the same node
//! set max-wait-for-unmount 6m
//! node a
//! node b
//! volume data single-node
//!
//! at 0s   pod web-0 on a uses data
//! at 5s   expect pod web-0 running
//! at 6s   fail detach data on a times 3
//! at 6s   delete pod web-0
//! at 7s   pod web-1 on a uses data
//! at 30s  expect reported a data
//! at 30s  expect pod web-1 running
//! run 40s
//! ",
//! )?;
//! assert_eq!(scenario.nodes, ["a", "b"]);
//! assert_eq!(scenario.steps.len(), 7);
//! assert_eq!(scenario.steps[1].line, 9);
//! assert_eq!(
//!     scenario.steps[6].action,
//!     Action::Expect(Expectation::Pod { pod: "web-1".into(), state: PodState::Running }),
//! );
//! assert_eq!(scenario.run, Some(Duration::from_secs(40)));
//!
//! let err = parse("node a\nat 1s node b crash").unwrap_err();
//! assert_eq!(err.to_string(), "line 2: node `b` is not declared (add `node b` before using it)");
//! # Ok::<(), attach_detach::sim::scenario::ParseError>(())
//! ```

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use crate::Access;

mod error;

pub use error::{ParseError, ParseErrorKind, ScenarioError};

/// The longest duration a scenario may state: 876000h, 100 years of 365 days.
///
/// Far beyond any incident, and far enough below the limits of [`Duration`] and of the clock's
/// `Instant` that every sum the simulator, the driver and the core form from a scenario's
/// durations (a step's time plus a cache lag plus one and a half latencies, a deadline plus a
/// period) fits with room to spare.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A parsed incident script: what the simulator needs to replay it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scenario {
    /// Timings and switches; the defaults unless a `set` line changed them.
    pub settings: Settings,
    /// Declared nodes, in file order, so the simulator creates them deterministically.
    pub nodes: Vec<String>,
    /// Declared volumes with their access mode, in file order.
    pub volumes: Vec<(String, Access)>,
    /// The `at` lines, in file order (their times never decrease).
    pub steps: Vec<Step>,
    /// How long to simulate, if the script says; otherwise the runner picks.
    pub run: Option<Duration>,
}

/// The knobs an incident depends on: controller periods, cache lag, backend latencies and seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How often the reconciler runs (upstream: 100 ms).
    pub reconcile_period: Duration,
    /// How often attachments are verified against the backend (upstream: 60 s).
    pub sync_period: Duration,
    /// How long a detach waits for the node to unmount before it may be forced (upstream: 6 min).
    pub max_wait_for_unmount: Duration,
    /// Whether an unhealthy node's volumes are force-detached after that wait; off by default
    /// because forcing without fencing can let two kernels write one block device.
    pub force_detach_on_timeout: bool,
    /// How far the controller's view of pods and nodes lags behind the orchestrator's API.
    pub cache_lag: Duration,
    /// How far the node-status cache that an upstream-style updater diffs against (`upstream-bug
    /// c6`) lags behind the store; the source of kubernetes#122413. Our updater never reads it.
    pub status_cache_lag: Duration,
    /// How long the simulated backend takes to attach.
    pub attach_latency: Duration,
    /// How long the simulated backend takes to detach.
    pub detach_latency: Duration,
    /// How long a node status write takes to land in the store.
    pub status_latency: Duration,
    /// Seeds every random choice the simulator makes, so a run replays exactly: 0 (the default)
    /// makes none, so hand-written timelines are exact; any other value varies each backend
    /// call's latency between half and one and a half of its setting.
    pub seed: u64,
    /// Upstream bugs whose reproduction is switched on, to show the scenario catches them.
    pub upstream_bugs: BTreeSet<UpstreamBug>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reconcile_period: Duration::from_millis(100),
            sync_period: Duration::from_secs(60),
            max_wait_for_unmount: Duration::from_secs(6 * 60),
            force_detach_on_timeout: false,
            cache_lag: Duration::ZERO,
            status_cache_lag: Duration::ZERO,
            attach_latency: Duration::from_millis(200),
            detach_latency: Duration::from_millis(200),
            status_latency: Duration::from_millis(10),
            seed: 0,
            upstream_bugs: BTreeSet::new(),
        }
    }
}

impl Settings {
    /// The keys of the duration-valued settings, in file order (for tests that try each).
    pub fn duration_keys() -> [&'static str; 8] {
        Settings::default().durations_mut().map(|(key, _)| key)
    }

    /// The duration-valued settings with their keys: one table for parsing and printing.
    fn durations_mut(&mut self) -> [(&'static str, &mut Duration); 8] {
        [
            ("reconcile-period", &mut self.reconcile_period),
            ("sync-period", &mut self.sync_period),
            ("max-wait-for-unmount", &mut self.max_wait_for_unmount),
            ("cache-lag", &mut self.cache_lag),
            ("status-cache-lag", &mut self.status_cache_lag),
            ("attach-latency", &mut self.attach_latency),
            ("detach-latency", &mut self.detach_latency),
            ("status-latency", &mut self.status_latency),
        ]
    }
}

/// An upstream bug the simulator can reproduce on demand (`set upstream-bug c1 on`), so a
/// scenario can be shown to fail against the behaviour it guards against. The simulator defines
/// what each one reproduces; the parser only names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpstreamBug {
    /// Reproduction `c1`.
    C1,
    /// Reproduction `c2`.
    C2,
    /// Reproduction `c3`.
    C3,
    /// Reproduction `c4`.
    C4,
    /// Reproduction `c5`.
    C5,
    /// Reproduction `c6`.
    C6,
}

/// One `at` line: an action at a point in virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// When, counted from the start of the scenario.
    pub at: Duration,
    /// The 1-based source line, so a failed expectation can point at its line.
    pub line: usize,
    /// What happens.
    pub action: Action,
}

/// What an `at` line makes happen, or checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A pod is scheduled to a node and needs these volumes.
    Schedule {
        /// The pod.
        pod: String,
        /// Where it is scheduled.
        node: String,
        /// The volumes it uses (at least one).
        volumes: Vec<String>,
    },
    /// A graceful delete: the node agent unmounts, then the pod is gone.
    Delete {
        /// The pod.
        pod: String,
    },
    /// A force delete: gone from the API at once; a live agent unmounts later.
    ForceDelete {
        /// The pod.
        pod: String,
    },
    /// The node's agent stops: nothing unmounts and the node turns unhealthy.
    Crash(String),
    /// The node's agent comes back.
    Recover(String),
    /// The node is marked out-of-service; its pods are force-deleted.
    Fence(String),
    /// The out-of-service mark is removed.
    Unfence(String),
    /// The next attach calls of a volume to a node fail.
    FailAttach {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How many consecutive calls fail (at least 1).
        times: u32,
        /// The call errors although the backend did attach.
        uncertain: bool,
    },
    /// The next detach calls of a volume from a node fail.
    FailDetach {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How many consecutive calls fail (at least 1).
        times: u32,
        /// The call errors although the backend did detach.
        uncertain: bool,
    },
    /// The next node status writes for a node fail.
    FailStatus {
        /// The node.
        node: String,
        /// How many consecutive writes fail (at least 1).
        times: u32,
    },
    /// The controller restarts: in-flight calls are lost to it; it recovers from store and
    /// backend.
    RestartController,
    /// A check of the simulated world at this time.
    Expect(Expectation),
}

/// A check the runner makes at a step's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// The pod is in this state.
    Pod {
        /// The pod.
        pod: String,
        /// Its expected state.
        state: PodState,
    },
    /// The backend has the volume attached to the node.
    Attached {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// The backend does not have the volume attached to the node.
    Detached {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
    },
    /// The node's reported list in the store is exactly this (empty for `none`).
    Reported {
        /// The node.
        node: String,
        /// The expected list, in the order written.
        volumes: Vec<String>,
    },
    /// A Multi-Attach event was emitted for the pod.
    Event {
        /// The pod.
        pod: String,
    },
    /// No Multi-Attach event was emitted for the pod.
    NoEvent {
        /// The pod.
        pod: String,
    },
    /// The number of backend calls of one kind for a volume and node so far.
    Calls {
        /// Attach or detach.
        op: CallOp,
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// How the seen count compares with `count`.
        cmp: Cmp,
        /// The count to compare with.
        count: u64,
    },
    /// The number of node status writes for a node so far (catches write churn).
    Writes {
        /// The node.
        node: String,
        /// How the seen count compares with `count`.
        cmp: Cmp,
        /// The count to compare with.
        count: u64,
    },
}

/// A pod state an expectation can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodState {
    /// All its volumes are mounted and it runs.
    Running,
    /// It exists but has not started (for instance, waiting for an attach).
    Pending,
    /// It no longer exists.
    Gone,
}

/// A backend call kind an expectation can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallOp {
    /// Attach calls.
    Attach,
    /// Detach calls.
    Detach,
}

/// How a counted value is compared, so that scripts can bound churn as well as require work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `<=`
    Le,
    /// `>=`
    Ge,
}

impl Cmp {
    /// Whether the count the runner `seen` satisfies the comparison with `expected`.
    pub fn holds(self, seen: u64, expected: u64) -> bool {
        match self {
            Cmp::Eq => seen == expected,
            Cmp::Le => seen <= expected,
            Cmp::Ge => seen >= expected,
        }
    }
}

type Result<T, E = ParseErrorKind> = std::result::Result<T, E>;

/// Parses a scenario script; the first error found is returned with its line.
///
/// A UTF-8 byte-order mark at the very start of the text is skipped, as editors on some systems
/// write one; anywhere else it is an ordinary (and invalid) character.
pub fn parse(text: &str) -> std::result::Result<Scenario, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser::default();
    for (index, raw) in text.lines().enumerate() {
        let line = index.saturating_add(1);
        let code = raw.split('#').next().unwrap_or_default();
        parser
            .statement(line, code)
            .map_err(|kind| ParseError { line, kind })?;
    }
    Ok(parser.scenario)
}

/// Formats a duration as the script writes it, in the largest unit that is exact (`90s`, `6m`).
///
/// The format has no unit below the millisecond, so a sub-millisecond remainder is dropped.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    const UNITS: [(u128, &str); 3] = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    if ms == 0 {
        return "0s".to_string();
    }
    for (size, unit) in UNITS {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

impl Scenario {
    /// Checks what [`parse`] checks of every duration, for a scenario built in code: each one
    /// (settings, step times, `run`) is at most [`MAX_DURATION`]. The runner refuses to simulate
    /// a scenario that fails this, and reports why instead.
    pub fn validate(&self) -> std::result::Result<(), ScenarioError> {
        let check = |what: String, value: Duration| {
            if value > MAX_DURATION {
                Err(ScenarioError::TooLong { what, value })
            } else {
                Ok(())
            }
        };
        let mut settings = self.settings.clone();
        for (key, value) in settings.durations_mut() {
            check(format!("`set {key}`"), *value)?;
        }
        for (index, step) in self.steps.iter().enumerate() {
            let what = format!("the time of step {} (line {})", index + 1, step.line);
            check(what, step.at)?;
        }
        if let Some(run) = self.run {
            check("`run`".to_string(), run)?;
        }
        Ok(())
    }

    /// The scenario as a script, so a generated schedule can be saved and replayed.
    ///
    /// `set` lines appear only for settings that differ from the defaults. For every scenario
    /// [`parse`] returns, `parse(&s.to_text())` equals `s` except for [`Step::line`]. A scenario
    /// built by hand round-trips if it could have been parsed: names without whitespace, commas or
    /// `#`, whole-millisecond durations, `times` of at least 1, non-empty `uses` lists, and so on.
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut settings = self.settings.clone();
        let mut defaults = Settings::default();
        for ((key, value), (_, default)) in settings
            .durations_mut()
            .into_iter()
            .zip(defaults.durations_mut())
        {
            if value != default {
                writeln!(f, "set {key} {}", format_duration(*value))?;
            }
        }
        if settings.force_detach_on_timeout != defaults.force_detach_on_timeout {
            writeln!(
                f,
                "set force-detach-on-timeout {}",
                settings.force_detach_on_timeout.word()
            )?;
        }
        if settings.seed != defaults.seed {
            writeln!(f, "set seed {}", settings.seed)?;
        }
        for bug in &settings.upstream_bugs {
            writeln!(f, "set upstream-bug {bug} on")?;
        }
        for node in &self.nodes {
            writeln!(f, "node {node}")?;
        }
        for (volume, access) in &self.volumes {
            writeln!(f, "volume {volume} {}", access.word())?;
        }
        for step in &self.steps {
            writeln!(f, "{step}")?;
        }
        if let Some(run) = self.run {
            writeln!(f, "run {}", format_duration(run))?;
        }
        Ok(())
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} {}", format_duration(self.at), self.action)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Schedule { pod, node, volumes } => {
                write!(f, "pod {pod} on {node} uses {}", volumes.join(","))
            }
            Action::Delete { pod } => write!(f, "delete pod {pod}"),
            Action::ForceDelete { pod } => write!(f, "force-delete pod {pod}"),
            Action::Crash(node) => write!(f, "node {node} crash"),
            Action::Recover(node) => write!(f, "node {node} recover"),
            Action::Fence(node) => write!(f, "node {node} fence"),
            Action::Unfence(node) => write!(f, "node {node} unfence"),
            Action::FailAttach {
                volume,
                node,
                times,
                uncertain,
            }
            | Action::FailDetach {
                volume,
                node,
                times,
                uncertain,
            } => {
                let op = if matches!(self, Action::FailAttach { .. }) {
                    "attach"
                } else {
                    "detach"
                };
                write!(f, "fail {op} {volume} on {node}")?;
                write_times(f, *times)?;
                if *uncertain {
                    write!(f, " uncertain")?;
                }
                Ok(())
            }
            Action::FailStatus { node, times } => {
                write!(f, "fail status {node}")?;
                write_times(f, *times)
            }
            Action::RestartController => write!(f, "restart controller"),
            Action::Expect(expectation) => write!(f, "expect {expectation}"),
        }
    }
}

/// Writes ` times <k>` unless `k` is the default of 1.
fn write_times(f: &mut fmt::Formatter<'_>, times: u32) -> fmt::Result {
    if times == 1 {
        Ok(())
    } else {
        write!(f, " times {times}")
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Pod { pod, state } => write!(f, "pod {pod} {state}"),
            Expectation::Attached { volume, node } => write!(f, "attached {volume} {node}"),
            Expectation::Detached { volume, node } => write!(f, "detached {volume} {node}"),
            Expectation::Reported { node, volumes } if volumes.is_empty() => {
                write!(f, "reported {node} none")
            }
            Expectation::Reported { node, volumes } => {
                write!(f, "reported {node} {}", volumes.join(","))
            }
            Expectation::Event { pod } => write!(f, "event multi-attach {pod}"),
            Expectation::NoEvent { pod } => write!(f, "no-event multi-attach {pod}"),
            Expectation::Calls {
                op,
                volume,
                node,
                cmp,
                count,
            } => {
                write!(f, "calls {op} {volume} {node} {cmp} {count}")
            }
            Expectation::Writes { node, cmp, count } => write!(f, "writes {node} {cmp} {count}"),
        }
    }
}

/// A closed set of words, one table for both parsing and printing so the two cannot drift.
trait Keyword: Copy + PartialEq + 'static {
    /// The words and the values they stand for.
    const WORDS: &'static [(&'static str, Self)];

    /// The word for this value.
    fn word(self) -> &'static str {
        Self::WORDS
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("?", |(word, _)| word)
    }

    /// The words as an error message lists them: "`a`, `b` or `c`".
    fn expected() -> String {
        let words: Vec<String> = Self::WORDS.iter().map(|(w, _)| format!("`{w}`")).collect();
        match words.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => words.concat(),
        }
    }
}

impl Keyword for bool {
    const WORDS: &'static [(&'static str, Self)] = &[("on", true), ("off", false)];
}

impl Keyword for Access {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("single-node", Access::SingleNode),
        ("multi-node", Access::MultiNode),
    ];
}

impl Keyword for UpstreamBug {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("c1", UpstreamBug::C1),
        ("c2", UpstreamBug::C2),
        ("c3", UpstreamBug::C3),
        ("c4", UpstreamBug::C4),
        ("c5", UpstreamBug::C5),
        ("c6", UpstreamBug::C6),
    ];
}

impl Keyword for PodState {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("running", PodState::Running),
        ("pending", PodState::Pending),
        ("gone", PodState::Gone),
    ];
}

impl Keyword for CallOp {
    const WORDS: &'static [(&'static str, Self)] =
        &[("attach", CallOp::Attach), ("detach", CallOp::Detach)];
}

impl Keyword for Cmp {
    const WORDS: &'static [(&'static str, Self)] =
        &[("=", Cmp::Eq), ("<=", Cmp::Le), (">=", Cmp::Ge)];
}

/// What a node line does, parsed with the same table as the other closed word sets.
#[derive(Clone, Copy, PartialEq)]
enum NodeEvent {
    Crash,
    Recover,
    Fence,
    Unfence,
}

impl Keyword for NodeEvent {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("crash", NodeEvent::Crash),
        ("recover", NodeEvent::Recover),
        ("fence", NodeEvent::Fence),
        ("unfence", NodeEvent::Unfence),
    ];
}

/// What a `fail` line targets.
#[derive(Clone, Copy, PartialEq)]
enum FailTarget {
    Attach,
    Detach,
    Status,
}

impl Keyword for FailTarget {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("attach", FailTarget::Attach),
        ("detach", FailTarget::Detach),
        ("status", FailTarget::Status),
    ];
}

macro_rules! display_keyword {
    ($($ty:ty),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.word())
            }
        }
    )*};
}

display_keyword!(UpstreamBug, PodState, CallOp, Cmp);

/// The tokens of one line, consumed left to right.
struct Tokens<'a>(std::str::SplitWhitespace<'a>);

impl<'a> Tokens<'a> {
    /// The next token, or an error saying what was `expected` there.
    fn next(&mut self, expected: &str) -> Result<&'a str> {
        self.0.next().ok_or_else(|| ParseErrorKind::Missing {
            expected: expected.to_string(),
        })
    }

    /// The next token, which must be exactly `word`.
    fn keyword(&mut self, word: &str) -> Result<()> {
        let expected = format!("`{word}`");
        let found = self.next(&expected)?;
        if found == word {
            Ok(())
        } else {
            Err(ParseErrorKind::Unexpected {
                expected,
                found: found.to_string(),
            })
        }
    }

    /// The next token, which must be one of `K`'s words.
    fn choose<K: Keyword>(&mut self) -> Result<K> {
        let found = self.next(&K::expected())?;
        K::WORDS
            .iter()
            .find(|(word, _)| *word == found)
            .map(|(_, value)| *value)
            .ok_or_else(|| ParseErrorKind::Unexpected {
                expected: K::expected(),
                found: found.to_string(),
            })
    }

    /// The next token as a name.
    fn name(&mut self, expected: &str) -> Result<String> {
        let token = self.next(expected)?;
        if token.contains(',') {
            return Err(ParseErrorKind::BadName(token.to_string()));
        }
        Ok(token.to_string())
    }

    /// The next token as a non-empty comma-separated list of distinct names.
    fn names(&mut self, expected: &str) -> Result<Vec<String>> {
        let token = self.next(expected)?;
        // A set to find repeats, so a pod with 20,000 volumes costs no 20,000 squared compares.
        let mut seen: HashSet<&str> = HashSet::new();
        let mut names: Vec<String> = Vec::new();
        for name in token.split(',') {
            if name.is_empty() {
                return Err(ParseErrorKind::BadList(token.to_string()));
            }
            if !seen.insert(name) {
                return Err(ParseErrorKind::DuplicateInList(name.to_string()));
            }
            names.push(name.to_string());
        }
        Ok(names)
    }

    /// The next token as a duration.
    fn duration(&mut self, expected: &str) -> Result<Duration> {
        parse_duration(self.next(expected)?)
    }

    /// The next token as a whole number.
    fn number(&mut self, expected: &str) -> Result<u64> {
        parse_number(self.next(expected)?)
    }

    /// The count after `times`: at least 1, at most `u32::MAX`.
    fn times(&mut self) -> Result<u32> {
        let token = self.next("a count after `times`")?;
        match u32::try_from(parse_number(token)?) {
            Ok(0) => Err(ParseErrorKind::ZeroTimes),
            Ok(times) => Ok(times),
            Err(_) => Err(ParseErrorKind::NumberOverflow(token.to_string())),
        }
    }

    /// The next token, without consuming it.
    fn peek(&self) -> Option<&'a str> {
        self.0.clone().next()
    }

    /// Succeeds if the line has no token left.
    fn finish(mut self) -> Result<()> {
        match self.0.next() {
            Some(extra) => Err(ParseErrorKind::Extra(extra.to_string())),
            None => Ok(()),
        }
    }
}

/// The value of a string of ASCII digits, or `None` if it does not fit a `u64`.
fn digits_value(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |value, digit| {
        value
            .checked_mul(10)?
            .checked_add(u64::from(digit.wrapping_sub(b'0')))
    })
}

/// Parses a whole number made of ASCII digits only (no sign, unlike `str::parse`).
fn parse_number(token: &str) -> Result<u64> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseErrorKind::BadNumber(token.to_string()));
    }
    digits_value(token).ok_or_else(|| ParseErrorKind::NumberOverflow(token.to_string()))
}

/// Parses `150ms`, `2s`, `6m`, `1h` or a bare `0`, at most [`MAX_DURATION`].
fn parse_duration(token: &str) -> Result<Duration> {
    let bad = || ParseErrorKind::BadDuration(token.to_string());
    let too_long = || ParseErrorKind::DurationTooLong(token.to_string());
    // Every byte before the split is an ASCII digit, so the split is on a char boundary.
    let split = token
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(token.len());
    let (digits, unit) = token.split_at(split);
    if digits.is_empty() {
        return Err(bad());
    }
    // The unit is checked before the value, so `99999999999999999999x` reads as a bad unit.
    let millis_per_unit: u64 = match unit {
        "" if digits.bytes().all(|b| b == b'0') => return Ok(Duration::ZERO),
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    // A value too large for a u64 of milliseconds is far beyond the bound too.
    let duration = digits_value(digits)
        .and_then(|value| value.checked_mul(millis_per_unit))
        .map(Duration::from_millis)
        .ok_or_else(too_long)?;
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}

/// The state the checks need while reading the lines in order.
#[derive(Default)]
struct Parser {
    scenario: Scenario,
    /// Declared nodes and their lines.
    nodes: HashMap<String, usize>,
    /// Declared volumes and their lines.
    volumes: HashMap<String, usize>,
    /// Settings given so far and their lines.
    set_lines: HashMap<String, usize>,
    /// The `run` line (the first and last `at` lines are in `scenario.steps`).
    run_line: Option<usize>,
}

impl Parser {
    /// Parses one line with its comment already removed.
    fn statement(&mut self, line: usize, code: &str) -> Result<()> {
        let mut tokens = Tokens(code.split_whitespace());
        let Some(word) = tokens.0.next() else {
            return Ok(());
        };
        match word {
            "set" => self.set(line, &mut tokens)?,
            "node" => self.declare_node(line, &mut tokens)?,
            "volume" => self.declare_volume(line, &mut tokens)?,
            "at" => self.step(line, &mut tokens)?,
            "run" => self.run(line, &mut tokens)?,
            other => return Err(ParseErrorKind::UnknownStatement(other.to_string())),
        }
        tokens.finish()
    }

    fn set(&mut self, line: usize, tokens: &mut Tokens<'_>) -> Result<()> {
        if let Some(first) = self.scenario.steps.first() {
            return Err(ParseErrorKind::SetAfterAt {
                first_at_line: first.line,
            });
        }
        let key = tokens.next("a setting name")?;
        let settings = &mut self.scenario.settings;
        let key = match key {
            "upstream-bug" => {
                let bug: UpstreamBug = tokens.choose()?;
                if tokens.choose()? {
                    settings.upstream_bugs.insert(bug);
                } else {
                    settings.upstream_bugs.remove(&bug);
                }
                format!("upstream-bug {bug}")
            }
            "force-detach-on-timeout" => {
                settings.force_detach_on_timeout = tokens.choose()?;
                key.to_string()
            }
            "seed" => {
                settings.seed = tokens.number("a seed (a whole number)")?;
                key.to_string()
            }
            _ => {
                let Some((_, field)) = settings
                    .durations_mut()
                    .into_iter()
                    .find(|(name, _)| *name == key)
                else {
                    return Err(ParseErrorKind::UnknownSetting(key.to_string()));
                };
                *field = tokens.duration("a duration like 150ms, 2s, 6m or 1h")?;
                key.to_string()
            }
        };
        if let Some(&first_line) = self.set_lines.get(&key) {
            return Err(ParseErrorKind::DuplicateSetting { key, first_line });
        }
        self.set_lines.insert(key, line);
        Ok(())
    }

    fn declare_node(&mut self, line: usize, tokens: &mut Tokens<'_>) -> Result<()> {
        let name = tokens.name("a node name")?;
        if let Some(&first_line) = self.nodes.get(&name) {
            return Err(ParseErrorKind::DuplicateNode { name, first_line });
        }
        self.nodes.insert(name.clone(), line);
        self.scenario.nodes.push(name);
        Ok(())
    }

    fn declare_volume(&mut self, line: usize, tokens: &mut Tokens<'_>) -> Result<()> {
        let name = tokens.name("a volume name")?;
        if name == "none" {
            return Err(ParseErrorKind::ReservedVolumeName);
        }
        let access: Access = tokens.choose()?;
        if let Some(&first_line) = self.volumes.get(&name) {
            return Err(ParseErrorKind::DuplicateVolume { name, first_line });
        }
        self.volumes.insert(name.clone(), line);
        self.scenario.volumes.push((name, access));
        Ok(())
    }

    fn run(&mut self, line: usize, tokens: &mut Tokens<'_>) -> Result<()> {
        let run = tokens.duration("the run length, a duration like 150ms, 2s, 6m or 1h")?;
        if let Some(first_line) = self.run_line {
            return Err(ParseErrorKind::DuplicateRun { first_line });
        }
        if let Some(last) = self.scenario.steps.last() {
            if run < last.at {
                return Err(ParseErrorKind::RunTooShort {
                    run,
                    step_at: last.at,
                    step_line: last.line,
                });
            }
        }
        self.run_line = Some(line);
        self.scenario.run = Some(run);
        Ok(())
    }

    fn step(&mut self, line: usize, tokens: &mut Tokens<'_>) -> Result<()> {
        let at = tokens.duration("a time like 150ms, 2s, 6m or 1h")?;
        if let Some(previous) = self.scenario.steps.last() {
            if at < previous.at {
                return Err(ParseErrorKind::TimeGoesBackwards {
                    at,
                    previous: previous.at,
                    previous_line: previous.line,
                });
            }
        }
        if let (Some(run), Some(run_line)) = (self.scenario.run, self.run_line) {
            if at > run {
                return Err(ParseErrorKind::StepAfterRun { at, run, run_line });
            }
        }
        let action = self.action(tokens)?;
        self.scenario.steps.push(Step { at, line, action });
        Ok(())
    }

    /// A node name that an earlier line declared.
    fn node(&self, tokens: &mut Tokens<'_>) -> Result<String> {
        let name = tokens.name("a node name")?;
        if self.nodes.contains_key(&name) {
            Ok(name)
        } else {
            Err(ParseErrorKind::UndeclaredNode(name))
        }
    }

    /// A volume name that an earlier line declared.
    fn volume(&self, tokens: &mut Tokens<'_>) -> Result<String> {
        let name = tokens.name("a volume name")?;
        self.declared_volume(name)
    }

    fn declared_volume(&self, name: String) -> Result<String> {
        if self.volumes.contains_key(&name) {
            Ok(name)
        } else {
            Err(ParseErrorKind::UndeclaredVolume(name))
        }
    }

    /// A comma-separated list of declared volumes.
    fn volume_list(&self, tokens: &mut Tokens<'_>, expected: &str) -> Result<Vec<String>> {
        tokens
            .names(expected)?
            .into_iter()
            .map(|name| self.declared_volume(name))
            .collect()
    }

    fn action(&self, tokens: &mut Tokens<'_>) -> Result<Action> {
        let word =
            tokens.next("an action (pod, delete, force-delete, node, fail, restart or expect)")?;
        Ok(match word {
            "pod" => {
                let pod = tokens.name("a pod name")?;
                tokens.keyword("on")?;
                let node = self.node(tokens)?;
                tokens.keyword("uses")?;
                let volumes = self.volume_list(tokens, "the volumes it uses, like `v1,v2`")?;
                Action::Schedule { pod, node, volumes }
            }
            "delete" => {
                tokens.keyword("pod")?;
                Action::Delete {
                    pod: tokens.name("a pod name")?,
                }
            }
            "force-delete" => {
                tokens.keyword("pod")?;
                Action::ForceDelete {
                    pod: tokens.name("a pod name")?,
                }
            }
            "node" => {
                let node = self.node(tokens)?;
                match tokens.choose()? {
                    NodeEvent::Crash => Action::Crash(node),
                    NodeEvent::Recover => Action::Recover(node),
                    NodeEvent::Fence => Action::Fence(node),
                    NodeEvent::Unfence => Action::Unfence(node),
                }
            }
            "fail" => self.fail(tokens)?,
            "restart" => {
                tokens.keyword("controller")?;
                Action::RestartController
            }
            "expect" => Action::Expect(self.expectation(tokens)?),
            other => return Err(ParseErrorKind::UnknownAction(other.to_string())),
        })
    }

    fn fail(&self, tokens: &mut Tokens<'_>) -> Result<Action> {
        let target: FailTarget = tokens.choose()?;
        // Attach and detach failures name a volume and may be uncertain; status failures do not.
        let volume = match target {
            FailTarget::Status => None,
            FailTarget::Attach | FailTarget::Detach => {
                let volume = self.volume(tokens)?;
                tokens.keyword("on")?;
                Some(volume)
            }
        };
        let node = self.node(tokens)?;
        let (mut times, mut uncertain) = (None, false);
        while let Some(option) = tokens.0.next() {
            match option {
                "times" if times.is_some() => return Err(ParseErrorKind::DuplicateOption("times")),
                "times" => times = Some(tokens.times()?),
                "uncertain" if volume.is_some() && uncertain => {
                    return Err(ParseErrorKind::DuplicateOption("uncertain"));
                }
                "uncertain" if volume.is_some() => uncertain = true,
                other => {
                    let expected = if volume.is_some() {
                        "`times <k>`, `uncertain` or the end of the line"
                    } else {
                        "`times <k>` or the end of the line"
                    };
                    return Err(ParseErrorKind::Unexpected {
                        expected: expected.to_string(),
                        found: other.to_string(),
                    });
                }
            }
        }
        let times = times.unwrap_or(1);
        Ok(match volume {
            None => Action::FailStatus { node, times },
            Some(volume) if target == FailTarget::Attach => Action::FailAttach {
                volume,
                node,
                times,
                uncertain,
            },
            Some(volume) => Action::FailDetach {
                volume,
                node,
                times,
                uncertain,
            },
        })
    }

    fn expectation(&self, tokens: &mut Tokens<'_>) -> Result<Expectation> {
        let word = tokens.next(
            "an expectation (pod, attached, detached, reported, event, no-event, calls or writes)",
        )?;
        Ok(match word {
            "pod" => Expectation::Pod {
                pod: tokens.name("a pod name")?,
                state: tokens.choose()?,
            },
            "attached" => Expectation::Attached {
                volume: self.volume(tokens)?,
                node: self.node(tokens)?,
            },
            "detached" => Expectation::Detached {
                volume: self.volume(tokens)?,
                node: self.node(tokens)?,
            },
            "reported" => {
                let node = self.node(tokens)?;
                let expected = "the reported volumes, like `v1,v2`, or `none`";
                let volumes = if tokens.peek() == Some("none") {
                    tokens.next(expected)?;
                    Vec::new()
                } else {
                    self.volume_list(tokens, expected)?
                };
                Expectation::Reported { node, volumes }
            }
            "event" => {
                tokens.keyword("multi-attach")?;
                Expectation::Event {
                    pod: tokens.name("a pod name")?,
                }
            }
            "no-event" => {
                tokens.keyword("multi-attach")?;
                Expectation::NoEvent {
                    pod: tokens.name("a pod name")?,
                }
            }
            "calls" => Expectation::Calls {
                op: tokens.choose()?,
                volume: self.volume(tokens)?,
                node: self.node(tokens)?,
                cmp: tokens.choose()?,
                count: tokens.number("a call count")?,
            },
            "writes" => Expectation::Writes {
                node: self.node(tokens)?,
                cmp: tokens.choose()?,
                count: tokens.number("a write count")?,
            },
            other => return Err(ParseErrorKind::UnknownExpectation(other.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Scenario {
        match parse(text) {
            Ok(scenario) => scenario,
            Err(error) => panic!("{}", error.with_file("test")),
        }
    }

    fn err(text: &str) -> ParseError {
        match parse(text) {
            Ok(scenario) => panic!("parsed, but should not have: {scenario:?}"),
            Err(error) => error,
        }
    }

    fn s(name: &str) -> String {
        name.to_string()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The scenario with every step's line set to 0, to compare scenarios from different texts.
    fn without_lines(mut scenario: Scenario) -> Scenario {
        for step in &mut scenario.steps {
            step.line = 0;
        }
        scenario
    }

    const HEADER: &str = "node a\nnode b\nvolume v single-node\nvolume w multi-node\n";

    /// The action of a single `at` line after [`HEADER`].
    fn action(line: &str) -> Action {
        let scenario = ok(&format!("{HEADER}{line}"));
        assert_eq!(scenario.steps.len(), 1, "{line}");
        assert_eq!(scenario.steps[0].line, 5, "{line}");
        scenario.steps[0].action.clone()
    }

    #[test]
    fn empty_text_is_the_default_scenario() {
        assert_eq!(ok(""), Scenario::default());
        assert_eq!(ok("\n\n   \n# only a comment\n"), Scenario::default());
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = Settings::default();
        assert_eq!(d.reconcile_period, ms(100));
        assert_eq!(d.sync_period, Duration::from_secs(60));
        assert_eq!(d.max_wait_for_unmount, Duration::from_secs(360));
        assert!(!d.force_detach_on_timeout);
        assert_eq!(d.cache_lag, Duration::ZERO);
        assert_eq!(d.attach_latency, ms(200));
        assert_eq!(d.detach_latency, ms(200));
        assert_eq!(d.status_latency, ms(10));
        assert_eq!(d.seed, 0);
        assert!(d.upstream_bugs.is_empty());
        assert_eq!(ok("node a").settings, d);
    }

    #[test]
    fn every_setting_parses() {
        let scenario = ok("set reconcile-period 50ms
            set sync-period 2m
            set max-wait-for-unmount 1h
            set force-detach-on-timeout on
            set cache-lag 300ms
            set status-cache-lag 5s
            set attach-latency 1s
            set detach-latency 2s
            set status-latency 0
            set seed 18446744073709551615
            set upstream-bug c1 on
            set upstream-bug c6 on
            set upstream-bug c3 off");
        let expected = Settings {
            reconcile_period: ms(50),
            sync_period: Duration::from_secs(120),
            max_wait_for_unmount: Duration::from_secs(3600),
            force_detach_on_timeout: true,
            cache_lag: ms(300),
            status_cache_lag: ms(5000),
            attach_latency: ms(1000),
            detach_latency: ms(2000),
            status_latency: Duration::ZERO,
            seed: u64::MAX,
            upstream_bugs: [UpstreamBug::C1, UpstreamBug::C6].into(),
        };
        assert_eq!(scenario.settings, expected);
        assert_eq!(
            ok("set force-detach-on-timeout off").settings,
            Settings::default()
        );
    }

    #[test]
    fn declarations_keep_file_order() {
        let scenario = ok("node b\nvolume z multi-node\nnode a\nvolume y single-node");
        assert_eq!(scenario.nodes, [s("b"), s("a")]);
        assert_eq!(
            scenario.volumes,
            [(s("z"), Access::MultiNode), (s("y"), Access::SingleNode)]
        );
    }

    #[test]
    fn every_action_parses() {
        assert_eq!(
            action("at 1s pod p on a uses v,w"),
            Action::Schedule {
                pod: s("p"),
                node: s("a"),
                volumes: vec![s("v"), s("w")]
            }
        );
        assert_eq!(action("at 1s delete pod p"), Action::Delete { pod: s("p") });
        assert_eq!(
            action("at 1s force-delete pod p"),
            Action::ForceDelete { pod: s("p") }
        );
        assert_eq!(action("at 1s node a crash"), Action::Crash(s("a")));
        assert_eq!(action("at 1s node a recover"), Action::Recover(s("a")));
        assert_eq!(action("at 1s node b fence"), Action::Fence(s("b")));
        assert_eq!(action("at 1s node b unfence"), Action::Unfence(s("b")));
        assert_eq!(
            action("at 1s fail attach v on a"),
            Action::FailAttach {
                volume: s("v"),
                node: s("a"),
                times: 1,
                uncertain: false
            }
        );
        let uncertain_detach = Action::FailDetach {
            volume: s("w"),
            node: s("b"),
            times: 3,
            uncertain: true,
        };
        assert_eq!(
            action("at 1s fail detach w on b times 3 uncertain"),
            uncertain_detach
        );
        assert_eq!(
            action("at 1s fail detach w on b uncertain times 3"),
            uncertain_detach
        );
        assert_eq!(
            action("at 1s fail status a"),
            Action::FailStatus {
                node: s("a"),
                times: 1
            }
        );
        assert_eq!(
            action("at 1s fail status a times 4294967295"),
            Action::FailStatus {
                node: s("a"),
                times: u32::MAX
            }
        );
        assert_eq!(
            action("at 1s restart controller"),
            Action::RestartController
        );
    }

    #[test]
    fn every_expectation_parses() {
        let expect = |line: &str| match action(line) {
            Action::Expect(expectation) => expectation,
            other => panic!("{line}: not an expectation: {other:?}"),
        };
        for (word, state) in [
            ("running", PodState::Running),
            ("pending", PodState::Pending),
            ("gone", PodState::Gone),
        ] {
            assert_eq!(
                expect(&format!("at 0 expect pod p {word}")),
                Expectation::Pod { pod: s("p"), state }
            );
        }
        assert_eq!(
            expect("at 0 expect attached v a"),
            Expectation::Attached {
                volume: s("v"),
                node: s("a")
            }
        );
        assert_eq!(
            expect("at 0 expect detached w b"),
            Expectation::Detached {
                volume: s("w"),
                node: s("b")
            }
        );
        assert_eq!(
            expect("at 0 expect reported a w,v"),
            Expectation::Reported {
                node: s("a"),
                volumes: vec![s("w"), s("v")]
            }
        );
        assert_eq!(
            expect("at 0 expect reported a none"),
            Expectation::Reported {
                node: s("a"),
                volumes: vec![]
            }
        );
        assert_eq!(
            expect("at 0 expect event multi-attach p"),
            Expectation::Event { pod: s("p") }
        );
        assert_eq!(
            expect("at 0 expect no-event multi-attach p"),
            Expectation::NoEvent { pod: s("p") }
        );
        for (word, cmp) in [("=", Cmp::Eq), ("<=", Cmp::Le), (">=", Cmp::Ge)] {
            assert_eq!(
                expect(&format!("at 0 expect calls detach v b {word} 2")),
                Expectation::Calls {
                    op: CallOp::Detach,
                    volume: s("v"),
                    node: s("b"),
                    cmp,
                    count: 2
                }
            );
            assert_eq!(
                expect(&format!("at 0 expect writes a {word} 15")),
                Expectation::Writes {
                    node: s("a"),
                    cmp,
                    count: 15
                }
            );
        }
        assert_eq!(
            expect("at 0 expect calls attach w a = 0"),
            Expectation::Calls {
                op: CallOp::Attach,
                volume: s("w"),
                node: s("a"),
                cmp: Cmp::Eq,
                count: 0
            }
        );
    }

    #[test]
    fn run_is_optional_and_may_come_first() {
        assert_eq!(ok(HEADER).run, None);
        let scenario = ok("run 10s\nnode a\nat 10s node a crash");
        assert_eq!(scenario.run, Some(Duration::from_secs(10)));
        assert_eq!(scenario.steps.len(), 1);
        assert_eq!(ok("at 5s restart controller\nrun 5s").run, Some(ms(5000)));
    }

    #[test]
    fn comments_blank_lines_and_spacing_are_ignored() {
        let scenario = ok("# a scenario\r\n\
             \r\n\
             node a # the only node\r\n\
             \t volume   v\tsingle-node   \r\n\
             #at 1s node a crash\r\n\
             at 2s node a crash#no space before the comment\r\n\
             \n\
             at 3s    expect   attached v a\n");
        assert_eq!(scenario.nodes, [s("a")]);
        assert_eq!(scenario.volumes, [(s("v"), Access::SingleNode)]);
        let lines: Vec<(Duration, usize)> = scenario.steps.iter().map(|s| (s.at, s.line)).collect();
        assert_eq!(lines, [(ms(2000), 6), (ms(3000), 8)]);
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped() {
        let plain = "node a\nvolume v single-node\nat 1s pod p on a uses v\nrun 2s\n";
        let marked = format!("\u{feff}{plain}");
        assert_eq!(ok(&marked), ok(plain));
        // Lines keep their numbers: the mark is not a line of its own.
        assert_eq!(ok(&marked).steps[0].line, 3);
        assert_eq!(err("\u{feff}node a\nfrobnicate").line, 2);
        // Only at the very start: elsewhere it is part of a token, as any other character.
        assert_eq!(
            err("node a\n\u{feff}node b").kind,
            ParseErrorKind::UnknownStatement(s("\u{feff}node"))
        );
    }

    #[test]
    fn equal_times_are_allowed_and_keep_file_order() {
        let scenario = ok("node a\nat 1s node a crash\nat 1s node a recover\nat 1s node a crash");
        let actions: Vec<&Action> = scenario.steps.iter().map(|s| &s.action).collect();
        assert_eq!(
            actions,
            [
                &Action::Crash(s("a")),
                &Action::Recover(s("a")),
                &Action::Crash(s("a"))
            ]
        );
    }

    #[test]
    fn pods_need_no_declaration_and_may_be_scheduled_twice() {
        let scenario = ok("node a\nvolume v single-node\n\
             at 0s pod p on a uses v\nat 1s pod p on a uses v\nat 2s expect pod q gone");
        assert_eq!(scenario.steps.len(), 3);
    }

    #[test]
    fn durations() {
        let good = [
            ("0", Duration::ZERO),
            ("000", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("0h", Duration::ZERO),
            ("150ms", ms(150)),
            ("2s", ms(2000)),
            ("6m", Duration::from_secs(360)),
            ("1h", Duration::from_secs(3600)),
            ("007s", ms(7000)),
            ("876000h", MAX_DURATION),
            ("52560000m", MAX_DURATION),
            ("3153600000s", MAX_DURATION),
            ("3153600000000ms", MAX_DURATION),
            ("0003153600000000ms", MAX_DURATION),
        ];
        for (text, expected) in good {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        let bad = [
            "",
            "5",
            "1",
            "ms",
            "s",
            "-1s",
            "+1s",
            "1.5s",
            "1sec",
            "1S",
            "1us",
            "1d",
            "1m30s",
            "1 s",
            "١s",
            "1é",
            "é",
            "1ms1",
            "99999999999999999999",
            "99999999999999999999x",
        ];
        for text in bad {
            assert_eq!(
                parse_duration(text),
                Err(ParseErrorKind::BadDuration(s(text))),
                "{text}"
            );
        }
        let too_long = [
            "876001h",
            "3153600001s",
            "3153600000001ms",
            "1000000h",
            "18446744073709551615ms",
            "18446744073709551616ms",
            "18446744073709551615s",
            "18446744073709551616s",
            "307445734561825861m",
            "5124095576030432h",
            "99999999999999999999999999999999h",
        ];
        for text in too_long {
            assert_eq!(
                parse_duration(text),
                Err(ParseErrorKind::DurationTooLong(s(text))),
                "{text}"
            );
        }
    }

    #[test]
    fn durations_print_in_the_largest_exact_unit() {
        let cases = [
            (Duration::ZERO, "0s"),
            (ms(1), "1ms"),
            (ms(1500), "1500ms"),
            (ms(2000), "2s"),
            (ms(90_000), "90s"),
            (Duration::from_secs(360), "6m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(3660), "61m"),
            (Duration::from_micros(1500), "1ms"),
            (Duration::from_nanos(1), "0s"),
            (ms(u64::MAX), "18446744073709551615ms"),
            (Duration::from_secs(u64::MAX), "18446744073709551615s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text, "{duration:?}");
        }
    }

    #[test]
    fn cmp_holds() {
        assert!(Cmp::Eq.holds(3, 3));
        assert!(!Cmp::Eq.holds(2, 3));
        assert!(Cmp::Le.holds(2, 3));
        assert!(Cmp::Le.holds(3, 3));
        assert!(!Cmp::Le.holds(4, 3));
        assert!(Cmp::Ge.holds(4, 3));
        assert!(Cmp::Ge.holds(3, 3));
        assert!(!Cmp::Ge.holds(2, 3));
    }

    #[test]
    fn each_error_names_its_line() {
        use ParseErrorKind as K;
        let missing = |expected: &str| K::Missing {
            expected: s(expected),
        };
        let unexpected = |expected: &str, found: &str| K::Unexpected {
            expected: s(expected),
            found: s(found),
        };
        // Each case comes after HEADER (4 lines), so its first line is line 5.
        let cases: Vec<(&str, usize, ParseErrorKind)> = vec![
            ("frobnicate", 5, K::UnknownStatement(s("frobnicate"))),
            ("AT 1s restart controller", 5, K::UnknownStatement(s("AT"))),
            ("at 1s explode", 5, K::UnknownAction(s("explode"))),
            ("at 1s expect magic", 5, K::UnknownExpectation(s("magic"))),
            ("\n\nnode", 7, missing("a node name")),
            ("volume x", 5, missing("`single-node` or `multi-node`")),
            (
                "volume x rwo",
                5,
                unexpected("`single-node` or `multi-node`", "rwo"),
            ),
            ("at", 5, missing("a time like 150ms, 2s, 6m or 1h")),
            (
                "at 1s",
                5,
                missing("an action (pod, delete, force-delete, node, fail, restart or expect)"),
            ),
            ("at 1s pod p at a uses v", 5, unexpected("`on`", "at")),
            (
                "at 1s pod p on a uses",
                5,
                missing("the volumes it uses, like `v1,v2`"),
            ),
            (
                "at 1s node a reboot",
                5,
                unexpected("`crash`, `recover`, `fence` or `unfence`", "reboot"),
            ),
            (
                "at 1s fail mount v on a",
                5,
                unexpected("`attach`, `detach` or `status`", "mount"),
            ),
            (
                "at 1s fail attach v on a twice",
                5,
                unexpected("`times <k>`, `uncertain` or the end of the line", "twice"),
            ),
            (
                "at 1s fail status a uncertain",
                5,
                unexpected("`times <k>` or the end of the line", "uncertain"),
            ),
            (
                "at 1s fail status a times",
                5,
                missing("a count after `times`"),
            ),
            (
                "at 1s expect pod p dead",
                5,
                unexpected("`running`, `pending` or `gone`", "dead"),
            ),
            (
                "at 1s expect calls verify v a = 1",
                5,
                unexpected("`attach` or `detach`", "verify"),
            ),
            (
                "at 1s expect writes a == 1",
                5,
                unexpected("`=`, `<=` or `>=`", "=="),
            ),
            ("at 1s expect event multi-attach", 5, missing("a pod name")),
            (
                "at 1s expect event attach p",
                5,
                unexpected("`multi-attach`", "attach"),
            ),
            (
                "set upstream-bug c7 on",
                5,
                unexpected("`c1`, `c2`, `c3`, `c4`, `c5` or `c6`", "c7"),
            ),
            ("set upstream-bug c1", 5, missing("`on` or `off`")),
            (
                "set force-detach-on-timeout yes",
                5,
                unexpected("`on` or `off`", "yes"),
            ),
            ("set", 5, missing("a setting name")),
            ("node c extra", 5, K::Extra(s("extra"))),
            ("at 1s restart controller now", 5, K::Extra(s("now"))),
            ("at 1s expect reported a none v", 5, K::Extra(s("v"))),
            ("run 1s 2s", 5, K::Extra(s("2s"))),
            ("set cache-lag 1.5s", 5, K::BadDuration(s("1.5s"))),
            ("at soon restart controller", 5, K::BadDuration(s("soon"))),
            (
                "run 99999999999999999999h",
                5,
                K::DurationTooLong(s("99999999999999999999h")),
            ),
            ("set seed -1", 5, K::BadNumber(s("-1"))),
            ("set seed +1", 5, K::BadNumber(s("+1"))),
            (
                "set seed 18446744073709551616",
                5,
                K::NumberOverflow(s("18446744073709551616")),
            ),
            (
                "at 1s fail status a times 4294967296",
                5,
                K::NumberOverflow(s("4294967296")),
            ),
            ("at 1s expect writes a = x", 5, K::BadNumber(s("x"))),
            ("at 1s fail attach v on a times 0", 5, K::ZeroTimes),
            ("at 1s fail status a times 00", 5, K::ZeroTimes),
            ("set cache-lags 1s", 5, K::UnknownSetting(s("cache-lags"))),
            (
                "set cache-lag 1s\nset cache-lag 2s",
                6,
                K::DuplicateSetting {
                    key: s("cache-lag"),
                    first_line: 5,
                },
            ),
            (
                "set upstream-bug c2 on\nset upstream-bug c2 off",
                6,
                K::DuplicateSetting {
                    key: s("upstream-bug c2"),
                    first_line: 5,
                },
            ),
            (
                "at 1s restart controller\n\nset seed 1",
                7,
                K::SetAfterAt { first_at_line: 5 },
            ),
            (
                "node a",
                5,
                K::DuplicateNode {
                    name: s("a"),
                    first_line: 1,
                },
            ),
            (
                "volume w single-node",
                5,
                K::DuplicateVolume {
                    name: s("w"),
                    first_line: 4,
                },
            ),
            ("at 1s node c crash", 5, K::UndeclaredNode(s("c"))),
            ("at 1s pod p on c uses v", 5, K::UndeclaredNode(s("c"))),
            ("at 1s expect writes c = 1", 5, K::UndeclaredNode(s("c"))),
            ("at 1s pod p on a uses v,x", 5, K::UndeclaredVolume(s("x"))),
            ("at 1s fail detach x on a", 5, K::UndeclaredVolume(s("x"))),
            ("at 1s expect reported a x", 5, K::UndeclaredVolume(s("x"))),
            ("at 1s expect attached x a", 5, K::UndeclaredVolume(s("x"))),
            (
                "at 1s node a crash\nnode c\nat 2s node c crash\nat 3s node d crash",
                8,
                K::UndeclaredNode(s("d")),
            ),
            ("node c,d", 5, K::BadName(s("c,d"))),
            ("at 1s delete pod p,q", 5, K::BadName(s("p,q"))),
            ("at 1s pod p on a uses v,", 5, K::BadList(s("v,"))),
            ("at 1s expect reported a ,v", 5, K::BadList(s(",v"))),
            ("at 1s pod p on a uses v,,w", 5, K::BadList(s("v,,w"))),
            ("at 1s pod p on a uses v,w,v", 5, K::DuplicateInList(s("v"))),
            ("volume none single-node", 5, K::ReservedVolumeName),
            (
                "at 1s fail attach v on a times 2 times 3",
                5,
                K::DuplicateOption("times"),
            ),
            (
                "at 1s fail detach v on a uncertain uncertain",
                5,
                K::DuplicateOption("uncertain"),
            ),
            (
                "at 2s node a crash\nat 1999ms node a recover",
                6,
                K::TimeGoesBackwards {
                    at: ms(1999),
                    previous: ms(2000),
                    previous_line: 5,
                },
            ),
            ("run 1s\nrun 1s", 6, K::DuplicateRun { first_line: 5 }),
            (
                "at 2s node a crash\nrun 1s",
                6,
                K::RunTooShort {
                    run: ms(1000),
                    step_at: ms(2000),
                    step_line: 5,
                },
            ),
            (
                "run 1s\nat 1s node a crash\nat 2s node a recover",
                7,
                K::StepAfterRun {
                    at: ms(2000),
                    run: ms(1000),
                    run_line: 5,
                },
            ),
        ];
        for (text, line, kind) in cases {
            let error = err(&format!("{HEADER}{text}"));
            assert_eq!(error, ParseError { line, kind }, "{text}");
        }
    }

    /// Each place a duration goes refuses one beyond the bound, with a typed error on its line;
    /// the bound itself is accepted everywhere.
    #[test]
    fn durations_beyond_the_bound_are_refused_everywhere() {
        let keys = Settings::duration_keys();
        let mut lines: Vec<String> = keys.iter().map(|k| format!("set {k} {{}}")).collect();
        lines.push("at {} restart controller".into());
        lines.push("run {}".into());
        for line in &lines {
            for huge in ["18446744073709551615s", "1000000h", "876001h"] {
                let text = format!("{HEADER}{}", line.replace("{}", huge));
                assert_eq!(
                    err(&text),
                    ParseError {
                        line: 5,
                        kind: ParseErrorKind::DurationTooLong(s(huge))
                    },
                    "{text}"
                );
            }
            let at_bound = ok(&format!("{HEADER}{}", line.replace("{}", "876000h")));
            assert_eq!(at_bound.validate(), Ok(()), "{line}");
        }
        // With a seed the backend stretches latencies by up to half again: still accepted.
        let seeded = ok("set seed 1\nset attach-latency 876000h\nset detach-latency 876000h");
        assert_eq!(seeded.settings.attach_latency, MAX_DURATION);
    }

    #[test]
    fn messages_state_the_bound() {
        assert_eq!(
            err("run 1000000h").to_string(),
            "line 1: duration `1000000h` is too long: a scenario's durations are at most \
             876000h (100 years)"
        );
        assert_eq!(
            err("node a\nat 18446744073709551615s node a crash").to_string(),
            "line 2: duration `18446744073709551615s` is too long: a scenario's durations are \
             at most 876000h (100 years)"
        );
    }

    /// A scenario built in code gets the same bound from `validate`.
    #[test]
    fn validate_applies_the_bound_to_built_scenarios() {
        let too_long = MAX_DURATION + ms(1);
        let mut scenario = ok(HEADER);
        assert_eq!(scenario.validate(), Ok(()));
        scenario.settings.status_cache_lag = too_long;
        assert_eq!(
            scenario.validate(),
            Err(ScenarioError::TooLong {
                what: s("`set status-cache-lag`"),
                value: too_long
            })
        );
        scenario.settings = Settings::default();
        scenario.steps.push(Step {
            at: Duration::MAX,
            line: 9,
            action: Action::RestartController,
        });
        let error = scenario.validate().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the time of step 1 (line 9) is 18446744073709551615999ms, longer than 876000h \
             (100 years), the longest a scenario may use"
        );
        scenario.steps.clear();
        scenario.run = Some(too_long);
        assert!(matches!(
            scenario.validate(),
            Err(ScenarioError::TooLong { what, .. }) if what == "`run`"
        ));
    }

    #[test]
    fn messages_read_well() {
        let cases = [
            (
                "foo",
                "line 1: unknown statement `foo` (expected set, node, volume, at or run)",
            ),
            (
                "set cache-lag x",
                "line 1: expected a duration like 150ms, 2s, 6m or 1h, found `x`",
            ),
            (
                "at 1s node a crash",
                "line 1: node `a` is not declared (add `node a` before using it)",
            ),
            (
                "node a\nat 1s pod p on a uses v",
                "line 2: volume `v` is not declared (add `volume v single-node` before using it)",
            ),
            (
                "at 2s restart controller\nat 1500ms restart controller",
                "line 2: time goes backwards: `at 1500ms` comes after `at 2s` on line 1",
            ),
            (
                "at 2m restart controller\nrun 90s",
                "line 2: `run 90s` ends before the step `at 2m` on line 1",
            ),
            (
                "run 1m\nat 61s restart controller",
                "line 2: step `at 61s` lies beyond `run 1m` on line 1",
            ),
            (
                "node a\nat 1s fail status a times 0",
                "line 2: `times 0` injects nothing: use 1 or more",
            ),
            (
                "volume v single",
                "line 1: expected `single-node` or `multi-node`, found `single`",
            ),
            (
                "node",
                "line 1: expected a node name, found the end of the line",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(err(text).to_string(), message, "{text}");
        }
        assert_eq!(
            err("\nnode a b").with_file("incidents/49053.scn"),
            "incidents/49053.scn:2: unexpected `b` after the end of the statement"
        );
    }

    const RICH: &str = "\
        # Everything the format can say, with non-default settings.
        set reconcile-period 250ms
        set sync-period 90s
        set max-wait-for-unmount 0
        set force-detach-on-timeout on
        set cache-lag 1500ms
        set attach-latency 2m
        set detach-latency 1h
        set status-latency 0ms
        set seed 12345678901234567890
        set upstream-bug c4 on
        set upstream-bug c2 on
        node node-1
        node 节点
        volume pvc-1 single-node
        volume pvc-2 multi-node
        volume données multi-node
        at 0 pod web-0 on node-1 uses pvc-1,pvc-2
        at 0 pod web-1 on 节点 uses données
        at 100ms expect pod web-0 pending
        at 1s fail attach pvc-1 on 节点 uncertain
        at 1s fail detach pvc-1 on node-1 times 3
        at 1s fail detach pvc-2 on node-1 times 2 uncertain
        at 1s fail status node-1
        at 1s fail status 节点 times 7
        at 2s delete pod web-0
        at 2s force-delete pod web-1
        at 3s node 节点 crash
        at 3s node 节点 fence
        at 4s node 节点 unfence
        at 4s node 节点 recover
        at 5s restart controller
        at 6m expect pod web-0 gone
        at 6m expect pod web-1 running
        at 6m expect attached pvc-1 node-1
        at 6m expect detached pvc-2 节点
        at 6m expect reported node-1 pvc-2,pvc-1
        at 6m expect reported 节点 none
        at 6m expect event multi-attach web-1
        at 6m expect no-event multi-attach web-0
        at 6m expect calls attach pvc-1 node-1 = 1
        at 6m expect calls detach données 节点 <= 0
        at 6m expect writes node-1 >= 18446744073709551615
        run 1h";

    #[test]
    fn round_trip_of_a_rich_scenario() {
        let scenario = ok(RICH);
        assert_eq!(scenario.steps.len(), 26);
        let text = scenario.to_text();
        assert_eq!(without_lines(ok(&text)), without_lines(scenario.clone()));
        // The printed form is canonical: printing it again changes nothing.
        assert_eq!(ok(&text).to_text(), text);
        // Defaults are not printed; durations use the largest exact unit.
        assert_eq!(
            ok("set seed 0\nset cache-lag 0\nnode a").to_text(),
            "node a\n"
        );
        assert!(text.starts_with(
            "set reconcile-period 250ms\nset sync-period 90s\nset max-wait-for-unmount 0s\n"
        ));
        assert!(
            text.contains(
                "\nset attach-latency 2m\nset detach-latency 1h\nset status-latency 0s\n"
            )
        );
        assert!(text.contains("\nset upstream-bug c2 on\nset upstream-bug c4 on\n"));
        assert!(text.contains("\nat 0s pod web-0 on node-1 uses pvc-1,pvc-2\n"));
        assert!(text.contains("\nat 1s fail status node-1\nat 1s fail status 节点 times 7\n"));
        assert!(text.ends_with("\nrun 1h\n"));
    }

    #[test]
    fn round_trip_of_a_built_scenario() {
        let mut scenario = Scenario::default();
        scenario.settings.cache_lag = ms(61_000);
        scenario.nodes = vec![s("a")];
        scenario.volumes = vec![(s("v"), Access::SingleNode)];
        scenario.steps = vec![Step {
            at: Duration::from_secs(7200),
            line: 0,
            action: Action::FailDetach {
                volume: s("v"),
                node: s("a"),
                times: 2,
                uncertain: true,
            },
        }];
        scenario.run = Some(Duration::from_secs(7200));
        let text = scenario.to_text();
        assert_eq!(
            text,
            "set cache-lag 61s\nnode a\nvolume v single-node\n\
             at 2h fail detach v on a times 2 uncertain\nrun 2h\n"
        );
        assert_eq!(without_lines(ok(&text)), scenario);
    }

    /// xorshift64: a tiny deterministic generator so the mutation test needs no dependency.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        /// A value in `0..n` (`n > 0`).
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Applies one random edit to `chars`: text that is nearly valid finds more paths than noise.
    fn mutate(rng: &mut XorShift, chars: &mut Vec<char>, tokens: &[&str]) {
        const ALPHABET: &[char] = &[
            ' ', '\t', '\n', '\r', '#', ',', '0', '1', '9', 'm', 's', 'h', '=', '<', '>', 'é',
            '节', '\u{0}', '\u{200b}', '\u{3000}', '🦀', '-', '+', '.',
        ];
        let len = chars.len();
        match rng.below(8) {
            // Delete a run of characters.
            0 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(8)).min(len);
                chars.drain(at..end);
            }
            // Insert a character.
            1 => {
                let c = ALPHABET[rng.below(ALPHABET.len())];
                chars.insert(rng.below(len + 1), c);
            }
            // Replace a character.
            2 if len > 0 => chars[rng.below(len)] = ALPHABET[rng.below(ALPHABET.len())],
            // Insert a token from the valid scenario, with a space before it.
            3 => {
                let token = tokens[rng.below(tokens.len())];
                let at = rng.below(len + 1);
                chars.splice(at..at, std::iter::once(' ').chain(token.chars()));
            }
            // Duplicate a line.
            4 => {
                let text: String = chars.iter().collect();
                let lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let line = lines[rng.below(lines.len())];
                    let at = rng.below(len + 1);
                    let insert: Vec<char> = format!("\n{line}\n").chars().collect();
                    chars.splice(at..at, insert);
                }
            }
            // Swap two characters.
            5 if len > 1 => chars.swap(rng.below(len), rng.below(len)),
            // Replace digits with a huge number, to hit the overflow checks.
            6 => {
                let at = rng.below(len + 1);
                chars.splice(at..at, "99999999999999999999".chars());
            }
            // Truncate.
            _ => chars.truncate(rng.below(len + 1)),
        }
    }

    #[test]
    fn mutations_never_panic_and_errors_name_a_real_line() {
        let tokens: Vec<&str> = RICH.split_whitespace().collect();
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let (mut parsed, mut failed) = (0, 0);
        for _ in 0..2000 {
            let mut chars: Vec<char> = RICH.chars().collect();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut chars, &tokens);
            }
            let text: String = chars.iter().collect();
            match parse(&text) {
                Ok(scenario) => {
                    parsed += 1;
                    let again = parse(&scenario.to_text())
                        .unwrap_or_else(|e| panic!("{e} in the printed form of:\n{text}"));
                    assert_eq!(without_lines(again), without_lines(scenario), "{text}");
                }
                Err(error) => {
                    failed += 1;
                    let lines = text.lines().count();
                    assert!(
                        (1..=lines + 1).contains(&error.line),
                        "line {} of {lines}: {error}\n{text}",
                        error.line
                    );
                }
            }
        }
        // Both outcomes must be common, or the test is not exercising what it claims to.
        assert!(
            parsed >= 50 && failed >= 50,
            "parsed {parsed}, failed {failed}"
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut rng = XorShift(42);
        for _ in 0..500 {
            let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
            let text = String::from_utf8_lossy(&bytes);
            if let Err(error) = parse(&text) {
                assert!(error.line >= 1 && error.line <= text.lines().count() + 1);
            }
        }
    }
}
