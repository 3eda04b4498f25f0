//! Arbitrary operation sequences on the desired and actual state, checked against a reference
//! model, and arbitrary histories through the planner, checked for I1, I2 and C5 on every plan,
//! and, once faults and inputs stop, for no stuck workload and no leaked attachment.
#![no_main]

use arbitrary::Arbitrary;
use attach_detach::sim::model::{PlanStep, StateOp, check_planner, check_state_ops};
use std::time::Duration;

use attach_detach::config::{BackendLoad, Config, OverdueCalls, RateLimit, UpstreamBugs};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Input {
    State(Vec<StateOp>),
    Plan(Vec<PlanStep>),
    /// A history under small backend load limits (attaches, detaches, a token every 100 ms
    /// times the third, bursts of the fourth, none when zero; calls overdue after 1 to 3 s):
    /// no class over its limit (plus its overdue calls), and
    /// everything settles. When the fourth's top bit is set, a pass also looks at one or two
    /// marked volumes at most (its next bit; `Config::volumes_per_pass`), so that most marks
    /// make a round.
    Limited(u8, u8, u8, u8, Vec<PlanStep>),
}

/// PLANT_BUG=c1..c5 switches an upstream bug back in, to measure how fast it is found (c6 lives
/// in the driver's status writer, which this target does not run: the `world` target finds it).
fn config() -> Config {
    let bug = std::env::var("PLANT_BUG").unwrap_or_default();
    Config {
        upstream_bugs: UpstreamBugs {
            c1_lose_report_on_failed_detach: bug == "c1",
            c2_ignore_uncertain_holder: bug == "c2",
            c3_force_detach_unfenced: bug == "c3",
            c4_sticky_assumed_mount: bug == "c4",
            c5_detach_before_status_ack: bug == "c5",
            ..UpstreamBugs::default()
        },
        ..Config::default()
    }
}

fuzz_target!(|input: Input| {
    let result = match &input {
        Input::State(ops) => check_state_ops(ops),
        Input::Plan(steps) => check_planner(steps, config()),
        Input::Limited(attaches, detaches, every, burst, steps) => {
            let backend_load = BackendLoad {
                max_attaches: Some(1 + usize::from(attaches % 3)),
                max_detaches: Some(1 + usize::from(detaches % 3)),
                rate: (every % 20 != 0).then(|| RateLimit {
                    every: Duration::from_millis(100 * u64::from(every % 20)),
                    burst: 1 + u32::from(burst % 3),
                }),
                // Calls overdue after 1 to 3 s, at most 1 or 2 of them per class.
                overdue: Some(OverdueCalls {
                    after: Duration::from_secs(1 + u64::from(every / 20 % 3)),
                    max: 1 + usize::from(attaches / 3 % 2),
                }),
            };
            let volumes_per_pass = if burst & 0x80 != 0 {
                1 + usize::from((burst >> 6) & 1)
            } else {
                Config::default().volumes_per_pass
            };
            check_planner(
                steps,
                Config {
                    backend_load,
                    volumes_per_pass,
                    ..config()
                },
            )
        }
    };
    if let Err(violation) = result {
        panic!("{violation}");
    }
});
