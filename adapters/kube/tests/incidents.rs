//! The seed incidents (`examples/scenarios/seed-00{0,2,4}-*.scn`) replayed through the
//! Kubernetes adapter: the controller runs with [`KubeStatusStore`] and
//! [`VolumeAttachmentBackend`] over one fake API server ([`Cluster`]: nodes, VolumeAttachments,
//! PersistentVolumes, a fake external-attacher), is fed by [`InformerState`] from the objects a
//! replay creates (so the inputs are the adapter's own mapping), and a kubelet simulation
//! writes `volumesInUse` (see `common/cluster.rs`). Events go to a [`MemoryRecorder`] and
//! through [`kube_events`]. Time is tokio's paused clock: minutes are virtual, runs are
//! deterministic.
//!
//! Each replay is one helper returning what happened; the test with the corrections asserts
//! the good outcome, and a second test runs the same helper with the matching upstream bug
//! switched back in ([`UpstreamBugs`]) and asserts the bad one, to show the replay bites.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use attach_detach::config::{Config, UpstreamBugs};
use attach_detach::controller::{Controller, ControllerHandle, MemoryRecorder, World};
use attach_detach::core::{Event, Input};
use attach_detach_kube::{
    CsiDrivers, CsiVolume, InformerState, Kube, KubeEvent, KubeStatusStore,
    VolumeAttachmentBackend, attachment_name, kube_events,
};
use http::Method;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::runtime::events::EventType;
use kube::runtime::watcher::Event as Watch;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use common::cluster::Cluster;
use common::fake_va::Attacher;

const DRIVER: &str = "hostpath.csi.k8s.io";
const HANDLE: &str = "disk-a";
const PV: &str = "pv-disk-a";
const CLAIM: &str = "data-disk-a";
const NS: &str = "default";
/// How often the kubelets post their status and the node informer looks.
const TICK: Duration = Duration::from_secs(1);

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NS, "name": name, "uid": format!("uid-{name}")},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
        "status": {"phase": "Running"},
    }))
    .expect("a pod")
}

fn claim() -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"namespace": NS, "name": CLAIM, "uid": "uid-claim"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": PV},
        "status": {"phase": "Bound"},
    }))
    .expect("a claim")
}

fn volume_object() -> PersistentVolume {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": PV, "uid": "uid-pv"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": DRIVER, "volumeHandle": HANDLE},
            "claimRef": {"namespace": NS, "name": CLAIM, "uid": "uid-claim"},
        },
        "status": {"phase": "Bound"},
    }))
    .expect("a PV")
}

/// One replay: the cluster, the controller, and what the informers and kubelets know.
struct Replay {
    cluster: Cluster,
    informers: InformerState,
    handle: ControllerHandle<Kube>,
    recorder: MemoryRecorder<Kube>,
    /// Pods by name (all in [`NS`]), as the pod informer last saw them.
    pods: BTreeMap<String, Pod>,
    volume: CsiVolume,
    nodes: Vec<String>,
    start: Instant,
}

impl Replay {
    /// The cluster with `nodes` Ready and the single-node volume bound to its claim, and a
    /// controller with `bugs` running on it, fed the PV, the claim and the nodes.
    async fn start(bugs: UpstreamBugs, nodes: &[&str]) -> Replay {
        let cluster = Cluster::new();
        for node in nodes {
            cluster.api.add_ready_node(node);
        }
        let volume = cluster
            .va
            .add_volume(PV, DRIVER, HANDLE, &["ReadWriteOnce"]);
        let client = cluster.client();
        let drivers = CsiDrivers::new();
        drivers.set(DRIVER, true);
        let backend = VolumeAttachmentBackend::new(client.clone(), drivers);
        let store = KubeStatusStore::new(client);
        let recorder = MemoryRecorder::new();
        let config = Config {
            upstream_bugs: bugs,
            ..Config::default()
        };
        let controller = Controller::new(config, Arc::new(backend), Arc::new(store), World::new())
            .expect("a controller")
            .with_recorder(Arc::new(recorder.clone()));
        let (handle, _task) = controller.spawn();
        let mut replay = Replay {
            cluster,
            informers: InformerState::new(),
            handle,
            recorder,
            pods: BTreeMap::new(),
            volume,
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            start: Instant::now(),
        };
        let inputs = replay.informers.volumes(Watch::Apply(volume_object()));
        replay.send(inputs).await;
        let inputs = replay.informers.claims(Watch::Apply(claim()));
        replay.send(inputs).await;
        replay.tick().await;
        replay
    }

    async fn send(&self, inputs: Vec<Input<Kube>>) {
        if inputs.is_empty() {
            return;
        }
        let refused = self
            .handle
            .send_all(inputs)
            .await
            .expect("a running controller");
        assert!(refused.is_empty(), "the core refused inputs: {refused:?}");
    }

    /// The pod informer sees `name` created on `node`.
    async fn add_pod(&mut self, name: &str, node: &str) {
        let pod = pod(name, node);
        self.pods.insert(name.to_owned(), pod.clone());
        let inputs = self.informers.pods(Watch::Apply(pod));
        self.send(inputs).await;
    }

    /// The pod informer sees `name` deleted (gracefully or by force: either way it is gone).
    async fn delete_pod(&mut self, name: &str) {
        let pod = self.pods.remove(name).expect("a known pod");
        let inputs = self.informers.pods(Watch::Delete(pod));
        self.send(inputs).await;
    }

    /// The volumes the pods on `node` need.
    fn needed(&self, node: &str) -> BTreeSet<String> {
        self.pods
            .values()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .map(|_| self.volume.unique_name())
            .collect()
    }

    /// Every kubelet posts its status, the node informer passes on what changed; then one
    /// tick of virtual time.
    async fn tick(&mut self) {
        for node in self.nodes.clone() {
            self.cluster.kubelet_sync(&node, &self.needed(&node));
            self.observe_node(&node).await;
        }
        sleep(TICK).await;
    }

    /// The node informer sees `node` as the API server holds it.
    async fn observe_node(&mut self, node: &str) {
        let object: Node =
            serde_json::from_value(self.cluster.api.node(node).expect("a node")).expect("a node");
        let inputs = self.informers.nodes(Watch::Apply(object));
        self.send(inputs).await;
    }

    /// Ticks until `done` holds, for at most `limit`; whether it did.
    async fn until(&mut self, limit: Duration, mut done: impl FnMut(&Replay) -> bool) -> bool {
        let end = Instant::now() + limit;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            self.tick().await;
        }
    }

    /// Virtual time since the replay started.
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Whether `node`'s `status.volumesAttached` lists the volume.
    fn reported(&self, node: &str) -> bool {
        self.cluster
            .attached(node)
            .contains(&self.volume.unique_name())
    }

    /// Whether `node`'s kubelet has the volume mounted (`volumesInUse`).
    fn mounted(&self, node: &str) -> bool {
        self.cluster
            .in_use(node)
            .contains(&self.volume.unique_name())
    }

    /// The VolumeAttachment of the volume on `node`.
    fn attachment(&self, node: &str) -> Option<VolumeAttachment> {
        let name = attachment_name(HANDLE, DRIVER, node);
        self.cluster
            .va
            .attachments()
            .into_iter()
            .find(|va| va.metadata.name.as_deref() == Some(name.as_str()))
    }

    /// Whether the volume's VolumeAttachment on `node` is attached and not being deleted.
    fn attached(&self, node: &str) -> bool {
        self.attachment(node).is_some_and(|va| {
            va.metadata.deletion_timestamp.is_none()
                && va.status.as_ref().is_some_and(|s| s.attached)
        })
    }

    /// Whether the volume's VolumeAttachment on `node` is being deleted, or gone.
    fn detaching(&self, node: &str) -> bool {
        self.attachment(node)
            .is_none_or(|va| va.metadata.deletion_timestamp.is_some())
    }

    /// Every event the controller recorded, as Kubernetes Events.
    fn kube_events(&self) -> Vec<KubeEvent> {
        let index = self.informers.index();
        self.recorder
            .events()
            .iter()
            .flat_map(|e| kube_events(e, &index))
            .collect()
    }

    /// Whether a pod on `node` gets running within `limit`: its volume attached, reported on
    /// the node, and mounted.
    async fn running(&mut self, node: &str, limit: Duration) -> bool {
        self.until(limit, |r| {
            r.attached(node) && r.reported(node) && r.mounted(node)
        })
        .await
    }
}

fn bugs(edit: impl FnOnce(&mut UpstreamBugs)) -> UpstreamBugs {
    let mut bugs = UpstreamBugs::NONE;
    edit(&mut bugs);
    bugs
}

// ---------------------------------------------------------------------------------------------
// Seed 000: a failed detach, and the pod comes back to the same node.

/// What seed 000's replay saw.
#[derive(Debug)]
struct Seed000 {
    /// While the external-attacher still failed the detach: whether n1's `volumesAttached`
    /// listed the volume again (so kubelet could mount it for web-1), and when first (after
    /// web-1 came).
    reported_while_failing: Option<Duration>,
    /// Whether kubelet mounted it for web-1 while the detach still failed.
    mounted_while_failing: bool,
    /// Whether the detach failure became a Kubernetes event.
    detach_failed_event: bool,
    /// After the attacher recovered: a live VolumeAttachment on n1, attached, and the volume
    /// in n1's `volumesAttached`.
    settled: bool,
}

/// How the detach fails.
#[derive(Clone, Copy, Debug)]
enum DetachFailure {
    /// The external-attacher's ControllerUnpublish fails: the object is deleted and stays with
    /// `status.detachError`; the adapter answers the detach as uncertain (the attacher keeps
    /// trying, and the object will go once it succeeds).
    Attacher,
    /// An admission webhook refuses the DELETE (403): nothing was done, the object stays as
    /// it was; the adapter answers the detach as transient.
    DeleteRefused,
}

/// How long the detach keeps failing after web-1 came: longer than a sync period (60 s),
/// since after an uncertain detach the core reports the volume again once a verify settles it.
const FAILING: Duration = Duration::from_secs(2 * 60);

/// Upstream 49053/72181/88565. web-0 on n1 uses the volume; detaches start failing
/// (`failure`); web-0 is deleted (kubelet unmounts, the volume leaves the status, the detach
/// fails); web-1 lands on n1 with the same volume. For [`FAILING`] the detach keeps failing,
/// then it works again.
///
/// With the external-attacher failing, the object is deleted and the attacher retries until it
/// is gone: that detach cannot be taken back, so once the attacher recovers a verify finds the
/// volume detached and it is attached (and reported) anew.
async fn seed_000(bugs: UpstreamBugs, failure: DetachFailure) -> Seed000 {
    let mut r = Replay::start(bugs, &["n1", "n2"]).await;
    r.add_pod("web-0", "n1").await;
    assert!(r.running("n1", Duration::from_secs(5)).await);

    match failure {
        DetachFailure::Attacher => r.cluster.va.set_attacher(Attacher {
            detach_error: Some(
                "rpc error: code = Internal desc = ControllerUnpublishVolume failed".into(),
            ),
            ..Attacher::default()
        }),
        DetachFailure::DeleteRefused => r.cluster.refuse_attachment_deletes(true),
    }
    r.delete_pod("web-0").await;
    // The detach was tried and failed (the volume left the status first).
    let failed = |r: &Replay| {
        r.recorder
            .events()
            .iter()
            .any(|e| matches!(e, Event::DetachFailed { .. }))
    };
    assert!(
        r.until(Duration::from_secs(10), failed).await,
        "the detach was never tried"
    );
    let detach_failed_event = r.kube_events().iter().any(|e| {
        e.reason == "FailedDetachVolume"
            && e.note.starts_with(&format!(
                "DetachVolume.Detach failed for volume \"{PV}\" : "
            ))
    });
    // The volume left n1's status before the detach was tried (C5).
    match failure {
        // The object was deleted: the volume stays unreported until a verify settles it.
        DetachFailure::Attacher => assert!(
            !r.reported("n1"),
            "the volume left n1's status before the detach"
        ),
        // Refused, the detach changed nothing, and the volume is reported again at once
        // (it may already be by now): what n1's status held when the webhook refused it.
        DetachFailure::DeleteRefused => {
            let seen = r.cluster.lists_at_refused_deletes();
            let first = seen.first().expect("a DELETE was refused");
            assert!(
                !first["n1"].contains(&r.volume.unique_name()),
                "the volume left n1's status before the detach: {first:?}"
            );
        }
    }
    r.tick().await;
    r.add_pod("web-1", "n1").await;

    let added = r.now();
    let mut reported_while_failing = None;
    let mut mounted_while_failing = false;
    while r.now() < added + FAILING {
        if reported_while_failing.is_none() && r.reported("n1") {
            reported_while_failing = Some(r.now() - added);
        }
        mounted_while_failing |= r.mounted("n1");
        r.tick().await;
    }

    r.cluster.va.set_attacher(Attacher::default());
    r.cluster.refuse_attachment_deletes(false);
    let settled = r
        .until(Duration::from_secs(3 * 60), |r| {
            r.attached("n1") && r.reported("n1") && r.mounted("n1")
        })
        .await;
    Seed000 {
        reported_while_failing,
        mounted_while_failing,
        detach_failed_event,
        settled,
    }
}

#[tokio::test(start_paused = true)]
async fn seed_000_a_refused_detach_is_reported_again_for_the_returning_pod() {
    let outcome = seed_000(UpstreamBugs::NONE, DetachFailure::DeleteRefused).await;
    assert!(outcome.detach_failed_event, "{outcome:?}");
    // At once: the object was never deleted, the volume is attached.
    let at = outcome.reported_while_failing.expect("reported again");
    assert!(at <= Duration::from_secs(2), "{outcome:?}");
    assert!(outcome.mounted_while_failing, "{outcome:?}");
    assert!(outcome.settled, "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn seed_000_bites_with_upstreams_lost_report() {
    let outcome = seed_000(
        bugs(|b| b.c1_lose_report_on_failed_detach = true),
        DetachFailure::DeleteRefused,
    )
    .await;
    assert!(outcome.detach_failed_event, "{outcome:?}");
    // web-1 waits: n1's status never lists the volume again, although it stays attached.
    assert_eq!(outcome.reported_while_failing, None, "{outcome:?}");
    assert!(!outcome.mounted_while_failing, "{outcome:?}");
}

/// A VolumeAttachment's deletion cannot be cancelled: while the external-attacher fails it,
/// it may still land at any moment. So the volume is neither listed in n1's status nor
/// mounted for the returning pod until it has (a verify that finds the object settles
/// nothing, and the adapter refuses an attach while the object is being deleted); once the
/// attacher recovers, the deletion lands, a new attach runs, and web-1 runs.
#[tokio::test(start_paused = true)]
async fn seed_000_a_failing_external_attacher_holds_the_volume_until_its_deletion_lands() {
    let outcome = seed_000(UpstreamBugs::NONE, DetachFailure::Attacher).await;
    assert!(outcome.detach_failed_event, "{outcome:?}");
    assert_eq!(outcome.reported_while_failing, None, "{outcome:?}");
    assert!(!outcome.mounted_while_failing, "{outcome:?}");
    assert!(outcome.settled, "{outcome:?}");
}

/// Through this adapter a `detachError` makes the attachment uncertain, which holds the volume
/// until the deletion lands whatever C1 says: the bug needs a detach that failed for certain
/// (see the refused DELETE above).
#[tokio::test(start_paused = true)]
async fn seed_000_c1_does_not_bite_through_an_uncertain_detach() {
    let corrected = seed_000(UpstreamBugs::NONE, DetachFailure::Attacher).await;
    let bug = seed_000(
        bugs(|b| b.c1_lose_report_on_failed_detach = true),
        DetachFailure::Attacher,
    )
    .await;
    assert_eq!(
        bug.reported_while_failing, corrected.reported_while_failing,
        "{bug:?}"
    );
    assert!(bug.settled, "{bug:?}");
}

// ---------------------------------------------------------------------------------------------
// Seed 002: the pod returns quickly while another writer updates the node.

/// What seed 002's replay saw.
#[derive(Debug)]
struct Seed002 {
    /// When the volume was back in n1's `volumesAttached` after db-1 came.
    reappeared: Option<Duration>,
    /// When, after that, it was seen missing again (within two virtual minutes).
    lost: Option<Duration>,
    /// The stale writer's patches the API server refused (a failed `test`).
    stale_refused: usize,
    /// Those it applied while they changed the list.
    stale_applied: usize,
}

/// A second writer of `volumesAttached` working from a copy of the node as it was `LAG`
/// ago: an old leader's node status updater still running off a lagging informer, writing
/// its copy's list back. It tests the field against its copy, as this adapter's store does.
struct StaleWriter {
    history: VecDeque<(Instant, Value)>,
}

const LAG: Duration = Duration::from_secs(5);

impl StaleWriter {
    /// Looks at the node, and writes back the list it saw `LAG` ago; whether the server
    /// applied it (`None`: nothing to write, its copy is current).
    fn step(&mut self, cluster: &Cluster, node: &str) -> Option<bool> {
        let now = Instant::now();
        let current = cluster.api.node(node).expect("a node")["status"]["volumesAttached"].clone();
        self.history.push_back((now, current.clone()));
        while self
            .history
            .get(1)
            .is_some_and(|(at, _)| now.duration_since(*at) >= LAG)
        {
            self.history.pop_front();
        }
        let (_, copy) = self.history.front().cloned()?;
        if copy == current {
            return None;
        }
        let list = if copy.is_null() {
            json!([])
        } else {
            copy.clone()
        };
        let patch = json!([
            {"op": "test", "path": "/status/volumesAttached", "value": copy},
            {"op": "add", "path": "/status/volumesAttached", "value": list},
        ]);
        let (code, _) = cluster.api.answer(
            &Method::PATCH,
            &format!("/api/v1/nodes/{node}/status"),
            "",
            Some("application/json-patch+json"),
            &serde_json::to_vec(&patch).expect("JSON"),
        );
        Some(code == 200)
    }
}

/// Upstream 122413. db-0 on n1; it is deleted, the volume leaves n1's status and is
/// detached; one second later db-1 lands on n1 with the same volume, while kubelet posts
/// n1's status every second and, if `stale_writer`, a second writer writes back 5 s old
/// lists. `mutant_api` makes the API server skip JSON-patch `test`s.
async fn seed_002(bugs: UpstreamBugs, stale_writer: bool, mutant_api: bool) -> Seed002 {
    let mut r = Replay::start(bugs, &["n1"]).await;
    r.cluster.api.ignore_test_ops(mutant_api);
    r.add_pod("db-0", "n1").await;
    assert!(r.running("n1", Duration::from_secs(10)).await);
    r.delete_pod("db-0").await;
    assert!(
        r.until(Duration::from_secs(30), |r| !r.reported("n1")
            && r.attachment("n1").is_none())
            .await,
        "db-0's volume was not detached"
    );
    let mut writer = StaleWriter {
        history: VecDeque::new(),
    };
    let (mut stale_refused, mut stale_applied) = (0, 0);
    let mut step = |r: &Replay, writer: &mut StaleWriter| {
        if stale_writer {
            match writer.step(&r.cluster, "n1") {
                Some(true) => stale_applied += 1,
                Some(false) => stale_refused += 1,
                None => {}
            }
        }
    };
    step(&r, &mut writer);
    r.tick().await;
    r.add_pod("db-1", "n1").await;

    let mut reappeared = None;
    let mut lost = None;
    let end = r.now() + Duration::from_secs(2 * 60);
    while r.now() < end {
        step(&r, &mut writer);
        let reported = r.reported("n1");
        match (reappeared, reported) {
            (None, true) => reappeared = Some(r.now()),
            (Some(_), false) if lost.is_none() => lost = Some(r.now()),
            _ => {}
        }
        r.tick().await;
    }
    Seed002 {
        reappeared,
        lost,
        stale_refused,
        stale_applied,
    }
}

#[tokio::test(start_paused = true)]
async fn seed_002_the_returning_pods_volume_reappears_and_stays() {
    let outcome = seed_002(UpstreamBugs::NONE, true, false).await;
    assert!(outcome.reappeared.is_some(), "{outcome:?}");
    assert_eq!(outcome.lost, None, "{outcome:?}");
    // The stale writer tried, and the field's `test` refused it.
    assert!(outcome.stale_refused > 0, "{outcome:?}");
    assert_eq!(outcome.stale_applied, 0, "{outcome:?}");
}

/// C6 reads the "cache" the driver is given (`Controller::with_status_diff_source`); this
/// adapter has none (the store always reads the API server), so with the switch on the core
/// reads the store itself, which is never stale: the incident cannot happen through it.
#[tokio::test(start_paused = true)]
async fn seed_002_c6_cannot_bite_without_a_cache_the_adapter_does_not_have() {
    let outcome = seed_002(bugs(|b| b.c6_diff_against_stale_read = true), false, false).await;
    assert!(outcome.reappeared.is_some(), "{outcome:?}");
    assert_eq!(outcome.lost, None, "{outcome:?}");
}

/// What protects the list here is the field-level compare-and-set: with an API server that
/// skips `test`s, the stale writer's list lands and the volume is lost again.
#[tokio::test(start_paused = true)]
async fn seed_002_bites_without_the_fields_compare_and_set() {
    let outcome = seed_002(UpstreamBugs::NONE, true, true).await;
    assert!(outcome.reappeared.is_some(), "{outcome:?}");
    assert!(outcome.stale_applied > 0, "{outcome:?}");
    assert!(outcome.lost.is_some(), "{outcome:?}");
}

// ---------------------------------------------------------------------------------------------
// Seed 004: a node dies with the volume mounted.

/// What seed 004's replay saw.
#[derive(Debug)]
struct Seed004 {
    /// The Multi-Attach event as Kubernetes would get it (for db-1).
    multi_attach: Option<KubeEvent>,
    /// When n1's VolumeAttachment was first seen deleted (or gone) before n1 was fenced.
    n1_deleted_unfenced: Option<Duration>,
    /// After the fence: n1's object gone, n2's attached and the volume in n2's
    /// `volumesAttached`.
    moved: bool,
    /// Whether n1's status still lists the volume after the move.
    n1_still_reported: bool,
}

/// db-0 on n1 with the volume mounted; n1 crashes (Ready False, volumesInUse frozen); db-0 is
/// force-deleted and db-1 lands on n2. Ten virtual minutes later the out-of-service taint is
/// put on n1.
async fn seed_004(bugs: UpstreamBugs) -> Seed004 {
    let mut r = Replay::start(bugs, &["n1", "n2"]).await;
    r.add_pod("db-0", "n1").await;
    assert!(r.running("n1", Duration::from_secs(5)).await);
    r.cluster.crash("n1");
    for _ in 0..10 {
        r.tick().await;
    }
    assert!(r.mounted("n1"), "a crashed node's volumesInUse is frozen");
    r.delete_pod("db-0").await;
    r.add_pod("db-1", "n2").await;

    let multi = |r: &Replay| {
        r.kube_events()
            .into_iter()
            .find(|e| e.reason == "FailedAttachVolume" && e.note.contains("Multi-Attach"))
    };
    r.until(Duration::from_secs(10), |r| multi(r).is_some())
        .await;
    let multi_attach = multi(&r);

    let fence_at = r.now() + Duration::from_secs(10 * 60);
    let mut n1_deleted_unfenced = None;
    while r.now() < fence_at {
        if n1_deleted_unfenced.is_none() && r.detaching("n1") {
            n1_deleted_unfenced = Some(r.now());
        }
        r.tick().await;
    }
    r.cluster.fence("n1");
    let moved = r
        .until(Duration::from_secs(2 * 60), |r| {
            r.attachment("n1").is_none() && r.attached("n2") && r.reported("n2")
        })
        .await;
    Seed004 {
        multi_attach,
        n1_deleted_unfenced,
        moved,
        n1_still_reported: r.reported("n1"),
    }
}

fn assert_upstreams_multi_attach(outcome: &Seed004) {
    let event = outcome.multi_attach.as_ref().expect("a Multi-Attach event");
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(
        event.note,
        format!(
            "Multi-Attach error for volume \"{PV}\" Volume is already exclusively attached to \
             one node and can't be attached to another"
        )
    );
    assert_eq!(event.regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(event.regarding.name.as_deref(), Some("db-1"));
    assert_eq!(event.regarding.uid.as_deref(), Some("uid-db-1"));
}

#[tokio::test(start_paused = true)]
async fn seed_004_a_dead_nodes_volume_moves_only_once_it_is_fenced() {
    let outcome = seed_004(UpstreamBugs::NONE).await;
    assert_upstreams_multi_attach(&outcome);
    assert_eq!(outcome.n1_deleted_unfenced, None, "{outcome:?}");
    assert!(outcome.moved, "{outcome:?}");
    assert!(!outcome.n1_still_reported, "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn seed_004_bites_with_upstreams_unfenced_force_detach() {
    let outcome = seed_004(bugs(|b| b.c3_force_detach_unfenced = true)).await;
    assert_upstreams_multi_attach(&outcome);
    // Force-detached from a node that may still be writing, after the 6 min unmount wait.
    let at = outcome.n1_deleted_unfenced.expect("a force detach");
    assert!(at < Duration::from_secs(10 * 60), "{outcome:?}");
}
