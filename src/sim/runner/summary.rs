//! The simulator's printed lines: the summary table and a violation.

use super::Report;
use crate::sim::world::{Violation, fmt_time};

/// One line of the summary table.
pub fn summary_line(name: &str, report: &Report) -> String {
    format!(
        "{:<44} {:<6} {:>10} {:>7} {:>7} {:>7}",
        name,
        if report.passed() { "pass" } else { "FAIL" },
        fmt_time(report.converged),
        report.attach_calls,
        report.detach_calls,
        report.status_writes
    )
}

/// One violation as the simulator prints it: `file:line: at <time>: <message>`, or without the
/// line for an invariant (or a panic), which belongs to no line.
pub fn violation_line(name: &str, violation: &Violation) -> String {
    let at = match violation.line {
        Some(line) => format!("{name}:{line}"),
        None => name.to_string(),
    };
    format!("{at}: at {:?}: {}", violation.at, violation.message)
}

/// The summary table's header.
pub fn summary_header() -> String {
    format!(
        "{:<44} {:<6} {:>10} {:>7} {:>7} {:>7}",
        "scenario", "result", "converged", "attach", "detach", "writes"
    )
}
