//! A fake Kubernetes API server over HTTP on 127.0.0.1, for running the controller as a real
//! client (the example as a child process, with a kubeconfig pointing here) rather than through
//! kube's mock service.
//!
//! One in-memory store serves every resource the controller and kube-lease-manager touch
//! ([`RESOURCES`]): get, list (paged by `limit`/`continue`, `fieldSelector=metadata.name=`),
//! watch (a real stream, from a `resourceVersion`, 410 Gone from before the history kept),
//! create, delete (an object with finalizers is marked deleted and stays), and patch: JSON
//! patch with the semantics of `fake_api.rs` (Kubernetes' json-patch library, a `test` of
//! `null` passing on an absent member), merge and strategic merge patch (as a merge patch: the
//! fields patched here are scalars), and server-side apply with field ownership, which
//! kube-lease-manager's exclusion rests on (an apply by another field manager of a field owned
//! with another value is a 409 Conflict). A status subresource keeps only `status` of a patch,
//! the main resource keeps its `status`.
//!
//! Every request is authenticated by its bearer token ([`ApiServer::token`]) and, when a policy
//! is set ([`ApiServer::enforce`]), authorized by it as the API server's RBAC authorizer would:
//! 403 otherwise. Every request is recorded ([`ApiServer::requests`]) with its verb, resource,
//! answer and time, for the RBAC proof and the measurements. An optional per-user token bucket
//! answers 429 over its rate ([`ApiServer::limit_rate`]), and a hook can refuse requests as an
//! admission webhook would ([`ApiServer::admission`]).
//!
//! The tests' simulators (kubelet, external-attacher, operators) change objects directly
//! ([`ApiServer::put`], [`ApiServer::edit`], [`ApiServer::remove`]), unauthenticated, as the
//! components they stand for would through their own credentials.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::rbac::{Attributes, Policy};
use super::{query_pairs, status_body};

/// A resource the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    /// API group (`""`: core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural name, as in paths and RBAC rules.
    pub plural: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether it has a status subresource.
    pub status: bool,
}

impl Resource {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const fn resource(
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
) -> Resource {
    Resource {
        group,
        version: "v1",
        plural,
        kind,
        namespaced,
        status,
    }
}

/// Pods.
pub const PODS: Resource = resource("", "pods", "Pod", true, true);
/// PersistentVolumeClaims.
pub const PVCS: Resource = resource(
    "",
    "persistentvolumeclaims",
    "PersistentVolumeClaim",
    true,
    true,
);
/// PersistentVolumes.
pub const PVS: Resource = resource("", "persistentvolumes", "PersistentVolume", false, true);
/// Nodes.
pub const NODES: Resource = resource("", "nodes", "Node", false, true);
/// core/v1 Events.
pub const EVENTS: Resource = resource("", "events", "Event", true, false);
/// events.k8s.io/v1 Events (a separate store here: the controller must use one or the other).
pub const NEW_EVENTS: Resource = resource("events.k8s.io", "events", "Event", true, false);
/// CSIDrivers.
pub const CSI_DRIVERS: Resource =
    resource("storage.k8s.io", "csidrivers", "CSIDriver", false, false);
/// CSINodes.
pub const CSI_NODES: Resource = resource("storage.k8s.io", "csinodes", "CSINode", false, false);
/// VolumeAttachments.
pub const ATTACHMENTS: Resource = resource(
    "storage.k8s.io",
    "volumeattachments",
    "VolumeAttachment",
    false,
    true,
);
/// Leases.
pub const LEASES: Resource = resource("coordination.k8s.io", "leases", "Lease", true, false);

/// Every resource served.
pub const RESOURCES: [Resource; 10] = [
    PODS,
    PVCS,
    PVS,
    NODES,
    EVENTS,
    NEW_EVENTS,
    CSI_DRIVERS,
    CSI_NODES,
    ATTACHMENTS,
    LEASES,
];

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Served {
    /// Who sent it (`system:serviceaccount:ns:name`), or `None` if unauthenticated.
    pub user: Option<String>,
    /// The RBAC verb: get, list, watch, create, update, patch, delete.
    pub verb: &'static str,
    /// The resource, `plural[/subresource]`.
    pub resource: String,
    /// Its group.
    pub group: &'static str,
    /// The namespace of the request, if any.
    pub namespace: Option<String>,
    /// The object's name, if any.
    pub name: Option<String>,
    /// The name of the object a create asked for (its body's `metadata.name`), which RBAC
    /// does not see.
    pub creates: Option<String>,
    /// The HTTP answer.
    pub code: u16,
    /// Whether RBAC refused it (a 403 of the authorizer, not of an admission hook).
    pub forbidden: bool,
    /// When it came, since the server started.
    pub at: Duration,
}

/// An admission hook: sees each authorized request that writes, and may refuse it with a
/// code and a message.
pub type Admission = Arc<dyn Fn(&Served) -> Option<(u16, String)> + Send + Sync>;

/// The fake API server. Clones share it.
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    addr: SocketAddr,
    started: Instant,
}

/// The identity of an object: its resource, namespace (`""` for cluster-scoped) and name.
type Key = (Resource, String, String);

/// One change, for watches.
#[derive(Clone, Debug)]
struct Change {
    revision: u64,
    resource: Resource,
    namespace: String,
    kind: &'static str,
    object: Value,
}

struct State {
    revision: u64,
    objects: BTreeMap<(usize, String, String), Value>,
    /// Changes kept for watches, oldest first; a watch from before `history_from` is 410.
    history: VecDeque<Change>,
    history_from: u64,
    history_limit: usize,
    /// Server-side apply: who owns which field of a Lease (`spec.holderIdentity` ...).
    owners: HashMap<Key, BTreeMap<String, String>>,
    tokens: HashMap<String, String>,
    policy: Option<Policy>,
    admission: Option<Admission>,
    /// Per user: (rate per second, burst, tokens, last refill).
    rates: HashMap<String, (f64, f64, f64, Instant)>,
    served: Vec<Served>,
    uids: u64,
}

fn index_of(resource: Resource) -> usize {
    RESOURCES
        .iter()
        .position(|r| *r == resource)
        .expect("a served resource")
}

/// Which request a path and method make.
#[derive(Debug)]
struct Target {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some((*name).to_owned()), None),
        [plural, name, sub] => (*plural, Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return None,
    };
    let resource = *RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)?;
    if resource.namespaced != namespace.is_some() && (name.is_some() || !resource.namespaced) {
        return None;
    }
    Some(Target {
        resource,
        namespace,
        name,
        subresource,
    })
}

fn json_answer(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("a status code"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("JSON")))
        .expect("a response")
}

fn failure(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (code, status_body(code, reason, message))
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

impl ApiServer {
    /// Starts a server on a free port of 127.0.0.1, in a task of the current runtime, with no
    /// policy (every authenticated request is allowed) and a history of 100,000 changes.
    pub async fn start() -> ApiServer {
        Self::start_at(0).await
    }

    /// [`ApiServer::start`] on `port` of 127.0.0.1 (0: any free one).
    pub async fn start_at(port: u16) -> ApiServer {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("a port on 127.0.0.1");
        let addr = listener.local_addr().expect("an address");
        let server = ApiServer {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    revision: 1,
                    objects: BTreeMap::new(),
                    history: VecDeque::new(),
                    history_from: 1,
                    history_limit: 100_000,
                    owners: HashMap::new(),
                    tokens: HashMap::new(),
                    policy: None,
                    admission: None,
                    rates: HashMap::new(),
                    served: Vec::new(),
                    uids: 0,
                }),
                changed: watch::Sender::new(1),
                addr,
                started: Instant::now(),
            }),
        };
        let serving = server.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let server = serving.clone();
            async move { server.serve(request).await }
        });
        tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the fake API server");
        });
        server
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// A bearer token that authenticates as `user` (`system:serviceaccount:ns:name`).
    pub fn token(&self, user: &str) -> String {
        let mut state = self.lock();
        let token = format!("token-{}", state.tokens.len() + 1);
        state.tokens.insert(token.clone(), user.to_owned());
        token
    }

    /// A kubeconfig that reaches this server with `token`.
    pub fn kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: controller\n  user:\n    token: {token}\ncontexts:\n- name: fake\n  \
             context:\n    cluster: fake\n    user: controller\n    namespace: default\n\
             current-context: fake\n",
            self.url()
        )
    }

    /// A kube client of this server with `token`.
    pub async fn client(&self, token: &str) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&self.kubeconfig(token)).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("a config");
        kube::Client::try_from(config).expect("a client")
    }

    /// Authorizes every request with `policy` from now on (`None`: allow all).
    pub fn enforce(&self, policy: Option<Policy>) {
        self.lock().policy = policy;
    }

    /// Refuses writes as `hook` says (an admission webhook), from now on.
    pub fn admission(&self, hook: Option<Admission>) {
        self.lock().admission = hook;
    }

    /// Answers 429 to `user`'s requests beyond `rate` a second with bursts of `burst`.
    pub fn limit_rate(&self, user: &str, rate: f64, burst: f64) {
        self.lock()
            .rates
            .insert(user.to_owned(), (rate, burst, burst, Instant::now()));
    }

    /// Keeps at most `changes` changes for watches (older ones: 410 Gone).
    pub fn keep_history(&self, changes: usize) {
        self.lock().history_limit = changes.max(1);
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<Served> {
        self.lock().served.clone()
    }

    /// A receiver that changes at every change of an object.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Time since the server started.
    pub fn elapsed(&self) -> Duration {
        self.inner.started.elapsed()
    }

    // ---- the simulators' side ----

    /// Creates or replaces `object` (its `apiVersion`, `kind`, namespace and name say where).
    pub fn put(&self, object: Value) -> Value {
        let resource = RESOURCES
            .iter()
            .copied()
            .find(|r| object["apiVersion"] == r.api_version().as_str() && object["kind"] == r.kind)
            .unwrap_or_else(|| panic!("not a served kind: {object}"));
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .expect("a named object")
            .to_owned();
        let mut state = self.lock();
        let exists =
            state
                .objects
                .contains_key(&(index_of(resource), namespace.clone(), name.clone()));
        let object = state.store(
            resource,
            &namespace,
            &name,
            object,
            if exists { "MODIFIED" } else { "ADDED" },
        );
        drop(state);
        self.notify();
        object
    }

    /// The object, if it exists.
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(index_of(resource), namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every object of `resource`.
    pub fn list(&self, resource: Resource) -> Vec<Value> {
        let i = index_of(resource);
        self.lock()
            .objects
            .range((i, String::new(), String::new())..(i + 1, String::new(), String::new()))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Edits the object in place; whether it exists. An edit that changes nothing is not a
    /// change.
    pub fn edit(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> bool {
        let mut state = self.lock();
        let key = (index_of(resource), namespace.to_owned(), name.to_owned());
        let Some(mut object) = state.objects.get(&key).cloned() else {
            return false;
        };
        let before = object.clone();
        edit(&mut object);
        if object != before {
            state.store(resource, namespace, name, object, "MODIFIED");
            drop(state);
            self.notify();
        }
        true
    }

    /// Removes the object at once, finalizers or not; whether it existed.
    pub fn remove(&self, resource: Resource, namespace: &str, name: &str) -> bool {
        let mut state = self.lock();
        let removed = state.drop_object(resource, namespace, name).is_some();
        drop(state);
        if removed {
            self.notify();
        }
        removed
    }

    /// The changes after `revision`, and the revision they bring the caller to; `None` if the
    /// history no longer reaches back that far.
    pub fn changes_since(&self, revision: u64) -> Option<(u64, Vec<(Resource, Value)>)> {
        let state = self.lock();
        if revision + 1 < state.history_from {
            return None;
        }
        let start = state.history.partition_point(|c| c.revision <= revision);
        let changes = state
            .history
            .range(start..)
            .map(|c| (c.resource, c.object.clone()))
            .collect();
        Some((state.revision, changes))
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// A JSON patch of the node's status, as another writer of it (a kubelet) would send; the
    /// HTTP code of the answer.
    pub fn patch_status_as_kubelet(&self, node: &str, patch: &Value) -> u16 {
        let body = serde_json::to_vec(patch).expect("JSON");
        let (code, _) = self.lock().patch(
            NODES,
            "",
            node,
            Some("status"),
            &BTreeMap::new(),
            "application/json-patch+json",
            &body,
        );
        if code < 300 {
            self.notify();
        }
        code
    }

    fn notify(&self) {
        let revision = self.lock().revision;
        self.inner.changed.send_replace(revision);
    }

    // ---- the HTTP side ----

    async fn serve(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, 64 << 20)
            .await
            .unwrap_or_default();
        let query = query_pairs(parts.uri.query().unwrap_or(""));
        let Some(target) = parse(parts.uri.path()) else {
            let (code, body) = failure(
                404,
                "NotFound",
                &format!(
                    "the server could not find the requested resource ({})",
                    parts.uri.path()
                ),
            );
            return json_answer(code, &body);
        };
        let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
        let verb: &'static str = match (&parts.method, target.name.is_some()) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if watching => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, false) => "create",
            (&Method::PUT, true) => "update",
            (&Method::PATCH, true) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => {
                let (code, body) = failure(405, "MethodNotAllowed", "not served by the fake");
                return json_answer(code, &body);
            }
        };
        let user = bearer(&parts.headers).and_then(|t| self.lock().tokens.get(&t).cloned());
        let mut served = Served {
            user: user.clone(),
            verb,
            resource: match &target.subresource {
                Some(sub) => format!("{}/{sub}", target.resource.plural),
                None => target.resource.plural.to_owned(),
            },
            group: target.resource.group,
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            creates: (verb == "create")
                .then(|| serde_json::from_slice::<Value>(&bytes).ok())
                .flatten()
                .and_then(|b| b["metadata"]["name"].as_str().map(str::to_owned)),
            code: 0,
            forbidden: false,
            at: self.elapsed(),
        };
        if let Some(refusal) = self.gate(&mut served) {
            return refusal;
        }
        if verb == "watch" {
            let response = self.watch(&target, &query);
            self.record(served, 200);
            return response;
        }
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let (code, body) = self.answer(verb, &target, &query, &content_type, &bytes);
        self.record(served, code);
        json_answer(code, &body)
    }

    /// Authentication, authorization, rate limit and admission: the refusal, if any (recorded).
    fn gate(&self, served: &mut Served) -> Option<Response<Body>> {
        let mut state = self.lock();
        let Some(user) = served.user.clone() else {
            served.code = 401;
            state.served.push(served.clone());
            let (code, body) = failure(401, "Unauthorized", "Unauthorized");
            return Some(json_answer(code, &body));
        };
        if let Some(policy) = &state.policy {
            let attributes = Attributes {
                user: &user,
                verb: served.verb,
                group: served.group,
                resource: &served.resource,
                namespace: served.namespace.as_deref(),
                name: served.name.as_deref(),
            };
            if !policy.allows(&attributes) {
                let message = attributes.forbidden_message();
                served.code = 403;
                served.forbidden = true;
                state.served.push(served.clone());
                let (code, body) = failure(403, "Forbidden", &message);
                return Some(json_answer(code, &body));
            }
        }
        if let Some((rate, burst, tokens, at)) = state.rates.get_mut(&user) {
            let now = Instant::now();
            *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * *rate).min(*burst);
            *at = now;
            if *tokens < 1.0 {
                served.code = 429;
                state.served.push(served.clone());
                let (code, body) = failure(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                );
                let mut response = json_answer(code, &body);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                return Some(response);
            }
            *tokens -= 1.0;
        }
        let writes = !matches!(served.verb, "get" | "list" | "watch");
        if writes && let Some(hook) = state.admission.clone() {
            drop(state);
            if let Some((code, message)) = hook(served) {
                served.code = code;
                self.lock().served.push(served.clone());
                let (code, body) = failure(code, "Forbidden", &message);
                return Some(json_answer(code, &body));
            }
        }
        None
    }

    fn record(&self, mut served: Served, code: u16) {
        served.code = code;
        self.lock().served.push(served);
    }

    fn answer(
        &self,
        verb: &str,
        target: &Target,
        query: &BTreeMap<String, String>,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let resource = target.resource;
        let namespace = target.namespace.clone().unwrap_or_default();
        let name = target.name.clone().unwrap_or_default();
        let sub = target.subresource.as_deref();
        if sub.is_some() && (sub != Some("status") || !resource.status) {
            return failure(404, "NotFound", "no such subresource");
        }
        let answer = {
            let mut state = self.lock();
            match verb {
                "get" => {
                    match state
                        .objects
                        .get(&(index_of(resource), namespace.clone(), name.clone()))
                    {
                        Some(object) => (200, object.clone()),
                        None => not_found(resource, &name),
                    }
                }
                "list" => state.list(resource, target.namespace.as_deref(), query),
                "create" => state.create(resource, &namespace, body),
                "delete" => state.delete(resource, &namespace, &name),
                "patch" => state.patch(resource, &namespace, &name, sub, query, content_type, body),
                "update" => state.update(resource, &namespace, &name, sub, body),
                _ => failure(405, "MethodNotAllowed", "not served by the fake"),
            }
        };
        if matches!(verb, "create" | "delete" | "patch" | "update") && answer.0 < 300 {
            self.notify();
        }
        answer
    }

    fn watch(&self, target: &Target, query: &BTreeMap<String, String>) -> Response<Body> {
        let resource = target.resource;
        let namespace = target.namespace.clone();
        let only = query
            .get("fieldSelector")
            .and_then(|s| s.strip_prefix("metadata.name="))
            .map(str::to_owned);
        let seconds: u64 = query
            .get("timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1800);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let matches = move |c: &Change| {
            c.resource == resource
                && namespace.as_ref().is_none_or(|ns| *ns == c.namespace)
                && only
                    .as_ref()
                    .is_none_or(|n| c.object["metadata"]["name"] == n.as_str())
        };
        // From "0" or nothing: the objects as they are, then what comes.
        let mut initial: Vec<Value> = Vec::new();
        if from == 0 {
            let state = self.lock();
            from = state.revision;
            let i = index_of(resource);
            for ((r, ns, _), object) in &state.objects {
                let change = Change {
                    revision: 0,
                    resource: RESOURCES[*r],
                    namespace: ns.clone(),
                    kind: "ADDED",
                    object: object.clone(),
                };
                if *r == i && matches(&change) {
                    initial.push(json!({"type": "ADDED", "object": object}));
                }
            }
            // Sent by popping from the end.
            initial.reverse();
        }
        let server = self.clone();
        let changed = self.changes();
        let stream = futures::stream::unfold(
            (initial, from, false, changed),
            move |(mut pending, mut from, mut ended, mut changed)| {
                let server = server.clone();
                let matches = matches.clone();
                async move {
                    loop {
                        if let Some(line) = pending.pop() {
                            let mut bytes = serde_json::to_vec(&line).expect("JSON");
                            bytes.push(b'\n');
                            let chunk = Ok::<_, Infallible>(Bytes::from(bytes));
                            return Some((chunk, (pending, from, ended, changed)));
                        }
                        if ended {
                            return None;
                        }
                        // Seen before reading, so that a change after the read wakes us.
                        changed.borrow_and_update();
                        {
                            let state = server.lock();
                            if from + 1 < state.history_from {
                                let gone = json!({"type": "ERROR", "object": status_body(
                                    410, "Expired", &format!("too old resource version: {from} ({})", state.history_from))});
                                pending.push(gone);
                                ended = true;
                                continue;
                            }
                            let start = state.history.partition_point(|c| c.revision <= from);
                            let mut lines: Vec<Value> = state
                                .history
                                .range(start..)
                                .filter(|c| matches(c))
                                .map(|c| json!({"type": c.kind, "object": c.object}))
                                .collect();
                            from = state.revision;
                            if !lines.is_empty() {
                                lines.reverse();
                                pending = lines;
                                continue;
                            }
                        }
                        tokio::select! {
                            _ = tokio::time::sleep_until(deadline) => return None,
                            _ = changed.changed() => {}
                        }
                    }
                }
            },
        );
        Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(stream))
            .expect("a response")
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

fn not_found(resource: Resource, name: &str) -> (u16, Value) {
    let what = if resource.group.is_empty() {
        resource.plural.to_owned()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    };
    failure(404, "NotFound", &format!("{what} \"{name}\" not found"))
}

impl State {
    /// Stores `object` with a new resourceVersion and records the change.
    fn store(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        mut object: Value,
        kind: &'static str,
    ) -> Value {
        self.revision += 1;
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        let meta = &mut object["metadata"];
        meta["name"] = json!(name);
        if resource.namespaced {
            meta["namespace"] = json!(namespace);
        }
        meta["resourceVersion"] = json!(self.revision.to_string());
        if meta["uid"].is_null() {
            self.uids += 1;
            meta["uid"] = json!(format!("uid-{}", self.uids));
        }
        if meta["creationTimestamp"].is_null() {
            meta["creationTimestamp"] = json!(now_rfc3339());
        }
        self.objects.insert(
            (index_of(resource), namespace.to_owned(), name.to_owned()),
            object.clone(),
        );
        self.remember(resource, namespace, kind, object.clone());
        object
    }

    fn drop_object(&mut self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        let key = (index_of(resource), namespace.to_owned(), name.to_owned());
        let mut object = self.objects.remove(&key)?;
        self.owners
            .remove(&(resource, namespace.to_owned(), name.to_owned()));
        self.revision += 1;
        object["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        self.remember(resource, namespace, "DELETED", object.clone());
        Some(object)
    }

    fn remember(&mut self, resource: Resource, namespace: &str, kind: &'static str, object: Value) {
        self.history.push_back(Change {
            revision: self.revision,
            resource,
            namespace: namespace.to_owned(),
            kind,
            object,
        });
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.history_from = old.revision + 1;
            }
        }
    }

    fn list(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        query: &BTreeMap<String, String>,
    ) -> (u16, Value) {
        let only = query
            .get("fieldSelector")
            .and_then(|s| s.strip_prefix("metadata.name="));
        let limit: usize = query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let after = query.get("continue").cloned();
        let i = index_of(resource);
        let mut items = Vec::new();
        let mut next = None;
        for ((_, ns, name), object) in self
            .objects
            .range((i, String::new(), String::new())..(i + 1, String::new(), String::new()))
        {
            if namespace.is_some_and(|want| want != ns) || only.is_some_and(|n| n != name) {
                continue;
            }
            let token = format!("{ns}/{name}");
            if after.as_ref().is_some_and(|a| token <= *a) {
                continue;
            }
            if items.len() == limit {
                next = Some(());
                break;
            }
            items.push(object.clone());
        }
        let mut metadata = json!({"resourceVersion": self.revision.to_string()});
        if next.is_some() {
            let last = items.last().expect("a full page");
            let ns = last["metadata"]["namespace"].as_str().unwrap_or("");
            let name = last["metadata"]["name"].as_str().unwrap_or("");
            metadata["continue"] = json!(format!("{ns}/{name}"));
        }
        (
            200,
            json!({
                "apiVersion": resource.api_version(),
                "kind": format!("{}List", resource.kind),
                "metadata": metadata,
                "items": items,
            }),
        )
    }

    fn create(&mut self, resource: Resource, namespace: &str, body: &[u8]) -> (u16, Value) {
        let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
            return failure(400, "BadRequest", "the body is not JSON");
        };
        let name = match object["metadata"]["name"].as_str() {
            Some(name) => name.to_owned(),
            None => match object["metadata"]["generateName"].as_str() {
                Some(prefix) => {
                    self.uids += 1;
                    format!("{prefix}{:05x}", self.uids)
                }
                None => return failure(422, "Invalid", "metadata.name: Required value"),
            },
        };
        if self
            .objects
            .contains_key(&(index_of(resource), namespace.to_owned(), name.clone()))
        {
            let what = if resource.group.is_empty() {
                resource.plural.to_owned()
            } else {
                format!("{}.{}", resource.plural, resource.group)
            };
            return failure(
                409,
                "AlreadyExists",
                &format!("{what} \"{name}\" already exists"),
            );
        }
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
            meta.remove("uid");
        }
        (201, self.store(resource, namespace, &name, object, "ADDED"))
    }

    fn delete(&mut self, resource: Resource, namespace: &str, name: &str) -> (u16, Value) {
        let key = (index_of(resource), namespace.to_owned(), name.to_owned());
        let Some(object) = self.objects.get(&key).cloned() else {
            return not_found(resource, name);
        };
        let finalized = object["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !finalized {
            let gone = self
                .drop_object(resource, namespace, name)
                .expect("it exists");
            return (200, gone);
        }
        if !object["metadata"]["deletionTimestamp"].is_null() {
            return (200, object);
        }
        let mut object = object;
        object["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
        (
            200,
            self.store(resource, namespace, name, object, "MODIFIED"),
        )
    }

    fn update(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sub: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        let key = (index_of(resource), namespace.to_owned(), name.to_owned());
        let Some(old) = self.objects.get(&key).cloned() else {
            return not_found(resource, name);
        };
        let Ok(new) = serde_json::from_slice::<Value>(body) else {
            return failure(400, "BadRequest", "the body is not JSON");
        };
        if let Some(version) = new["metadata"]["resourceVersion"].as_str()
            && old["metadata"]["resourceVersion"].as_str() != Some(version)
        {
            return failure(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            );
        }
        let object = keep_other_half(resource, sub, &old, new);
        (
            200,
            self.store(resource, namespace, name, object, "MODIFIED"),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn patch(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sub: Option<&str>,
        query: &BTreeMap<String, String>,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let key = (index_of(resource), namespace.to_owned(), name.to_owned());
        let old = self.objects.get(&key).cloned();
        let manager = query
            .get("fieldManager")
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let Ok(patch) = serde_json::from_slice::<Value>(body) else {
            return failure(400, "BadRequest", "the body is not JSON");
        };
        let content_type = content_type.split(';').next().unwrap_or("").trim();
        let apply = content_type == "application/apply-patch+yaml";
        let Some(old) = old.or_else(|| apply.then(|| json!({"metadata": {"name": name}}))) else {
            return not_found(resource, name);
        };
        let mut doc = old.clone();
        match content_type {
            "application/json-patch+json" => {
                let Some(ops) = patch.as_array() else {
                    return failure(400, "BadRequest", "not a JSON patch");
                };
                for op in ops {
                    if let Err(e) = super::fake_api::apply(&mut doc, op, false) {
                        return failure(422, "Invalid", &e);
                    }
                }
            }
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                merge(&mut doc, &patch);
                self.own(resource, namespace, name, &manager, &patch, false);
            }
            "application/apply-patch+yaml" => {
                let force = query.get("force").is_some_and(|f| f == "true");
                let mine = leaves(&patch);
                let owners = self
                    .owners
                    .get(&(resource, namespace.to_owned(), name.to_owned()))
                    .cloned()
                    .unwrap_or_default();
                if !force {
                    for (path, value) in &mine {
                        if let Some(owner) = owners.get(path)
                            && *owner != manager
                            && pointer(&old, path) != Some(value)
                        {
                            return failure(
                                409,
                                "Conflict",
                                &format!(
                                    "Apply failed with 1 conflict: conflict with \"{owner}\": .{path}"
                                ),
                            );
                        }
                    }
                }
                merge(&mut doc, &patch);
                self.own(resource, namespace, name, &manager, &patch, true);
            }
            _ => {
                return failure(
                    415,
                    "UnsupportedMediaType",
                    &format!("the body of the request was in an unknown format: {content_type}"),
                );
            }
        }
        let object = keep_other_half(resource, sub, &old, doc);
        let kind = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        (
            if kind == "ADDED" { 201 } else { 200 },
            self.store(resource, namespace, name, object, kind),
        )
    }

    /// Records `manager` as the owner of the fields `patch` sets (and none for those it
    /// removes), for Leases only: the only objects applied here.
    fn own(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manager: &str,
        patch: &Value,
        _apply: bool,
    ) {
        if resource != LEASES {
            return;
        }
        let owners = self
            .owners
            .entry((resource, namespace.to_owned(), name.to_owned()))
            .or_default();
        for (path, value) in leaves(patch) {
            if value.is_null() {
                owners.remove(&path);
            } else {
                owners.insert(path, manager.to_owned());
            }
        }
    }
}

/// The patched object with the half a request may not change put back: for a status
/// subresource everything but `status`, for the main resource of a kind with one its
/// `status`.
fn keep_other_half(resource: Resource, sub: Option<&str>, old: &Value, mut new: Value) -> Value {
    if sub == Some("status") {
        let mut kept = old.clone();
        kept["status"] = new["status"].take();
        return kept;
    }
    if resource.status {
        new["status"] = old["status"].clone();
        if new["status"].is_null()
            && let Some(o) = new.as_object_mut()
        {
            o.remove("status");
        }
    }
    new
}

/// RFC 7386: objects merge, `null` removes, anything else replaces.
fn merge(doc: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = json!({});
    }
    let target = doc.as_object_mut().expect("an object");
    for (key, value) in fields {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The leaf fields of `patch` under `spec` (`spec.holderIdentity` ...), with their values.
fn leaves(patch: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
        match value.as_object() {
            Some(fields) if !fields.is_empty() => {
                for (k, v) in fields {
                    walk(&format!("{prefix}.{k}"), v, out);
                }
            }
            _ => out.push((prefix.trim_start_matches('.').to_owned(), value.clone())),
        }
    }
    let mut out = Vec::new();
    if let Some(spec) = patch.get("spec") {
        walk("spec", spec, &mut out);
    }
    out
}

fn pointer<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    let pointer = format!("/{}", path.replace('.', "/"));
    doc.pointer(&pointer)
}
