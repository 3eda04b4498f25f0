//! A zone fenced, through the fake API server over HTTP (`tests/common/apiserver.rs`) with
//! simulated kubelets and external-attacher (`tests/common/sims.rs`): a third of the nodes
//! lose power at once, are tainted out-of-service, and every pod on them (one single-node CSI
//! volume each) is recreated on a healthy node. Measured, for the controller's requests from
//! the fence until every pod runs again: requests by verb and resource, the peak over any one
//! second, 429s from the server, and the time.
//!
//! Two controllers, one run each on a fresh fake:
//! - `ours`: the adapter as the example wires it (informers, Node status store,
//!   VolumeAttachment backend, events), its client behind [`ClientRateLimit`] at QPS 20, burst
//!   30 (the example's default);
//! - `upstream`: a model of kube-controller-manager's attach/detach controller on the same
//!   fake: informers on pods, claims, volumes, nodes, CSIDrivers, CSINodes and
//!   VolumeAttachments, a 100 ms loop that creates a missing VolumeAttachment, and for a
//!   detach patches the node's status without the volume and then deletes the attachment,
//!   one status patch per node per loop whose attached list changed, a `SuccessfulAttachVolume`
//!   event per attach; client QPS 20, burst 30.
//!
//! The server answers 429 past 100 requests a second per client (bursts of 200), as a
//! priority level of API Priority and Fairness would.
//!
//! `cargo bench -p attach-detach-kube --bench zone` runs the full scale (1,000 nodes, 30
//! volumes each, 333 fenced); `-- --test` (CI) a small one (30 nodes, 3 volumes each: 30 pods
//! move, enough that the rate bound paces both sides). `ZONE_NODES`, `ZONE_VOLUMES` (per
//! node), `ZONE_FENCED`, `ZONE_RUNS=ours,upstream` override. Asserted: every pod runs again
//! and no fenced node still reports a volume, on both sides; ours got no 429, never sent more
//! in one second than its bound allows (QPS + burst), and, when both ran, sent no more
//! requests than the model.

// The tests' fake API server and simulators (the module allows its own dead code).
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use attach_detach::config::{BackendLoad, Config};
use attach_detach::controller::Controller;
use attach_detach_kube::{
    ClientRateLimit, Informers, KubeEvent, KubeEventRecorder, KubeStatusStore,
    REPORTING_CONTROLLER, VolumeAttachmentBackend, attachment_name, publish,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, VolumeAttachment};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use common::apiserver::{ApiServer, EVENTS, NODES, Served};
use common::sims::{CONTROLLER, Sims, until};

const DRIVER: &str = "ebs.csi.aws.com";
/// The annotation kubelet puts on a node whose volumes the controller attaches.
const MANAGED: &str = attach_detach_kube::CONTROLLER_MANAGED_ANNOTATION;
const NS: &str = "default";
/// kube-controller-manager's client defaults, and ours.
const QPS: f64 = 20.0;
const BURST: u32 = 30;
/// The server's limit per client: past it, 429.
const SERVER_QPS: f64 = 100.0;
const SERVER_BURST: f64 = 200.0;
const UPSTREAM: &str = "system:serviceaccount:kube-system:attachdetach-controller";

#[derive(Clone, Copy, Debug)]
struct Scale {
    nodes: usize,
    volumes: usize,
    fenced: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Ours,
    Upstream,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Upstream => "upstream",
        }
    }
    fn user(self) -> &'static str {
        match self {
            Side::Ours => CONTROLLER,
            Side::Upstream => UPSTREAM,
        }
    }
}

#[derive(Debug)]
struct Report {
    side: Side,
    moved: usize,
    seconds: f64,
    requests: usize,
    by_kind: BTreeMap<String, usize>,
    peak: usize,
    too_many: usize,
    /// Whether the side stopped sending within 10 minutes of the move (else its count is a
    /// floor).
    quiet: bool,
}

fn node(i: usize) -> String {
    format!("node-{i:04}")
}

/// The cluster settled: every pod runs with its volume attached and reported.
fn populate(server: &ApiServer, scale: Scale) {
    for n in 0..scale.nodes {
        let node_name = node(n);
        let mut attached = Vec::new();
        let mut in_use = Vec::new();
        for v in 0..scale.volumes {
            let id = format!("{n:04}-{v:02}");
            let (pv, claim, handle) = (
                format!("pv-{id}"),
                format!("data-{id}"),
                format!("vol-{id}"),
            );
            let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
            let claim_object = server.put(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"namespace": NS, "name": claim},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv},
                "status": {"phase": "Bound"},
            }));
            server.put(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "csi": {"driver": DRIVER, "volumeHandle": handle},
                         "claimRef": {"namespace": NS, "name": claim,
                                      "uid": claim_object["metadata"]["uid"]}},
                "status": {"phase": "Bound"},
            }));
            server.put(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": NS, "name": format!("app-{id}")},
                "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "app"}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": "Running"},
            }));
            server.put(json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": attachment_name(&handle, DRIVER, &node_name),
                             "finalizers": ["external-attacher/ebs-csi-aws-com"]},
                "spec": {"attacher": DRIVER, "nodeName": node_name,
                         "source": {"persistentVolumeName": pv}},
                "status": {"attached": true},
            }));
            attached.push(json!({"name": unique, "devicePath": ""}));
            in_use.push(unique);
        }
        server.put(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name, "annotations": {MANAGED: "true"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                       "volumesAttached": attached, "volumesInUse": in_use},
        }));
    }
    server.put(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": DRIVER}, "spec": {"attachRequired": true},
    }));
}

/// Our controller as the example wires it, without the Lease.
async fn ours(client: kube::Client, backend_load: BackendLoad) {
    let mut informers = Informers::new(client.clone());
    let world = informers.initial_sync().await;
    let (recorder, _publisher) = KubeEventRecorder::spawn(
        client.clone(),
        REPORTING_CONTROLLER.into(),
        informers.index(),
        4096,
    );
    let store = KubeStatusStore::new(client.clone());
    let backend = VolumeAttachmentBackend::new(client, informers.csi_drivers())
        .with_managed_nodes(informers.managed_nodes());
    // As the example: the core's calls paced to the client's bucket.
    let config = Config {
        backend_load,
        ..Config::default()
    };
    let controller = Controller::new(config, Arc::new(backend), Arc::new(store), world)
        .expect("a controller")
        .with_recorder(Arc::new(recorder));
    let (handle, _task) = controller.spawn();
    informers.run(handle).await;
}

fn cache<K>(client: &kube::Client) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    reader
}

/// The model of upstream's attach/detach controller (see the module's doc).
async fn upstream(client: kube::Client) {
    let pods: Store<Pod> = cache(&client);
    let claims: Store<PersistentVolumeClaim> = cache(&client);
    let volumes: Store<PersistentVolume> = cache(&client);
    let nodes: Store<Node> = cache(&client);
    let attachments: Store<VolumeAttachment> = cache(&client);
    let _drivers: Store<CSIDriver> = cache(&client);
    let _csinodes: Store<CSINode> = cache(&client);
    for ready in [
        pods.wait_until_ready().await,
        claims.wait_until_ready().await,
    ] {
        ready.expect("synced");
    }
    let _ = volumes.wait_until_ready().await;
    let _ = nodes.wait_until_ready().await;
    let _ = attachments.wait_until_ready().await;
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let node_api: Api<Node> = Api::all(client.clone());
    // Upstream's node status updater writes one node at a time, what the actual state says
    // when it writes.
    let updater = Arc::new(tokio::sync::Mutex::new(()));
    // Upstream's recorder: client-go's correlator, as ours ports it.
    let (events, queue) = tokio::sync::mpsc::channel(100_000);
    tokio::spawn(publish(client.clone(), REPORTING_CONTROLLER.into(), queue));
    // Operations under way, by (node, pv): upstream's executor runs one per volume at a time.
    let pending: Arc<Mutex<BTreeSet<(String, String)>>> = Arc::default();
    // What each node's status says, as last written.
    let written: Arc<Mutex<HashMap<String, BTreeSet<String>>>> = Arc::default();
    // Volumes taken off a node's report before their detach.
    let detaching: Arc<Mutex<BTreeSet<(String, String)>>> = Arc::default();
    let unique = |pv: &PersistentVolume| {
        let csi = pv.spec.as_ref()?.csi.as_ref()?;
        Some((csi.driver.clone(), csi.volume_handle.clone()))
    };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        // Desired: (node, pv) of every scheduled pod not terminated.
        let mut desired: BTreeMap<(String, String), String> = BTreeMap::new();
        for pod in pods.state() {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            for volume in pod
                .spec
                .as_ref()
                .and_then(|s| s.volumes.clone())
                .unwrap_or_default()
            {
                let Some(claim) = volume.persistent_volume_claim else {
                    continue;
                };
                let key = reflector::ObjectRef::new(&claim.claim_name).within(NS);
                if let Some(pv) = claims
                    .get(&key)
                    .and_then(|c| c.spec.as_ref()?.volume_name.clone())
                {
                    desired.insert(
                        (node.clone(), pv),
                        pod.metadata.name.clone().unwrap_or_default(),
                    );
                }
            }
        }
        let mut actual: BTreeMap<(String, String), (String, bool, bool)> = BTreeMap::new();
        for va in attachments.state() {
            let pv = va
                .spec
                .source
                .persistent_volume_name
                .clone()
                .unwrap_or_default();
            let attached = va.status.as_ref().is_some_and(|s| s.attached);
            let deleting = va.metadata.deletion_timestamp.is_some();
            actual.insert(
                (va.spec.node_name.clone(), pv),
                (
                    va.metadata.name.clone().unwrap_or_default(),
                    attached,
                    deleting,
                ),
            );
        }
        let fenced: BTreeSet<String> = nodes
            .state()
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| {
                        t.iter()
                            .any(|t| t.key == "node.kubernetes.io/out-of-service")
                    })
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let in_use = |node: &str, name: &str| {
            nodes
                .get(&reflector::ObjectRef::new(node))
                .and_then(|n| n.status.as_ref()?.volumes_in_use.clone())
                .is_some_and(|u| u.iter().any(|v| v == name))
        };
        let unique_of = |pv: &str| {
            volumes
                .get(&reflector::ObjectRef::new(pv))
                .and_then(|v| unique(&v))
                .map(|(d, h)| format!("kubernetes.io/csi/{d}^{h}"))
        };
        // Detaches: an attachment no pod wants, once unmounted or the node fenced: the node's
        // status first (one patch for this volume), then the delete.
        for ((node, pv), (name, _, deleting)) in &actual {
            if *deleting || desired.contains_key(&(node.clone(), pv.clone())) {
                continue;
            }
            let Some(unique_name) = unique_of(pv) else {
                continue;
            };
            if in_use(node, &unique_name) && !fenced.contains(node) {
                continue;
            }
            let key = (node.clone(), pv.clone());
            if !pending.lock().unwrap().insert(key.clone()) {
                continue;
            }
            detaching.lock().unwrap().insert(key.clone());
            let report: BTreeSet<String> = written
                .lock()
                .unwrap()
                .get(node)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|v| *v != unique_name)
                .collect();
            written.lock().unwrap().insert(node.clone(), report.clone());
            let _ = report;
            let (vas, node_api, pending, name, node) = (
                vas.clone(),
                node_api.clone(),
                pending.clone(),
                name.clone(),
                node.clone(),
            );
            let (written, updater) = (written.clone(), updater.clone());
            tokio::spawn(async move {
                write_status(&updater, &written, &node_api, &node).await;
                let _ = vas.delete(&name, &DeleteParams::default()).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                pending.lock().unwrap().remove(&key);
            });
        }
        // Attaches: a wanted volume with no attachment there, unless attached elsewhere
        // (Multi-Attach: wait).
        for ((node, pv), pod) in &desired {
            if actual.contains_key(&(node.clone(), pv.clone())) {
                continue;
            }
            if actual.keys().any(|(n, p)| p == pv && n != node) {
                // reportMultiAttachError, at every loop: client-go's correlator counts it.
                let _ = events.try_send(pod_event(
                    pod,
                    EventType::Warning,
                    "FailedAttachVolume",
                    format!("Multi-Attach error for volume \"{pv}\" Volume is already exclusively attached to one node and can't be attached to another"),
                ));
                continue;
            }
            let Some(pv_object) = volumes.get(&reflector::ObjectRef::new(pv)) else {
                continue;
            };
            let Some((driver, handle)) = unique(&pv_object) else {
                continue;
            };
            let key = (node.clone(), pv.clone());
            if !pending.lock().unwrap().insert(key.clone()) {
                continue;
            }
            let va: VolumeAttachment = serde_json::from_value(json!({
                "metadata": {"name": attachment_name(&handle, &driver, node)},
                "spec": {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": pv}},
            }))
            .expect("a VolumeAttachment");
            let (vas, pending) = (vas.clone(), pending.clone());
            tokio::spawn(async move {
                let _ = vas.create(&PostParams::default(), &va).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                pending.lock().unwrap().remove(&key);
            });
        }
        // The status updater: one patch per node whose attached list changed; an attach
        // reported is a SuccessfulAttachVolume event on its pod.
        let mut reported: HashMap<String, BTreeSet<String>> = HashMap::new();
        for ((node, pv), (_, attached, deleting)) in &actual {
            if *attached
                && !*deleting
                && !detaching
                    .lock()
                    .unwrap()
                    .contains(&(node.clone(), pv.clone()))
                && let Some(u) = unique_of(pv)
            {
                reported.entry(node.clone()).or_default().insert(u);
            }
        }
        for (node, now) in reported {
            let before = written
                .lock()
                .unwrap()
                .get(&node)
                .cloned()
                .unwrap_or_default();
            if before == now {
                continue;
            }
            for volume in now.difference(&before) {
                if let Some(((_, pv), pod)) = desired
                    .iter()
                    .find(|((n, pv), _)| *n == node && unique_of(pv).as_ref() == Some(volume))
                {
                    let _ = events.try_send(pod_event(
                        pod,
                        EventType::Normal,
                        "SuccessfulAttachVolume",
                        format!("AttachVolume.Attach succeeded for volume \"{pv}\""),
                    ));
                }
            }
            written.lock().unwrap().insert(node.clone(), now.clone());
            let (node_api, written, updater) = (node_api.clone(), written.clone(), updater.clone());
            tokio::spawn(async move {
                write_status(&updater, &written, &node_api, &node).await;
            });
        }
        detaching.lock().unwrap().retain(|k| actual.contains_key(k));
    }
}

/// One status patch of `node`: its list as `written` holds it when the patch goes.
async fn write_status(
    updater: &tokio::sync::Mutex<()>,
    written: &Mutex<HashMap<String, BTreeSet<String>>>,
    node_api: &Api<Node>,
    node: &str,
) {
    let _one_at_a_time = updater.lock().await;
    let list: Vec<_> = written
        .lock()
        .unwrap()
        .get(node)
        .into_iter()
        .flatten()
        .map(|v| json!({"name": v, "devicePath": ""}))
        .collect();
    let patch = json!({"status": {"volumesAttached": list}});
    let _ = node_api
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

fn pod_event(pod: &str, type_: EventType, reason: &'static str, note: String) -> KubeEvent {
    KubeEvent {
        regarding: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(NS.into()),
            name: Some(pod.to_owned()),
            ..ObjectReference::default()
        },
        type_,
        reason,
        note,
        action: "Attach",
    }
}

fn env(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok()
}

async fn run(side: Side, scale: Scale) -> Report {
    let server = ApiServer::start().await;
    server.keep_history(scale.nodes * scale.volumes * 8 + 10_000);
    let token = server.token(side.user());
    server.limit_rate(side.user(), SERVER_QPS, SERVER_BURST);
    populate(&server, scale);
    let (sims, _sims_task) = Sims::start_with(&server, None);
    for n in 0..scale.nodes {
        sims.adopt_node(&node(n));
    }
    let limit = ClientRateLimit::new(QPS, BURST).expect("a rate");
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig(&token)).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a config");
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("a client")
        .with_layer(&limit)
        .build();
    let controller = match side {
        Side::Ours => tokio::spawn(ours(client, limit.backend_load())),
        Side::Upstream => tokio::spawn(upstream(client)),
    };
    // Settled: the controller's start-up (listings, recovery) is over when at most a couple of
    // requests come in two seconds.
    let mut seen = 0;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = server.requests().len();
        if now > 0 && now - seen <= 2 {
            break;
        }
        seen = now;
    }
    let mark = server.requests().len();
    let start = server.elapsed();
    // The zone goes: kubelets stop, nodes tainted out-of-service, pods recreated elsewhere.
    let healthy: Vec<String> = (scale.fenced..scale.nodes).map(node).collect();
    let mut moved = Vec::new();
    for n in 0..scale.fenced {
        sims.crash(&node(n));
        sims.fence(&node(n));
    }
    let mut next = 0;
    for n in 0..scale.fenced {
        for v in 0..scale.volumes {
            let id = format!("{n:04}-{v:02}");
            let name = format!("app-{id}");
            sims.force_delete_pod(NS, &name);
            let target = &healthy[next % healthy.len()];
            next += 1;
            sims.add_pod(NS, &name, target, &format!("data-{id}"));
            moved.push(name);
        }
    }
    let limit = Duration::from_secs((moved.len() as u64 * 3).max(120));
    let done = until(limit, || moved.iter().all(|p| sims.running(NS, p))).await;
    let seconds = (server.elapsed() - start).as_secs_f64();
    // What the move set going (events, the last status writes) counts too: until quiet, so
    // that a side whose events still queue behind its rate bound pays for them. The model's
    // Multi-Attach event at every loop queues more than it can send (client-go's spam filter
    // lets 25 an object through, at 20 a second): it is cut off after 10 minutes, a floor.
    let mut seen = server.requests().len();
    let mut quiet = false;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = server.requests().len();
        if now - seen <= 2 {
            quiet = true;
            break;
        }
        seen = now;
    }
    assert!(
        quiet || side == Side::Upstream,
        "{}: still sending 10 minutes after the move",
        side.name()
    );
    controller.abort();
    if std::env::var_os("ZONE_DEBUG").is_some() {
        // What the events said, by reason and count, to see where requests went.
        let mut reasons: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for e in server.list(EVENTS) {
            let entry = reasons
                .entry(e["reason"].as_str().unwrap_or("?").to_string())
                .or_default();
            entry.0 += 1;
            entry.1 += e["count"].as_u64().unwrap_or(1);
        }
        eprintln!(
            "{}: events (objects, count) by reason: {reasons:?}",
            side.name()
        );
    }
    let running = moved.iter().filter(|p| sims.running(NS, p)).count();
    assert!(
        done,
        "{}: {running} of {} pods run again after {seconds:.0} s",
        side.name(),
        moved.len()
    );
    // No volume left reported on a fenced node.
    for n in 0..scale.fenced {
        let listed = &server.get(NODES, "", &node(n)).expect("a node")["status"]["volumesAttached"];
        assert!(
            listed.as_array().is_none_or(Vec::is_empty),
            "{}: node-{n:04} still lists {listed}",
            side.name()
        );
    }
    let requests: Vec<Served> = server.requests()[mark..]
        .iter()
        .filter(|r| r.user.as_deref() == Some(side.user()))
        .cloned()
        .collect();
    let mut by_kind = BTreeMap::new();
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    let mut too_many = 0;
    for r in &requests {
        *by_kind
            .entry(format!("{} {}", r.verb, r.resource))
            .or_insert(0) += 1;
        *per_second.entry(r.at.as_secs()).or_insert(0) += 1;
        too_many += usize::from(r.code == 429);
    }
    Report {
        side,
        moved: moved.len(),
        seconds,
        requests: requests.len(),
        by_kind,
        peak: per_second.values().copied().max().unwrap_or(0),
        too_many,
        quiet,
    }
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    let nodes = env("ZONE_NODES").unwrap_or(if test_mode { 30 } else { 1000 });
    let scale = Scale {
        nodes,
        volumes: env("ZONE_VOLUMES").unwrap_or(if test_mode { 3 } else { 30 }),
        fenced: env("ZONE_FENCED").unwrap_or(nodes / 3),
    };
    let wanted = std::env::var("ZONE_RUNS").ok();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "zone: {} nodes x {} volumes, {} fenced ({} pods move); client QPS {QPS} burst {BURST}, server 429 past {SERVER_QPS}/s",
        scale.nodes,
        scale.volumes,
        scale.fenced,
        scale.fenced * scale.volumes
    );
    let mut reports = Vec::new();
    for side in [Side::Ours, Side::Upstream] {
        if wanted
            .as_deref()
            .is_some_and(|w| !w.split(',').any(|s| s == side.name()))
        {
            continue;
        }
        let report = runtime.block_on(run(side, scale));
        println!(
            "{:>8}: {} pods moved in {:.1} s, {}{} requests (peak {}/s, {} 429s): {:?}",
            report.side.name(),
            report.moved,
            report.seconds,
            if report.quiet { "" } else { "at least " },
            report.requests,
            report.peak,
            report.too_many,
            report.by_kind
        );
        reports.push(report);
    }
    if let Some(ours) = reports.iter().find(|r| r.side == Side::Ours) {
        assert_eq!(ours.too_many, 0, "ours got 429s");
        assert!(
            ours.peak as f64 <= QPS + f64::from(BURST),
            "ours went past its rate bound: {}/s",
            ours.peak
        );
        if let Some(model) = reports.iter().find(|r| r.side == Side::Upstream) {
            println!(
                "requests: ours {}, the upstream model {}",
                ours.requests, model.requests
            );
            assert!(
                ours.requests <= model.requests,
                "ours sent more requests ({}) than the upstream model ({})",
                ours.requests,
                model.requests
            );
        }
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
}
