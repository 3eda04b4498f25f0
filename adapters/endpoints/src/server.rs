//! The HTTP server: routes, builder, and the running server.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::explain::{ExplainError, Explainer, Question, question, wants_json};
use crate::probes::{Healthy, Probes};

/// The port the endpoints listen on unless told otherwise.
pub const DEFAULT_PORT: u16 = 9808;

/// Where the endpoints listen unless told otherwise: loopback only, so that nothing is exposed
/// that the operator did not choose to expose.
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT);

/// The content type of `/metrics`: the OpenMetrics text `prometheus-client` writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

/// How long [`Server::shutdown`] lets requests under way finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A registry the embedder and the server share: the embedder may register into it while it
/// is served.
pub type SharedRegistry = Arc<Mutex<Registry>>;

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointsError {
    /// The address could not be bound (taken, or not this machine's).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The server stopped with an error.
    #[error("the endpoints' server failed: {0}")]
    Serve(io::Error),
    /// The server's task panicked.
    #[error("the endpoints' server panicked")]
    Panicked,
}

/// The endpoints; see the [crate] docs for the routes.
#[derive(Debug)]
pub struct Endpoints;

impl Endpoints {
    /// A builder: no metrics, probes that always pass, no `/explain`, on [`DEFAULT_ADDR`].
    pub fn builder() -> EndpointsBuilder {
        EndpointsBuilder {
            addr: DEFAULT_ADDR,
            registry: Arc::default(),
            probes: Arc::new(Healthy),
            explainer: None,
        }
    }
}

/// What the endpoints serve, and where.
pub struct EndpointsBuilder {
    addr: SocketAddr,
    registry: SharedRegistry,
    probes: Arc<dyn Probes>,
    explainer: Option<Arc<dyn Explainer>>,
}

impl std::fmt::Debug for EndpointsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointsBuilder")
            .field("addr", &self.addr)
            .field("explainer", &self.explainer.is_some())
            .finish_non_exhaustive()
    }
}

impl EndpointsBuilder {
    /// Listens on `addr` instead of [`DEFAULT_ADDR`]: `0.0.0.0:9808` to be reached from other
    /// machines (the kubelet's probes, Prometheus); port 0 for any free port
    /// ([`Server::local_addr`] tells which).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Where it will listen.
    pub fn listen_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `registry` on `/metrics`.
    pub fn registry(self, registry: Registry) -> Self {
        self.shared_registry(Arc::new(Mutex::new(registry)))
    }

    /// Serves a registry the embedder keeps registering into.
    pub fn shared_registry(mut self, registry: SharedRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Answers `/healthz` and `/readyz` with `probes`.
    pub fn probes(mut self, probes: impl Probes) -> Self {
        self.probes = Arc::new(probes);
        self
    }

    /// Answers `/explain` with `explainer`; without one, `/explain` answers 501.
    pub fn explainer(mut self, explainer: impl Explainer) -> Self {
        self.explainer = Some(Arc::new(explainer));
        self
    }

    /// Binds the address and serves until [`Server::shutdown`] (or the [`Server`] is dropped).
    pub async fn bind(self) -> Result<Server, EndpointsError> {
        let addr = self.addr;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| EndpointsError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| EndpointsError::Bind { addr, source })?;
        let state = Shared {
            registry: self.registry,
            probes: self.probes,
            explainer: self.explainer,
        };
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/explain", get(explain))
            .fallback(not_found)
            .with_state(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    // A dropped `Server` stops it too.
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Server {
            addr: local,
            stop: Some(stop),
            task,
        })
    }
}

/// The endpoints being served. Dropping it stops them.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// The address it listens on (the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking connections, lets the requests under way finish (up to 5 s, then cuts
    /// them), and returns once it has stopped.
    pub async fn shutdown(mut self) -> Result<(), EndpointsError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = &mut self.task;
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut *task).await {
            Ok(Ok(result)) => result.map_err(EndpointsError::Serve),
            Ok(Err(_)) => Err(EndpointsError::Panicked),
            Err(_) => {
                warn!("requests to the endpoints still under way at shutdown: cut");
                task.abort();
                Ok(())
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[derive(Clone)]
struct Shared {
    registry: SharedRegistry,
    probes: Arc<dyn Probes>,
    explainer: Option<Arc<dyn Explainer>>,
}

fn answer(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    answer(status, TEXT, body.into())
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode(&mut body, &shared.registry.lock());
    match encoded {
        Ok(()) => answer(StatusCode::OK, METRICS_CONTENT_TYPE, body),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded",
        ),
    }
}

fn probe(result: Result<(), String>, failed: StatusCode) -> Response {
    match result {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(reason) => text(failed, reason),
    }
}

async fn healthz(State(shared): State<Shared>) -> Response {
    probe(shared.probes.health(), StatusCode::INTERNAL_SERVER_ERROR)
}

async fn readyz(State(shared): State<Shared>) -> Response {
    probe(shared.probes.readiness(), StatusCode::SERVICE_UNAVAILABLE)
}

async fn explain(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let json = wants_json(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    let failure = |status: StatusCode, message: String| {
        if json {
            answer(
                status,
                JSON,
                serde_json::json!({ "error": message }).to_string(),
            )
        } else {
            text(status, message + "\n")
        }
    };
    let question = match question(query.as_deref()) {
        Ok(question) => question,
        Err(message) => return failure(StatusCode::BAD_REQUEST, message),
    };
    let Some(explainer) = shared.explainer else {
        return failure(
            StatusCode::NOT_IMPLEMENTED,
            "this process has no explainer".into(),
        );
    };
    let answered = match &question {
        Question::Volume(volume) => explainer.explain_volume(volume).await,
        Question::Pod { namespace, name } => explainer.explain_pod(namespace, name).await,
    };
    match answered {
        Ok(explained) if json => answer(StatusCode::OK, JSON, explained.json.to_string()),
        Ok(explained) => {
            let mut body = String::new();
            for line in &explained.lines {
                body.push_str(line);
                body.push('\n');
            }
            text(StatusCode::OK, body)
        }
        Err(error) => {
            let status = match error {
                ExplainError::NotFound(_) => StatusCode::NOT_FOUND,
                ExplainError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                ExplainError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            failure(status, error.to_string())
        }
    }
}

async fn not_found(uri: Uri) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!(
            "no route {}: the routes are /metrics, /healthz, /readyz and /explain\n",
            uri.path()
        ),
    )
}
