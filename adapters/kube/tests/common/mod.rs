//! Test doubles of the Kubernetes API server, on kube's documented mock service
//! (`tower_test::mock::pair` behind `kube::Client::new`): a scripted one that asserts each
//! request exactly ([`script`]), and stateful ones that serve nodes ([`fake_api`]) and
//! VolumeAttachments with PersistentVolumes and an external-attacher ([`fake_va`]), and both
//! behind one client with a kubelet simulation ([`cluster`]); and a fake API server over HTTP
//! on 127.0.0.1 that enforces `deploy/rbac.yaml` ([`apiserver`], [`rbac`]), for the example
//! run as a child process.

// Each test crate uses some of these helpers, not all.
#![allow(dead_code)]

pub mod apiserver;
pub mod cluster;
pub mod fake_api;
pub mod fake_va;
pub mod rbac;
pub mod script;
pub mod sims;

use std::collections::BTreeMap;

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

/// The query's pairs, percent-decoded.
pub fn query_pairs(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
