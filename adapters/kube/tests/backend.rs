//! `VolumeAttachmentBackend` against kube's documented mock: each test scripts the API server,
//! asserting every request exactly (method, path and query, content type, JSON body) and
//! answering it; then the backend conformance kit against the stateful fake of
//! `common/fake_va.rs`.
//!
//! The backend's shared watch (a LIST of every VolumeAttachment, then a WATCH from its
//! resourceVersion) runs beside the calls, so the script claims each request by what it is,
//! whichever comes first; every request must be claimed.

mod common;

use std::error::Error as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use attach_detach::conformance::{self, BackendHarness, HarnessError};
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use attach_detach_kube::{
    AttachSource, CsiDrivers, CsiVolume, Kube, KubeBackendConfig, ManagedDrivers, ManagedNodes,
    VolumeAttachmentBackend, attachment_name, driver_id, unique_name,
};
use common::fake_va::{Attacher, FakeVa};
use common::status_body as status_json;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tower_test::mock::SendResponse;

const DRIVER: &str = "ebs.csi.aws.com";
const NODE: &str = "node-a";
const VAS: &str = "/apis/storage.k8s.io/v1/volumeattachments";
const PVS: &str = "/api/v1/persistentvolumes";

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Reply = SendResponse<Response<Body>>;

/// The scripted API server's side of the mock, shared by the script and the test: every
/// request the client sent and nobody claimed yet.
#[derive(Clone)]
struct Server(Arc<Inbox>);

struct Inbox {
    /// Requests not claimed yet, in the order they came.
    pending: Mutex<Vec<(Request<Body>, Reply)>>,
    /// Replies a script keeps unanswered until the test ends (a watch left open).
    held: Mutex<Vec<Reply>>,
    /// Told at each request, and when the client is gone.
    arrived: Notify,
    /// Whether the client is gone (every clone of it dropped).
    closed: Mutex<bool>,
}

impl Server {
    /// Takes every request of `handle` into the inbox.
    fn new(mut handle: Handle) -> Server {
        let server = Server(Arc::new(Inbox {
            pending: Mutex::default(),
            held: Mutex::default(),
            arrived: Notify::new(),
            closed: Mutex::new(false),
        }));
        let inbox = server.clone();
        tokio::spawn(async move {
            while let Some(request) = handle.next_request().await {
                lock(&inbox.0.pending).push(request);
                inbox.0.arrived.notify_waiters();
            }
            *lock(&inbox.0.closed) = true;
            inbox.0.arrived.notify_waiters();
        });
        server
    }

    /// The request `method` on `uri` (path and query, exactly), once it came (`None` if the
    /// client is gone first).
    async fn claim(&self, method: &Method, uri: &str) -> Option<(Request<Body>, Reply)> {
        loop {
            let told = self.0.arrived.notified();
            {
                let mut pending = lock(&self.0.pending);
                if let Some(i) = pending
                    .iter()
                    .position(|(r, _)| r.method() == method && *r.uri() == *uri)
                {
                    return Some(pending.remove(i));
                }
            }
            if *lock(&self.0.closed) {
                return None;
            }
            told.await;
        }
    }

    /// The request `method` on `uri` (path and query, exactly), whenever it comes, which must
    /// have `body` (JSON, with a JSON content type) or no body; returns its responder.
    async fn expect(&self, method: Method, uri: &str, body: Option<Value>) -> Reply {
        let Some((request, reply)) = self.claim(&method, uri).await else {
            panic!(
                "expected {method} {uri}, but the client is gone; unclaimed: {:?}",
                self.unclaimed()
            );
        };
        let (parts, got) = request.into_parts();
        let got = got.collect_bytes().await.expect("a body");
        match body {
            Some(expected) => {
                assert_eq!(
                    parts.headers.get(http::header::CONTENT_TYPE).unwrap(),
                    "application/json",
                    "content type of {method} {uri}"
                );
                let got: Value = serde_json::from_slice(&got).expect("a JSON body");
                assert_eq!(got, expected, "body of {method} {uri}");
            }
            None => assert!(got.is_empty(), "{method} {uri} has no body"),
        }
        reply
    }

    /// Answers every request `method` on `uri` with `answer`, from now until the client is
    /// gone, however many come (a reflector retrying a refused LIST).
    fn always(
        &self,
        method: Method,
        uri: &str,
        answer: impl Fn() -> Response<Body> + Send + 'static,
    ) {
        let (server, uri) = (self.clone(), uri.to_owned());
        tokio::spawn(async move {
            while let Some((_, reply)) = server.claim(&method, &uri).await {
                reply.send_response(answer());
            }
        });
    }

    /// Keeps `reply` unanswered until the test ends: a watch left open.
    fn hold(&self, reply: Reply) {
        lock(&self.0.held).push(reply);
    }

    fn unclaimed(&self) -> Vec<String> {
        lock(&self.0.pending)
            .iter()
            .map(|(r, _)| format!("{} {}", r.method(), r.uri()))
            .collect()
    }

    /// Asserts that the client sent nothing unclaimed (call once the backend is dropped).
    async fn done(&self) {
        loop {
            let told = self.0.arrived.notified();
            if *lock(&self.0.closed) {
                break;
            }
            told.await;
        }
        let unclaimed = self.unclaimed();
        assert!(unclaimed.is_empty(), "unexpected requests {unclaimed:?}");
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A backend over the mock, with `drivers` and `config`, and the server's side.
fn backend_with(
    drivers: CsiDrivers,
    config: KubeBackendConfig,
) -> (VolumeAttachmentBackend, Server) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    (
        VolumeAttachmentBackend::with_config(client, drivers, config),
        Server::new(handle),
    )
}

fn backend() -> (VolumeAttachmentBackend, Server) {
    backend_with(CsiDrivers::new(), KubeBackendConfig::default())
}

/// Runs `call` against the backend while `script` plays the server, then checks the server
/// saw nothing more.
async fn run<T, F>(
    backend: VolumeAttachmentBackend,
    server: Server,
    script: impl FnOnce(Server) -> F,
    call: impl AsyncFnOnce(&VolumeAttachmentBackend) -> T,
) -> T
where
    F: Future<Output = ()> + Send + 'static,
{
    let played = tokio::spawn(script(server.clone()));
    let answer = call(&backend).await;
    drop(backend);
    played.await.expect("the script ran to its end");
    server.done().await;
    answer
}

fn volume(n: u32) -> (String, CsiVolume) {
    let payload = CsiVolume::persistent(format!("pv-{n}"), DRIVER, format!("vol-{n}"));
    (payload.unique_name(), payload)
}

fn name(n: u32, node: &str) -> String {
    attachment_name(&format!("vol-{n}"), DRIVER, node)
}

/// The VolumeAttachment of volume `n` on `node`, as the server holds it at `version`.
fn va(n: u32, node: &str, version: u32) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name(n, node), "resourceVersion": version.to_string(), "uid": "u-1"},
        "spec": {"attacher": DRIVER, "nodeName": node, "source": {"persistentVolumeName": format!("pv-{n}")}},
    })
}

fn with(mut object: Value, field: &str, value: Value) -> Value {
    object[field] = value;
    object
}

fn attached(object: Value) -> Value {
    let mut object = with(object, "status", json!({"attached": true}));
    object["metadata"]["finalizers"] = json!(["external-attacher/ebs-csi-aws-com"]);
    object
}

fn deleting(object: Value) -> Value {
    let mut object = attached(object);
    object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    object
}

/// Another incarnation of the object's name (another `uid`).
fn other_uid(mut object: Value) -> Value {
    object["metadata"]["uid"] = json!("u-0");
    object
}

fn reply(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn failure(code: u16, reason: &str) -> Response<Body> {
    reply(
        code,
        status_json(code, reason, &format!("the server says {reason}")),
    )
}

/// A watch answer carrying `events` (type, object), ending after them.
fn events(events: &[(&str, Value)]) -> Response<Body> {
    let mut body = Vec::new();
    for (kind, object) in events {
        serde_json::to_writer(&mut body, &json!({"type": kind, "object": object})).unwrap();
        body.push(b'\n');
    }
    Response::builder()
        .status(StatusCode::OK)
        .body(Body::from(body))
        .unwrap()
}

/// The object of volume `n` on NODE, as a DELETE names it.
fn item(n: u32) -> String {
    format!("{VAS}/{}?", name(n, NODE))
}

/// The object of volume `n` on NODE, as a GET names it.
fn get(n: u32) -> String {
    format!("{VAS}/{}", name(n, NODE))
}

/// The shared watch's LIST of every VolumeAttachment, a page of `page_size`.
fn listing(page_size: u32) -> String {
    format!("{VAS}?&limit={page_size}")
}

/// The shared watch's WATCH of every VolumeAttachment from `version`.
fn watching(version: u32) -> String {
    format!(
        "{VAS}?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion={version}"
    )
}

/// A page of a list of `kind`, at list version 99.
fn page(kind: &str, items: Vec<Value>, next: Option<&str>) -> Response<Body> {
    page_at(kind, items, next, 99)
}

/// A page of a list of `kind`, at list version `version`.
fn page_at(kind: &str, items: Vec<Value>, next: Option<&str>, version: u32) -> Response<Body> {
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if let Some(next) = next {
        metadata["continue"] = json!(next);
    }
    reply(
        200,
        json!({"apiVersion": "v1", "kind": kind, "metadata": metadata, "items": items}),
    )
}

/// The shared watch starts: its LIST answers `items` at `version`, and its WATCH from there
/// answers `then` (and ends), or, if `then` is empty, stays open.
async fn shared_watch(s: &Server, items: Vec<Value>, version: u32, then: &[(&str, Value)]) {
    s.expect(Method::GET, &listing(500), None)
        .await
        .send_response(page_at("VolumeAttachmentList", items, None, version));
    let watch = s.expect(Method::GET, &watching(version), None).await;
    if then.is_empty() {
        s.hold(watch);
    } else {
        watch.send_response(events(then));
    }
}

/// The shared watch, opened again from `version` after it ended, stays open.
async fn watch_stays_open(s: &Server, version: u32) {
    let watch = s.expect(Method::GET, &watching(version), None).await;
    s.hold(watch);
}

fn create() -> String {
    format!("{VAS}?")
}

/// The body of the create of volume `n` on NODE.
fn created(n: u32) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name(n, NODE)},
        "spec": {"attacher": DRIVER, "nodeName": NODE, "source": {"persistentVolumeName": format!("pv-{n}")}},
    })
}

async fn attach(b: &VolumeAttachmentBackend, n: u32) -> Result<AttachInfo, BackendError<String>> {
    let (v, p) = volume(n);
    b.attach(&v, &NODE.to_owned(), &p).await
}

async fn detach(b: &VolumeAttachmentBackend, n: u32) -> Result<(), BackendError<String>> {
    let (v, p) = volume(n);
    b.detach(&v, &NODE.to_owned(), &p).await
}

/// The kube error behind a backend error, and its status code (`None`: no answer).
fn kube_code(error: &BackendError<String>) -> Option<u16> {
    let source = error.source().expect("the kube error is kept");
    match source.downcast_ref::<kube::Error>().expect("a kube::Error") {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn is_transient(e: &BackendError<String>) -> bool {
    matches!(e, BackendError::Transient { .. })
}

fn is_uncertain(e: &BackendError<String>) -> bool {
    matches!(e, BackendError::Uncertain { .. })
}

#[tokio::test(start_paused = true)]
async fn attach_creates_the_object_and_waits_for_attached_through_the_shared_watch() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            // Listed before the create landed: the watch brings it.
            shared_watch(
                &s,
                vec![],
                9,
                &[
                    ("ADDED", va(1, NODE, 10)),
                    ("BOOKMARK", json!({"kind": "VolumeAttachment", "apiVersion": "storage.k8s.io/v1", "metadata": {"resourceVersion": "11"}})),
                    ("MODIFIED", with(va(1, NODE, 12), "status", json!({"attached": false}))),
                    ("MODIFIED", attached(va(1, NODE, 13))),
                ],
            )
            .await;
            watch_stays_open(&s, 13).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    // CSI hands the node no device path.
    assert_eq!(answer, Ok(AttachInfo { device: None }));
}

#[tokio::test(start_paused = true)]
async fn attaches_and_detaches_share_one_watch() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            for n in [1, 2] {
                s.expect(Method::POST, &create(), Some(created(n)))
                    .await
                    .send_response(reply(201, va(n, NODE, 9 + n)));
            }
            s.expect(Method::DELETE, &item(3), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(3, NODE, 12))));
            shared_watch(
                &s,
                vec![va(1, NODE, 10), va(2, NODE, 11), deleting(va(3, NODE, 12))],
                12,
                &[
                    ("MODIFIED", attached(va(2, NODE, 13))),
                    ("DELETED", deleting(va(3, NODE, 14))),
                    ("MODIFIED", attached(va(1, NODE, 15))),
                ],
            )
            .await;
            watch_stays_open(&s, 15).await;
        },
        async |b: &VolumeAttachmentBackend| {
            let (a, b2, d) = tokio::join!(attach(b, 1), attach(b, 2), detach(b, 3));
            (a, b2, d)
        },
    )
    .await;
    let done = Ok(AttachInfo { device: None });
    assert_eq!(answer, (done.clone(), done, Ok(())));
}

#[tokio::test(start_paused = true)]
async fn attach_of_an_existing_object_succeeds() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(failure(409, "AlreadyExists"));
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, attached(va(1, NODE, 7))));
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(AttachInfo { device: None }));

    // Existing but not attached yet: wait for it like a new one.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(failure(409, "AlreadyExists"));
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, va(1, NODE, 7)));
            shared_watch(
                &s,
                vec![va(1, NODE, 7)],
                50,
                &[("MODIFIED", attached(va(1, NODE, 51)))],
            )
            .await;
            watch_stays_open(&s, 51).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(AttachInfo { device: None }));
}

#[tokio::test(start_paused = true)]
async fn attach_error_is_uncertain_with_its_message() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            let failed = with(
                va(1, NODE, 11),
                "status",
                json!({"attached": false, "attachError": {"message": "rpc error: code = ResourceExhausted desc = too many volumes", "time": "2026-01-01T00:00:00Z"}}),
            );
            shared_watch(&s, vec![va(1, NODE, 10)], 10, &[("MODIFIED", failed)]).await;
            watch_stays_open(&s, 11).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(
        e.message()
            .contains("rpc error: code = ResourceExhausted desc = too many volumes"),
        "{e}"
    );
    assert!(e.message().contains(&name(1, NODE)), "{e}");
}

#[tokio::test(start_paused = true)]
async fn attach_times_out_as_uncertain() {
    let (b, server) = backend_with(
        CsiDrivers::new(),
        KubeBackendConfig {
            timeout: Duration::from_secs(30),
            ..KubeBackendConfig::default()
        },
    );
    let (answer, took) = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            // The watch tells nothing: the external-attacher is silent.
            shared_watch(&s, vec![va(1, NODE, 10)], 10, &[]).await;
        },
        async |b: &VolumeAttachmentBackend| {
            let start = tokio::time::Instant::now();
            (attach(b, 1).await, start.elapsed())
        },
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(e.message().contains("not done within 30s"), "{e}");
    assert_eq!(took, Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn attach_while_a_detach_is_under_way_is_transient() {
    // The object exists and is being deleted.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(failure(409, "AlreadyExists"));
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, deleting(va(1, NODE, 7))));
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_transient(&e), "{e}");
    assert!(e.message().contains("being deleted"), "{e}");

    // A deletion starts while the attach waits; then the object goes.
    for (last, expected) in [
        (("MODIFIED", deleting(va(1, NODE, 11))), "being deleted"),
        (("DELETED", va(1, NODE, 11)), "was deleted"),
    ] {
        let (b, server) = backend();
        let answer = run(
            b,
            server,
            move |s: Server| async move {
                s.expect(Method::POST, &create(), Some(created(1)))
                    .await
                    .send_response(reply(201, va(1, NODE, 10)));
                shared_watch(&s, vec![va(1, NODE, 10)], 10, &[last]).await;
                watch_stays_open(&s, 11).await;
            },
            async |b: &VolumeAttachmentBackend| attach(b, 1).await,
        )
        .await;
        let e = answer.unwrap_err();
        assert!(is_transient(&e), "{e}");
        assert!(e.message().contains(expected), "{e}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_older_object_of_the_name_is_not_taken_for_the_new_one() {
    // The cache still holds an attached object of the name (deleted since, not delivered
    // yet); the create made a new one. Until the cache caught up with the create, nothing is
    // judged: the attach waits for its own object, and here times out.
    let (b, server) = backend_with(
        CsiDrivers::new(),
        KubeBackendConfig {
            timeout: Duration::from_secs(30),
            ..KubeBackendConfig::default()
        },
    );
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            shared_watch(&s, vec![other_uid(attached(va(1, NODE, 3)))], 8, &[]).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");

    // Caught up, an object of the name with another uid means ours is gone.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            shared_watch(&s, vec![other_uid(attached(va(1, NODE, 12)))], 12, &[]).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_transient(&e), "{e}");
    assert!(e.message().contains("was deleted"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn the_shared_watch_lists_again_after_410_and_watches_again_when_it_ends() {
    let (b, server) = backend();
    let (answer, took) = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            // 410 Gone: the version is too old to watch from; list again, at once.
            s.expect(Method::GET, &listing(500), None)
                .await
                .send_response(page_at(
                    "VolumeAttachmentList",
                    vec![va(1, NODE, 10)],
                    None,
                    10,
                ));
            s.expect(Method::GET, &watching(10), None)
                .await
                .send_response(failure(410, "Expired"));
            // The same, as an ERROR event inside the watch.
            shared_watch(
                &s,
                vec![va(1, NODE, 19)],
                20,
                &[(
                    "ERROR",
                    status_json(410, "Expired", "too old resource version"),
                )],
            )
            .await;
            // A watch that ends after news: watched again at once, from its last event.
            shared_watch(
                &s,
                vec![va(1, NODE, 19)],
                30,
                &[(
                    "MODIFIED",
                    with(va(1, NODE, 31), "status", json!({"attached": false})),
                )],
            )
            .await;
            // A watch that ends without a word: watched again after a pause.
            s.expect(Method::GET, &watching(31), None)
                .await
                .send_response(events(&[]));
            s.expect(Method::GET, &watching(31), None)
                .await
                .send_response(events(&[("MODIFIED", attached(va(1, NODE, 51)))]));
            watch_stays_open(&s, 51).await;
        },
        async |b: &VolumeAttachmentBackend| {
            let start = tokio::time::Instant::now();
            (attach(b, 1).await, start.elapsed())
        },
    )
    .await;
    assert_eq!(answer, Ok(AttachInfo { device: None }));
    assert_eq!(took, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_broken_watch_is_opened_again_from_where_it_was() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            s.expect(Method::GET, &listing(500), None)
                .await
                .send_response(page_at(
                    "VolumeAttachmentList",
                    vec![va(1, NODE, 10)],
                    None,
                    10,
                ));
            // No answer (a broken connection), then a refusal: each followed by a pause
            // (kube-runtime's backoff) and a watch from the same version.
            s.expect(Method::GET, &watching(10), None)
                .await
                .send_error("connection reset by peer");
            s.expect(Method::GET, &watching(10), None)
                .await
                .send_response(failure(503, "ServiceUnavailable"));
            s.expect(Method::GET, &watching(10), None)
                .await
                .send_response(events(&[("MODIFIED", attached(va(1, NODE, 11)))]));
            watch_stays_open(&s, 11).await;
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(AttachInfo { device: None }));
}

#[tokio::test(start_paused = true)]
async fn a_wait_whose_watch_is_refused_times_out_saying_why() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(reply(201, va(1, NODE, 10)));
            // Every LIST refused, however often it is tried.
            s.always(Method::GET, &listing(500), || failure(403, "Forbidden"));
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(
        e.message().contains("not done within 120s")
            && e.message().contains("listing VolumeAttachments failed")
            && e.message().contains("Forbidden"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn detach_deletes_the_object_and_waits_until_it_is_gone() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(1, NODE, 20))));
            shared_watch(
                &s,
                vec![deleting(va(1, NODE, 20))],
                20,
                &[("DELETED", deleting(va(1, NODE, 21)))],
            )
            .await;
            watch_stays_open(&s, 21).await;
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(()));

    // Gone while the cache was listing: absent from a list as new as the delete, it is gone.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(1, NODE, 20))));
            shared_watch(&s, vec![], 22, &[]).await;
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(()));

    // Without a finalizer (never attached), the object is gone at once: no watch.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, va(1, NODE, 20)));
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(()));

    // Already gone (404) is done.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(failure(404, "NotFound"));
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn detach_error_and_timeout_are_uncertain() {
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(1, NODE, 20))));
            let mut failed = deleting(va(1, NODE, 21));
            failed["status"]["detachError"] =
                json!({"message": "rpc error: code = Internal desc = volume is busy"});
            shared_watch(
                &s,
                vec![deleting(va(1, NODE, 20))],
                20,
                &[("MODIFIED", failed)],
            )
            .await;
            watch_stays_open(&s, 21).await;
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(e.message().contains("volume is busy"), "{e}");

    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(1, NODE, 20))));
            shared_watch(&s, vec![deleting(va(1, NODE, 20))], 20, &[]).await;
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(e.message().contains("not done within 120s"), "{e}");

    // Created again by an attach while the detach waited: uncertain.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(reply(200, deleting(va(1, NODE, 20))));
            shared_watch(
                &s,
                vec![deleting(va(1, NODE, 20))],
                20,
                &[
                    ("DELETED", deleting(va(1, NODE, 21))),
                    ("ADDED", other_uid(va(1, NODE, 22))),
                ],
            )
            .await;
            watch_stays_open(&s, 22).await;
        },
        async |b: &VolumeAttachmentBackend| {
            // Both events come before the wait looks again.
            detach(b, 1).await
        },
    )
    .await;
    match answer {
        // Seen between the two events: gone, done.
        Ok(()) => {}
        Err(e) => assert!(
            is_uncertain(&e) && e.message().contains("created again"),
            "{e}"
        ),
    }
}

#[tokio::test(start_paused = true)]
async fn a_driver_that_needs_no_attach_makes_no_attach_or_verify_request() {
    let drivers = CsiDrivers::new();
    drivers.set(DRIVER, false);
    let (b, server) = backend_with(drivers, KubeBackendConfig::default());
    run(
        b,
        server,
        |_: Server| async {},
        async |b: &VolumeAttachmentBackend| {
            assert_eq!(attach(b, 1).await, Ok(AttachInfo { device: None }));
            let (v, p) = volume(1);
            // Counted as attached: it needs nothing.
            assert_eq!(
                b.verify(&NODE.to_owned(), &[(v.clone(), p)]).await,
                Ok(vec![v])
            );
            // Asked about nothing, verify reads nothing either.
            assert_eq!(b.verify(&NODE.to_owned(), &[]).await, Ok(vec![]));
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn detach_deletes_the_object_even_of_a_driver_switched_to_no_attach() {
    // The driver needed attach when its volume was attached; its CSIDriver now says it does
    // not. Upstream's detacher deletes the VolumeAttachment all the same: left behind, it
    // would keep the external-attacher's publication (and the core's record) for ever.
    let drivers = CsiDrivers::new();
    drivers.set(DRIVER, false);
    let (b, server) = backend_with(drivers, KubeBackendConfig::default());
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::DELETE, &item(1), Some(json!({})))
                .await
                .send_response(failure(404, "NotFound"));
        },
        async |b: &VolumeAttachmentBackend| detach(b, 1).await,
    )
    .await;
    assert_eq!(answer, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn write_failures_are_transient_when_refused_and_uncertain_otherwise() {
    for (code, reason, transient) in [
        (400, "BadRequest", true),
        (403, "Forbidden", true),
        (422, "Invalid", true),
        (429, "TooManyRequests", true),
        (500, "InternalError", false),
        (503, "ServiceUnavailable", false),
        (504, "Timeout", false),
    ] {
        let (b, server) = backend();
        let answer = run(
            b,
            server,
            move |s: Server| async move {
                s.expect(Method::POST, &create(), Some(created(1)))
                    .await
                    .send_response(failure(code, reason));
            },
            async |b: &VolumeAttachmentBackend| attach(b, 1).await,
        )
        .await;
        let e = answer.unwrap_err();
        assert_eq!(is_transient(&e), transient, "create answered {code}: {e}");
        assert_eq!(is_uncertain(&e), !transient, "create answered {code}: {e}");
        assert_eq!(kube_code(&e), Some(code));

        let (b, server) = backend();
        let answer = run(
            b,
            server,
            move |s: Server| async move {
                s.expect(Method::DELETE, &item(1), Some(json!({})))
                    .await
                    .send_response(failure(code, reason));
            },
            async |b: &VolumeAttachmentBackend| detach(b, 1).await,
        )
        .await;
        let e = answer.unwrap_err();
        assert_eq!(is_transient(&e), transient, "delete answered {code}: {e}");
        assert_eq!(kube_code(&e), Some(code));
    }

    // No answer at all (a broken connection): the write may have landed.
    for detaching in [false, true] {
        let (b, server) = backend();
        let answer = run(
            b,
            server,
            move |s: Server| async move {
                let (method, uri, body) = if detaching {
                    (Method::DELETE, item(1), json!({}))
                } else {
                    (Method::POST, create(), created(1))
                };
                s.expect(method, &uri, Some(body))
                    .await
                    .send_error("connection reset by peer");
            },
            async move |b: &VolumeAttachmentBackend| {
                if detaching {
                    detach(b, 1).await
                } else {
                    attach(b, 1).await.map(drop)
                }
            },
        )
        .await;
        let e = answer.unwrap_err();
        assert!(is_uncertain(&e), "{e}");
        assert_eq!(kube_code(&e), None);
    }

    // A create that is never answered: uncertain once the timeout passed.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            let held = s.expect(Method::POST, &create(), Some(created(1))).await;
            s.hold(held);
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert!(e.message().contains("no answer to the create"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_is_transient() {
    // AlreadyExists, then the read of the existing object fails: nothing was written.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::POST, &create(), Some(created(1)))
                .await
                .send_response(failure(409, "AlreadyExists"));
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(failure(500, "InternalError"));
        },
        async |b: &VolumeAttachmentBackend| attach(b, 1).await,
    )
    .await;
    let e = answer.unwrap_err();
    assert!(is_transient(&e), "{e}");
    assert_eq!(kube_code(&e), Some(500));

    // A verify's read failing is transient, answered or not.
    for broken in [false, true] {
        let (b, server) = backend();
        let answer = run(
            b,
            server,
            move |s: Server| async move {
                s.always(Method::GET, &listing(500), || failure(500, "InternalError"));
                let reply = s.expect(Method::GET, &get(1), None).await;
                if broken {
                    reply.send_error("connection reset by peer");
                } else {
                    reply.send_response(failure(500, "InternalError"));
                }
            },
            async |b: &VolumeAttachmentBackend| {
                let (v, p) = volume(1);
                b.verify(&NODE.to_owned(), &[(v, p)]).await
            },
        )
        .await;
        let e = answer.unwrap_err();
        assert!(is_transient(&e), "{e}");
        assert_eq!(kube_code(&e), (!broken).then_some(500));
    }
}

/// Asks, on NODE: 1 attached here, 2 attached to another node only, 3 being attached, 4
/// being detached, 5 nowhere, 6 of a driver needing no attach.
async fn verify_the_six(b: &VolumeAttachmentBackend) -> Result<Vec<String>, BackendError<String>> {
    let mut asked: Vec<(String, CsiVolume)> = (1..=5).map(volume).collect();
    let nfs = CsiVolume::persistent("pv-6", "nfs.csi.k8s.io", "share");
    asked.push((nfs.unique_name(), nfs));
    b.verify(&NODE.to_owned(), &asked).await
}

/// What [`verify_the_six`] must answer.
fn the_attached_of_the_six() -> Vec<String> {
    [1, 3, 4]
        .map(|n| volume(n).0)
        .into_iter()
        .chain([unique_name("nfs.csi.k8s.io", "share")])
        .collect()
}

fn drivers_with_nfs() -> CsiDrivers {
    let drivers = CsiDrivers::new();
    drivers.set("nfs.csi.k8s.io", false);
    drivers
}

#[tokio::test(start_paused = true)]
async fn verify_reads_each_asked_object_while_the_shared_watch_is_down() {
    let (b, server) = backend_with(drivers_with_nfs(), KubeBackendConfig::default());
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.always(Method::GET, &listing(500), || {
                failure(503, "ServiceUnavailable")
            });
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, attached(va(1, NODE, 1))));
            s.expect(Method::GET, &get(2), None)
                .await
                .send_response(failure(404, "NotFound"));
            s.expect(Method::GET, &get(3), None)
                .await
                .send_response(reply(200, va(3, NODE, 3)));
            s.expect(Method::GET, &get(4), None)
                .await
                .send_response(reply(200, deleting(va(4, NODE, 4))));
            s.expect(Method::GET, &get(5), None)
                .await
                .send_response(failure(404, "NotFound"));
        },
        verify_the_six,
    )
    .await;
    assert_eq!(answer, Ok(the_attached_of_the_six()));
}

#[tokio::test(start_paused = true)]
async fn verify_trusts_the_shared_watch_for_presence_and_reads_the_rest() {
    let (b, server) = backend_with(
        drivers_with_nfs(),
        KubeBackendConfig {
            page_size: 2,
            ..KubeBackendConfig::default()
        },
    );
    let answer = run(
        b,
        server,
        |s: Server| async move {
            // The first verify starts the watch and, before it listed, reads.
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, attached(va(1, NODE, 1))));
            s.expect(Method::GET, &listing(2), None)
                .await
                .send_response(page(
                    "VolumeAttachmentList",
                    vec![attached(va(1, NODE, 1)), attached(va(2, "node-b", 2))],
                    Some("next-1"),
                ));
            s.expect(
                Method::GET,
                &format!("{}&continue=next-1", listing(2)),
                None,
            )
            .await
            .send_response(page(
                "VolumeAttachmentList",
                vec![va(3, NODE, 3), deleting(va(4, NODE, 4))],
                None,
            ));
            watch_stays_open(&s, 99).await;
            // The second: what the cache holds counts; 2 (here) and 5 are read.
            for n in [2, 5] {
                s.expect(Method::GET, &get(n), None)
                    .await
                    .send_response(failure(404, "NotFound"));
            }
        },
        async |b: &VolumeAttachmentBackend| {
            let (v, p) = volume(1);
            assert_eq!(
                b.verify(&NODE.to_owned(), &[(v.clone(), p)]).await,
                Ok(vec![v])
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
            verify_the_six(b).await
        },
    )
    .await;
    assert_eq!(answer, Ok(the_attached_of_the_six()));
}

#[tokio::test(start_paused = true)]
async fn verify_reports_an_object_the_watch_has_not_delivered_yet() {
    // The cache listed volume 2's object only; then volume 1's was created (by an attach of
    // a controller that restarted since, say), and the watch has not told it yet. Verify
    // must not call it gone: the core would forget an attachment that exists.
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            // The first verify starts the watch and, before it listed, reads.
            s.expect(Method::GET, &get(2), None)
                .await
                .send_response(reply(200, attached(va(2, NODE, 4))));
            shared_watch(&s, vec![attached(va(2, NODE, 4))], 5, &[]).await;
            s.expect(Method::GET, &get(1), None)
                .await
                .send_response(reply(200, attached(va(1, NODE, 6))));
        },
        async |b: &VolumeAttachmentBackend| {
            let node = NODE.to_owned();
            let (v2, p2) = volume(2);
            assert_eq!(
                b.verify(&node, &[(v2.clone(), p2.clone())]).await,
                Ok(vec![v2.clone()])
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (v1, p1) = volume(1);
            b.verify(&node, &[(v1, p1), (v2, p2)]).await
        },
    )
    .await;
    assert_eq!(answer, Ok(vec![volume(1).0, volume(2).0]));
}

/// A CSI PersistentVolume `pv-{n}` of `vol-{n}` of `driver` with `modes`.
fn pv(n: u32, driver: &str, modes: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("pv-{n}")},
        "spec": {"accessModes": modes, "csi": {"driver": driver, "volumeHandle": format!("vol-{n}")}},
    })
}

#[tokio::test(start_paused = true)]
async fn list_joins_the_attachments_with_their_volumes() {
    let drivers = CsiDrivers::new();
    drivers.set("nfs.csi.k8s.io", false);
    let (b, server) = backend_with(drivers, KubeBackendConfig::default());
    let other_node = "node-b";
    // The informers' registry knows both nodes as the controller's: no Node is read.
    let b = b.with_managed_nodes(managed(&[(NODE, true), (other_node, true)]));
    let answer = run(
        b,
        server,
        move |s: Server| async move {
            let nfs = json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": attachment_name("share", "nfs.csi.k8s.io", NODE)},
                "spec": {"attacher": "nfs.csi.k8s.io", "nodeName": NODE, "source": {"persistentVolumeName": "pv-9"}},
            });
            let inline = json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": "csi-inline"},
                "spec": {"attacher": DRIVER, "nodeName": NODE, "source": {"inlineVolumeSpec": {"csi": {"driver": DRIVER, "volumeHandle": "vol-i"}}}},
            });
            let mut renamed = attached(va(7, NODE, 7));
            renamed["metadata"]["name"] = json!(name(70, NODE));
            s.expect(Method::GET, &format!("{VAS}?&limit=500"), None)
                .await
                .send_response(page("VolumeAttachmentList", vec![
                    attached(va(1, NODE, 1)),           // RWO, attached
                    va(2, NODE, 2),                     // RWX, attach under way
                    attached(va(2, other_node, 3)),     // RWX, on the other node too
                    deleting(va(3, NODE, 4)),           // RWOP, detach under way
                    attached(va(4, NODE, 5)),           // its PV is gone
                    attached(va(5, NODE, 6)),           // its PV is not CSI
                    renamed,                            // its PV has another handle now
                    nfs,                                // a driver that needs no attach
                    inline,                             // an inline volume, misnamed
                ], None));
            let mut not_csi = pv(5, DRIVER, &["ReadWriteOnce"]);
            not_csi["spec"] = json!({"accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/mnt"}});
            s.expect(Method::GET, &format!("{PVS}?&limit=500"), None)
                .await
                .send_response(page("PersistentVolumeList", vec![
                    pv(1, DRIVER, &["ReadWriteOnce"]),
                    pv(2, DRIVER, &["ReadWriteOnce", "ReadWriteMany"]),
                    pv(3, DRIVER, &["ReadWriteOncePod"]),
                    not_csi,
                    pv(7, DRIVER, &["ReadWriteOnce"]),
                ], None));
        },
        async |b: &VolumeAttachmentBackend| b.list().await,
    )
    .await;
    let at = |n: u32, node: &str, access: Access| BackendAttachment::<Kube> {
        volume: volume(n).0,
        node: node.to_owned(),
        spec: VolumeSpec {
            access,
            payload: volume(n).1,
            attach_required: true,
            driver: Some(driver_id(DRIVER)),
        },
    };
    assert_eq!(
        answer,
        Ok(vec![
            at(1, NODE, Access::SingleNode),
            at(2, NODE, Access::MultiNode),
            at(2, other_node, Access::MultiNode),
            at(3, NODE, Access::SingleNode),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn list_reports_only_the_managed_drivers() {
    let config = KubeBackendConfig {
        drivers: ManagedDrivers::Only(["other.csi.example.com".to_owned()].into()),
        ..KubeBackendConfig::default()
    };
    let (b, server) = backend_with(CsiDrivers::new(), config);
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::GET, &format!("{VAS}?&limit=500"), None)
                .await
                .send_response(page(
                    "VolumeAttachmentList",
                    vec![attached(va(1, NODE, 1))],
                    None,
                ));
            // Nothing managed: no PersistentVolume is read.
        },
        async |b: &VolumeAttachmentBackend| b.list().await,
    )
    .await;
    assert_eq!(answer, Ok(vec![]));
}

#[tokio::test(start_paused = true)]
async fn attach_of_an_inline_volume_puts_its_translated_spec_in_the_object() {
    let spec: k8s_openapi::api::core::v1::PersistentVolumeSpec = serde_json::from_value(json!({
        "csi": {"driver": DRIVER, "volumeHandle": "vol-1", "volumeAttributes": {"partition": "0"}},
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    }))
    .unwrap();
    let payload = CsiVolume {
        source: AttachSource::Inline(Box::new(spec)),
        driver: DRIVER.into(),
        handle: "vol-1".into(),
    };
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            // As upstream's attacher creates it: no PV name, the spec inline.
            let mut body = created(1);
            body["spec"]["source"] = json!({"inlineVolumeSpec": {
                "csi": {"driver": DRIVER, "volumeHandle": "vol-1", "volumeAttributes": {"partition": "0"}},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
            }});
            s.expect(Method::POST, &create(), Some(body))
                .await
                .send_response(reply(201, attached(va(1, NODE, 1))));
        },
        async move |b: &VolumeAttachmentBackend| {
            b.attach(&payload.unique_name(), &NODE.to_owned(), &payload)
                .await
        },
    )
    .await;
    assert_eq!(answer, Ok(AttachInfo { device: None }));
}

#[tokio::test(start_paused = true)]
async fn list_adopts_the_attachments_of_migrated_and_inline_volumes() {
    let (b, server) = backend();
    let b = b.with_managed_nodes(managed(&[(NODE, true)]));
    let inline_spec = json!({
        "csi": {"driver": DRIVER, "volumeHandle": "vol-9", "volumeAttributes": {"partition": "0"}},
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    });
    let answer = run(
        b,
        server,
        move |s: Server| async move {
            // An in-tree EBS PV, attached through its CSI driver: named from the translated
            // handle (vol-1, not aws://us-west-2a/vol-1).
            let migrated = json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": name(1, NODE)},
                "spec": {"attacher": DRIVER, "nodeName": NODE, "source": {"persistentVolumeName": "pv-ebs"}},
                "status": {"attached": true},
            });
            // An inline volume's: its spec is in the object.
            let inline = json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": name(9, NODE), "deletionTimestamp": "2026-01-01T00:00:00Z",
                             "finalizers": ["external-attacher/ebs-csi-aws-com"]},
                "spec": {"attacher": DRIVER, "nodeName": NODE, "source": {"inlineVolumeSpec": inline_spec}},
            });
            // One whose name is not the one its spec gives, and one without a CSI source.
            let mut renamed = inline.clone();
            renamed["metadata"]["name"] = json!(name(8, NODE));
            let mut not_csi = inline.clone();
            not_csi["metadata"]["name"] = json!(name(7, NODE));
            not_csi["spec"]["source"] = json!({"inlineVolumeSpec": {"hostPath": {"path": "/"}}});
            s.expect(Method::GET, &format!("{VAS}?&limit=500"), None)
                .await
                .send_response(page(
                    "VolumeAttachmentList",
                    vec![migrated, inline, renamed, not_csi],
                    None,
                ));
            s.expect(Method::GET, &format!("{PVS}?&limit=500"), None)
                .await
                .send_response(page(
                    "PersistentVolumeList",
                    vec![json!({
                        "apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": {"name": "pv-ebs"},
                        "spec": {"accessModes": ["ReadWriteOnce"],
                                 "awsElasticBlockStore": {"volumeID": "aws://us-west-2a/vol-1"}},
                    })],
                    None,
                ));
        },
        async |b: &VolumeAttachmentBackend| b.list().await,
    )
    .await;
    let inline_spec = serde_json::from_value(json!({
        "csi": {"driver": DRIVER, "volumeHandle": "vol-9", "volumeAttributes": {"partition": "0"}},
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    }))
    .unwrap();
    assert_eq!(
        answer,
        Ok(vec![
            BackendAttachment {
                volume: unique_name(DRIVER, "vol-1"),
                node: NODE.to_owned(),
                spec: VolumeSpec {
                    access: Access::SingleNode,
                    payload: CsiVolume::persistent("pv-ebs", DRIVER, "vol-1"),
                    attach_required: true,
                    driver: Some(driver_id(DRIVER)),
                },
            },
            BackendAttachment {
                volume: unique_name(DRIVER, "vol-9"),
                node: NODE.to_owned(),
                spec: VolumeSpec {
                    access: Access::SingleNode,
                    payload: CsiVolume {
                        source: AttachSource::Inline(Box::new(inline_spec)),
                        driver: DRIVER.to_owned(),
                        handle: "vol-9".to_owned(),
                    },
                    attach_required: true,
                    driver: Some(driver_id(DRIVER)),
                },
            },
        ])
    );
}

/// A registry of nodes, as the informers keep it: whether the controller manages each.
fn managed(nodes: &[(&str, bool)]) -> ManagedNodes {
    let registry = ManagedNodes::new();
    for (node, managed) in nodes {
        registry.set(node, *managed);
    }
    registry
}

#[tokio::test(start_paused = true)]
async fn list_asks_the_informers_registry_which_nodes_are_managed() {
    let (b, server) = backend();
    let b = b.with_managed_nodes(managed(&[(NODE, true), ("node-kubelet", false)]));
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::GET, &format!("{VAS}?&limit=500"), None)
                .await
                .send_response(page(
                    "VolumeAttachmentList",
                    vec![attached(va(1, NODE, 1)), attached(va(2, "node-kubelet", 2))],
                    None,
                ));
            // No Node read: the registry knows both.
            s.expect(Method::GET, &format!("{PVS}?&limit=500"), None)
                .await
                .send_response(page(
                    "PersistentVolumeList",
                    vec![
                        pv(1, DRIVER, &["ReadWriteOnce"]),
                        pv(2, DRIVER, &["ReadWriteOnce"]),
                    ],
                    None,
                ));
        },
        async |b: &VolumeAttachmentBackend| b.list().await,
    )
    .await;
    let nodes: Vec<String> = answer.unwrap().into_iter().map(|a| a.node).collect();
    assert_eq!(nodes, [NODE]);
}

/// A node's metadata as the API server answers a metadata-only GET; `controller_managed`:
/// whether its kubelet left attach and detach to the controller (the annotation).
fn node_metadata(name: &str, controller_managed: bool) -> Value {
    let mut metadata = json!({"name": name, "uid": format!("uid-{name}")});
    if controller_managed {
        metadata["annotations"] =
            json!({"volumes.kubernetes.io/controller-managed-attach-detach": "true"});
    }
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata})
}

#[tokio::test(start_paused = true)]
async fn list_skips_the_attachments_of_nodes_kubelet_manages() {
    // No registry of nodes was handed over: each node is read once (its metadata only).
    let (b, server) = backend();
    let answer = run(
        b,
        server,
        |s: Server| async move {
            s.expect(Method::GET, &format!("{VAS}?&limit=500"), None)
                .await
                .send_response(page(
                    "VolumeAttachmentList",
                    vec![
                        attached(va(1, NODE, 1)),
                        attached(va(2, "node-kubelet", 2)), // kubelet attached it itself
                        attached(va(3, "node-gone", 3)),    // its node object was deleted
                        attached(va(4, NODE, 4)),
                    ],
                    None,
                ));
            s.expect(Method::GET, &format!("/api/v1/nodes/{NODE}"), None)
                .await
                .send_response(reply(200, node_metadata(NODE, true)));
            s.expect(Method::GET, "/api/v1/nodes/node-gone", None)
                .await
                .send_response(failure(404, "NotFound"));
            s.expect(Method::GET, "/api/v1/nodes/node-kubelet", None)
                .await
                .send_response(reply(200, node_metadata("node-kubelet", false)));
            s.expect(Method::GET, &format!("{PVS}?&limit=500"), None)
                .await
                .send_response(page(
                    "PersistentVolumeList",
                    (1..=4).map(|n| pv(n, DRIVER, &["ReadWriteOnce"])).collect(),
                    None,
                ));
        },
        async |b: &VolumeAttachmentBackend| b.list().await,
    )
    .await;
    let nodes: Vec<(String, String)> = answer
        .expect("a listing")
        .into_iter()
        .map(|a| (a.volume, a.node))
        .collect();
    assert_eq!(
        nodes,
        [
            (volume(1).0, NODE.to_owned()),
            // A deleted node's attachment is still adopted: the core keeps it pinned there
            // until the node is fenced or comes back.
            (volume(3).0, "node-gone".to_owned()),
            (volume(4).0, NODE.to_owned()),
        ]
    );
}

/// The conformance kit's view of the fake API server.
struct Harness {
    fake: FakeVa,
    backend: VolumeAttachmentBackend,
}

#[async_trait]
impl BackendHarness<Kube> for Harness {
    fn backend(&self) -> &dyn AttachBackend<Kube> {
        &self.backend
    }

    fn node(&self, n: usize) -> String {
        format!("node-{n}")
    }

    async fn volume(&self, n: usize, access: Access) -> Result<(String, CsiVolume), HarnessError> {
        let modes: &[&str] = match access {
            Access::SingleNode => &["ReadWriteOnce"],
            Access::MultiNode => &["ReadWriteMany"],
        };
        let payload = self
            .fake
            .add_volume(&format!("pv-{n}"), DRIVER, &format!("vol-{n}"), modes);
        Ok((payload.unique_name(), payload))
    }
}

#[tokio::test(start_paused = true)]
async fn the_backend_conforms_over_a_stateful_fake() {
    let fake = FakeVa::new();
    let backend = VolumeAttachmentBackend::new(fake.client(), CsiDrivers::new());
    let harness = Harness {
        fake: fake.clone(),
        backend,
    };
    if let Err(failures) = conformance::check_backend(&harness).await {
        panic!("{failures}");
    }
    // Everything the suite attached, it detached.
    assert!(fake.attachments().is_empty(), "{:?}", fake.attachments());
}

#[tokio::test(start_paused = true)]
async fn the_fake_plays_a_slow_and_a_failing_attacher() {
    let fake = FakeVa::new();
    let config = KubeBackendConfig {
        timeout: Duration::from_secs(10),
        ..KubeBackendConfig::default()
    };
    let backend = VolumeAttachmentBackend::with_config(fake.client(), CsiDrivers::new(), config);
    let payload = fake.add_volume("pv-1", DRIVER, "vol-1", &["ReadWriteOnce"]);
    let (v, n) = (payload.unique_name(), NODE.to_owned());

    // The attacher is down: the attach times out as uncertain, and counts as attached.
    fake.set_attacher(Attacher {
        running: false,
        ..Attacher::default()
    });
    let e = backend.attach(&v, &n, &payload).await.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    assert_eq!(
        backend.verify(&n, &[(v.clone(), payload.clone())]).await,
        Ok(vec![v.clone()])
    );
    assert_eq!(backend.list().await.unwrap().len(), 1);

    // It comes back failing: the attach error is reported.
    fake.set_attacher(Attacher {
        attach_error: Some("disk quota exceeded".into()),
        ..Attacher::default()
    });
    let e = backend.attach(&v, &n, &payload).await.unwrap_err();
    assert!(
        is_uncertain(&e) && e.message().contains("disk quota exceeded"),
        "{e}"
    );

    // Healed: the attach succeeds; the detach waits for the attacher, then the object is gone.
    fake.set_attacher(Attacher::default());
    assert_eq!(
        backend.attach(&v, &n, &payload).await,
        Ok(AttachInfo { device: None })
    );
    fake.set_attacher(Attacher {
        detach_delay: Duration::from_secs(5),
        ..Attacher::default()
    });
    let start = tokio::time::Instant::now();
    assert_eq!(backend.detach(&v, &n, &payload).await, Ok(()));
    assert!(start.elapsed() >= Duration::from_secs(5));
    assert!(fake.attachments().is_empty());

    // While a detach is under way (the attacher is down), an attach is refused as transient
    // and verify still counts the volume.
    assert_eq!(
        backend.attach(&v, &n, &payload).await,
        Ok(AttachInfo { device: None })
    );
    fake.set_attacher(Attacher {
        running: false,
        ..Attacher::default()
    });
    let e = backend.detach(&v, &n, &payload).await.unwrap_err();
    assert!(is_uncertain(&e), "{e}");
    let e = backend.attach(&v, &n, &payload).await.unwrap_err();
    assert!(is_transient(&e), "{e}");
    assert_eq!(
        backend.verify(&n, &[(v.clone(), payload.clone())]).await,
        Ok(vec![v.clone()])
    );

    // The history compacted under the shared watch: it answers 410 Gone, the watch lists
    // again and watches from the list's version, and the detach ends all the same.
    fake.add_volume("pv-2", DRIVER, "vol-2", &["ReadWriteOnce"]); // a later revision
    fake.compact();
    let before = fake.requests().len();
    fake.set_attacher(Attacher {
        detach_delay: Duration::from_secs(2),
        ..Attacher::default()
    });
    assert_eq!(backend.detach(&v, &n, &payload).await, Ok(()));
    let name = attachment_name("vol-1", DRIVER, NODE);
    let seen = &fake.requests()[before..];
    assert_eq!(seen[0], format!("DELETE {VAS}/{name}?"));
    assert_eq!(seen[1], format!("GET {VAS}?&limit=500"), "{seen:?}");
    let watch = format!(
        "GET {VAS}?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion="
    );
    assert!(seen[2..].iter().all(|r| r.starts_with(&watch)), "{seen:?}");
    assert!(fake.attachments().is_empty());
}
