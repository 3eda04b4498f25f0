//! Test doubles of the Kubernetes API server, on kube's documented mock service
//! (`tower_test::mock::pair` behind `kube::Client::new`): a scripted one that asserts each
//! request exactly ([`script`]), and stateful ones that serve nodes ([`fake_api`]) and
//! VolumeAttachments with PersistentVolumes and an external-attacher ([`fake_va`]), and both
//! behind one client with a kubelet simulation ([`cluster`]).

// Each test crate uses some of these helpers, not all.
#![allow(dead_code)]

pub mod cluster;
pub mod fake_api;
pub mod fake_va;
pub mod script;

use serde_json::{Value, json};

/// A Kubernetes `Status` body for a failed call, as the API server answers one.
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}
