//! What you implement to plug the crate into your storage and your orchestrator, and what
//! their methods take and return: [`AttachBackend`] (cloud disks, CSI, a SAN) and
//! [`NodeStatusStore`] (the API server, etcd, ...).
//!
//! You need it to write an adapter, and to drive the core yourself: the core's
//! [`Operation`](crate::core::Operation)s carry [`ReportedVolumes`] and [`Revision`]s, and
//! its `*_finished` methods take these results. The in-memory doubles in
//! [`memory`](crate::memory) implement both traits.
//!
//! The values are defined in the core, which plans with them; the two traits are defined here,
//! above it, since only the driver, the doubles, the conformance kit and the simulator call
//! them, and need the feature `driver` (on by default: it brings async-trait and tokio). This
//! module imports from the core, `config` and `domain` only.

#[cfg(feature = "driver")]
pub(crate) mod backend;
#[cfg(feature = "driver")]
pub(crate) mod store;

#[cfg(feature = "driver")]
pub use backend::AttachBackend;
#[cfg(feature = "driver")]
pub use store::NodeStatusStore;

pub use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError, MachineState};
pub use crate::core::calls::error::ErrorSource;
pub use crate::core::calls::reported_volumes::{ReportedVolume, ReportedVolumes};
pub use crate::core::calls::store::{NodeStatus, Revision, StatusFacts, StoreError, WriteReceipt};
