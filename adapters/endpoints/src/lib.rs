//! An operator's HTTP endpoints for a controller, generic over what it runs.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /metrics` | the Prometheus registry, OpenMetrics text (`application/openmetrics-text; version=1.0.0; charset=utf-8`) |
//! | `GET /healthz` | `200 ok`, or `500` and the reason ([`Probes::health`]): for a liveness probe |
//! | `GET /readyz` | `200 ok`, or `503` and the reason ([`Probes::readiness`]): for a readiness probe |
//! | `GET /explain?volume=NAME` | why a volume is where it is ([`Explainer::explain_volume`]): one line per answer, or JSON with `Accept: application/json` |
//! | `GET /explain?pod=NAMESPACE/NAME` | why a pod's volumes are where they are ([`Explainer::explain_pod`]) |
//!
//! Any other path answers `404`, another method `405`. The server binds [`DEFAULT_ADDR`]
//! (`127.0.0.1:9808`) unless told otherwise: what it shows (the cluster's volumes, by name) is
//! for the operator, and exposing it is a choice made with
//! [`EndpointsBuilder::listen`] (e.g. `0.0.0.0:9808` in a pod, for the kubelet's probes and
//! Prometheus).
//!
//! [`LeaderGauge`] is the `attach_detach_leader` gauge: 1 while this replica leads.
//!
//! ```no_run
//! use attach_detach_endpoints::{Endpoints, LeaderGauge};
//! use prometheus_client::registry::Registry;
//! # async fn run() -> Result<(), attach_detach_endpoints::EndpointsError> {
//! let mut registry = Registry::default();
//! let leader = LeaderGauge::new();
//! leader.register(&mut registry);
//! let server = Endpoints::builder().registry(registry).bind().await?;
//! leader.set_leading(true);
//! // ... until the process stops:
//! server.shutdown().await
//! # }
//! ```
#![deny(missing_docs)]

mod explain;
mod gauge;
mod probes;
mod server;

pub use explain::{ExplainError, Explained, Explainer};
pub use gauge::{LEADER_METRIC, LeaderGauge};
pub use probes::{Healthy, Probes};
pub use server::{
    DEFAULT_ADDR, DEFAULT_PORT, Endpoints, EndpointsBuilder, EndpointsError, METRICS_CONTENT_TYPE,
    Server, SharedRegistry,
};

/// The `prometheus-client` this crate encodes, so that an embedder registers into the same
/// version's [`Registry`](prometheus_client::registry::Registry).
pub use prometheus_client;
