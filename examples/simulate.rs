//! The incident simulator: `cargo run --release --example simulate --features sim [--trace] [FILE...]`
//!
//! With no files it runs the bundled incident library. Exit status: 0 when every expectation and
//! invariant holds, 1 with each violation listed (a panic in the controller or the simulator is
//! one), 2 for a file that cannot be read or parsed or whose settings the controller refuses
//! (`Config::validate`).

use std::process::ExitCode;

use attach_detach::sim::{
    config_of, library::LIBRARY, run, scenario, summary_header, summary_line, violation_line,
};

fn main() -> ExitCode {
    let mut trace = false;
    let mut files = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--trace" => trace = true,
            "-h" | "--help" => {
                println!("usage: simulate [--trace] [FILE...]  (no files: the bundled library)");
                return ExitCode::SUCCESS;
            }
            _ => files.push(arg),
        }
    }
    let mut inputs: Vec<(String, String)> = Vec::new();
    if files.is_empty() {
        inputs.extend(LIBRARY.iter().map(|(n, t)| (n.to_string(), t.to_string())));
    }
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => inputs.push((file, text)),
            Err(e) => {
                eprintln!("{file}: cannot read: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let mut parsed = Vec::new();
    for (name, text) in &inputs {
        match scenario::parse(text) {
            Ok(s) => {
                if let Err(e) = config_of(&s).validate() {
                    eprintln!("{name}: the controller refuses these settings: {e}");
                    return ExitCode::from(2);
                }
                parsed.push((name, s));
            }
            Err(e) => {
                eprintln!("{}", e.with_file(name));
                return ExitCode::from(2);
            }
        }
    }
    println!("{}", summary_header());
    let mut failed = 0;
    let mut details = Vec::new();
    for (name, s) in &parsed {
        let report = run(s);
        println!("{}", summary_line(name, &report));
        if trace {
            details.push(format!("--- trace of {name}"));
            details.extend(report.trace.iter().cloned());
        }
        if !report.passed() {
            failed += 1;
            // A panic in the controller or the simulator is one of these too.
            details.extend(report.violations.iter().map(|v| violation_line(name, v)));
        }
    }
    for line in details {
        println!("{line}");
    }
    println!("{} passed, {} failed", parsed.len() - failed, failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
