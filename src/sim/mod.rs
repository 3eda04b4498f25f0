//! The deterministic incident simulator: scripted scenarios replayed against the real core and
//! driver under a virtual clock, so that an upstream incident becomes a regression test.

pub mod model;
pub mod scenario;
