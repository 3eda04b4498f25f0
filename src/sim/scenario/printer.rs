//! [`Scenario`] back to text: the `Display` impls that print a scenario as a script that
//! [`parse`](super::parse) reads back, so that a generated schedule can be saved and replayed.

use std::fmt;
use std::time::Duration;

use super::keyword::Keyword;
use super::types::{Action, Expectation, Scenario, Settings, Step};

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
    /// The scenario as a script, so a generated schedule can be saved and replayed.
    ///
    /// `set` lines appear only for settings that differ from the defaults. For every scenario
    /// [`parse`] returns, `parse(&s.to_text())` equals `s` except for [`Step::line`]. A scenario
    /// built by hand round-trips if it could have been parsed: names without whitespace, commas or
    /// `#`, whole-millisecond durations, `times` of at least 1, non-empty `uses` lists, and so on.
    ///
    /// [`parse`]: super::parse
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
        if settings.machine_fencing != defaults.machine_fencing {
            writeln!(f, "set machine-fencing {}", settings.machine_fencing.word())?;
        }
        if settings.seed != defaults.seed {
            writeln!(f, "set seed {}", settings.seed)?;
        }
        if let Some(batch) = settings.verify_batch {
            writeln!(f, "set verify-batch {batch}")?;
        }
        if let Some(volumes) = settings.volumes_per_pass {
            writeln!(f, "set volumes-per-pass {volumes}")?;
        }
        let load = settings.backend_load;
        if let Some(max) = load.max_attaches {
            writeln!(f, "set max-attaches {max}")?;
        }
        if let Some(max) = load.max_detaches {
            writeln!(f, "set max-detaches {max}")?;
        }
        if load.overdue != defaults.backend_load.overdue {
            if let Some(overdue) = load.overdue {
                writeln!(f, "set overdue-after {}", format_duration(overdue.after))?;
                writeln!(f, "set max-overdue {}", overdue.max)?;
            }
        }
        if let Some(rate) = load.rate {
            writeln!(
                f,
                "set backend-rate {} {}",
                format_duration(rate.every),
                rate.burst
            )?;
        }
        for bug in &settings.upstream_bugs {
            writeln!(f, "set upstream-bug {bug} on")?;
        }
        for node in &self.nodes {
            match self.attach_limits.get(node) {
                Some(l) if l.reported => writeln!(f, "node {node} attach-limit {}", l.limit)?,
                Some(l) => writeln!(f, "node {node} attach-limit {} unreported", l.limit)?,
                None => writeln!(f, "node {node}")?,
            }
        }
        for (volume, access) in &self.volumes {
            if self.claim_only.contains(volume) {
                writeln!(f, "volume {volume} {} claim-only", access.word())?;
            } else {
                writeln!(f, "volume {volume} {}", access.word())?;
            }
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
            Action::PowerOff(node) => write!(f, "node {node} power-off"),
            Action::PowerOn(node) => write!(f, "node {node} power-on"),
            Action::DeleteNode(node) => write!(f, "node {node} delete"),
            Action::CreateNode(node) => write!(f, "node {node} create"),
            Action::StopReporting(node) => write!(f, "node {node} stop-reporting"),
            Action::ResumeReporting(node) => write!(f, "node {node} resume-reporting"),
            Action::HangUnmount { volume, node } => write!(f, "hang unmount {volume} on {node}"),
            Action::ReleaseVolume { volume, node } => write!(f, "release {volume} from {node}"),
            Action::OperatorDetach { volume, node } => {
                write!(f, "operator-detach {volume} from {node}")
            }
            Action::ReleaseUnmount { volume, node } => {
                write!(f, "release unmount {volume} on {node}")
            }
            Action::PartitionBackend(node) => write!(f, "partition backend {node}"),
            Action::HealBackend(node) => write!(f, "heal backend {node}"),
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
            Expectation::NodeFullEvent { pod } => write!(f, "event node-full {pod}"),
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
            Expectation::Wait {
                subject,
                wait,
                node: None,
            } => write!(f, "wait {subject} {wait}"),
            Expectation::Wait {
                subject,
                wait,
                node: Some(node),
            } => write!(f, "wait {subject} {wait} {node}"),
        }
    }
}
