//! Shared by the integration tests.
pub mod etcd;
