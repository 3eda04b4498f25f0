//! [`NodeStatusStore`] over the Node objects of a Kubernetes cluster: the attached list is
//! `status.volumesAttached`, what kubelet and kube-controller-manager's own attach/detach
//! controller use.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use attach_detach::traits::{
    NodeStatus, NodeStatusStore, ReportedVolume, ReportedVolumes, Revision, StoreError,
    WriteReceipt,
};
use kube::Client;
use kube::api::{GetParams, ListParams, Patch, PatchParams};
use kube::core::Request;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::domain::{Kube, facts_of};
use crate::error::{CallKind, is_status, store_error};
use crate::nodes::CONTROLLER_MANAGED_ANNOTATION;

/// Where nodes live in the API.
const NODES: &str = "/api/v1/nodes";

/// The JSON pointer of the one field this store writes.
const ATTACHED_PATH: &str = "/status/volumesAttached";

/// How many nodes one page of [`list`](NodeStatusStore::list) asks for.
const PAGE: u32 = 500;

/// The node status store over `Node` objects, through a [`kube::Client`].
///
/// A node's status, as [`read`](NodeStatusStore::read) gives it (`GET /api/v1/nodes/{name}`):
///
/// | field | from |
/// | --- | --- |
/// | `attached` | `status.volumesAttached`: `name` is the volume's unique name, `devicePath` its device (`""`: none) |
/// | `in_use` | `status.volumesInUse`, written by kubelet; `None` while kubelet has never posted the node's status (no `Ready` condition at all), since an absent list then means "unknown", not "nothing mounted" |
/// | `fenced` | whether the node carries a taint [`OUT_OF_SERVICE_TAINT`](crate::OUT_OF_SERVICE_TAINT), of any effect |
/// | `healthy` | whether the `Ready` condition's status is `"True"` (no `Ready` condition: `false`, the node has never answered) |
/// | `revision` | the JSON text of `status.volumesAttached` as read (see below) |
///
/// # Compare-and-set on the field, not on the object
///
/// A [`write`](NodeStatusStore::write) is one JSON patch (`application/json-patch+json`) of the
/// status subresource, `PATCH /api/v1/nodes/{name}/status`:
///
/// ```json
/// [{"op": "test", "path": "/status/volumesAttached", "value": <the list as read>},
///  {"op": "add",  "path": "/status/volumesAttached", "value": [{"name": "...", "devicePath": "..."}]}]
/// ```
///
/// The API server applies a JSON patch all or nothing, and against the object it stores: it
/// re-applies the patch to the fresh object whenever its own etcd write loses a race. So the
/// list is replaced only if it is still exactly the one this controller last read or wrote;
/// otherwise the `test` fails and the server answers 422, which is a
/// [`StoreError::Conflict`]. `add` replaces the member if it is there and creates it if not.
///
/// The revision is therefore the list itself: the canonical JSON text of
/// `status.volumesAttached` as read, `null` when the field is absent (a new node; also what an
/// empty list reads as, since the API server omits empty lists) and `[]` when present and
/// empty. A `test` of `null` on an absent member succeeds in the JSON-patch library the API
/// server uses (evanphx/json-patch v4, whose own test suite has that case), so the first write
/// to a new node needs no special case.
///
/// Why not `metadata.resourceVersion`: kubelet updates the same object every few seconds
/// (`volumesInUse`, conditions, heartbeats), and each update bumps it, so a `resourceVersion`
/// precondition would make the controller's writes conflict constantly although only
/// `volumesAttached` is the controller's. The field-level test is exactly the precondition
/// that matters: "the list is still the one I last acknowledged". That the same list may
/// have been written away and back in between (ABA) is harmless, because that list is all the
/// controller owns; kubelet's fields are never in the patch, so they are never overwritten.
/// (Upstream's node status updater sends a strategic merge patch with no precondition at all,
/// which is how a lagging informer cache once erased attached volumes: kubernetes#122413.)
///
/// [`list`](NodeStatusStore::list) gives the nodes this controller manages: those carrying
/// kubelet's [`CONTROLLER_MANAGED_ANNOTATION`](crate::CONTROLLER_MANAGED_ANNOTATION). A node
/// whose kubelet attaches and detaches by itself is left out: what its status lists is
/// kubelet's, and a core that adopted it would detach it.
///
/// # Errors
///
/// | the API server answered | reads | writes |
/// | --- | --- | --- |
/// | 404 | [`StoreError::NotFound`] | [`StoreError::NotFound`] |
/// | 409, 422 (a failed `test`) | [`StoreError::Conflict`] (no current revision) | the same |
/// | another 4xx (400, 401, 403, 429...) | [`StoreError::Transient`] | [`StoreError::Transient`]: refused, nothing written |
/// | 5xx, 408, no answer (connection, client timeout), an unreadable answer | [`StoreError::Transient`] | [`StoreError::Uncertain`]: it may have been applied |
///
/// Each keeps kube's error as its `source()`. An answer that is not the node this store
/// expects (a `volumesAttached` that is not a list of `{name, devicePath}`) fails a read as
/// transient; the same after a write means the write landed but its result is unknown:
/// uncertain.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach::traits::NodeStatusStore;
/// use attach_detach_kube::KubeStatusStore;
///
/// let client = kube::Client::try_default().await?;
/// let store = KubeStatusStore::new(client);
/// let status = store.read(&"node-a".to_string()).await?;
/// store.write(&"node-a".to_string(), &Default::default(), status.revision).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubeStatusStore {
    client: Client,
    timeout: Option<Duration>,
    stats: Arc<StatusWriteStats>,
}

/// What a store wrote, for benchmarks and capacity planning: the API server's write load is
/// what a Kubernetes controller is judged by.
#[derive(Debug, Default)]
pub struct StatusWriteStats {
    writes: AtomicU64,
    bytes: AtomicU64,
}

impl StatusWriteStats {
    /// Status patches sent (whatever their outcome).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Bytes of those patches' bodies.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl KubeStatusStore {
    /// A store that reads and writes Node objects through `client`, its calls bounded only by
    /// the client's own timeouts (the controller bounds each store call too: its
    /// `call_timeouts`).
    pub fn new(client: Client) -> Self {
        KubeStatusStore {
            client,
            timeout: None,
            stats: Arc::default(),
        }
    }

    /// The same store, giving up on any call that has no answer after `timeout`: a read then
    /// fails as transient, a write as uncertain (the request may still be applied).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// What this store (and its clones) wrote.
    pub fn stats(&self) -> &StatusWriteStats {
        &self.stats
    }

    /// Sends `request` and decodes the answer as `T`, bounded by the store's timeout.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        request: http::Request<Vec<u8>>,
        call: CallKind,
        context: &str,
    ) -> Result<T, StoreError> {
        let answer = self.client.request::<T>(request);
        let answer = match self.timeout {
            None => answer.await,
            Some(limit) => match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer,
                Err(elapsed) => {
                    let e = match call {
                        CallKind::Read => StoreError::transient(context.to_owned()),
                        CallKind::Write => StoreError::uncertain(context.to_owned()),
                    };
                    return Err(e.with_source(format!("no answer within {limit:?} ({elapsed})")));
                }
            },
        };
        answer.map_err(|e| store_error(e, call, context))
    }

    /// One page of nodes, from `token` on.
    async fn page(&self, token: Option<&str>) -> Result<NodeList, kube::Error> {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(token) = token {
            params = params.continue_token(token);
        }
        let request = Request::new(NODES)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        match self.timeout {
            None => self.client.request(request).await,
            Some(limit) => tokio::time::timeout(limit, self.client.request(request))
                .await
                .unwrap_or_else(|elapsed| {
                    Err(kube::Error::Service(
                        format!("no answer within {limit:?} ({elapsed})").into(),
                    ))
                }),
        }
    }

    /// Every node, page by page.
    async fn all_nodes(&self) -> Result<Vec<NodeView>, ListError> {
        let mut nodes = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.page(token.as_deref()).await;
            let page = match page {
                Ok(page) => page,
                Err(e) if token.is_some() && is_status(&e, 410) => {
                    return Err(ListError::Expired(e));
                }
                Err(e) => return Err(ListError::Failed(e)),
            };
            nodes.extend(page.items);
            match page.metadata.continue_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => return Ok(nodes),
            }
        }
    }
}

/// Why a listing stopped.
enum ListError {
    /// The continue token expired (410 Gone): the listing must start over.
    Expired(kube::Error),
    /// Anything else.
    Failed(kube::Error),
}

#[async_trait]
impl NodeStatusStore<Kube> for KubeStatusStore {
    async fn read(&self, node: &String) -> Result<NodeStatus<Kube>, StoreError> {
        let context = format!("reading node {node}");
        let request = Request::new(NODES)
            .get(node, &GetParams::default())
            .map_err(|e| StoreError::transient(context.clone()).with_source(e))?;
        let view: NodeView = self.call(request, CallKind::Read, &context).await?;
        view.status()
            .map_err(|e| StoreError::transient(context).with_source(e))
    }

    async fn write(
        &self,
        node: &String,
        attached: &ReportedVolumes<Kube>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.patch(node, attached, expected)
            .await
            .map(|status| status.revision)
    }

    /// The same patch: the API server answers it with the patched Node, whose
    /// `volumesInUse`, taints and `Ready` condition are the node's as of the write.
    async fn write_reading_facts(
        &self,
        node: &String,
        attached: &ReportedVolumes<Kube>,
        expected: Revision,
    ) -> Result<WriteReceipt<Kube>, StoreError> {
        let status = self.patch(node, attached, expected).await?;
        Ok(WriteReceipt {
            facts: Some(status.facts()),
            revision: status.revision,
        })
    }

    async fn list(&self) -> Result<Vec<(String, NodeStatus<Kube>)>, StoreError> {
        self.list_nodes().await
    }
}

impl KubeStatusStore {
    /// The write's JSON patch; answers the patched node's status.
    async fn patch(
        &self,
        node: &str,
        attached: &ReportedVolumes<Kube>,
        expected: Revision,
    ) -> Result<NodeStatus<Kube>, StoreError> {
        let context = format!("writing node {node}");
        // The core only hands back revisions this store gave out: JSON texts.
        let expected: Value = serde_json::from_str(&expected.text()).map_err(|e| {
            StoreError::conflict(None).with_source(format!(
                "revision {expected} is not a volumesAttached list this store read ({e})"
            ))
        })?;
        let list: Vec<Value> = attached
            .iter()
            .map(|(volume, device)| json!({"name": volume, "devicePath": device.unwrap_or("")}))
            .collect();
        let patch = json!([
            {"op": "test", "path": ATTACHED_PATH, "value": expected},
            {"op": "add", "path": ATTACHED_PATH, "value": list},
        ]);
        let patch: json_patch::Patch = serde_json::from_value(patch)
            .map_err(|e| StoreError::transient(context.clone()).with_source(e))?;
        let request = Request::new(NODES)
            .patch_subresource(
                "status",
                node,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .map_err(|e| StoreError::transient(context.clone()).with_source(e))?;
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add(request.body().len() as u64, Ordering::Relaxed);
        let view: NodeView = self.call(request, CallKind::Write, &context).await?;
        // The patch landed; an answer this store cannot read leaves the new list unknown.
        view.status()
            .map_err(|e| StoreError::uncertain(context).with_source(e))
    }

    /// Every node's status, page by page.
    async fn list_nodes(&self) -> Result<Vec<(String, NodeStatus<Kube>)>, StoreError> {
        let context = "listing nodes";
        // A continue token expires (410 Gone) when the listing takes longer than etcd keeps
        // its snapshot: start over once, from a fresh snapshot.
        let nodes = match self.all_nodes().await {
            Ok(nodes) => nodes,
            Err(ListError::Expired(_)) => match self.all_nodes().await {
                Ok(nodes) => nodes,
                Err(ListError::Expired(e)) => {
                    return Err(StoreError::transient(
                        "listing nodes: the continue token expired twice",
                    )
                    .with_source(e));
                }
                Err(ListError::Failed(e)) => return Err(store_error(e, CallKind::Read, context)),
            },
            Err(ListError::Failed(e)) => return Err(store_error(e, CallKind::Read, context)),
        };
        nodes
            .into_iter()
            // A node whose kubelet attaches and detaches by itself is kubelet's: its status
            // lists what kubelet attached, which the core must not adopt (and then detach).
            .filter(|view| {
                view.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(CONTROLLER_MANAGED_ANNOTATION))
            })
            .map(|view| {
                let status = view.status().map_err(|e| {
                    StoreError::transient(format!("listing nodes: node {}", view.metadata.name))
                        .with_source(e)
                })?;
                Ok((view.metadata.name, status))
            })
            .collect()
    }
}

/// The parts of a Node this store reads. Everything else (and any field a newer API adds) is
/// ignored, except inside `volumesAttached`, which is kept as JSON so that the revision is
/// exactly what the server holds and the `test` compares equal.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeView {
    metadata: MetaView,
    spec: SpecView,
    status: StatusView,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MetaView {
    name: String,
    annotations: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SpecView {
    taints: Option<Vec<TaintView>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TaintView {
    key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct StatusView {
    volumes_attached: Option<Value>,
    volumes_in_use: Option<Vec<String>>,
    conditions: Option<Vec<ConditionView>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConditionView {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// One `volumesAttached` entry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachedView {
    name: String,
    #[serde(default)]
    device_path: Option<String>,
}

/// A node whose `volumesAttached` is not a list of `{name, devicePath}`.
#[derive(Debug, thiserror::Error)]
#[error("status.volumesAttached of node {node:?} is not a list of {{name, devicePath}}: {source}")]
struct UnexpectedShape {
    node: String,
    source: serde_json::Error,
}

impl NodeView {
    /// The node's status, as the store's documentation says.
    fn status(&self) -> Result<NodeStatus<Kube>, UnexpectedShape> {
        let attached = self.status.volumes_attached.clone().unwrap_or(Value::Null);
        // Canonical: serde_json's maps keep their keys sorted, whatever order the server used
        // (with serde_json's `preserve_order` on, the server's order, which is as stable).
        let revision = Revision::from(attached.to_string());
        let entries: Option<Vec<AttachedView>> =
            serde_json::from_value(attached).map_err(|source| UnexpectedShape {
                node: self.metadata.name.clone(),
                source,
            })?;
        let attached = entries
            .unwrap_or_default()
            .into_iter()
            .map(|entry| ReportedVolume {
                volume: entry.name,
                device: entry
                    .device_path
                    .filter(|path| !path.is_empty())
                    .map(Arc::from),
            })
            .collect();
        let facts = facts_of(
            self.status
                .conditions
                .iter()
                .flatten()
                .map(|c| (c.type_.as_str(), c.status.as_str())),
            self.spec.taints.iter().flatten().map(|t| t.key.as_str()),
            self.status.volumes_in_use.as_deref(),
        );
        Ok(NodeStatus {
            attached,
            in_use: facts.in_use,
            fenced: Some(facts.fenced),
            healthy: Some(facts.healthy),
            revision,
        })
    }
}

/// A page of a node listing.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeList {
    metadata: ListMetaView,
    items: Vec<NodeView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListMetaView {
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}
