//! Kubernetes for [`attach_detach`], through kube-rs.
#![deny(missing_docs)]

mod backend;
mod domain;
mod drivers;
mod error;
mod events;
mod informers;
mod leader;
mod ratelimit;
mod store;

pub use backend::{KubeBackendConfig, ManagedDrivers, VolumeAttachmentBackend};
pub use domain::{
    CsiVolume, Kube, OUT_OF_SERVICE_TAINT, attachment_name, pod_key, split_unique_name, unique_name,
};
pub use drivers::CsiDrivers;
pub use events::{KubeEvent, KubeEventRecorder, REPORTING_CONTROLLER, kube_events, publish};
pub use informers::{DriverChange, InformerState, Informers, ObjectIndex, PodRef, node_facts};
pub use leader::{LeaderConfig, LeaderError, Term, lead};
pub use ratelimit::{ClientRateLimit, RateLimited};
pub use store::{KubeStatusStore, StatusWriteStats};
