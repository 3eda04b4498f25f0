//! Kubernetes for [`attach_detach`], through kube-rs.
#![deny(missing_docs)]

mod backend;
mod domain;
mod drivers;

pub use backend::{KubeBackendConfig, ManagedDrivers, VolumeAttachmentBackend};
pub use domain::{CsiVolume, Kube, attachment_name, pod_key, split_unique_name, unique_name};
pub use drivers::CsiDrivers;
