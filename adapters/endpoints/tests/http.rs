//! Every route over HTTP on a real listener on 127.0.0.1: status codes, content types, the
//! `Accept` negotiation of `/explain`, bad queries, unknown paths and methods, the default
//! address, and shutdown.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use attach_detach_endpoints::prometheus_client::metrics::counter::Counter;
use attach_detach_endpoints::prometheus_client::registry::Registry;
use attach_detach_endpoints::{
    DEFAULT_ADDR, DEFAULT_PORT, Endpoints, EndpointsBuilder, ExplainError, Explained, Explainer,
    LeaderGauge, METRICS_CONTENT_TYPE, Probes, Server,
};
use parking_lot::Mutex;
use serde_json::{Value, json};

use common::{get, get_accepting, request};

const TEXT: &str = "text/plain; charset=utf-8";

/// Binds `builder` on a free loopback port.
async fn serve(builder: EndpointsBuilder) -> Server {
    builder
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .bind()
        .await
        .expect("bound")
}

/// Probes whose answers the test sets.
/// Health and readiness.
type Answers = (Result<(), String>, Result<(), String>);

#[derive(Clone)]
struct Switch(Arc<Mutex<Answers>>);

impl Default for Switch {
    fn default() -> Self {
        Switch(Arc::new(Mutex::new((Ok(()), Ok(())))))
    }
}

impl Switch {
    fn set(&self, health: Result<(), &str>, readiness: Result<(), &str>) {
        *self.0.lock() = (
            health.map_err(str::to_owned),
            readiness.map_err(str::to_owned),
        );
    }
}

impl Probes for Switch {
    fn health(&self) -> Result<(), String> {
        self.0.lock().0.clone()
    }

    fn readiness(&self) -> Result<(), String> {
        self.0.lock().1.clone()
    }
}

/// Answers by the name asked: `vol-1` and pod `default/web-0` are known, `standby` is
/// unavailable, `broken` fails; anything else is not found.
struct Fixed;

#[async_trait]
impl Explainer for Fixed {
    async fn explain_volume(&self, volume: &str) -> Result<Explained, ExplainError> {
        match volume {
            "kubernetes.io/csi/ebs^vol-1" => Ok(Explained {
                lines: vec![
                    format!("{volume} is attached to node-a"),
                    "pod default/web-0 uses it there".into(),
                ],
                json: json!({"volume": volume, "attached": ["node-a"]}),
            }),
            "standby" => Err(ExplainError::Unavailable(
                "this replica is a standby".into(),
            )),
            "broken" => Err(ExplainError::Internal(
                "the controller did not answer".into(),
            )),
            other => Err(ExplainError::NotFound(format!("no volume {other}"))),
        }
    }

    async fn explain_pod(&self, namespace: &str, name: &str) -> Result<Explained, ExplainError> {
        match (namespace, name) {
            ("default", "web-0") => Ok(Explained {
                lines: vec!["pod default/web-0 waits for its volume".into()],
                json: json!({"pod": format!("{namespace}/{name}"), "waiting": true}),
            }),
            _ => Err(ExplainError::NotFound(format!("no pod {namespace}/{name}"))),
        }
    }
}

#[tokio::test]
async fn metrics_are_the_registry_as_openmetrics_with_the_leadership_gauge() {
    let mut registry = Registry::default();
    let leader = LeaderGauge::new();
    leader.register(&mut registry);
    let registry = Arc::new(Mutex::new(registry));
    let server = serve(Endpoints::builder().shared_registry(registry.clone())).await;
    let addr = server.local_addr();

    let reply = get(addr, "/metrics").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type(), METRICS_CONTENT_TYPE);
    assert!(
        reply.body.contains("# TYPE attach_detach_leader gauge\n"),
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains("\nattach_detach_leader 0\n"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);

    leader.set_leading(true);
    assert!(
        get(addr, "/metrics")
            .await
            .body
            .contains("\nattach_detach_leader 1\n")
    );
    leader.set_leading(false);
    assert!(
        get(addr, "/metrics")
            .await
            .body
            .contains("\nattach_detach_leader 0\n")
    );

    // The embedder may register after the server started: the shared registry is read per scrape.
    let late = Counter::<u64>::default();
    late.inc_by(3);
    registry
        .lock()
        .register("late_things", "Registered while served", late);
    assert!(
        get(addr, "/metrics")
            .await
            .body
            .contains("\nlate_things_total 3\n")
    );
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn probes_answer_ok_or_their_reason_with_500_and_503() {
    let probes = Switch::default();
    probes.set(Ok(()), Ok(()));
    let server = serve(Endpoints::builder().probes(probes.clone())).await;
    let addr = server.local_addr();
    for path in ["/healthz", "/readyz"] {
        let reply = get(addr, path).await;
        assert_eq!(
            (reply.status, reply.content_type(), reply.body.as_str()),
            (200, TEXT, "ok")
        );
    }

    probes.set(Ok(()), Err("leading; the controller is recovering"));
    let ready = get(addr, "/readyz").await;
    assert_eq!(
        (ready.status, ready.content_type(), ready.body.as_str()),
        (503, TEXT, "leading; the controller is recovering")
    );
    assert_eq!(
        get(addr, "/healthz").await.status,
        200,
        "health is its own question"
    );

    probes.set(
        Err("the controller died: boom"),
        Err("the controller died: boom"),
    );
    let health = get(addr, "/healthz").await;
    assert_eq!(
        (health.status, health.content_type(), health.body.as_str()),
        (500, TEXT, "the controller died: boom")
    );
    assert_eq!(get(addr, "/readyz").await.status, 503);
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn without_probes_or_a_registry_it_answers_ok_and_an_empty_exposition() {
    let server = serve(Endpoints::builder()).await;
    let addr = server.local_addr();
    assert_eq!(get(addr, "/healthz").await.status, 200);
    assert_eq!(get(addr, "/readyz").await.status, 200);
    let metrics = get(addr, "/metrics").await;
    assert_eq!((metrics.status, metrics.body.as_str()), (200, "# EOF\n"));
    assert_eq!(metrics.content_type(), METRICS_CONTENT_TYPE);
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn explain_answers_lines_by_default_and_json_when_accepted() {
    let server = serve(Endpoints::builder().explainer(Fixed)).await;
    let addr = server.local_addr();
    let volume = "/explain?volume=kubernetes.io%2Fcsi%2Febs%5Evol-1";

    let reply = get(addr, volume).await;
    assert_eq!((reply.status, reply.content_type()), (200, TEXT));
    assert_eq!(
        reply.body,
        "kubernetes.io/csi/ebs^vol-1 is attached to node-a\npod default/web-0 uses it there\n"
    );
    for accept in ["*/*", "text/plain", "text/plain, application/json;q=0.5"] {
        assert_eq!(
            get_accepting(addr, volume, accept).await.content_type(),
            TEXT,
            "{accept}"
        );
    }

    for accept in ["application/json", "application/json, text/plain, */*"] {
        let reply = get_accepting(addr, volume, accept).await;
        assert_eq!(
            (reply.status, reply.content_type()),
            (200, "application/json"),
            "{accept}"
        );
        let body: Value = serde_json::from_str(&reply.body).expect("JSON");
        assert_eq!(
            body,
            json!({"volume": "kubernetes.io/csi/ebs^vol-1", "attached": ["node-a"]})
        );
    }

    let pod = get(addr, "/explain?pod=default/web-0").await;
    assert_eq!(
        (pod.status, pod.content_type(), pod.body.as_str()),
        (200, TEXT, "pod default/web-0 waits for its volume\n")
    );
    let pod = get_accepting(addr, "/explain?pod=default%2Fweb-0", "application/json").await;
    assert_eq!(pod.status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&pod.body).expect("JSON"),
        json!({"pod": "default/web-0", "waiting": true})
    );
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn explain_errors_have_their_status_codes_in_either_format() {
    let server = serve(Endpoints::builder().explainer(Fixed)).await;
    let addr = server.local_addr();
    for (path, status, said) in [
        ("/explain?volume=nothing", 404, "no volume nothing"),
        ("/explain?pod=default/gone", 404, "no pod default/gone"),
        ("/explain?volume=standby", 503, "this replica is a standby"),
        (
            "/explain?volume=broken",
            500,
            "the controller did not answer",
        ),
    ] {
        let reply = get(addr, path).await;
        assert_eq!(
            (reply.status, reply.content_type()),
            (status, TEXT),
            "{path}"
        );
        assert!(reply.body.contains(said), "{path}: {}", reply.body);

        let reply = get_accepting(addr, path, "application/json").await;
        assert_eq!(
            (reply.status, reply.content_type()),
            (status, "application/json"),
            "{path}"
        );
        let body: Value = serde_json::from_str(&reply.body).expect("JSON");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(said)),
            "{path}: {body}"
        );
    }
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn a_bad_explain_query_is_a_400_that_says_how_to_ask() {
    let server = serve(Endpoints::builder().explainer(Fixed)).await;
    let addr = server.local_addr();
    for path in [
        "/explain",
        "/explain?",
        "/explain?volume=",
        "/explain?volume=a&pod=default/web-0",
        "/explain?volume=a&volume=b",
        "/explain?pod=web-0",
        "/explain?pod=/web-0",
        "/explain?pod=default/",
        "/explain?pod=a/b/c",
        "/explain?node=node-a",
        "/explain?volume=%FF%FE",
    ] {
        let reply = get(addr, path).await;
        // A name that is not UTF-8 is read lossily: a name no volume has, so 404, never a panic.
        let expected = if path.contains("%FF") { 404 } else { 400 };
        assert_eq!(
            (reply.status, reply.content_type()),
            (expected, TEXT),
            "{path}"
        );
        if expected == 400 {
            assert!(
                reply
                    .body
                    .contains("/explain?volume=NAME or /explain?pod=NAMESPACE/NAME"),
                "{path}: {}",
                reply.body
            );
            let reply = get_accepting(addr, path, "application/json").await;
            assert_eq!(
                (reply.status, reply.content_type()),
                (400, "application/json")
            );
        }
    }
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn without_an_explainer_explain_is_not_implemented() {
    let server = serve(Endpoints::builder()).await;
    let addr = server.local_addr();
    let reply = get(addr, "/explain?volume=v").await;
    assert_eq!((reply.status, reply.content_type()), (501, TEXT));
    assert_eq!(
        get(addr, "/explain?pod=nope").await.status,
        400,
        "the query is checked first"
    );
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn unknown_paths_are_404_and_other_methods_405() {
    let server = serve(Endpoints::builder().explainer(Fixed)).await;
    let addr = server.local_addr();
    for path in ["/", "/metricz", "/healthz/extra", "/explain/vol-1"] {
        let reply = get(addr, path).await;
        assert_eq!((reply.status, reply.content_type()), (404, TEXT), "{path}");
        assert!(reply.body.contains(path), "{path}: {}", reply.body);
    }
    for path in ["/healthz", "/readyz", "/metrics", "/explain?volume=v"] {
        assert_eq!(request(addr, "POST", path, &[]).await.status, 405, "{path}");
    }
    let head = request(addr, "HEAD", "/healthz", &[]).await;
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn it_listens_on_loopback_unless_told_otherwise() {
    let builder = Endpoints::builder();
    assert_eq!(builder.listen_addr(), DEFAULT_ADDR);
    assert!(DEFAULT_ADDR.ip().is_loopback());
    assert_eq!(DEFAULT_ADDR.port(), DEFAULT_PORT);
    assert_eq!(DEFAULT_ADDR.to_string(), "127.0.0.1:9808");
    // Only the port moved: still loopback.
    let server = builder
        .listen(SocketAddr::new(DEFAULT_ADDR.ip(), 0))
        .bind()
        .await
        .expect("bound");
    assert!(server.local_addr().ip().is_loopback());
    assert_ne!(server.local_addr().port(), 0);
    server.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn a_taken_address_is_a_typed_error_and_shutdown_closes_the_port() {
    let server = serve(Endpoints::builder()).await;
    let addr = server.local_addr();
    let taken = Endpoints::builder().listen(addr).bind().await;
    assert!(
        matches!(&taken, Err(attach_detach_endpoints::EndpointsError::Bind { addr: a, .. }) if *a == addr),
        "{taken:?}"
    );
    server.shutdown().await.expect("a clean stop");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens any more"
    );

    // Dropping the server stops it too.
    let server = serve(Endpoints::builder()).await;
    let addr = server.local_addr();
    drop(server);
    let mut closed = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(closed, "a dropped server stops listening");
}
