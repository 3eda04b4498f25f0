//! A small stateful fake of the API server's VolumeAttachments and PersistentVolumes, over
//! kube's documented tower-test mock, with a fake external-attacher: enough to run the
//! `VolumeAttachmentBackend` against something that keeps state (the conformance kit, incident
//! replays), where the per-test scripts of `tests/backend.rs` assert exact requests.
//!
//! What it serves, cluster-scoped:
//! - `/apis/storage.k8s.io/v1/volumeattachments`: create (POST; 409 AlreadyExists), list
//!   (GET, paged by `limit`/`continue`, `fieldSelector=metadata.name=...`), watch (GET `?watch=true`, with `fieldSelector=
//!   metadata.name=...`, `resourceVersion`, `timeoutSeconds`; 410 Gone from before
//!   [`FakeVa::compact`]); `.../{name}`: get, delete (an object with finalizers is marked
//!   deleted and stays until the attacher removes it; one without goes at once).
//! - `/api/v1/persistentvolumes`: list (paged) and get, of the volumes added with
//!   [`FakeVa::add_volume`].
//!
//! Watches are answered as long polls: the answer waits until there is an event after the
//! asked version (or `timeoutSeconds` pass) and then ends with the events it carries, since
//! `kube::client::Body` cannot be built as an open stream from outside kube. A client sees a
//! watch that ends, which it must handle anyway.
//!
//! The fake external-attacher, [`Attacher`], attaches each new VolumeAttachment (adds its
//! finalizer, sets `status.attached`) after `attach_delay`, and removes a deleted one after
//! `detach_delay`; it can be stopped (an attacher that is down) or made to fail attaches with
//! `status.attachError` or detaches with `status.detachError`. Time is tokio's, so
//! `start_paused` tests run it instantly.
//!
//! To combine it with fakes of other resources, route each request whose path
//! [`FakeVa::serves`] to [`FakeVa::respond`] (in a task of its own: a watch waits); or let
//! [`FakeVa::client`] serve everything, answering 404 to other paths.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use attach_detach_kube::CsiVolume;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::{VolumeAttachment, VolumeAttachmentStatus, VolumeError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

/// The mock's handle, as `tower_test::mock::pair` gives it for kube's `Client::new`.
pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const VOLUME_ATTACHMENTS: &str = "/apis/storage.k8s.io/v1/volumeattachments";
const PERSISTENT_VOLUMES: &str = "/api/v1/persistentvolumes";

/// How the fake external-attacher behaves; change it at any time with
/// [`FakeVa::set_attacher`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attacher {
    /// Whether it runs: stopped, nothing is attached and deleted objects stay (their
    /// finalizer is not removed), as when the driver's external-attacher is down.
    pub running: bool,
    /// How long after its creation (or since the attacher runs again) an object is attached.
    pub attach_delay: Duration,
    /// How long after its deletion an object with a finalizer is removed.
    pub detach_delay: Duration,
    /// When set, attaches fail: the object gets `status.attachError` with this message
    /// instead of `status.attached` (and is attached once this is cleared).
    pub attach_error: Option<String>,
    /// When set, detaches fail: a deleted object gets `status.detachError` with this message
    /// (after `detach_delay`) and keeps its finalizer, so it stays; once this is cleared, it
    /// is removed after `detach_delay`, as the external-attacher's retry succeeds.
    pub detach_error: Option<String>,
}

impl Default for Attacher {
    fn default() -> Self {
        Attacher {
            running: true,
            attach_delay: Duration::from_millis(20),
            detach_delay: Duration::from_millis(20),
            attach_error: None,
            detach_error: None,
        }
    }
}

/// The fake API server's state, shared by its clones.
#[derive(Clone)]
pub struct FakeVa {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// The latest revision, sent at every change: watches and the attacher wait on it.
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    revision: u64,
    /// Watches from before this revision answer 410 Gone.
    compacted: u64,
    attachments: BTreeMap<String, VolumeAttachment>,
    /// When each attachment last changed hands: created, or marked deleted.
    since: BTreeMap<String, Instant>,
    volumes: BTreeMap<String, PersistentVolume>,
    /// Every change of a VolumeAttachment: revision, watch event type, the object then.
    events: Vec<(u64, &'static str, Value)>,
    attacher: Attacher,
    requests: Vec<String>,
}

impl Default for FakeVa {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeVa {
    /// An empty API server with a running [`Attacher`] of default delays.
    pub fn new() -> Self {
        FakeVa {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                changed: watch::Sender::new(0),
            }),
        }
    }

    /// A kube client served by this fake alone (other paths answer 404), with the attacher
    /// started. Needs a tokio runtime.
    pub fn client(&self) -> kube::Client {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        self.serve(handle);
        self.start_attacher();
        kube::Client::new(service, "default")
    }

    /// Serves every request of `handle`, each in a task of its own, until the client is
    /// dropped.
    pub fn serve(&self, mut handle: Handle) -> JoinHandle<()> {
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let fake = fake.clone();
                tokio::spawn(async move { send.send_response(fake.respond(request).await) });
            }
        })
    }

    /// Starts the fake external-attacher, for a caller routing requests itself. Runs until
    /// the runtime ends.
    pub fn start_attacher(&self) -> JoinHandle<()> {
        let fake = self.clone();
        tokio::spawn(async move {
            loop {
                let mut changed = fake.inner.changed.subscribe();
                match fake.attacher_step(Instant::now()) {
                    Some(due) => {
                        tokio::select! {
                            _ = sleep_until(due) => {}
                            _ = changed.changed() => {}
                        }
                    }
                    None => {
                        let _ = changed.changed().await;
                    }
                }
            }
        })
    }

    /// Whether this fake serves `path` (a request's `uri().path()`).
    pub fn serves(path: &str) -> bool {
        [VOLUME_ATTACHMENTS, PERSISTENT_VOLUMES]
            .iter()
            .any(|prefix| path == *prefix || path.starts_with(&format!("{prefix}/")))
    }

    /// Adds (or replaces) the CSI PersistentVolume `name` of `driver` and `handle`, with
    /// `access_modes` (`ReadWriteOnce`, ...), and returns the payload attaching it takes.
    pub fn add_volume(
        &self,
        name: &str,
        driver: &str,
        handle: &str,
        access_modes: &[&str],
    ) -> CsiVolume {
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(access_modes.iter().map(|m| (*m).to_owned()).collect()),
                csi: Some(CSIPersistentVolumeSource {
                    driver: driver.to_owned(),
                    volume_handle: handle.to_owned(),
                    ..CSIPersistentVolumeSource::default()
                }),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        };
        let mut state = self.state();
        state.revision += 1;
        let mut pv = pv;
        pv.metadata.resource_version = Some(state.revision.to_string());
        state.volumes.insert(name.to_owned(), pv);
        CsiVolume::persistent(name, driver, handle)
    }

    /// Removes the PersistentVolume `name`.
    pub fn remove_volume(&self, name: &str) {
        self.state().volumes.remove(name);
    }

    /// Every VolumeAttachment, by name.
    pub fn attachments(&self) -> Vec<VolumeAttachment> {
        self.state().attachments.values().cloned().collect()
    }

    /// Puts a VolumeAttachment as it is (a leftover of another controller, say), as a
    /// create would, attacher included.
    pub fn insert_attachment(&self, mut va: VolumeAttachment) {
        let name = va.metadata.name.clone().expect("a named VolumeAttachment");
        let mut state = self.state();
        va.metadata.resource_version = None;
        state.since.insert(name.clone(), Instant::now());
        state.record(name, "ADDED", Some(va));
        drop(state);
        self.notify();
    }

    /// The requests served so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.state().requests.clone()
    }

    /// The attacher's behaviour now.
    pub fn attacher(&self) -> Attacher {
        self.state().attacher.clone()
    }

    /// Changes the attacher's behaviour.
    pub fn set_attacher(&self, attacher: Attacher) {
        let mut state = self.state();
        if attacher.running && !state.attacher.running {
            // Its delays count from now, as for an attacher that just started.
            let now = Instant::now();
            for since in state.since.values_mut() {
                *since = now;
            }
        }
        state.attacher = attacher;
        drop(state);
        self.notify();
    }

    /// Forgets the change history: watches from an older revision answer 410 Gone, as after
    /// an etcd compaction.
    pub fn compact(&self) {
        let mut state = self.state();
        state.compacted = state.revision;
        state.events.clear();
    }

    /// Answers one request.
    pub async fn respond(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let path = parts.uri.path().to_owned();
        let query = super::query_pairs(parts.uri.query().unwrap_or_default());
        self.state().requests.push(format!(
            "{} {}",
            parts.method,
            parts.uri.path_and_query().map_or("", |p| p.as_str())
        ));
        let name = |prefix: &str| path.strip_prefix(prefix)?.strip_prefix('/');
        let method = parts.method;
        if path == VOLUME_ATTACHMENTS {
            if method == Method::POST {
                return self.create(&bytes);
            }
            if method == Method::GET && query.get("watch").map(String::as_str) == Some("true") {
                return self.watch(&query).await;
            }
            if method == Method::GET {
                let state = self.state();
                let only = name_selector(&query);
                let items = state
                    .attachments
                    .iter()
                    .filter(|(name, _)| only.is_none_or(|only| only == name.as_str()))
                    .map(|(_, va)| to_json(va))
                    .collect();
                return list(
                    &state,
                    "VolumeAttachmentList",
                    "storage.k8s.io/v1",
                    items,
                    &query,
                );
            }
        } else if let Some(name) = name(VOLUME_ATTACHMENTS) {
            if method == Method::GET {
                return match self.state().attachments.get(name) {
                    Some(va) => answer(StatusCode::OK, to_json(va)),
                    None => not_found("volumeattachments", name),
                };
            }
            if method == Method::DELETE {
                return self.delete(name);
            }
        } else if path == PERSISTENT_VOLUMES && method == Method::GET {
            let state = self.state();
            let items = state.volumes.values().map(to_json).collect();
            return list(&state, "PersistentVolumeList", "v1", items, &query);
        } else if let Some(name) = name(PERSISTENT_VOLUMES)
            && method == Method::GET
        {
            return match self.state().volumes.get(name) {
                Some(pv) => answer(StatusCode::OK, to_json(pv)),
                None => not_found("persistentvolumes", name),
            };
        }
        if Self::serves(&path) {
            status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "not faked",
            )
        } else {
            not_found("", &path)
        }
    }

    fn create(&self, body: &[u8]) -> Response<Body> {
        let mut va: VolumeAttachment = match serde_json::from_slice(body) {
            Ok(va) => va,
            Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
        };
        let Some(name) = va.metadata.name.clone() else {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "name: Required value",
            );
        };
        let mut state = self.state();
        if state.attachments.contains_key(&name) {
            return status(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("volumeattachments.storage.k8s.io \"{name}\" already exists"),
            );
        }
        va.status = None;
        va.metadata.uid = Some(format!("uid-{}", state.revision + 1));
        state.since.insert(name.clone(), Instant::now());
        let created = state.record(name, "ADDED", Some(va));
        drop(state);
        self.notify();
        answer(StatusCode::CREATED, created)
    }

    fn delete(&self, name: &str) -> Response<Body> {
        let mut state = self.state();
        let Some(va) = state.attachments.get(name).cloned() else {
            return not_found("volumeattachments", name);
        };
        let finalized = va
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty());
        let answer_json = if !finalized {
            state.record(name.to_owned(), "DELETED", None)
        } else if va.metadata.deletion_timestamp.is_some() {
            to_json(&va)
        } else {
            let mut va = va;
            va.metadata.deletion_timestamp = Some(timestamp());
            state.since.insert(name.to_owned(), Instant::now());
            state.record(name.to_owned(), "MODIFIED", Some(va))
        };
        drop(state);
        self.notify();
        answer(StatusCode::OK, answer_json)
    }

    async fn watch(&self, query: &BTreeMap<String, String>) -> Response<Body> {
        let only = name_selector(query).map(str::to_owned);
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let seconds: u64 = query
            .get("timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(290);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let mut changed = self.inner.changed.subscribe();
            let lines = {
                let state = self.state();
                if from < state.compacted {
                    let gone = json!({"type": "ERROR", "object": super::status_body(
                        410, "Expired", &format!("too old resource version: {from} ({})", state.compacted))});
                    return events(&[gone]);
                }
                state
                    .events
                    .iter()
                    .filter(|(revision, _, object)| {
                        *revision > from
                            && only
                                .as_deref()
                                .is_none_or(|name| object["metadata"]["name"] == name)
                    })
                    .map(|(_, kind, object)| json!({"type": kind, "object": object}))
                    .collect::<Vec<_>>()
            };
            if !lines.is_empty() {
                return events(&lines);
            }
            tokio::select! {
                _ = sleep_until(deadline) => return events(&[]),
                _ = changed.changed() => {}
            }
        }
    }

    /// Does what the attacher has due by `now`; answers when it has something due next.
    fn attacher_step(&self, now: Instant) -> Option<Instant> {
        let mut state = self.state();
        let attacher = state.attacher.clone();
        if !attacher.running {
            return None;
        }
        let mut next: Option<Instant> = None;
        let mut changed = false;
        let names: Vec<String> = state.attachments.keys().cloned().collect();
        for name in names {
            let va = state.attachments[&name].clone();
            let since = state.since.get(&name).copied().unwrap_or(now);
            let deleting = va.metadata.deletion_timestamp.is_some();
            let attached = va.status.as_ref().is_some_and(|s| s.attached);
            let failed_already = va
                .status
                .as_ref()
                .and_then(|s| s.attach_error.as_ref())
                .is_some_and(|e| e.message == attacher.attach_error);
            let failed_detach_already = va
                .status
                .as_ref()
                .and_then(|s| s.detach_error.as_ref())
                .is_some_and(|e| e.message == attacher.detach_error);
            let (due, work) = if deleting && attacher.detach_error.is_some() {
                (since + attacher.detach_delay, !failed_detach_already)
            } else if deleting {
                (since + attacher.detach_delay, true)
            } else if !attached && !failed_already {
                (since + attacher.attach_delay, true)
            } else {
                (now, false)
            };
            if !work {
                continue;
            }
            if due > now {
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            }
            changed = true;
            if deleting && let Some(message) = &attacher.detach_error {
                // ControllerUnpublish failed: the finalizer stays, the error is reported.
                let mut va = va;
                va.status.get_or_insert_with(Default::default).detach_error = Some(VolumeError {
                    message: Some(message.clone()),
                    ..VolumeError::default()
                });
                state.record(name, "MODIFIED", Some(va));
                continue;
            }
            if deleting {
                state.record(name, "DELETED", None);
                continue;
            }
            let mut va = va;
            let finalizer = format!("external-attacher/{}", sanitize(&va.spec.attacher));
            let finalizers = va.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.contains(&finalizer) {
                finalizers.push(finalizer);
            }
            va.status = Some(match &attacher.attach_error {
                Some(message) => VolumeAttachmentStatus {
                    attached: false,
                    attach_error: Some(VolumeError {
                        message: Some(message.clone()),
                        ..VolumeError::default()
                    }),
                    ..VolumeAttachmentStatus::default()
                },
                None => VolumeAttachmentStatus {
                    attached: true,
                    ..VolumeAttachmentStatus::default()
                },
            });
            state.record(name, "MODIFIED", Some(va));
        }
        drop(state);
        if changed {
            self.notify();
        }
        next
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn notify(&self) {
        let revision = self.state().revision;
        self.inner.changed.send_replace(revision);
    }
}

impl State {
    /// Records a change of the VolumeAttachment `name` (`None`: removed) at a new revision;
    /// returns the object as the change left it (as deleted, for a removal).
    fn record(&mut self, name: String, kind: &'static str, va: Option<VolumeAttachment>) -> Value {
        self.revision += 1;
        let revision = self.revision.to_string();
        let mut object = match va {
            Some(va) => va,
            None => {
                self.since.remove(&name);
                self.attachments
                    .remove(&name)
                    .expect("removing an existing object")
            }
        };
        object.metadata.resource_version = Some(revision);
        let json = to_json(&object);
        if kind != "DELETED" {
            self.attachments.insert(name, object);
        }
        self.events.push((self.revision, kind, json.clone()));
        json
    }
}

/// The external-attacher's finalizer suffix: the driver with every character other than
/// `[a-zA-Z0-9-]` replaced by `-`.
fn sanitize(driver: &str) -> String {
    driver
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn timestamp() -> Time {
    Time("2026-01-01T00:00:00Z".parse().expect("a timestamp"))
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializable")
}

/// One page of a list, `limit` long from the offset in `continue`.
fn list(
    state: &State,
    kind: &str,
    api_version: &str,
    items: Vec<Value>,
    query: &BTreeMap<String, String>,
) -> Response<Body> {
    let start: usize = query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(limit).min(items.len());
    let mut metadata = json!({"resourceVersion": state.revision.to_string()});
    if end < items.len() {
        metadata["continue"] = json!(end.to_string());
    }
    let page: Vec<Value> = items.get(start..end).unwrap_or_default().to_vec();
    answer(
        StatusCode::OK,
        json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": page}),
    )
}

fn answer(code: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(&body).expect("serializable")))
        .expect("a response")
}

fn events(lines: &[Value]) -> Response<Body> {
    let mut body = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut body, line).expect("serializable");
        body.push(b'\n');
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a response")
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    answer(code, super::status_body(code.as_u16(), reason, message))
}

fn not_found(resource: &str, name: &str) -> Response<Body> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{resource} \"{name}\" not found"),
    )
}

/// The name a `fieldSelector=metadata.name=...` selects, if the query has one.
fn name_selector(query: &BTreeMap<String, String>) -> Option<&str> {
    query.get("fieldSelector")?.strip_prefix("metadata.name=")
}
