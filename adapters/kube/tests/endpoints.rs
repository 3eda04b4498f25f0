//! The endpoints of two replicas over HTTP, their leadership over the fake API server on
//! 127.0.0.1: a standby is ready, a leader only once its controller recovered (its recovery
//! listing held back by a gate until the test opens it), `/healthz` stays up through it all,
//! `attach_detach_leader` follows the lease when the leader steps down, and `/explain` answers
//! from the leader's controller (a standby: 503).

mod common;
// The endpoints crate's minimal HTTP client; this test uses some of it.
#[path = "../../endpoints/tests/common/mod.rs"]
#[allow(dead_code)]
mod http;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use attach_detach::Domain;
use attach_detach::config::Config;
use attach_detach::controller::{Controller, World};
use attach_detach::core::{NodeFacts, VolumeSpec};
use attach_detach::memory::{MemoryBackend, MemoryStore};
use attach_detach::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use attach_detach_endpoints::prometheus_client::registry::Registry;
use attach_detach_endpoints::{Endpoints, Server};
use attach_detach_kube::{
    CsiVolume, Kube, KubeExplainer, LeaderConfig, LeaderStatus, Term, lead_with_status,
};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use common::apiserver::ApiServer;
use http::{get, get_accepting};

/// The one volume the controllers know, as kubelet names it, and its pod.
const VOLUME: &str = "kubernetes.io/csi/ebs.csi.aws.com^vol-1";
const POD: &str = "default/web-0";

/// What each term's informers would have listed: a node, and a pod on it with one volume.
fn world() -> World<Kube> {
    World::new()
        .volume(
            VOLUME.into(),
            VolumeSpec::single_node(CsiVolume::persistent("pv-1", "ebs.csi.aws.com", "vol-1")),
        )
        .node("node-a".into(), NodeFacts::default())
        .workload(POD.into(), "node-a".into(), [VOLUME.to_owned()])
}

/// A memory backend whose `list` (the controller's recovery listing) waits until the gate
/// opens.
struct Gated<D: Domain> {
    inner: MemoryBackend<D>,
    gate: watch::Receiver<bool>,
}

#[async_trait]
impl<D: Domain> AttachBackend<D> for Gated<D> {
    async fn attach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<AttachInfo, BackendError<D::Node>> {
        self.inner.attach(volume, node, payload).await
    }

    async fn detach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<(), BackendError<D::Node>> {
        self.inner.detach(volume, node, payload).await
    }

    async fn verify(
        &self,
        node: &D::Node,
        volumes: &[(D::Volume, D::Payload)],
    ) -> Result<Vec<D::Volume>, BackendError<D::Node>> {
        self.inner.verify(node, volumes).await
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<D::Node>> {
        let _ = self.gate.clone().wait_for(|open| *open).await;
        self.inner.list().await
    }
}

/// One replica: its leader loop, its endpoints, and the gate of its recovery listings.
struct Replica {
    status: LeaderStatus,
    endpoints: Server,
    gate: watch::Sender<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), attach_detach_kube::LeaderError>>>,
}

impl Replica {
    async fn start(server: &ApiServer, token: &str) -> Replica {
        let status = LeaderStatus::new();
        let mut registry = Registry::default();
        status.register(&mut registry);
        let endpoints = Endpoints::builder()
            .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .registry(registry)
            .probes(status.clone())
            .explainer(KubeExplainer::new(status.clone()))
            .bind()
            .await
            .expect("the endpoints are served");
        let (gate, gated) = watch::channel(false);
        let (stop, stopped) = oneshot::channel::<()>();
        let config = LeaderConfig {
            duration_seconds: 3,
            grace_seconds: 1,
            ..LeaderConfig::default()
        };
        let task = tokio::spawn(lead_with_status(
            server.client(token).await,
            config,
            status.clone(),
            move || {
                let gate = gated.clone();
                async move {
                    let backend = Gated {
                        inner: MemoryBackend::<Kube>::new(),
                        gate,
                    };
                    let (handle, task) = Controller::<Kube>::new(
                        Config::default(),
                        Arc::new(backend),
                        Arc::new(MemoryStore::default()),
                        world(),
                    )
                    .map_err(|e| e.to_string())?
                    .spawn();
                    Ok::<_, String>(Term {
                        handle,
                        task,
                        helpers: Vec::new(),
                    })
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        Replica {
            status,
            endpoints,
            gate,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.endpoints.local_addr()
    }

    /// `/readyz`'s status and body.
    async fn ready(&self) -> (u16, String) {
        let reply = get(self.addr(), "/readyz").await;
        (reply.status, reply.body)
    }

    async fn healthy(&self) -> bool {
        get(self.addr(), "/healthz").await.status == 200
    }

    async fn metrics(&self) -> String {
        let reply = get(self.addr(), "/metrics").await;
        assert_eq!(reply.status, 200);
        reply.body
    }

    /// Stops its leader loop (which releases the lease) and waits for it.
    async fn step_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("no panic").expect("a clean stop");
        }
    }
}

/// Polls `/readyz` until it answers `status` with a body containing `said`, at most `limit`.
async fn ready_becomes(replica: &Replica, status: u16, said: &str, limit: Duration) {
    let end = tokio::time::Instant::now() + limit;
    let mut last = replica.ready().await;
    while !(last.0 == status && last.1.contains(said)) {
        assert!(
            tokio::time::Instant::now() < end,
            "/readyz never answered {status} {said:?}; last {last:?}, {:?}",
            replica.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = replica.ready().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_recovery_and_follows_a_leadership_change() {
    let server = ApiServer::start().await;
    let token = server.token("system:serviceaccount:kube-system:attach-detach-controller");
    let wait = Duration::from_secs(15);

    // The first replica leads: not ready while its controller recovers, healthy throughout.
    let mut first = Replica::start(&server, &token).await;
    ready_becomes(&first, 503, "leading; the controller is recovering", wait).await;
    assert!(first.healthy().await);
    let metrics = first.metrics().await;
    assert!(metrics.contains("\nattach_detach_leader 1\n"), "{metrics}");
    assert!(
        metrics.contains("\nattach_detach_recovering 1\n"),
        "{metrics}"
    );
    // Held there by the gate, not by chance: still recovering a while later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(first.ready().await.0, 503);
    // `/explain` asks the leader's controller, which says what its pod waits for.
    let pod = get(first.addr(), "/explain?pod=default/web-0").await;
    assert_eq!(
        (pod.status, pod.content_type()),
        (200, "text/plain; charset=utf-8")
    );
    assert!(
        pod.body.starts_with(
            "\"default/web-0\" on \"node-a\": waiting for the core's recovery listings"
        ) && pod
            .body
            .contains("waiting for the core's recovery listings"),
        "{}",
        pod.body
    );

    first.gate.send_replace(true);
    ready_becomes(&first, 200, "ok", wait).await;
    assert!(first.healthy().await);
    let metrics = first.metrics().await;
    assert!(
        metrics.contains("\nattach_detach_recovering 0\n"),
        "{metrics}"
    );
    let volume = format!("/explain?volume={}", VOLUME.replace('^', "%5E"));
    let json = get_accepting(first.addr(), &volume, "application/json").await;
    assert_eq!(
        (json.status, json.content_type()),
        (200, "application/json")
    );
    let json: Value = serde_json::from_str(&json.body).expect("JSON");
    assert_eq!(
        (
            &json["volume"],
            &json["pairs"][0]["node"],
            &json["pairs"][0]["wanted"]
        ),
        (
            &Value::from(VOLUME),
            &Value::from("node-a"),
            &Value::from(true)
        ),
        "{json}"
    );
    assert_ne!(json["pairs"][0]["wait"], "Recovery", "recovered: {json}");
    let unknown = get(first.addr(), "/explain?volume=kubernetes.io/csi/x%5Ey").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let unknown = get(first.addr(), "/explain?pod=default/nobody").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // A second replica stands by: healthy and ready, so that a rollout is not stalled.
    let mut second = Replica::start(&server, &token).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!second.status.is_leading(), "{:?}", second.status);
    assert_eq!(second.ready().await, (200, "ok".into()));
    assert!(second.healthy().await);
    let metrics = second.metrics().await;
    assert!(metrics.contains("\nattach_detach_leader 0\n"), "{metrics}");
    assert!(
        !metrics.contains("attach_detach_recovering"),
        "no term, no controller metrics: {metrics}"
    );
    let standby = get(second.addr(), &volume).await;
    assert_eq!(standby.status, 503, "{}", standby.body);
    assert!(standby.body.contains("does not lead"), "{}", standby.body);

    // The leader steps down (releasing the lease): the standby takes over and is not ready
    // until its own controller recovered; the old leader is a ready standby.
    first.step_down().await;
    assert_eq!(first.ready().await, (200, "ok".into()));
    assert!(first.metrics().await.contains("\nattach_detach_leader 0\n"));
    ready_becomes(&second, 503, "leading; the controller is recovering", wait).await;
    assert!(second.healthy().await);
    assert!(
        second
            .metrics()
            .await
            .contains("\nattach_detach_leader 1\n")
    );
    second.gate.send_replace(true);
    ready_becomes(&second, 200, "ok", wait).await;
    assert!(second.healthy().await);

    second.step_down().await;
    assert!(!second.status.is_leading());
    for replica in [first, second] {
        replica.endpoints.shutdown().await.expect("a clean stop");
    }
}
