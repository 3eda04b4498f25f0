//! One fake API server for incident replays: nodes from [`FakeApi`], VolumeAttachments and
//! PersistentVolumes (with the fake external-attacher) from [`FakeVa`], behind one
//! `kube::Client`; and a small kubelet simulation writing the nodes' `status.volumesInUse`.
//!
//! The kubelet of a node, at each [`Cluster::kubelet_sync`]:
//! - mounts a volume its pods need only once `status.volumesAttached` lists it, and keeps it
//!   mounted while a pod needs it; a volume no pod needs is unmounted. `volumesInUse` is what
//!   is mounted.
//! - writes its status every time (a heartbeat in the `Ready` condition), so the node's
//!   resourceVersion moves under the controller's writes, as a real kubelet's does.
//!
//! [`Cluster::refuse_attachment_deletes`] puts an admission webhook in front that refuses
//! every DELETE of a VolumeAttachment (403).
//!
//! A crashed node's kubelet ([`Cluster::crash`]) writes nothing any more: `Ready` is `False`
//! (as the node lifecycle controller marks it) and `volumesInUse` stays what it was.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use attach_detach_kube::OUT_OF_SERVICE_TAINT;
use http::Method;
use kube::Client;
use serde_json::{Value, json};

use super::fake_api::FakeApi;
use super::fake_va::FakeVa;
use super::script::{json_response, mock_client};
use super::status_body;

const VOLUME_ATTACHMENTS: &str = "/apis/storage.k8s.io/v1/volumeattachments";

/// The combined fake API server.
#[derive(Clone)]
pub struct Cluster {
    /// Nodes.
    pub api: Arc<FakeApi>,
    /// VolumeAttachments and PersistentVolumes, and the external-attacher.
    pub va: FakeVa,
    /// Nodes whose kubelet is gone.
    crashed: Arc<Mutex<BTreeSet<String>>>,
    /// Whether DELETEs of VolumeAttachments are refused (an admission webhook).
    refuse_deletes: Arc<AtomicBool>,
    /// At each DELETE refused, every node's `status.volumesAttached` as it then stood: what
    /// the store said while the detach was tried.
    refused_seen: Arc<Mutex<Vec<Lists>>>,
}

/// Every node's `status.volumesAttached` (names), by node.
pub type Lists = BTreeMap<String, Vec<String>>;

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    /// An empty cluster.
    pub fn new() -> Self {
        Cluster {
            api: FakeApi::new(),
            va: FakeVa::new(),
            crashed: Arc::default(),
            refuse_deletes: Arc::default(),
            refused_seen: Arc::default(),
        }
    }

    /// A client of the whole fake, with the external-attacher started. Needs a tokio runtime.
    pub fn client(&self) -> Client {
        let (client, mut handle) = mock_client();
        let (api, va) = (Arc::clone(&self.api), self.va.clone());
        let refuse_deletes = Arc::clone(&self.refuse_deletes);
        let refused_seen = Arc::clone(&self.refused_seen);
        va.start_attacher();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path();
                if request.method() == Method::DELETE
                    && path.starts_with(VOLUME_ATTACHMENTS)
                    && refuse_deletes.load(Ordering::SeqCst)
                {
                    let lists = api
                        .nodes()
                        .into_iter()
                        .map(|(name, node)| (name, names(&node["status"]["volumesAttached"])))
                        .collect();
                    refused_seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(lists);
                    let message = "admission webhook \"deny-detach.example.com\" denied the \
                                   request: detach refused";
                    send.send_response(json_response(403, &status_body(403, "Forbidden", message)));
                    continue;
                }
                if FakeVa::serves(path) {
                    // A watch waits: each in a task of its own.
                    let va = va.clone();
                    tokio::spawn(async move { send.send_response(va.respond(request).await) });
                    continue;
                }
                send.send_response(api.respond(request).await);
            }
        });
        client
    }

    /// Makes an admission webhook refuse (403) every DELETE of a VolumeAttachment, or stop.
    pub fn refuse_attachment_deletes(&self, refuse: bool) {
        self.refuse_deletes.store(refuse, Ordering::SeqCst);
    }

    /// At each refused DELETE of a VolumeAttachment so far, every node's
    /// `status.volumesAttached` (names) as it stood when the webhook refused it.
    pub fn lists_at_refused_deletes(&self) -> Vec<Lists> {
        self.refused_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The names in the node's `status.volumesAttached`.
    pub fn attached(&self, node: &str) -> Vec<String> {
        names(&self.api.node(node).expect("a node")["status"]["volumesAttached"])
    }

    /// The node's `status.volumesInUse`.
    pub fn in_use(&self, node: &str) -> Vec<String> {
        strings(&self.api.node(node).expect("a node")["status"]["volumesInUse"])
    }

    /// One status update of the node's kubelet, whose pods need `needed` (unique names); none
    /// if it crashed.
    pub fn kubelet_sync(&self, node: &str, needed: &BTreeSet<String>) {
        if self.crashed().contains(node) {
            return;
        }
        self.api.edit_node(node, |n| {
            let attached: BTreeSet<String> =
                names(&n["status"]["volumesAttached"]).into_iter().collect();
            let mounted: BTreeSet<String> =
                strings(&n["status"]["volumesInUse"]).into_iter().collect();
            let in_use: Vec<String> = needed
                .iter()
                .filter(|v| mounted.contains(*v) || attached.contains(*v))
                .cloned()
                .collect();
            let beat = n["status"]["conditions"][0]["message"]
                .as_str()
                .and_then(|m| m.strip_prefix("heartbeat "))
                .and_then(|b| b.parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            n["status"]["conditions"] = json!([{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": format!("heartbeat {beat}"),
            }]);
            if in_use.is_empty() {
                if let Some(status) = n["status"].as_object_mut() {
                    status.remove("volumesInUse");
                }
            } else {
                n["status"]["volumesInUse"] = json!(in_use);
            }
        });
    }

    /// The node's machine dies: its kubelet stops, `Ready` becomes `False`
    /// (`NodeStatusUnknown`, as the node lifecycle controller sets it), `volumesInUse` is
    /// frozen.
    pub fn crash(&self, node: &str) {
        self.crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node.to_owned());
        self.api.edit_node(node, |n| {
            n["status"]["conditions"] = json!([{
                "type": "Ready", "status": "False", "reason": "NodeStatusUnknown",
            }]);
        });
    }

    /// An operator (or a fencing agent) puts the out-of-service taint on the node.
    pub fn fence(&self, node: &str) {
        self.api.edit_node(node, |n| {
            n["spec"]["taints"] = json!([{
                "key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute",
            }]);
        });
    }

    fn crashed(&self) -> BTreeSet<String> {
        self.crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The `name`s of a `volumesAttached` list (none if absent).
fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect()
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}
