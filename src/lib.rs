//! attach-detach: the volume attach/detach state machine of an orchestrator.
#![deny(missing_docs)]

mod domain;
#[cfg(feature = "sim")]
pub mod sim;
mod volume;

pub use domain::{Domain, Id, Ids};
pub use volume::{Access, VolumeSpec};
