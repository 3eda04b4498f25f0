//! The incident simulator:
//! `cargo run --release --example simulate --features sim -- [--trace] [--seed K | --seeds N]
//! [--timeline OUT.svg] [FILE...]`
//!
//! With no files it runs the bundled incident library.
//!
//! - `--trace` prints each run's trace after the summary.
//! - `--seed K` runs every scenario with jitter seed K (each backend call's latency varies
//!   between half and one and a half of its setting, reproducibly; 0 is the exact timeline).
//! - `--seeds N` reruns every scenario under seeds 1..=N and names each seed that fails, so
//!   that `--seed K` replays it exactly.
//! - `--timeline OUT.svg` draws the run of exactly one FILE as an SVG picture: a lane per node
//!   with each attachment's bar, the pods' lives, status writes and their answers, events,
//!   node crashes and fences, controller restarts, and violations in red.
//!
//! Exit status: 0 when every expectation and invariant holds, 1 with each violation listed (a
//! panic in the controller or the simulator is one; under `--seeds`, any failing seed), 2 for a
//! bad command line, a file that cannot be read or parsed, settings the controller refuses
//! (`Config::validate`), or a timeline that cannot be written.

use std::process::ExitCode;

use attach_detach::sim::cli::{Command, Options, USAGE, parse_args};
use attach_detach::sim::scenario::Scenario;
use attach_detach::sim::seeds::{sweep, with_seed};
use attach_detach::sim::timeline::render_svg;
use attach_detach::sim::{
    config_of, library::LIBRARY, run, scenario, summary_header, summary_line, violation_line,
};

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(options)) => options,
        Err(e) => {
            eprintln!("simulate: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut inputs: Vec<(String, String)> = Vec::new();
    if options.files.is_empty() {
        inputs.extend(LIBRARY.iter().map(|(n, t)| (n.to_string(), t.to_string())));
    }
    for file in &options.files {
        match std::fs::read_to_string(file) {
            Ok(text) => inputs.push((file.clone(), text)),
            Err(e) => {
                eprintln!("{file}: cannot read: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let mut parsed: Vec<(String, Scenario)> = Vec::new();
    for (name, text) in &inputs {
        match scenario::parse(text) {
            Ok(s) => {
                if let Err(e) = config_of(&s).validate() {
                    eprintln!("{name}: the controller refuses these settings: {e}");
                    return ExitCode::from(2);
                }
                let s = match options.seed {
                    Some(seed) => with_seed(&s, seed),
                    None => s,
                };
                parsed.push((name.clone(), s));
            }
            Err(e) => {
                eprintln!("{}", e.with_file(name));
                return ExitCode::from(2);
            }
        }
    }
    match options.seeds {
        Some(count) => sweep_seeds(&parsed, count),
        None => run_once(&parsed, &options),
    }
}

/// Runs each scenario once, prints the summary, and draws the timeline if asked.
fn run_once(parsed: &[(String, Scenario)], options: &Options) -> ExitCode {
    println!("{}", summary_header());
    let mut failed = 0;
    let mut details = Vec::new();
    let mut reports = Vec::new();
    for (name, s) in parsed {
        let report = run(s);
        println!("{}", summary_line(name, &report));
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
        println!("{line}");
    }
    println!("{} passed, {} failed", parsed.len() - failed, failed);
    if let (Some(path), [(name, s)], [report]) = (&options.timeline, parsed, &reports[..]) {
        let svg = render_svg(&scenario_title(name), s, report);
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!("{}: cannot write the timeline: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("timeline of {name} written to {}", path.display());
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs each scenario under seeds 1..=count and names the seeds that fail.
fn sweep_seeds(parsed: &[(String, Scenario)], count: u64) -> ExitCode {
    let mut failing_scenarios = 0;
    for (name, s) in parsed {
        let failures = sweep(s, count);
        if failures.is_empty() {
            println!("{name:<44} pass under seeds 1..={count}");
            continue;
        }
        failing_scenarios += 1;
        let seeds: Vec<String> = failures.iter().map(|f| f.seed.to_string()).collect();
        println!(
            "{name:<44} FAIL under {} of {count} seeds: {}",
            failures.len(),
            seeds.join(", ")
        );
        for failure in &failures {
            for v in &failure.report.violations {
                println!("  --seed {}: {}", failure.seed, violation_line(name, v));
            }
        }
    }
    println!(
        "{} of {} scenarios pass under seeds 1..={count}{}",
        parsed.len() - failing_scenarios,
        parsed.len(),
        if failing_scenarios > 0 {
            " (replay a failing seed with --seed K FILE)"
        } else {
            ""
        }
    );
    if failing_scenarios == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The scenario's name for the picture's heading: its file name without directory or `.scn`.
fn scenario_title(file: &str) -> String {
    let base = std::path::Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |f| f.to_string_lossy().into_owned());
    base.strip_suffix(".scn")
        .map_or(base.clone(), str::to_string)
}
