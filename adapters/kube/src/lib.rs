//! Kubernetes for [`attach_detach`], through kube-rs.
#![deny(missing_docs)]

mod attachments;
mod backend;
mod domain;
mod drivers;
mod error;
mod events;
mod explain;
mod informers;
mod leader;
mod nodes;
mod ratelimit;
mod status;
mod store;
mod translate;

pub use backend::{KubeBackendConfig, ManagedDrivers, VolumeAttachmentBackend};
pub use domain::{
    AttachSource, CsiVolume, Kube, OUT_OF_SERVICE_TAINT, attachment_name, driver_id, pod_key,
    split_unique_name, unique_name,
};
pub use drivers::CsiDrivers;
pub use events::{KubeEvent, KubeEventRecorder, REPORTING_CONTROLLER, kube_events, publish};
pub use explain::KubeExplainer;
pub use informers::{InformerState, Informers, ObjectIndex, PodRef, driver_limits, node_facts};
pub use leader::{LeaderConfig, LeaderError, Term, lead, lead_with_status};
pub use nodes::{CONTROLLER_MANAGED_ANNOTATION, ManagedNodes, controller_managed};
pub use ratelimit::{ClientRateLimit, REQUESTS_PER_CALL, RateLimited};
pub use status::{DEFAULT_HEALTH_TOLERANCE, LeaderStatus};
pub use store::{KubeStatusStore, StatusWriteStats};
pub use translate::{
    CsiMigration, CsiSpec, InTreePlugin, MIGRATED_PLUGINS_ANNOTATION, MigratedNode,
    NodeMigrationError, TranslationError, translate_inline_volume, translate_persistent_volume,
};
