//! What crosses the core's edge: the values a call to the backend or the store takes and
//! answers ([`Revision`](store::Revision), [`NodeStatus`](store::NodeStatus),
//! [`ReportedVolumes`](reported_volumes::ReportedVolumes), [`StoreError`](store::StoreError),
//! [`AttachInfo`](backend::AttachInfo), [`BackendError`](backend::BackendError),
//! [`MachineState`](backend::MachineState), ...), and what a volume is
//! ([`VolumeSpec`](volume::VolumeSpec)), which the backend's listing answers and an input sets.
//!
//! They sit in the core because the core plans with them: an [`Operation`](crate::core::Operation)
//! carries them out and its result brings them back. The traits that make the calls are one
//! floor up, in [`traits`](crate::traits), which re-exports these values. May import
//! `crate::domain`, `crate::config` and `core::tables`.

pub(crate) mod backend;
pub(crate) mod error;
pub(crate) mod reported_volumes;
pub(crate) mod store;
pub(crate) mod volume;
