//! attach-detach: the volume attach/detach state machine of an orchestrator.
#![deny(missing_docs)]

mod backend;
mod domain;
mod memory;
mod store;
mod volume;

pub use backend::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
pub use domain::{Domain, Id, Ids};
pub use memory::{BackendOp, CachedView, MemoryBackend, MemoryStore};
pub use store::{NodeStatus, NodeStatusStore, ReportedVolume, Revision, StoreError};
pub use volume::{Access, VolumeSpec};
