//! The state machine and its vocabulary: the pure [`Reconciler`], what goes into it and
//! what comes out.
//!
//! Every user needs part of it: the [`Input`]s that tell the core (or a running
//! [`Controller`](crate::controller::Controller)) what the orchestrator sees, with the
//! [`VolumeSpec`] and [`NodeFacts`] they carry, and the [`Event`]s worth showing a human.
//! The rest matters when you drive the core yourself: the [`Operation`]s it plans for you
//! to run, and read-only views of its desired state ([`DesiredState`]), actual state
//! ([`ActualState`]) and node statuses ([`StatusBook`]).
//!
//! It does no IO, reads no clock and spawns nothing: time is an argument, and every call to
//! the outside is an [`Operation`] whose result comes back through the [`Reconciler`].
//!
//! # Inside (for contributors)
//!
//! The folders are floors: a module imports from its own floor and the floors below it,
//! never above, and nothing in the core imports from the driver, the doubles, the conformance
//! kit or the simulator (`tests/layering.rs` fails on one that does). Lowest first:
//!
//! - `tables/`: cache-tuned tables and trimming; a reader after the protocol may skip it.
//! - `calls/`: the values a backend or store call takes and answers, and [`VolumeSpec`].
//! - `state/`: the records: desired state, actual state, the status book.
//! - `operation.rs`, `outcome.rs`, `input.rs`, `event.rs`: the vocabulary, what goes out, what
//!   comes back, what goes in, and what a human is told.
//! - `rules/`: the decisions, the fresh read, machine fencing, capacity, the gate, admission.
//! - `plan/`: the schedule, the operations in flight, recovery.
//! - `explain.rs`: the answers to "why does it wait?" ([`Wait`], [`VolumeExplanation`]).
//! - `reconciler/`: the [`Reconciler`] itself, which ties them together.
//!
//! This file only re-exports: the public paths below are the core's whole API.

// Lowest floor first.
pub(crate) mod tables;

pub(crate) mod calls;

pub(crate) mod state;

pub(crate) mod event;
pub(crate) mod input;
pub(crate) mod operation;
pub(crate) mod outcome;

pub(crate) mod rules;

pub(crate) mod plan;

pub(crate) mod explain;

pub(crate) mod reconciler;

// Why a volume or a workload waits.
pub use crate::core::explain::{
    LastFailure, PENDING_ENDS, PairExplanation, Placement, VolumeExplanation, Wait, WaitKind,
    WorkloadExplanation,
};

// The core, and its errors.
pub use crate::core::input::{ReconcilerError, ReleaseRefusal};
pub use crate::core::reconciler::{Reconciler, StuckDetach};
pub use crate::core::state::desired::DesiredError;

// In: the changes the orchestrator saw.
pub use crate::core::calls::volume::{Access, DriverId, VolumeSpec};
pub use crate::core::input::{Input, Kind, Rejection};
pub use crate::core::state::actual::NodeFacts;

// Out: the calls to make, and what to tell a human.
pub use crate::core::event::{Event, Holder};
pub use crate::core::operation::OpKind;
pub use crate::core::operation::{ForceReason, OpId, Operation};

// Back: what a planned call answered.
pub use crate::core::outcome::Outcome;

// Read-only views of the core's state.
pub use crate::core::state::actual::{ActualState, AttachState, Attachment};
pub use crate::core::state::desired::{DesiredState, Missing, PendingWorkload};
pub use crate::core::state::progress::{DetachProgress, DetachStage, Release, Told};
pub use crate::core::state::status::StatusBook;

// Backend load, queued under `Config::backend_load`.
pub use crate::core::rules::admission::{ClassStats, QueueStats};
