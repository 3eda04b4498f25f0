//! Model checks for the core: small, obviously-correct reference models of the desired and
//! actual state, and a planner harness that checks every plan of the reconciler against a
//! simulated truth. Shared by the proptest properties in `cargo test` and the `core_model`
//! fuzz target, so both explore the same histories.
//!
//! Here: the small id space both checks draw from. Beside: `state` checks the state structures
//! against a reference model, `planner` checks every plan against the `truth` of a simulated
//! world.

mod planner;
mod state;
#[cfg(test)]
mod tests;
mod truth;

use crate::Ids;

pub use planner::{Answer, PlanStep, check_planner};
pub use state::{StateOp, check_state_ops};

type T = Ids<u8, u8, u8, ()>;

const NODES: u8 = 4;
const VOLUMES: u8 = 6;

fn node(n: u8) -> u8 {
    n % NODES
}

fn volume(v: u8) -> u8 {
    v % VOLUMES
}
