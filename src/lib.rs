//! attach-detach: the volume attach/detach state machine of an orchestrator.
#![deny(missing_docs)]

mod actual;
mod backend;
mod config;
mod controller;
mod desired;
mod domain;
mod event;
mod gate;
mod memory;
mod operation;
mod reconciler;
mod status;
mod store;
mod volume;

pub use actual::{ActualState, AttachState, Attachment, NodeFacts};
pub use backend::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
pub use config::{BackoffConfig, Config, UpstreamBugs};
pub use controller::{
    Controller, ControllerError, ControllerHandle, EventRecorder, Input, MemoryRecorder, Metrics,
    MetricsSnapshot, OperationSummary, Outcome, OutcomeCounts, ShutdownReport, StatusWriter, World,
    WriteOutcome,
};
pub use desired::{DesiredError, DesiredState};
pub use domain::{Domain, Id, Ids};
pub use event::{Event, Holder};
pub use gate::{OpKind, OperationGate};
pub use memory::{BackendOp, CachedView, MemoryBackend, MemoryStore};
pub use operation::{ForceReason, OpId, Operation};
pub use reconciler::{Reconciler, ReconcilerError};
pub use status::StatusBook;
pub use store::{NodeStatus, NodeStatusStore, ReportedVolume, Revision, StoreError};
pub use volume::{Access, VolumeSpec};
