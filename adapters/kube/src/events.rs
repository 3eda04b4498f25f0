//! The controller's events as Kubernetes Events, where `kubectl describe pod` shows them.
//!
//! [`kube_events`] is the mapping, pure: a core [`Event`] becomes zero or more [`KubeEvent`]s
//! (reason, type, message, the object it is about). [`KubeEventRecorder`] is the controller's
//! [`EventRecorder`]: `record` runs on the controller's loop and must not block, so it only
//! puts the mapped events in a bounded queue; a task publishes them through kube-runtime's
//! [`Recorder`] (the `events.k8s.io/v1` API, with its series deduplication). A full queue
//! drops the event and counts it ([`KubeEventRecorder::dropped`]): losing an event is better
//! than stalling attaches and detaches behind a slow API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use attach_detach::controller::EventRecorder;
use attach_detach::core::Event;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as Note, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::domain::Kube;
use crate::informers::{ObjectIndex, PodRef};

/// The reporting controller upstream's events carry (`source.component`): alerts and
/// dashboards that filter on it keep working with this controller in its place.
pub const REPORTING_CONTROLLER: &str = "attachdetach-controller";

/// The most an event's note may hold (the Events API refuses more than 1 kB).
const NOTE_LIMIT: usize = 1024;

/// One Kubernetes Event to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeEvent {
    /// The object it is about (`regarding`; `involvedObject` in `core/v1`).
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub type_: EventType,
    /// The machine-readable reason.
    pub reason: &'static str,
    /// The human-readable message (`note`).
    pub note: String,
    /// What the controller was doing: `Attach`, `Detach`, `Wait` or `Call`.
    pub action: &'static str,
}

impl KubeEvent {
    fn note(&self) -> Note {
        Note {
            type_: self.type_,
            reason: self.reason.to_owned(),
            note: Some(self.note.clone()),
            action: self.action.to_owned(),
            secondary: None,
        }
    }
}

fn pod_ref(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        // `kubectl describe` selects events by uid too: without it they would not show.
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..ObjectReference::default()
    }
}

/// A pod by key, with its uid if the informers know it.
fn pod_by_key(key: &str, index: &ObjectIndex) -> PodRef {
    index.pod(key).unwrap_or_else(|| {
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        PodRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: String::new(),
        }
    })
}

fn node_ref(node: &str, index: &ObjectIndex) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        uid: index.node_uid(node),
        ..ObjectReference::default()
    }
}

/// Upstream's Multi-Attach message for `waiting`, given the pods that hold the volume.
fn multi_attach_message(pv: &str, waiting: &PodRef, users: &[PodRef]) -> String {
    let suffix = if users.is_empty() {
        "Volume is already exclusively attached to one node and can't be attached to another"
            .to_owned()
    } else {
        let local: Vec<&str> = users
            .iter()
            .filter(|p| p.namespace == waiting.namespace)
            .map(|p| p.name.as_str())
            .collect();
        let others = users.len() - local.len();
        if local.is_empty() {
            format!("Volume is already used by {others} pod(s) in different namespaces")
        } else if others > 0 {
            format!(
                "Volume is already used by pod(s) {} and {others} pod(s) in different namespaces",
                local.join(", ")
            )
        } else {
            format!("Volume is already used by pod(s) {}", local.join(", "))
        }
    };
    format!("Multi-Attach error for volume \"{pv}\" {suffix}")
}

/// Cuts a note to the Events API's limit, on a character boundary.
fn limit(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

/// The Kubernetes Events a core event becomes.
///
/// `index` names what the core event does not carry: the PV behind a unique volume name, the
/// pods using a volume on a node, the uids of pods and nodes. An event with nothing to be
/// about (a timed-out listing) becomes none; it is in the controller's log anyway.
///
/// # Reasons
///
/// | core event | reason | type | about | message |
/// |---|---|---|---|---|
/// | [`Event::MultiAttach`] | `FailedAttachVolume` (upstream) | Warning | each waiting pod | upstream's Multi-Attach messages, below |
/// | [`Event::AttachSucceeded`] | `SuccessfulAttachVolume` (upstream) | Normal | the pods on the node that use it | `AttachVolume.Attach succeeded for volume "<pv>"` |
/// | [`Event::AttachFailed`] | `FailedAttachVolume` (upstream) | Warning | the same | `AttachVolume.Attach failed for volume "<pv>" : <error>` |
/// | [`Event::DetachSucceeded`] | `SuccessfulDetachVolume` | Normal | the node | `DetachVolume.Detach succeeded for volume "<pv>"` |
/// | the same, forced | `ForcedDetachVolume` | Warning | the node | the same, `(forced: <reason>)` |
/// | [`Event::DetachFailed`] | `FailedDetachVolume` | Warning | the node | `DetachVolume.Detach failed for volume "<pv>" : <error>` |
/// | [`Event::DetachBlocked`] | `DetachBlocked` | Warning | the node | what would unblock it |
/// | [`Event::WaitingForUnmount`] | `WaitingForUnmount` | Normal | the node | what the fresh read showed |
/// | [`Event::WorkloadWaiting`] | `WorkloadWaiting` | Warning | the pod | what it waits for |
/// | [`Event::CallTimedOut`] | `CallTimedOut` | Warning | the node (none for a listing) | the call and its deadline |
/// | [`Event::ClaimInDoubt`] | `ClaimInDoubt` | Warning | each node named | which nodes may have the volume mounted |
///
/// Upstream's controller posts events on pods only; detach events have no pod left to go to
/// (the pod is gone when its volume is detached), so ours go to the Node. Our own reasons are
/// the core's [`Event::reason`]. `<pv>` is the PersistentVolume's name, as upstream's messages
/// name volumes (the unique name when the PV is not known). Upstream's success message ends
/// with a space (its `%q %v` with an empty suffix); ours does not.
///
/// The Multi-Attach messages are upstream's, per waiting pod:
/// - no pod is known to use the volume where it is attached:
///   `Multi-Attach error for volume "<pv>" Volume is already exclusively attached to one node
///   and can't be attached to another`;
/// - otherwise `Multi-Attach error for volume "<pv>" Volume is already used by pod(s) a, b`,
///   naming only pods of the waiting pod's namespace and counting the others (`... and 2
///   pod(s) in different namespaces`, or `Volume is already used by 2 pod(s) in different
///   namespaces`): a namespace's users must not learn other namespaces' pod names.
pub fn kube_events(event: &Event<Kube>, index: &ObjectIndex) -> Vec<KubeEvent> {
    let pv = |volume: &String| index.pv_name(volume).unwrap_or_else(|| volume.clone());
    let warning = |regarding, reason, note, action| KubeEvent {
        regarding,
        type_: EventType::Warning,
        reason,
        note: limit(note),
        action,
    };
    let normal = |regarding, reason, note, action| KubeEvent {
        type_: EventType::Normal,
        ..warning(regarding, reason, note, action)
    };
    // The pods on `node` that use `volume`, or the node itself if none is known.
    let users_or_node = |volume: &String, node: &String| -> Vec<ObjectReference> {
        let pods = index.pods_using(volume, node);
        if pods.is_empty() {
            vec![node_ref(node, index)]
        } else {
            pods.iter().map(pod_ref).collect()
        }
    };
    match event {
        Event::MultiAttach {
            volume,
            node,
            workloads,
            holders,
        } => {
            let pv = pv(volume);
            let users: Vec<PodRef> = holders
                .iter()
                .flat_map(|h| &h.workloads)
                .map(|key| pod_by_key(key, index))
                .collect();
            let waiting: Vec<PodRef> = if workloads.is_empty() {
                index.pods_using(volume, node)
            } else {
                workloads.iter().map(|key| pod_by_key(key, index)).collect()
            };
            waiting
                .iter()
                .map(|pod| {
                    warning(
                        pod_ref(pod),
                        "FailedAttachVolume",
                        multi_attach_message(&pv, pod, &users),
                        "Attach",
                    )
                })
                .collect()
        }
        Event::AttachSucceeded { volume, node } => {
            let note = format!(
                "AttachVolume.Attach succeeded for volume \"{}\"",
                pv(volume)
            );
            users_or_node(volume, node)
                .into_iter()
                .map(|r| normal(r, "SuccessfulAttachVolume", note.clone(), "Attach"))
                .collect()
        }
        Event::AttachFailed {
            volume,
            node,
            message,
        } => {
            let note = format!(
                "AttachVolume.Attach failed for volume \"{}\" : {message}",
                pv(volume)
            );
            users_or_node(volume, node)
                .into_iter()
                .map(|r| warning(r, "FailedAttachVolume", note.clone(), "Attach"))
                .collect()
        }
        Event::DetachSucceeded {
            volume,
            node,
            force,
        } => {
            let mut note = format!(
                "DetachVolume.Detach succeeded for volume \"{}\"",
                pv(volume)
            );
            match force {
                None => vec![normal(
                    node_ref(node, index),
                    event.reason(),
                    note,
                    "Detach",
                )],
                Some(reason) => {
                    note.push_str(&format!(" (forced: {})", reason.as_str()));
                    vec![warning(
                        node_ref(node, index),
                        event.reason(),
                        note,
                        "Detach",
                    )]
                }
            }
        }
        Event::DetachFailed {
            volume,
            node,
            message,
        } => vec![warning(
            node_ref(node, index),
            event.reason(),
            format!(
                "DetachVolume.Detach failed for volume \"{}\" : {message}",
                pv(volume)
            ),
            "Detach",
        )],
        Event::DetachBlocked {
            volume,
            node,
            reason,
        } => vec![warning(
            node_ref(node, index),
            event.reason(),
            format!(
                "DetachVolume.Detach blocked for volume \"{}\": {reason}",
                pv(volume)
            ),
            "Detach",
        )],
        Event::WaitingForUnmount {
            volume,
            node,
            reason,
        } => vec![normal(
            node_ref(node, index),
            event.reason(),
            format!(
                "DetachVolume.Detach waits for volume \"{}\" to be unmounted: {reason}",
                pv(volume)
            ),
            "Detach",
        )],
        Event::WorkloadWaiting { workload, .. } => vec![warning(
            pod_ref(&pod_by_key(workload, index)),
            event.reason(),
            event.to_string(),
            "Wait",
        )],
        Event::CallTimedOut {
            node: Some(node), ..
        } => vec![warning(
            node_ref(node, index),
            event.reason(),
            event.to_string(),
            "Call",
        )],
        Event::ClaimInDoubt { volume, nodes } => {
            let note = format!(
                "Volume \"{}\" may be mounted on any of nodes {} and no node's volumesAttached lists it: it is granted to none of them until all but one stop using it",
                pv(volume),
                nodes.join(", ")
            );
            nodes
                .iter()
                .map(|node| {
                    warning(
                        node_ref(node, index),
                        event.reason(),
                        note.clone(),
                        "Attach",
                    )
                })
                .collect()
        }
        // A timed-out listing is about no object; events the core adds later are logged only
        // until they are mapped here.
        _ => Vec::new(),
    }
}

/// The controller's [`EventRecorder`] for Kubernetes: maps each core event with
/// [`kube_events`] and queues the result for a task that publishes it.
///
/// `record` runs on the controller's loop and must not block: it only `try_send`s into a
/// bounded queue. A full queue drops the event and counts it ([`dropped`](Self::dropped)):
/// losing an event is better than stalling attaches and detaches behind a slow API server.
///
/// ```no_run
/// # async fn demo(client: kube::Client, index: attach_detach_kube::ObjectIndex) {
/// use std::sync::Arc;
/// use attach_detach_kube::{KubeEventRecorder, REPORTING_CONTROLLER};
/// let (recorder, publisher) =
///     KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), index, 1024);
/// // Controller::new(..).with_recorder(Arc::new(recorder.clone()))
/// # let _ = (recorder, publisher);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct KubeEventRecorder {
    tx: mpsc::Sender<KubeEvent>,
    index: ObjectIndex,
    dropped: Arc<AtomicU64>,
}

impl KubeEventRecorder {
    /// A recorder whose events go to the returned queue, holding at most `capacity` (at least
    /// one). The caller drains it: [`publish`] does, and tests read it directly.
    pub fn new(index: ObjectIndex, capacity: usize) -> (Self, mpsc::Receiver<KubeEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let recorder = KubeEventRecorder {
            tx,
            index,
            dropped: Arc::default(),
        };
        (recorder, rx)
    }

    /// A recorder and the task that publishes its events through kube-runtime's [`Recorder`]
    /// as `reporter` (upstream's is [`REPORTING_CONTROLLER`]). The task ends once every clone
    /// of the recorder is dropped and the queue is drained.
    pub fn spawn(
        client: Client,
        reporter: Reporter,
        index: ObjectIndex,
        capacity: usize,
    ) -> (Self, JoinHandle<()>) {
        let (recorder, rx) = Self::new(index, capacity);
        let task = tokio::spawn(publish(Recorder::new(client, reporter), rx));
        (recorder, task)
    }

    /// How many events were dropped because the queue was full (or the publisher gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventRecorder<Kube> for KubeEventRecorder {
    fn record(&self, event: &Event<Kube>) {
        for kube_event in kube_events(event, &self.index) {
            if let Err(error) = self.tx.try_send(kube_event) {
                let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                // Logged at the first drop and every 1000th: a flood must not flood the log.
                if total == 1 || total.is_multiple_of(1000) {
                    warn!(dropped = total, %error, "event queue full: Kubernetes events dropped");
                }
            }
        }
    }
}

/// Publishes every queued event through `recorder` until the queue closes. A refused event is
/// logged and skipped: events are best effort.
pub async fn publish(recorder: Recorder, mut queue: mpsc::Receiver<KubeEvent>) {
    while let Some(event) = queue.recv().await {
        match recorder.publish(&event.note(), &event.regarding).await {
            Ok(()) => debug!(reason = event.reason, "event published"),
            Err(error) => {
                warn!(%error, reason = event.reason, object = ?event.regarding.name, "event not published")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use attach_detach::core::{ForceReason, Holder, Input};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::watcher;

    use super::*;
    use crate::informers::InformerState;

    const VOL: &str = "kubernetes.io/csi/d^h1";

    /// An index that knows PV `pv-1` (unique name `VOL`), node `n1` and pods `ns/a`
    /// (using the volume on n1) and `other/b`.
    fn index() -> ObjectIndex {
        let mut state = InformerState::new();
        let index = state.index();
        let pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(
            serde_json::json!({
                "metadata": {"name": "pv-1"},
                "spec": {"accessModes": ["ReadWriteOnce"], "csi": {"driver": "d", "volumeHandle": "h1"},
                         "claimRef": {"namespace": "ns", "name": "c", "uid": "uid-c"}}
            }),
        )
        .unwrap();
        state.volumes(watcher::Event::Apply(pv));
        let pvc = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c"},
            "spec": {"volumeName": "pv-1"},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        state.claims(watcher::Event::Apply(pvc));
        let node: Node = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "n1", "uid": "uid-n1"}}),
        )
        .unwrap();
        state.nodes(watcher::Event::Apply(node));
        for (ns, name, claim) in [("ns", "a", "c"), ("other", "b", "none")] {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
                "spec": {"nodeName": "n1", "containers": [],
                         "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": "Running"}
            }))
            .unwrap();
            let inputs = state.pods(watcher::Event::Apply(pod));
            assert!(matches!(inputs[0], Input::WorkloadScheduled { .. }));
        }
        index
    }

    fn pod(namespace: &str, name: &str, uid: Option<&str>) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: uid.map(str::to_owned),
            ..ObjectReference::default()
        }
    }

    fn node(name: &str, uid: Option<&str>) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.into()),
            uid: uid.map(str::to_owned),
            ..ObjectReference::default()
        }
    }

    /// (reason, type, note, regarding) of each event.
    fn summary(event: Event<Kube>) -> Vec<(&'static str, EventType, String, ObjectReference)> {
        kube_events(&event, &index())
            .into_iter()
            .map(|e| (e.reason, e.type_, e.note, e.regarding))
            .collect()
    }

    fn multi_attach(workloads: &[&str], holders: &[&str]) -> Event<Kube> {
        Event::MultiAttach {
            volume: VOL.into(),
            node: "n2".into(),
            workloads: workloads.iter().map(|w| w.to_string()).collect(),
            holders: vec![Holder {
                node: "n1".into(),
                workloads: holders.iter().map(|w| w.to_string()).collect(),
            }],
        }
    }

    #[test]
    fn multi_attach_without_known_users_is_upstreams_exclusive_message() {
        assert_eq!(
            summary(multi_attach(&["ns/w"], &[])),
            vec![(
                "FailedAttachVolume",
                EventType::Warning,
                "Multi-Attach error for volume \"pv-1\" Volume is already exclusively attached to one node and can't be attached to another".into(),
                pod("ns", "w", None),
            )]
        );
    }

    #[test]
    fn multi_attach_names_users_of_the_waiting_pods_namespace_only() {
        let events = summary(multi_attach(&["ns/w", "third/x"], &["ns/a", "other/b"]));
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].2,
            "Multi-Attach error for volume \"pv-1\" Volume is already used by pod(s) a and 1 pod(s) in different namespaces"
        );
        assert_eq!(events[0].3, pod("ns", "w", None));
        assert_eq!(
            events[1].2,
            "Multi-Attach error for volume \"pv-1\" Volume is already used by 2 pod(s) in different namespaces"
        );
        assert_eq!(
            summary(multi_attach(&["ns/w"], &["ns/a"]))[0].2,
            "Multi-Attach error for volume \"pv-1\" Volume is already used by pod(s) a"
        );
    }

    #[test]
    fn attach_results_go_to_the_pods_using_the_volume_on_the_node() {
        assert_eq!(
            summary(Event::AttachSucceeded {
                volume: VOL.into(),
                node: "n1".into()
            }),
            vec![(
                "SuccessfulAttachVolume",
                EventType::Normal,
                "AttachVolume.Attach succeeded for volume \"pv-1\"".into(),
                pod("ns", "a", Some("uid-a")),
            )]
        );
        assert_eq!(
            summary(Event::AttachFailed {
                volume: VOL.into(),
                node: "n1".into(),
                message: "rpc error".into()
            }),
            vec![(
                "FailedAttachVolume",
                EventType::Warning,
                "AttachVolume.Attach failed for volume \"pv-1\" : rpc error".into(),
                pod("ns", "a", Some("uid-a")),
            )]
        );
        // No pod known there (it went meanwhile): the node, and the unique name if no PV.
        assert_eq!(
            summary(Event::AttachSucceeded {
                volume: "kubernetes.io/csi/d^zz".into(),
                node: "n9".into()
            }),
            vec![(
                "SuccessfulAttachVolume",
                EventType::Normal,
                "AttachVolume.Attach succeeded for volume \"kubernetes.io/csi/d^zz\"".into(),
                node("n9", None),
            )]
        );
    }

    #[test]
    fn detach_events_go_to_the_node() {
        assert_eq!(
            summary(Event::DetachSucceeded {
                volume: VOL.into(),
                node: "n1".into(),
                force: None
            }),
            vec![(
                "SuccessfulDetachVolume",
                EventType::Normal,
                "DetachVolume.Detach succeeded for volume \"pv-1\"".into(),
                node("n1", Some("uid-n1")),
            )]
        );
        assert_eq!(
            summary(Event::DetachSucceeded {
                volume: VOL.into(),
                node: "n1".into(),
                force: Some(ForceReason::OutOfService)
            })[0]
                .clone(),
            (
                "ForcedDetachVolume",
                EventType::Warning,
                "DetachVolume.Detach succeeded for volume \"pv-1\" (forced: out-of-service)".into(),
                node("n1", Some("uid-n1")),
            )
        );
        let failed = summary(Event::DetachFailed {
            volume: VOL.into(),
            node: "n1".into(),
            message: "busy".into(),
        });
        assert_eq!(
            (failed[0].0, failed[0].1, failed[0].2.as_str()),
            (
                "FailedDetachVolume",
                EventType::Warning,
                "DetachVolume.Detach failed for volume \"pv-1\" : busy"
            )
        );
        let blocked = summary(Event::DetachBlocked {
            volume: VOL.into(),
            node: "n1".into(),
            reason: "node unhealthy".into(),
        });
        assert_eq!(
            (blocked[0].0, blocked[0].1),
            ("DetachBlocked", EventType::Warning)
        );
        let waiting = summary(Event::WaitingForUnmount {
            volume: VOL.into(),
            node: "n1".into(),
            reason: "in use".into(),
        });
        assert_eq!(
            (waiting[0].0, waiting[0].1, &waiting[0].3),
            (
                "WaitingForUnmount",
                EventType::Normal,
                &node("n1", Some("uid-n1"))
            )
        );
    }

    #[test]
    fn a_waiting_workload_is_told_on_the_pod_and_a_timed_out_listing_nowhere() {
        let waiting = summary(Event::WorkloadWaiting {
            workload: "ns/a".into(),
            node: "n1".into(),
            missing: vec![],
            waited: std::time::Duration::from_secs(60),
        });
        assert_eq!(
            (waiting[0].0, waiting[0].1, &waiting[0].3),
            (
                "WorkloadWaiting",
                EventType::Warning,
                &pod("ns", "a", Some("uid-a"))
            )
        );
        assert!(
            summary(Event::CallTimedOut {
                call: attach_detach::config::CallKind::BackendList,
                node: None,
                volume: None,
                after: std::time::Duration::from_secs(1)
            })
            .is_empty()
        );
    }

    #[test]
    fn a_claim_in_doubt_is_told_on_each_node() {
        let told = summary(Event::ClaimInDoubt {
            volume: VOL.into(),
            nodes: vec!["n1".into(), "n9".into()],
        });
        let expected = |n, uid| {
            (
                "ClaimInDoubt",
                EventType::Warning,
                "Volume \"pv-1\" may be mounted on any of nodes n1, n9 and no node's volumesAttached lists it: it is granted to none of them until all but one stop using it".to_string(),
                node(n, uid),
            )
        };
        assert_eq!(
            told,
            vec![expected("n1", Some("uid-n1")), expected("n9", None)]
        );
    }

    #[test]
    fn notes_are_cut_to_the_api_limit() {
        let events = summary(Event::AttachFailed {
            volume: VOL.into(),
            node: "n1".into(),
            message: "é".repeat(2000),
        });
        assert!(events[0].2.len() <= NOTE_LIMIT);
    }

    #[test]
    fn a_full_queue_drops_and_counts_never_blocks() {
        let (recorder, mut rx) = KubeEventRecorder::new(index(), 1);
        let event = Event::DetachSucceeded {
            volume: VOL.into(),
            node: "n1".into(),
            force: None,
        };
        recorder.record(&event);
        recorder.record(&event);
        recorder.record(&event);
        assert_eq!(recorder.dropped(), 2);
        assert_eq!(rx.try_recv().unwrap().reason, "SuccessfulDetachVolume");
        assert!(rx.try_recv().is_err());
    }
}
