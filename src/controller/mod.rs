//! The tokio driver: runs the core's operations through the backend and the store, feeds their
//! results back, and sleeps until the core's next deadline. It makes no decision of its own.

mod metrics;
mod recorder;
mod status_writer;

pub use metrics::{Metrics, MetricsSnapshot, Outcome, OutcomeCounts};
pub use recorder::{EventRecorder, MemoryRecorder};
pub use status_writer::{StatusWriter, WriteOutcome};
