//! The controller's events as Kubernetes Events, where `kubectl describe pod` shows them.
//!
//! [`kube_events`] is the mapping, pure: a core [`Event`] becomes zero or more [`KubeEvent`]s
//! (reason, type, message, the object it is about). [`KubeEventRecorder`] is the controller's
//! [`EventRecorder`]: `record` runs on the controller's loop and must not block, so it only
//! puts the mapped events in a bounded queue; a task ([`publish`]) sends them as `core/v1`
//! Events through client-go's event correlator, ported (see [`publish`]). A full queue drops
//! the event and counts it ([`KubeEventRecorder::dropped`]): losing an event is better than
//! stalling attaches and detaches behind a slow API server.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use attach_detach::controller::EventRecorder;
use attach_detach::core::Event;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{EventType, Reporter};
use kube::{Api, Client};
use lru::LruCache;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
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
/// | [`Event::WaitExplained`] | `WaitExplained` | Warning | the pod | what each of its volumes waits for, and what ends it |
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
        Event::WaitExplained {
            workload,
            explanation,
            ..
        } => {
            // The core names volumes by their unique names; a person knows the PV.
            let mut note = event.to_string();
            for volume in &explanation.volumes {
                let unique = format!("{:?}", volume.volume);
                note = note.replace(&unique, &format!("{:?}", pv(&volume.volume)));
            }
            vec![warning(
                pod_ref(&pod_by_key(workload, index)),
                event.reason(),
                note,
                "Wait",
            )]
        }
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

    /// A recorder and the task that [`publish`]es its events as `reporter` (upstream's
    /// controller is [`REPORTING_CONTROLLER`]; the instance names the replica). The task ends
    /// once every clone of the recorder is dropped and the queue is drained.
    pub fn spawn(
        client: Client,
        reporter: Reporter,
        index: ObjectIndex,
        capacity: usize,
    ) -> (Self, JoinHandle<()>) {
        let (recorder, rx) = Self::new(index, capacity);
        let task = tokio::spawn(publish(client, reporter, rx));
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

/// client-go's event correlator defaults (`tools/record/events_cache.go`): per object, a
/// token bucket of 25 that gains one every 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(5 * 60);
/// From the tenth distinct message of one reason on one object within 10 minutes, the
/// messages go to one aggregate event.
const AGGREGATE_AFTER: usize = 10;
const AGGREGATE_WITHIN: Duration = Duration::from_secs(10 * 60);
/// The aggregate event's message is this, then the latest message.
const COMBINED: &str = "(combined from similar events): ";
/// Each of the correlator's caches holds at most this many keys, least recently used out.
const CACHE_ENTRIES: NonZeroUsize = NonZeroUsize::new(4096).expect("not zero");

/// The object an event is about, as client-go's correlator keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    api_version: Option<String>,
    field_path: Option<String>,
}

impl From<&ObjectReference> for ObjectKey {
    fn from(r: &ObjectReference) -> Self {
        ObjectKey {
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            api_version: r.api_version.clone(),
            field_path: r.field_path.clone(),
        }
    }
}

/// One reason of one type on one object; with a message, one event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    object: ObjectKey,
    warning: bool,
    reason: &'static str,
    /// `None`: the aggregate of that reason's messages.
    message: Option<String>,
}

/// The distinct messages of one reason on one object seen lately.
#[derive(Debug)]
struct Similar {
    messages: HashSet<String>,
    last: Instant,
}

/// An event already sent: a repeat is a patch of it.
#[derive(Clone, Debug)]
struct Observed {
    namespace: String,
    name: String,
    count: i32,
    first: Timestamp,
}

/// A token bucket, refilled lazily (client-go's passive rate limiter).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn try_take(&mut self, now: Instant) -> bool {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        self.tokens = (self.tokens + refill).min(SPAM_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What to send for one event.
#[derive(Debug)]
enum Step {
    /// POST the event.
    Create(CoreEvent),
    /// PATCH the event's `count`, `lastTimestamp` and `message`; create it whole if it is
    /// gone (events expire after an hour).
    Patch(CoreEvent),
    /// Nothing: the object's budget is spent.
    Skip,
}

/// client-go's `EventCorrelator`, on `core/v1` Events: aggregation of similar messages, then
/// the repeat of an event sent already as a patch of its count, then the per-object spam
/// filter. Pure: time is passed in.
#[derive(Debug)]
struct Correlator {
    reporter: Reporter,
    similar: LruCache<EventKey, Similar>,
    observed: LruCache<EventKey, Observed>,
    budgets: LruCache<ObjectKey, Bucket>,
    /// The last name suffix used: names stay unique however fast events come.
    last_suffix: i128,
}

impl Correlator {
    fn new(reporter: Reporter) -> Self {
        Correlator {
            reporter,
            similar: LruCache::new(CACHE_ENTRIES),
            observed: LruCache::new(CACHE_ENTRIES),
            budgets: LruCache::new(CACHE_ENTRIES),
            last_suffix: 0,
        }
    }

    /// A fresh event for `event` with `message`, first seen at `wall`.
    fn fresh(&mut self, event: &KubeEvent, message: String, wall: Timestamp) -> CoreEvent {
        let suffix = wall.as_nanosecond().max(self.last_suffix + 1);
        self.last_suffix = suffix;
        let regarding = &event.regarding;
        let object = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{suffix:x}")),
                // A cluster-scoped object's events go to `default`, as client-go's.
                namespace: Some(
                    regarding
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            reason: Some(event.reason.to_owned()),
            message: Some(message),
            type_: Some(type_name(event.type_).to_owned()),
            action: Some(event.action.to_owned()),
            source: Some(EventSource {
                component: Some(self.reporter.controller.clone()),
                host: None,
            }),
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            first_timestamp: Some(Time(wall)),
            last_timestamp: Some(Time(wall)),
            count: Some(1),
            ..CoreEvent::default()
        }
    }

    /// What to send for `event` at `now` (`wall` on the clock the API server reads).
    fn correlate(&mut self, event: &KubeEvent, now: Instant, wall: Timestamp) -> Step {
        let object = ObjectKey::from(&event.regarding);
        let mut key = EventKey {
            object: object.clone(),
            warning: event.type_ == EventType::Warning,
            reason: event.reason,
            message: None,
        };
        // Aggregation (client-go's EventAggregate): count the distinct messages of this
        // reason on this object within the window; from the tenth on, the event is the
        // aggregate, under the key without a message.
        let similar = self.similar.get_or_insert_mut(key.clone(), || Similar {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(similar.last) > AGGREGATE_WITHIN {
            similar.messages.clear();
        }
        similar.messages.insert(event.note.clone());
        similar.last = now;
        let message = if similar.messages.len() < AGGREGATE_AFTER {
            key.message = Some(event.note.clone());
            event.note.clone()
        } else {
            // The set stays below the threshold, as client-go's: any one goes.
            if let Some(any) = similar.messages.iter().next().cloned() {
                similar.messages.remove(&any);
            }
            limit(format!("{COMBINED}{}", event.note))
        };
        // Observation (client-go's eventObserve): a key seen before is a patch of its event.
        let mut out = self.fresh(event, message, wall);
        let step = match self.observed.get(&key).cloned() {
            Some(seen) => {
                out.metadata.name = Some(seen.name.clone());
                out.metadata.namespace = Some(seen.namespace.clone());
                out.first_timestamp = Some(Time(seen.first));
                out.count = Some(seen.count.saturating_add(1));
                self.observed.put(
                    key,
                    Observed {
                        count: seen.count.saturating_add(1),
                        ..seen
                    },
                );
                Step::Patch(out)
            }
            None => {
                self.observed.put(
                    key,
                    Observed {
                        namespace: out.metadata.namespace.clone().unwrap_or_default(),
                        name: out.metadata.name.clone().unwrap_or_default(),
                        count: 1,
                        first: wall,
                    },
                );
                Step::Create(out)
            }
        };
        // The spam filter (client-go's EventSourceObjectSpamFilter), last, as there: a
        // skipped event still counts in its event's `count`.
        let budget = self.budgets.get_or_insert_mut(object, || Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        if budget.try_take(now) {
            step
        } else {
            Step::Skip
        }
    }
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// Sends one step; a patch of an event that is gone creates it.
async fn send(client: &Client, step: Step) -> Result<(), kube::Error> {
    let (event, patch) = match step {
        Step::Skip => return Ok(()),
        Step::Create(event) => (event, false),
        Step::Patch(event) => (event, true),
    };
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    if patch {
        let name = event.metadata.name.clone().unwrap_or_default();
        let body = serde_json::json!({
            "count": event.count,
            "lastTimestamp": event.last_timestamp,
            "message": event.message,
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            other => return other.map(drop),
        }
    }
    api.create(&PostParams::default(), &event).await.map(drop)
}

/// Publishes every queued event as a `core/v1` Event of `reporter` until the queue closes:
/// client-go's `EventCorrelator`, as upstream's recorder runs it for the attach/detach
/// controller.
///
/// - **Every distinct message reaches the API server.** An event is identified by its object,
///   type, reason and message: a repeat PATCHes its event's `count`, `lastTimestamp` and
///   `message`, a new message is a new event (kube-runtime's `Recorder` keys by reason alone,
///   and sent a second `WaitingForUnmount` of another volume as a count of the first).
/// - **Similar messages are aggregated**: from the tenth distinct message of one reason on one
///   object within 10 minutes, they go to one event whose message is `(combined from similar
///   events): ` and the latest message, patched at each.
/// - **Per object, a burst of 25, then one every 5 minutes**: what is over is not sent, but
///   counted in its event's `count`, which the next one sent carries.
///
/// Events are `core/v1` (`source.component` and `reportingComponent` are the reporter's
/// controller, `reportingInstance` its instance) because the `events.k8s.io/v1` API refuses to
/// change an event's note on update, where client-go's aggregate event carries the latest
/// message. They are named `<object>.<hex nanoseconds>` in the object's namespace (`default`
/// for a node), as client-go names them. A refused request is logged and skipped: events
/// are best effort.
pub async fn publish(client: Client, reporter: Reporter, mut queue: mpsc::Receiver<KubeEvent>) {
    let mut correlator = Correlator::new(reporter);
    while let Some(event) = queue.recv().await {
        let step = correlator.correlate(&event, Instant::now(), Timestamp::now());
        if matches!(step, Step::Skip) {
            debug!(reason = event.reason, object = ?event.regarding.name, "event over its object's budget: counted, not sent");
            continue;
        }
        match send(&client, step).await {
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
            serde_json::json!({"metadata": {"name": "n1", "uid": "uid-n1", "annotations":
                {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}),
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

    /// A pod waiting long is told why on the pod (`kubectl describe pod`), its volumes by
    /// their PV names.
    #[test]
    fn a_long_wait_is_explained_on_the_pod_with_pv_names() {
        use attach_detach::core::{
            AttachState, PairExplanation, Placement, VolumeExplanation, Wait, WorkloadExplanation,
        };
        let at = std::time::Duration::from_secs(200);
        let pair = |node: &str, wanted: bool, wait| PairExplanation {
            volume: VOL.to_string(),
            node: node.into(),
            wanted,
            attached: (!wanted).then_some(AttachState::Attached),
            wait,
            since: Some(std::time::Duration::from_secs(60)),
            last_failure: None,
            at,
        };
        let explanation = WorkloadExplanation {
            workload: "ns/a".to_string(),
            placement: Placement::Placed { node: "n2".into() },
            volumes: vec![VolumeExplanation {
                volume: VOL.to_string(),
                known: true,
                recovering: false,
                pairs: vec![
                    pair("n1", false, Wait::Unmount { forced_at: None }),
                    pair(
                        "n2",
                        true,
                        Wait::HeldElsewhere {
                            holders: vec!["n1".into()],
                        },
                    ),
                ],
            }],
            at,
        };
        let told = summary(Event::WaitExplained {
            workload: "ns/a".into(),
            node: "n2".into(),
            waited: std::time::Duration::from_secs(120),
            explanation: Box::new(explanation),
        });
        assert_eq!(told.len(), 1);
        let (reason, type_, note, regarding) = &told[0];
        assert_eq!(
            (*reason, *type_, regarding),
            (
                "WaitExplained",
                EventType::Warning,
                &pod("ns", "a", Some("uid-a"))
            )
        );
        assert!(
            note.contains(
                "\"pv-1\" on \"n1\": to be detached; waiting for \"n1\"'s agent to unmount it"
            ) && note.contains("waiting for it to be detached from [\"n1\"] (Multi-Attach)")
                && !note.contains(VOL),
            "{note}"
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

    fn failed(message: &str) -> KubeEvent {
        kube_events(
            &Event::AttachFailed {
                volume: VOL.into(),
                node: "n1".into(),
                message: message.into(),
            },
            &index(),
        )
        .remove(0)
    }

    #[test]
    fn similar_messages_are_aggregated_only_within_ten_minutes() {
        let mut correlator = Correlator::new(REPORTING_CONTROLLER.into());
        let start = Instant::now();
        let wall = Timestamp::now();
        let messages = |step: &Step| match step {
            Step::Create(e) | Step::Patch(e) => e.message.clone().unwrap_or_default(),
            Step::Skip => "skipped".into(),
        };
        for i in 1..=9 {
            let step = correlator.correlate(&failed(&format!("e{i}")), start, wall);
            assert!(matches!(step, Step::Create(_)));
            assert!(!messages(&step).starts_with(COMBINED));
        }
        let tenth = correlator.correlate(&failed("e10"), start, wall);
        assert!(messages(&tenth).starts_with(COMBINED), "{tenth:?}");
        // Ten quiet minutes and more: the next distinct message stands alone again.
        let later = start + AGGREGATE_WITHIN + Duration::from_secs(1);
        let step = correlator.correlate(&failed("e11"), later, wall);
        assert!(matches!(step, Step::Create(_)));
        assert!(messages(&step).ends_with(": e11"), "{step:?}");
        assert!(!messages(&step).starts_with(COMBINED));
    }
}
