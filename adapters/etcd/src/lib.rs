//! etcd v3 for [`attach_detach`]: a compare-and-set node status store, watches turned into
//! controller inputs, and high availability with fenced leadership.
//!
//! An orchestrator that is not Kubernetes keeps its cluster state in etcd and runs its
//! controller as two or more replicas. This crate gives it:
//!
//! - [`EtcdStatusStore`], the [`NodeStatusStore`](attach_detach::traits::NodeStatusStore) over
//!   the keys of a documented [`KeyLayout`];
//! - [`Fence`], the leader key every write of the elected replica compares, so that a deposed
//!   leader's write fails even before it notices;
//! - [`ClusterWriter`], what an orchestrator and its node agents write;
//! - [`Replica`], a controller replica: it campaigns ([`Candidate`]), and while it leads runs
//!   a controller whose writes carry its [`Fence`];
//! - [`SimulatedCloud`] and [`SimulatedAgents`], stand-ins for a cloud and for node agents
//!   whose state lives in etcd, for examples and tests;
//! - [`client`], the etcd client all of them take, on gRPC code generated from etcd's protos
//!   and committed: building this crate needs no `protoc`.
#![deny(missing_docs)]

pub mod client;
mod cloud;
mod cluster;
mod codec;
mod error;
mod fence;
mod layout;
mod leader;
mod range;
mod replica;
mod store;
mod watch;

pub use cloud::{CloudAttachment, CloudConfig, CloudState, SimulatedAgents, SimulatedCloud};
pub use cluster::{ClusterWriter, Placement, Placements};
pub use codec::{EtcdDomain, KeyId};
pub use error::{DecodeError, Deposed, EtcdError};
pub use fence::Fence;
pub use layout::{KeyKind, KeyLayout};
pub use leader::{Candidate, CandidateConfig, LeaderError, Leadership, Loss, current_leader};
pub use replica::{BackendFactory, Replica, ReplicaConfig, ReplicaError, ReplicaHandle, Role};
pub use store::{EtcdStatusStore, WriteStats};
pub use watch::InputWatcher;
