//! Text in, [`Scenario`] out: the tokenizer, the duration and number syntax, and the checks that
//! need no simulation (declarations before use, time never going backwards, ...). It never
//! panics, whatever the input, and every error names its line.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::keyword::Keyword;
use super::types::{
    Action, AttachLimit, Expectation, MAX_DURATION, SIM_OVERDUE, Scenario, Step, UpstreamBug,
};
use super::{ParseError, ParseErrorKind};
use crate::core::calls::volume::Access;

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

/// Parses a scenario script given as bytes, as read from a file: like [`parse`], and text that
/// is not UTF-8 is refused with the line it is on ([`ParseErrorKind::InvalidUtf8`]), unless an
/// earlier line has an error of its own, which comes first as it would in [`parse`].
///
/// ```
/// use attach_detach::sim::scenario::{parse_bytes, ParseError, ParseErrorKind};
/// let error = parse_bytes(b"node a\nnode b\xff\n").unwrap_err();
/// assert_eq!(error, ParseError { line: 2, kind: ParseErrorKind::InvalidUtf8 { column: 7 } });
/// ```
pub fn parse_bytes(bytes: &[u8]) -> std::result::Result<Scenario, ParseError> {
    let invalid = match std::str::from_utf8(bytes) {
        Ok(text) => return parse(text),
        Err(invalid) => invalid.valid_up_to(),
    };
    // The lines before the one with the bad byte are valid; their errors come first.
    let line_start = bytes[..invalid]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |newline| newline + 1);
    let before = std::str::from_utf8(&bytes[..line_start]).unwrap_or_default();
    parse(before)?;
    Err(ParseError {
        line: before.lines().count().saturating_add(1),
        kind: ParseErrorKind::InvalidUtf8 {
            column: invalid - line_start + 1,
        },
    })
}

/// The action words, as a message lists them.
const ACTIONS: &str = "an action (pod, delete, force-delete, node, fail, hang, release, partition, \
     heal, restart or expect)";

/// Whether the tokens after `release` (or `operator-detach`) are the unmount form,
/// `unmount <v> on <n>`, rather than `<v> from <n>`. A volume may be named `unmount`:
/// `release unmount from <n>` is the second form, which the first cannot be (its third word is
/// `on`). Any other line that starts with `unmount` is read as the first form, so that its
/// errors say what that form expects.
fn unmount_form(tokens: &Tokens<'_>) -> bool {
    let mut rest = tokens.rest();
    let first = rest.next();
    let release_of_unmount = matches!(
        (rest.next(), rest.next(), rest.next()),
        (Some("from"), Some(_), None)
    );
    first == Some("unmount") && !release_of_unmount
}

/// What a node line does, parsed with the same table as the other closed word sets.
#[derive(Clone, Copy, PartialEq)]
enum NodeEvent {
    Crash,
    Recover,
    Fence,
    Unfence,
    Delete,
    Create,
    StopReporting,
    ResumeReporting,
    PowerOff,
    PowerOn,
}

impl Keyword for NodeEvent {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("crash", NodeEvent::Crash),
        ("recover", NodeEvent::Recover),
        ("fence", NodeEvent::Fence),
        ("unfence", NodeEvent::Unfence),
        ("delete", NodeEvent::Delete),
        ("create", NodeEvent::Create),
        ("stop-reporting", NodeEvent::StopReporting),
        ("resume-reporting", NodeEvent::ResumeReporting),
        ("power-off", NodeEvent::PowerOff),
        ("power-on", NodeEvent::PowerOn),
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
        checked_name(token)
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
            names.push(checked_name(name)?);
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

    /// A backend load limit or burst: at least 1, at most `u32::MAX`.
    fn limit(&mut self) -> Result<u32> {
        let token = self.next("a limit (a whole number, at least 1)")?;
        match u32::try_from(parse_number(token)?) {
            Ok(0) => Err(ParseErrorKind::Unexpected {
                expected: "a limit of at least 1".to_string(),
                found: token.to_string(),
            }),
            Ok(limit) => Ok(limit),
            Err(_) => Err(ParseErrorKind::NumberOverflow(token.to_string())),
        }
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

    /// The tokens left, without consuming them.
    fn rest(&self) -> impl Iterator<Item = &'a str> {
        self.0.clone()
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

/// `token` as a name, unless it has a control character.
fn checked_name(token: &str) -> Result<String> {
    if token.chars().any(char::is_control) {
        return Err(ParseErrorKind::ControlCharacter(token.to_string()));
    }
    Ok(token.to_string())
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
pub(super) fn parse_duration(token: &str) -> Result<Duration> {
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
            "machine-fencing" => {
                settings.machine_fencing = tokens.choose()?;
                key.to_string()
            }
            "seed" => {
                settings.seed = tokens.number("a seed (a whole number)")?;
                key.to_string()
            }
            "verify-batch" => {
                settings.verify_batch = Some(tokens.limit()? as usize);
                key.to_string()
            }
            "volumes-per-pass" => {
                settings.volumes_per_pass = Some(tokens.limit()? as usize);
                key.to_string()
            }
            "max-attaches" => {
                settings.backend_load.max_attaches = Some(tokens.limit()? as usize);
                key.to_string()
            }
            "max-detaches" => {
                settings.backend_load.max_detaches = Some(tokens.limit()? as usize);
                key.to_string()
            }
            "overdue-after" => {
                let after = tokens.duration("a duration like 1s")?;
                if after.is_zero() {
                    return Err(ParseErrorKind::Unexpected {
                        expected: "a duration longer than zero".to_string(),
                        found: "0s".to_string(),
                    });
                }
                let overdue = settings.backend_load.overdue.get_or_insert(SIM_OVERDUE);
                overdue.after = after;
                key.to_string()
            }
            "max-overdue" => {
                let max = tokens.limit()? as usize;
                let overdue = settings.backend_load.overdue.get_or_insert(SIM_OVERDUE);
                overdue.max = max;
                key.to_string()
            }
            "backend-rate" => {
                let every = tokens.duration("a token interval like 100ms")?;
                if every.is_zero() {
                    return Err(ParseErrorKind::Unexpected {
                        expected: "a token interval longer than zero".to_string(),
                        found: "0s".to_string(),
                    });
                }
                let burst = tokens.limit()?;
                settings.backend_load.rate = Some(crate::config::RateLimit { every, burst });
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
        if tokens.peek() == Some("attach-limit") {
            tokens.keyword("attach-limit")?;
            let limit = tokens.number("how many volumes the node can hold")?;
            let limit = u32::try_from(limit)
                .map_err(|_| ParseErrorKind::NumberOverflow(limit.to_string()))?;
            let reported = tokens.peek() != Some("unreported");
            if !reported {
                tokens.keyword("unreported")?;
            }
            self.scenario
                .attach_limits
                .insert(name.clone(), AttachLimit { limit, reported });
        }
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
        if tokens.peek() == Some("claim-only") {
            tokens.keyword("claim-only")?;
            self.scenario.claim_only.insert(name.clone());
        }
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
        let word = tokens.next(ACTIONS)?;
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
                    NodeEvent::Delete => Action::DeleteNode(node),
                    NodeEvent::Create => Action::CreateNode(node),
                    NodeEvent::StopReporting => Action::StopReporting(node),
                    NodeEvent::ResumeReporting => Action::ResumeReporting(node),
                    NodeEvent::PowerOff => Action::PowerOff(node),
                    NodeEvent::PowerOn => Action::PowerOn(node),
                }
            }
            "release" | "operator-detach" if word != "release" || !unmount_form(tokens) => {
                let volume = self.volume(tokens)?;
                tokens.keyword("from")?;
                let node = self.node(tokens)?;
                if word == "release" {
                    Action::ReleaseVolume { volume, node }
                } else {
                    Action::OperatorDetach { volume, node }
                }
            }
            "hang" | "release" => {
                tokens.keyword("unmount")?;
                let volume = self.volume(tokens)?;
                tokens.keyword("on")?;
                let node = self.node(tokens)?;
                if word == "hang" {
                    Action::HangUnmount { volume, node }
                } else {
                    Action::ReleaseUnmount { volume, node }
                }
            }
            "partition" | "heal" => {
                tokens.keyword("backend")?;
                let node = self.node(tokens)?;
                if word == "partition" {
                    Action::PartitionBackend(node)
                } else {
                    Action::HealBackend(node)
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
            "an expectation (pod, attached, detached, reported, event, no-event, calls, writes or wait)",
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
            "event" if tokens.peek() == Some("node-full") => {
                tokens.keyword("node-full")?;
                Expectation::NodeFullEvent {
                    pod: tokens.name("a pod name")?,
                }
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
            "wait" => Expectation::Wait {
                subject: tokens.name("a pod or volume name")?,
                wait: tokens.choose()?,
                node: match tokens.peek() {
                    Some(_) => Some(self.node(tokens)?),
                    None => None,
                },
            },
            other => return Err(ParseErrorKind::UnknownExpectation(other.to_string())),
        })
    }
}
