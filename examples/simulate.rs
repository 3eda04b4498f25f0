//! The incident simulator:
//! `cargo run --release --example simulate --features sim -- [--trace] [--seed K | --seeds N]
//! [--timeline OUT.svg] [FILE...]`
//!
//! With no files it runs the bundled incident library.
//!
//! - `--trace` prints each run's trace after the summary.
//! - `--seed K` runs every scenario with jitter seed K (each backend call's latency varies
//!   between half and one and a half of its setting, reproducibly; 0 is the exact timeline).
//! - `--seeds N` reruns every scenario under seeds 1..=N (N at most a million) and names each
//!   seed that fails, so that `--seed K` replays it exactly; a long sweep says how far it is on
//!   stderr (every second on a terminal, every ten seconds otherwise).
//! - `--timeline OUT.svg` draws the run of exactly one FILE as an SVG picture: a lane per node
//!   with each attachment's bar, the pods' lives, status writes and their answers, events,
//!   node crashes and fences, controller restarts, and violations in red.
//!
//! Exit status: 0 when every expectation and invariant holds, 1 with each violation listed (a
//! panic in the controller or the simulator is one; under `--seeds`, any failing seed), 2 for a
//! bad command line, a file that cannot be read or parsed, settings the controller refuses
//! (`Config::validate`), or a timeline or output that cannot be written; 141 when the output
//! was closed before the end (`simulate | head`): the run stops there, quietly.
//!
//! The command line lives in [`attach_detach::sim::cli`], where it is tested.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use attach_detach::sim::cli::{Console, main as simulate};

fn main() -> ExitCode {
    let stderr = std::io::stderr();
    let args: Result<Vec<String>, OsString> = std::env::args_os()
        .skip(1)
        .map(OsString::into_string)
        .collect();
    let args = match args {
        Ok(args) => args,
        Err(arg) => {
            let _ = writeln!(
                stderr.lock(),
                "simulate: argument {arg:?} is not UTF-8 (rename the file?)"
            );
            return ExitCode::from(2);
        }
    };
    let progress_every = Duration::from_secs(if stderr.is_terminal() { 1 } else { 10 });
    ExitCode::from(simulate(
        args,
        Console {
            out: &mut std::io::stdout().lock(),
            err: &mut stderr.lock(),
            progress_every,
        },
    ))
}
