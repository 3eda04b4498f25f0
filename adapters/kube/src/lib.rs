//! Kubernetes for [`attach_detach`], through kube-rs.
#![deny(missing_docs)]

mod domain;
mod error;
mod store;

pub use domain::{CsiVolume, Kube, attachment_name, pod_key, split_unique_name, unique_name};
pub use store::{KubeStatusStore, OUT_OF_SERVICE_TAINT, StatusWriteStats};
