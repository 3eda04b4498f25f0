//! A small stateful fake of the Kubernetes API server for Node objects, served through kube's
//! mock service: enough of the API for the node status store, with the semantics that store
//! relies on kept exactly.
//!
//! - `GET /api/v1/nodes/{name}`: the node, or 404.
//! - `GET /api/v1/nodes?limit=N[&continue=T]`: the nodes in name order, a page at a time (at
//!   most [`FakeApi::set_page_size`] per page whatever `limit` asks); the continue token is
//!   opaque to clients. [`FakeApi::expire_continue_tokens`] answers the next continued pages
//!   410 Gone.
//! - `PATCH /api/v1/nodes/{name}/status` with `application/json-patch+json` (other patch
//!   types: 415): the JSON patch applied all or nothing to the node, of which only `status` is
//!   kept (a status subresource ignores the rest). `test`, `add`, `replace` and `remove` are
//!   implemented as Kubernetes' JSON-patch library (evanphx/json-patch v4) does them,
//!   including its one departure from RFC 6902 that the store relies on: a `test` of `null` on
//!   an absent member succeeds (the parent must exist). A failed op is answered 422, a missing
//!   node 404. After a patch an empty `status.volumesAttached` is dropped, as the API server's
//!   `omitempty` encoding drops it, and `metadata.resourceVersion` moves.
//!
//! Anything else is answered 404 (unknown path) or 405. Tests edit the nodes directly
//! ([`FakeApi::put_node`], [`FakeApi::edit_node`]) the way kubelet and operators would, and
//! [`FakeApi::ignore_test_ops`] turns the fake into a mutant that skips `test` ops, to show
//! what the store's compare-and-set protects.
//!
//! The lead extends it for VolumeAttachments and incident replays: [`FakeApi::answer`] is the
//! one routing point, and [`FakeApi::requests`] logs every request line.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use http::{Method, header};
use kube::Client;
use serde_json::{Value, json};

use super::script::{ApiHandle, json_response, mock_client};
use super::status_body;

/// The fake API server's state. Share it in an [`Arc`]; [`FakeApi::client`] starts serving.
#[derive(Debug, Default)]
pub struct FakeApi {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Every node, by name, as the JSON the API server would return.
    nodes: BTreeMap<String, Value>,
    /// The cluster's resourceVersion counter.
    version: u64,
    /// The most nodes a page holds (0: whatever the client's limit says).
    page_size: usize,
    /// How many continued listings to answer 410 Gone.
    expire_tokens: usize,
    /// The mutant: skip JSON-patch `test` ops.
    ignore_tests: bool,
    /// Every request line served, `METHOD path?query`.
    requests: Vec<String>,
}

/// Where nodes live in the API.
const NODES: &str = "/api/v1/nodes";

impl FakeApi {
    /// An empty cluster.
    pub fn new() -> Arc<Self> {
        Arc::new(FakeApi::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("fake API state")
    }

    /// A client served by this fake, on a task of the current runtime.
    pub fn client(self: &Arc<Self>) -> Client {
        let (client, handle) = mock_client();
        tokio::spawn(Arc::clone(self).serve(handle));
        client
    }

    /// Answers every request that comes through `handle`, one at a time (so each patch is
    /// atomic), until every client is gone.
    pub async fn serve(self: Arc<Self>, mut handle: ApiHandle) {
        while let Some((request, respond)) = handle.next_request().await {
            respond.send_response(self.respond(request).await);
        }
    }

    /// The answer to one request, read whole (see [`FakeApi::answer`]).
    pub async fn respond(
        &self,
        request: http::Request<kube::client::Body>,
    ) -> http::Response<kube::client::Body> {
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.expect("request body");
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (code, answer) = self.answer(
            &parts.method,
            parts.uri.path(),
            parts.uri.query().unwrap_or(""),
            content_type.as_deref(),
            &body,
        );
        json_response(code, &answer)
    }

    /// The answer to one request: the fake's single routing point.
    pub fn answer(
        &self,
        method: &Method,
        path: &str,
        query: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        let mut state = self.lock();
        let line = if query.is_empty() {
            format!("{method} {path}")
        } else {
            format!("{method} {path}?{query}")
        };
        state.requests.push(line);
        let Some(rest) = path.strip_prefix(NODES) else {
            return not_found(path);
        };
        let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        match (method, segments.as_slice()) {
            (&Method::GET, []) => state.list(query),
            (&Method::GET, [name]) => match state.nodes.get(*name) {
                Some(node) => (200, node.clone()),
                None => not_found(name),
            },
            (&Method::PATCH, [name, "status"]) => {
                if content_type != Some("application/json-patch+json") {
                    return (
                        415,
                        status_body(415, "UnsupportedMediaType", "only JSON patch here"),
                    );
                }
                state.patch_status(name, body)
            }
            _ => (
                405,
                status_body(405, "MethodNotAllowed", "not served by the fake"),
            ),
        }
    }

    /// Adds (or replaces) a node as given.
    pub fn put_node(&self, node: Value) {
        let name = node["metadata"]["name"]
            .as_str()
            .expect("a node has metadata.name")
            .to_owned();
        let mut state = self.lock();
        let mut node = node;
        state.bump(&mut node);
        state.nodes.insert(name, node);
    }

    /// Adds a node as a registered kubelet leaves it: `Ready` and nothing in use or attached.
    pub fn add_ready_node(&self, name: &str) {
        self.put_node(ready_node(name));
    }

    /// Deletes a node; whether it was there.
    pub fn remove_node(&self, name: &str) -> bool {
        self.lock().nodes.remove(name).is_some()
    }

    /// Edits a node in place, as kubelet, an operator or a fencing agent would (the
    /// resourceVersion moves); whether it was there.
    pub fn edit_node(&self, name: &str, edit: impl FnOnce(&mut Value)) -> bool {
        let mut state = self.lock();
        let Some(mut node) = state.nodes.remove(name) else {
            return false;
        };
        edit(&mut node);
        state.bump(&mut node);
        state.nodes.insert(name.to_owned(), node);
        true
    }

    /// The node as the fake holds it.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.lock().nodes.get(name).cloned()
    }

    /// Every node, by name.
    pub fn nodes(&self) -> BTreeMap<String, Value> {
        self.lock().nodes.clone()
    }

    /// Caps every page of a listing at `size` nodes (0: no cap).
    pub fn set_page_size(&self, size: usize) {
        self.lock().page_size = size;
    }

    /// Answers the next `times` continued listings (those with a continue token) 410 Gone, as
    /// the API server does once etcd compacted the listing's snapshot.
    pub fn expire_continue_tokens(&self, times: usize) {
        self.lock().expire_tokens = times;
    }

    /// The mutant switch: skip every JSON-patch `test` op (as a server without them would).
    pub fn ignore_test_ops(&self, ignore: bool) {
        self.lock().ignore_tests = ignore;
    }

    /// Every request line served so far.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }
}

/// A node as a registered kubelet leaves it: `Ready`, nothing in use or attached, annotated
/// as leaving attach and detach to the controller (kubelet's default).
pub fn ready_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    })
}

fn not_found(name: &str) -> (u16, Value) {
    (
        404,
        status_body(404, "NotFound", &format!("nodes \"{name}\" not found")),
    )
}

fn invalid(message: String) -> (u16, Value) {
    (422, status_body(422, "Invalid", &message))
}

impl State {
    /// Gives `node` the next resourceVersion.
    fn bump(&mut self, node: &mut Value) {
        self.version += 1;
        node["metadata"]["resourceVersion"] = json!(self.version.to_string());
    }

    fn list(&mut self, query: &str) -> (u16, Value) {
        let params: BTreeMap<String, String> = super::query_pairs(query);
        let limit: usize = params
            .get("limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let size = match (limit, self.page_size) {
            (0, 0) => usize::MAX,
            (0, cap) | (cap, 0) => cap,
            (limit, cap) => limit.min(cap),
        };
        let after = match params.get("continue") {
            None => None,
            Some(token) => {
                if self.expire_tokens > 0 {
                    self.expire_tokens -= 1;
                    return (
                        410,
                        status_body(410, "Expired", "The provided continue parameter is too old"),
                    );
                }
                match token.strip_prefix("after:") {
                    Some(name) => Some(name.to_owned()),
                    None => return (400, status_body(400, "BadRequest", "bad continue token")),
                }
            }
        };
        let remaining: Vec<(&String, &Value)> = self
            .nodes
            .iter()
            .filter(|(name, _)| after.as_ref().is_none_or(|after| *name > after))
            .collect();
        let page: Vec<Value> = remaining
            .iter()
            .take(size)
            .map(|(_, node)| (*node).clone())
            .collect();
        let mut metadata = json!({"resourceVersion": self.version.to_string()});
        if remaining.len() > size {
            let last = remaining[size - 1].0;
            metadata["continue"] = json!(format!("after:{last}"));
        }
        (
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": metadata, "items": page}),
        )
    }

    fn patch_status(&mut self, name: &str, body: &[u8]) -> (u16, Value) {
        let Some(node) = self.nodes.get(name) else {
            return not_found(name);
        };
        let Ok(Value::Array(ops)) = serde_json::from_slice::<Value>(body) else {
            return (400, status_body(400, "BadRequest", "not a JSON patch"));
        };
        let mut doc = node.clone();
        for op in &ops {
            if let Err(e) = apply(&mut doc, op, self.ignore_tests) {
                return invalid(e);
            }
        }
        // The status subresource: only status changes.
        let mut node = node.clone();
        node["status"] = doc["status"].take();
        // The API server encodes `volumesAttached` with omitempty.
        if let Some(status) = node["status"].as_object_mut()
            && status
                .get("volumesAttached")
                .is_some_and(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty))
        {
            status.remove("volumesAttached");
        }
        self.bump(&mut node);
        self.nodes.insert(name.to_owned(), node.clone());
        (200, node)
    }
}

/// Applies one JSON-patch op to `doc` as evanphx/json-patch v4 does (objects only: the store
/// never patches inside an array).
pub fn apply(doc: &mut Value, op: &Value, ignore_tests: bool) -> Result<(), String> {
    let kind = op["op"].as_str().ok_or("an op without \"op\"")?;
    let path = op["path"].as_str().ok_or("an op without \"path\"")?;
    let (parent, key) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("bad path {path:?}"))?;
    let key = key.replace("~1", "/").replace("~0", "~");
    let container = doc
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .ok_or_else(|| format!("{kind} operation does not apply: doc is missing path: {path}"))?;
    match kind {
        "test" if ignore_tests => Ok(()),
        "test" => {
            let expected = op.get("value").unwrap_or(&Value::Null);
            match container.get(&key) {
                // Absent: equal to null (evanphx/json-patch v4's test op).
                None if expected.is_null() => Ok(()),
                Some(actual) if actual == expected => Ok(()),
                _ => Err(format!("testing value {path} failed: test failed")),
            }
        }
        "add" => {
            let value = op.get("value").cloned().ok_or("add without a value")?;
            container.insert(key, value);
            Ok(())
        }
        "replace" => {
            let value = op.get("value").cloned().ok_or("replace without a value")?;
            match container.get_mut(&key) {
                Some(slot) => {
                    *slot = value;
                    Ok(())
                }
                None => Err(format!("replace operation does not apply: missing {path}")),
            }
        }
        "remove" => container
            .remove(&key)
            .map(drop)
            .ok_or_else(|| format!("remove operation does not apply: missing {path}")),
        other => Err(format!("unsupported op {other:?}")),
    }
}
