//! Arbitrary operation sequences on the desired and actual state, checked against a reference
//! model, and arbitrary histories through the planner, checked for I1, I2 and C5.
#![no_main]

use arbitrary::Arbitrary;
use attach_detach::Config;
use attach_detach::sim::model::{PlanStep, StateOp, check_planner, check_state_ops};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Input {
    State(Vec<StateOp>),
    Plan(Vec<PlanStep>),
}

fuzz_target!(|input: Input| {
    let result = match &input {
        Input::State(ops) => check_state_ops(ops),
        Input::Plan(steps) => check_planner(steps, Config::default()),
    };
    if let Err(violation) = result {
        panic!("{violation}");
    }
});
