//! Kubernetes watches turned into controller inputs: Pods, PersistentVolumeClaims,
//! PersistentVolumes, Nodes, CSIDrivers and CSINodes become [`Input<Kube>`]s, and the registries the
//! backend reads ([`CsiDrivers`], [`ManagedNodes`]) are kept up to date.
//!
//! The mapping is [`InformerState`]: pure and synchronous, fed one `watcher::Event` at a time,
//! so every rule is unit-tested without an API server. [`Informers`] drives kube-runtime's six
//! watchers through it: [`Informers::initial_sync`] waits until every watcher has listed once
//! (upstream's `WaitForCacheSync`) and hands back the [`World`] a controller starts from, then
//! [`Informers::run`] forwards every later change to a running controller.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use attach_detach::controller::{ControllerError, ControllerHandle, World};
use attach_detach::core::{Input, Kind, NodeFacts, VolumeSpec};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client, Resource};
use tracing::{debug, info, warn};

use crate::domain::{AttachSource, CsiVolume, Kube, facts_of, pod_key, split_unique_name};
use crate::drivers::CsiDrivers;
use crate::nodes::{ManagedNodes, controller_managed};
use crate::translate::{
    CsiMigration, CsiSpec, InTreePlugin, MigratedNode, translate_inline_volume,
    translate_persistent_volume,
};

/// A pod as events name it: enough for an `ObjectReference` that `kubectl describe` matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (empty if the object had none).
    pub uid: String,
}

/// What the informers know that the event recorder needs and the core does not carry: which
/// PersistentVolume a unique volume name stands for, which pods use a volume on a node, the
/// uids of pods and nodes.
///
/// A cheap cloneable view onto state an [`InformerState`] keeps up to date as it emits inputs;
/// reads take a short lock and never wait for the API server.
#[derive(Clone, Debug, Default)]
pub struct ObjectIndex {
    inner: Arc<RwLock<IndexInner>>,
}

#[derive(Debug, Default)]
struct IndexInner {
    /// Unique volume name → the PVs that have it (normally one).
    pvs: HashMap<String, BTreeSet<String>>,
    /// Unique volume name of an inline volume → the name upstream's translation gives it.
    inline: HashMap<String, String>,
    /// (node, unique volume) → pods placed there that need it.
    users: HashMap<(String, String), BTreeSet<String>>,
    /// Pod key → its reference.
    pods: HashMap<String, PodRef>,
    /// Node name → uid.
    nodes: HashMap<String, String>,
}

impl ObjectIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, IndexInner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, IndexInner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The PersistentVolume a unique volume name stands for (the first by name if several PVs
    /// share a driver and handle), as upstream's event messages name volumes; for an inline
    /// in-tree volume, the name upstream's translation gives it (`ebs.csi.aws.com-vol-1`...).
    pub fn pv_name(&self, volume: &str) -> Option<String> {
        let inner = self.read();
        match inner.pvs.get(volume).and_then(|pvs| pvs.first()) {
            Some(pv) => Some(pv.clone()),
            None => inner.inline.get(volume).cloned(),
        }
    }

    /// The pods placed on `node` that need `volume` there, by key.
    pub fn pods_using(&self, volume: &str, node: &str) -> Vec<PodRef> {
        let inner = self.read();
        let Some(keys) = inner.users.get(&(node.to_owned(), volume.to_owned())) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|key| inner.pods.get(key).cloned())
            .collect()
    }

    /// The reference of the pod `namespace/name`, if it is placed (or was, until removed).
    pub fn pod(&self, key: &str) -> Option<PodRef> {
        self.read().pods.get(key).cloned()
    }

    /// The uid of a node the informers know.
    pub fn node_uid(&self, node: &str) -> Option<String> {
        self.read().nodes.get(node).cloned()
    }
}

/// A claim a pod volume names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    /// The PVC's name, in the pod's namespace.
    name: String,
    /// A generic ephemeral volume's claim (`{pod}-{volume}`): only valid if the pod owns it.
    ephemeral: bool,
}

/// A volume as the core would know it: its unique name and spec, and the in-tree plugin it
/// was translated from (whose migration a node may not have).
#[derive(Clone, Debug, PartialEq)]
struct Translated {
    unique: String,
    spec: VolumeSpec<CsiVolume>,
    plugin: Option<InTreePlugin>,
}

/// What a pod's volume may need attached.
#[derive(Clone, Debug)]
enum PodVolume {
    /// A claim, resolved through its PV.
    Claim(Claim),
    /// An in-tree volume written inline in the pod, translated (and the name upstream's
    /// translation gives it).
    Inline(Box<(Translated, String)>),
}

/// An active pod: scheduled and not terminal.
#[derive(Clone, Debug)]
struct PodEntry {
    namespace: String,
    name: String,
    uid: String,
    node: String,
    volumes: Vec<PodVolume>,
    /// The node and volumes of its last `WorkloadScheduled`, while the core knows the pod
    /// (`None`: never sent, or removed since, as a pod on a node kubelet manages is).
    sent: Option<(String, Vec<String>)>,
    /// Of the volumes sent, the inline ones (which exist for the core while a pod needs them).
    inline_sent: BTreeSet<String>,
}

impl PodEntry {
    fn sent_volumes(&self) -> &[String] {
        self.sent.as_ref().map_or(&[], |(_, volumes)| volumes)
    }

    fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.volumes.iter().filter_map(|volume| match volume {
            PodVolume::Claim(claim) => Some(claim),
            PodVolume::Inline(_) => None,
        })
    }
}

/// An inline volume some pods the core knows need.
#[derive(Clone, Debug)]
struct InlineEntry {
    spec: VolumeSpec<CsiVolume>,
    /// The pods, by key.
    users: BTreeSet<String>,
}

/// A node the Node watcher shows.
#[derive(Clone, Debug)]
struct NodeEntry {
    /// Whether this controller manages it: its kubelet's annotation was seen since the node
    /// was first seen (kept once seen, as upstream's node update only ever adds a node).
    managed: bool,
    /// Whether the annotation is on the node now.
    annotated: bool,
    /// The facts last sent (those of a node kubelet manages are never sent).
    facts: NodeFacts<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct ClaimEntry {
    uid: String,
    /// `spec.volumeName` while `status.phase` is `Bound`.
    bound: Option<String>,
    /// The uid of its controlling owner (a pod, for an ephemeral volume's claim).
    owner: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct PvEntry {
    /// The volume of a CSI PV, or of an in-tree one as CSI migration translates it; `None`
    /// for another plugin's.
    csi: Option<Translated>,
    /// `spec.claimRef.uid`.
    claim_uid: Option<String>,
}

/// Which of the six watchers a relist belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Pods,
    Claims,
    Volumes,
    Nodes,
    Drivers,
    CsiNodes,
}

/// The mapping from Kubernetes objects to [`Input<Kube>`]s, one watcher event at a time.
///
/// # Rules
///
/// **Pods** (kind [`Kind::Workload`], workload `namespace/name`). A pod is *active* when it is
/// scheduled (`spec.nodeName` set) and not terminated: `status.phase` is neither `Succeeded`
/// nor `Failed`, and it is not a pod being deleted whose containers, ephemeral ones included,
/// all stopped: terminated or waiting, a container with no state counting as running
/// (upstream's `IsPodTerminated`). An active pod is [`Input::WorkloadScheduled`] on its node with the
/// volumes that resolve now, in its volume order, without repeats:
/// - `persistentVolumeClaim.claimName` (or a generic ephemeral volume's claim
///   `{pod}-{volume}`, only if the pod controls it) → a PVC of the pod's namespace whose
///   `status.phase` is `Bound` → its `spec.volumeName` → a PV whose `claimRef.uid` is the
///   PVC's, with `spec.csi`, or of an in-tree plugin CSI migration serves, translated
///   ([`translate_persistent_volume`](crate::translate_persistent_volume)) →
///   [`unique_name`](crate::unique_name);
/// - an in-tree volume written inline in the pod (`awsElasticBlockStore`...), translated
///   ([`translate_inline_volume`](crate::translate_inline_volume)) → its unique name.
///
/// A volume counts only if its driver needs attach (below) and, if it is an in-tree plugin's,
/// if the pod's node hands the plugin's volumes to the CSI driver ([`CsiMigration`]: on every
/// node for a plugin whose migration is complete, else where the node's CSINode says so, as
/// upstream's `isCSIMigrationSupportedOnNode`). Anything else (a missing or unbound claim, a
/// PV of another plugin, one that does not translate, a CSI ephemeral volume) contributes
/// nothing until it resolves; the pod is sent again whenever a PVC, PV, CSIDriver or CSINode
/// change changes what it resolves to. A pod that stops being active, or is deleted, is
/// [`Input::WorkloadRemoved`]. A pod is sent again only if its node or volumes changed (the
/// kubelet updates pod status often), except in a relist, where every active pod is sent. A
/// pod on a node kubelet manages (below) is not sent at all, and one sent before its node was
/// seen is removed when it is; a pod whose node is not known is sent (the core lets it wait
/// for its node).
///
/// **PersistentVolumes** (kind [`Kind::Volume`], volume = unique name). A PV with `spec.csi`,
/// or of an in-tree plugin CSI migration serves, is [`Input::SetVolume`] with [`CsiVolume`] as
/// payload (its source the PV's name, as upstream's attacher sets it), single-node unless its
/// (translated) `accessModes` include `ReadWriteMany` or `ReadOnlyMany` (upstream's
/// `isMultiAttachAllowed`; upstream also allows several nodes for a PV without access modes,
/// which validation makes impossible: this takes the safe side). A deleted PV is
/// [`Input::VolumeRemoved`]; should several PVs share a driver and handle, the volume is
/// removed with the last one (and set again from a remaining one). Other plugins' PVs are not
/// this controller's.
///
/// **Inline volumes** (kind [`Kind::Volume`] too): an inline in-tree volume is
/// [`Input::SetVolume`] (its source its translated spec, as upstream's attacher puts it in a
/// VolumeAttachment's `inlineVolumeSpec`) just before the first pod the core knows needs it,
/// and [`Input::VolumeRemoved`] once no such pod does (after the pod's input); a PV relist
/// sets the ones pods need again, so the core's relist keeps them.
///
/// **Nodes** (kind [`Kind::Node`]). [`Input::NodeUpdated`] with [`NodeFacts`]: `healthy` is a
/// `Ready` condition whose status is `"True"`, `fenced` is the presence of the
/// [`OUT_OF_SERVICE_TAINT`](crate::OUT_OF_SERVICE_TAINT), `in_use` is `status.volumesInUse`, or `None` while the node has no
/// `Ready` condition at all (its kubelet never reported: every attached volume counts as
/// mounted). Sent again only when the facts change, except in a relist. A deleted node is
/// [`Input::NodeRemoved`].
///
/// Only nodes this controller manages are sent: those whose kubelet leaves attach and detach
/// to the controller and says so with the
/// [`CONTROLLER_MANAGED_ANNOTATION`](crate::CONTROLLER_MANAGED_ANNOTATION), checked on every
/// add and update as upstream's `addNodeToDswp` does. A node without it is kubelet's
/// (`--enable-controller-attach-detach=false`): it, its pods and (through
/// [`managed_nodes`](InformerState::managed_nodes), which the backend reads) its
/// VolumeAttachments are invisible to the core. A node that gets the annotation is sent, with
/// its pods; one that loses it stays managed, as upstream keeps it, until it is deleted or
/// the state is built anew (a controller restart), with a warning in the log.
///
/// **PersistentVolumeClaims** feed no kind of their own: a change re-derives the pods that
/// name the claim.
///
/// **CSINodes** feed no kind of their own: a node's CSINode says which in-tree plugins its
/// kubelet migrated (the `storage.alpha.kubernetes.io/migrated-plugins` annotation) and which
/// CSI drivers are installed there ([`MigratedNode`]); a change re-derives the pods on the
/// node. A CSINode missing from a listing is forgotten likewise.
///
/// **CSIDrivers** feed the [`CsiDrivers`] registry ([`csi_drivers`](InformerState::csi_drivers),
/// which the backend reads). Volumes of a driver that needs no attach (`attachRequired:
/// false`) are not tracked, as upstream does not track them: no [`Input::SetVolume`], and
/// no pod needs them. When a driver's CSIDriver starts or stops saying so (created, changed,
/// deleted), its volumes are removed ([`Input::VolumeRemoved`]: the core detaches what is
/// still attached once its pods stopped using it) or set again, and the pods bound to them are
/// sent again.
///
/// # Relists
///
/// A watcher's `Init` is [`Input::RelistStarted`] of the kind it feeds, `InitApply` its upsert
/// (always sent, so the core records the object as seen), `InitDone`
/// [`Input::RelistDone`]: the core then removes whatever the listing did not show. The state
/// forgets those objects too.
///
/// PVCs have no core relist, yet a PVC deleted while the watch was down must still reach the
/// pods that named it: at the PVC watcher's `InitDone`, every claim the listing did not show
/// is dropped and its pods are re-derived (without its volume). Likewise CSIDrivers missing
/// from a listing are removed from the registry (their drivers need attach again).
///
/// While pods are being relisted, a PVC or PV change re-derives only pods the listing has
/// shown already: sending one it has not shown yet would mark it seen in the core, and a pod
/// deleted during the gap would survive the relist. The others are sent as the listing
/// reaches them (with what they resolve to then), or removed at its end.
///
/// ```
/// use attach_detach::core::{Input, Kind};
/// use attach_detach_kube::InformerState;
/// use kube::runtime::watcher::Event;
/// let mut state = InformerState::new();
/// assert_eq!(state.pods(Event::Init), vec![Input::RelistStarted { kind: Kind::Workload }]);
/// assert_eq!(state.pods(Event::InitDone), vec![Input::RelistDone { kind: Kind::Workload }]);
/// ```
#[derive(Debug, Default)]
pub struct InformerState {
    pods: HashMap<String, PodEntry>,
    /// Claim key (`namespace/name`) → pod keys that name it.
    pods_by_claim: HashMap<String, BTreeSet<String>>,
    claims: HashMap<String, ClaimEntry>,
    /// PV name → claim keys bound to it.
    claims_by_pv: HashMap<String, BTreeSet<String>>,
    pvs: HashMap<String, PvEntry>,
    nodes: HashMap<String, NodeEntry>,
    /// Node → the keys of the active pods placed there.
    pods_by_node: HashMap<String, BTreeSet<String>>,
    /// Which nodes this controller manages, shared with the backend.
    managed: ManagedNodes,
    /// The CSIDrivers the watcher shows, by name.
    drivers: HashSet<String>,
    /// Which drivers need attach, shared with the backend.
    csi_drivers: CsiDrivers,
    /// Inline volumes the core knows, by unique name.
    inline: HashMap<String, InlineEntry>,
    /// Which in-tree plugins are migrated where.
    migration: CsiMigration,
    /// What each node's CSINode says of migration.
    csi_nodes: HashMap<String, MigratedNode>,
    /// Names seen by each watcher's relist in progress.
    relists: HashMap<Source, HashSet<String>>,
    /// Watchers that completed a listing at least once.
    synced: HashSet<Source>,
    index: ObjectIndex,
}

impl InformerState {
    /// An empty state: nothing known, no watcher synced, CSI migration as upstream's
    /// default ([`CsiMigration::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state whose CSI migration is `migration` (as kube-controller-manager's
    /// feature gates would set it).
    pub fn with_csi_migration(migration: CsiMigration) -> Self {
        InformerState {
            migration,
            ..Self::default()
        }
    }

    /// The view the event recorder reads (see [`ObjectIndex`]).
    pub fn index(&self) -> ObjectIndex {
        self.index.clone()
    }

    /// Which nodes this controller manages, as the Node watcher showed them: hand it to the
    /// backend ([`VolumeAttachmentBackend::with_managed_nodes`](crate::VolumeAttachmentBackend::with_managed_nodes)).
    pub fn managed_nodes(&self) -> ManagedNodes {
        self.managed.clone()
    }

    /// Whether `node` is known and kubelet's: its pods are not the core's business.
    fn kubelets(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|entry| !entry.managed)
    }

    /// Whether every watcher (pods, claims, volumes, nodes, drivers, CSI nodes) has completed
    /// a listing: from then on the state shows the whole cluster.
    pub fn synced(&self) -> bool {
        self.synced.len() == 6
    }

    /// The inputs that build the state as it stands, for a controller's start-up [`World`]:
    /// every CSI volume, then every node, then every active pod (in name order within each).
    pub fn snapshot(&self) -> Vec<Input<Kube>> {
        let mut inputs = Vec::new();
        let index = self.index.read();
        let mut unique: Vec<(&String, &BTreeSet<String>)> = index.pvs.iter().collect();
        unique.sort();
        for (volume, pvs) in unique {
            if let Some(spec) = pvs.first().and_then(|pv| self.spec_of(pv)) {
                inputs.push(Input::SetVolume {
                    volume: volume.clone(),
                    spec,
                });
            }
        }
        drop(index);
        inputs.extend(self.inline_only());
        let mut nodes: Vec<_> = self.nodes.iter().filter(|(_, n)| n.managed).collect();
        nodes.sort_by(|a, b| a.0.cmp(b.0));
        for (node, entry) in nodes {
            inputs.push(Input::NodeUpdated {
                node: node.clone(),
                facts: entry.facts.clone(),
            });
        }
        let mut pods: Vec<_> = self.pods.iter().filter(|(_, p)| p.sent.is_some()).collect();
        pods.sort_by(|a, b| a.0.cmp(b.0));
        for (key, pod) in pods {
            inputs.push(Input::WorkloadScheduled {
                workload: key.clone(),
                node: pod.node.clone(),
                volumes: self.resolve(pod),
            });
        }
        inputs
    }

    /// [`snapshot`](Self::snapshot) as a [`World`].
    pub fn world(&self) -> World<Kube> {
        self.snapshot().into_iter().collect()
    }

    /// The spec of PV `pv`'s volume, if the core tracks it.
    fn spec_of(&self, pv: &str) -> Option<VolumeSpec<CsiVolume>> {
        let spec = &self.pvs.get(pv)?.csi.as_ref()?.spec;
        self.tracked(&spec.payload.driver).then(|| spec.clone())
    }

    /// The spec a tracked PV gives the volume `unique`, if one does.
    fn pv_spec(&self, unique: &str) -> Option<VolumeSpec<CsiVolume>> {
        let pv = self.index.read().pvs.get(unique)?.first()?.clone();
        self.spec_of(&pv)
    }

    /// `SetVolume` of each inline volume pods need that no PV gives a spec, by name.
    fn inline_only(&self) -> Vec<Input<Kube>> {
        let mut volumes: Vec<(&String, &InlineEntry)> = self
            .inline
            .iter()
            .filter(|(unique, _)| self.pv_spec(unique).is_none())
            .collect();
        volumes.sort_by(|a, b| a.0.cmp(b.0));
        volumes
            .into_iter()
            .map(|(unique, entry)| Input::SetVolume {
                volume: unique.clone(),
                spec: entry.spec.clone(),
            })
            .collect()
    }

    /// Whether the volume `translated` is the core's on `node`: its driver needs attach, and
    /// if it is an in-tree plugin's, the node's kubelet hands it to the CSI driver (else the
    /// in-tree plugin serves it there, which this controller does not drive).
    fn usable_on(&self, node: &str, translated: &Translated) -> bool {
        if !self.tracked(&translated.spec.payload.driver) {
            return false;
        }
        let Some(plugin) = translated.plugin else {
            return true;
        };
        match self.migration.on_node(plugin, self.csi_nodes.get(node)) {
            Ok(migrated) => migrated,
            Err(error) => {
                debug!(node, volume = translated.unique, %error, "the volume waits on this node");
                false
            }
        }
    }

    /// Whether the core tracks the volumes of `driver`: those that need attach. Upstream
    /// never tracks the others (`FindAttachablePluginBySpec` finds no attacher for them), so
    /// they are not listed in `Node.status.volumesAttached`, kubelet does not wait for them,
    /// and no Multi-Attach warning names them.
    fn tracked(&self, driver: &str) -> bool {
        self.csi_drivers.attach_required(driver)
    }

    fn relist_start(&mut self, source: Source) {
        self.relists.insert(source, HashSet::new());
    }

    fn seen(&mut self, source: Source, name: &str) {
        if let Some(seen) = self.relists.get_mut(&source) {
            seen.insert(name.to_owned());
        }
    }

    /// Ends `source`'s relist: the names it did not show, or `None` if none was running.
    fn relist_end(&mut self, source: Source, known: impl Iterator<Item = String>) -> Vec<String> {
        self.synced.insert(source);
        let Some(seen) = self.relists.remove(&source) else {
            return Vec::new();
        };
        let mut gone: Vec<String> = known.filter(|name| !seen.contains(name)).collect();
        gone.sort();
        gone
    }

    // ---- pods ----

    /// One event of the Pod watcher.
    pub fn pods(&mut self, event: Event<Pod>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Pods);
                out.push(Input::RelistStarted {
                    kind: Kind::Workload,
                });
            }
            Event::InitApply(pod) => self.apply_pod(&pod, true, &mut out),
            Event::Apply(pod) => self.apply_pod(&pod, false, &mut out),
            Event::Delete(pod) => {
                if let Some(key) = key_of(&pod) {
                    self.remove_pod(&key, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.pods.keys().cloned().collect();
                // The core removes the unlisted pods at RelistDone; the state forgets them,
                // and the inline volumes only they needed go once they are gone.
                let mut unneeded = Vec::new();
                for key in self.relist_end(Source::Pods, known.into_iter()) {
                    self.forget_pod(&key, &mut unneeded);
                }
                out.push(Input::RelistDone {
                    kind: Kind::Workload,
                });
                out.extend(unneeded);
            }
        }
        out
    }

    fn apply_pod(&mut self, pod: &Pod, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(key) = key_of(pod) else { return };
        if relist {
            self.seen(Source::Pods, &key);
        }
        let (Some(node), true) = (scheduled_node(pod), !is_terminated(pod)) else {
            self.remove_pod(&key, out);
            return;
        };
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // A pod's volumes cannot change: the same pod's (same uid) are not translated again
        // at each of its many status updates (nor warned about again).
        let volumes = match self.pods.get(&key) {
            Some(old) if old.uid == uid => old.volumes.clone(),
            _ => volumes_of(pod, &name, &namespace),
        };
        let (sent, inline_sent) = match self.pods.get(&key) {
            Some(old) => {
                let old_namespace = old.namespace.clone();
                let old_claims: Vec<Claim> = old.claims().cloned().collect();
                let (old_node, sent) = (old.node.clone(), old.sent.clone());
                let inline_sent = old.inline_sent.clone();
                for claim in &old_claims {
                    self.unlink_claim(&old_namespace, &claim.name, &key);
                }
                unlink(&mut self.pods_by_node, &old_node, &key);
                (sent, inline_sent)
            }
            None => (None, BTreeSet::new()),
        };
        let entry = PodEntry {
            namespace,
            name,
            uid,
            node: node.clone(),
            volumes,
            sent,
            inline_sent,
        };
        for claim in entry.claims() {
            self.pods_by_claim
                .entry(pod_key(&entry.namespace, &claim.name))
                .or_default()
                .insert(key.clone());
        }
        self.pods_by_node
            .entry(node.clone())
            .or_default()
            .insert(key.clone());
        let volumes = self.resolve(&entry);
        let unchanged = entry
            .sent
            .as_ref()
            .is_some_and(|(sent_node, sent)| *sent_node == node && *sent == volumes);
        self.pods.insert(key.clone(), entry);
        if self.kubelets(&node) {
            self.hide_pod(&key, out);
        } else if relist || !unchanged {
            self.send_pod(&key, volumes, out);
        }
    }

    fn unlink_claim(&mut self, namespace: &str, claim: &str, pod: &str) {
        unlink(&mut self.pods_by_claim, &pod_key(namespace, claim), pod);
    }

    /// Sends `WorkloadScheduled` for an active pod and records what was sent. An inline
    /// volume it needs first is set before (`SetVolume`), one no pod needs any more is
    /// removed after (`VolumeRemoved`).
    fn send_pod(&mut self, key: &str, volumes: Vec<String>, out: &mut Vec<Input<Kube>>) {
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let node = pod.node.clone();
        let previous = pod.sent.replace((node.clone(), volumes.clone()));
        let reference = PodRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let inline: Vec<(Translated, String)> = pod
            .volumes
            .iter()
            .filter_map(|volume| match volume {
                PodVolume::Inline(inline) if volumes.contains(&inline.0.unique) => {
                    Some((**inline).clone())
                }
                _ => None,
            })
            .collect();
        let now: BTreeSet<String> = inline.iter().map(|(t, _)| t.unique.clone()).collect();
        let before = std::mem::replace(&mut pod.inline_sent, now.clone());
        let mut index = self.index.write();
        if let Some((old_node, old)) = previous {
            for volume in old {
                unlink_user(&mut index, &old_node, &volume, key);
            }
        }
        for volume in &volumes {
            index
                .users
                .entry((node.clone(), volume.clone()))
                .or_default()
                .insert(key.to_owned());
        }
        index.pods.insert(key.to_owned(), reference);
        drop(index);
        for (translated, name) in inline {
            if !before.contains(&translated.unique) {
                self.add_inline_user(translated, name, key, out);
            }
        }
        out.push(Input::WorkloadScheduled {
            workload: key.to_owned(),
            node,
            volumes,
        });
        for unique in before.difference(&now) {
            self.remove_inline_user(unique, key, out);
        }
    }

    /// Records that the pod `key` needs the inline volume `translated`; the first pod to
    /// need it sets it, unless a PV gives it a spec already.
    fn add_inline_user(
        &mut self,
        translated: Translated,
        name: String,
        key: &str,
        out: &mut Vec<Input<Kube>>,
    ) {
        let Translated { unique, spec, .. } = translated;
        let entry = self
            .inline
            .entry(unique.clone())
            .or_insert_with(|| InlineEntry {
                spec: spec.clone(),
                users: BTreeSet::new(),
            });
        let first = entry.users.is_empty();
        entry.users.insert(key.to_owned());
        if first {
            self.index.write().inline.insert(unique.clone(), name);
            if self.pv_spec(&unique).is_none() {
                out.push(Input::SetVolume {
                    volume: unique,
                    spec,
                });
            }
        }
    }

    /// Records that the pod `key` no longer needs the inline volume `unique`; once no pod
    /// does, it is removed, unless a PV still gives it a spec.
    fn remove_inline_user(&mut self, unique: &str, key: &str, out: &mut Vec<Input<Kube>>) {
        let Some(entry) = self.inline.get_mut(unique) else {
            return;
        };
        entry.users.remove(key);
        if !entry.users.is_empty() {
            return;
        }
        self.inline.remove(unique);
        self.index.write().inline.remove(unique);
        if self.pv_spec(unique).is_none() {
            out.push(Input::VolumeRemoved {
                volume: unique.to_owned(),
            });
        }
    }

    /// Takes an active pod back from the core (`WorkloadRemoved`), keeping it in the state:
    /// its node is kubelet's.
    fn hide_pod(&mut self, key: &str, out: &mut Vec<Input<Kube>>) {
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let inline = std::mem::take(&mut pod.inline_sent);
        if let Some((node, sent)) = pod.sent.take() {
            let mut index = self.index.write();
            for volume in &sent {
                unlink_user(&mut index, &node, volume, key);
            }
            index.pods.remove(key);
            drop(index);
            out.push(Input::WorkloadRemoved {
                workload: key.to_owned(),
            });
        }
        for unique in &inline {
            self.remove_inline_user(unique, key, out);
        }
    }

    fn remove_pod(&mut self, key: &str, out: &mut Vec<Input<Kube>>) {
        let mut unneeded = Vec::new();
        if self.forget_pod(key, &mut unneeded) {
            out.push(Input::WorkloadRemoved {
                workload: key.to_owned(),
            });
        }
        out.extend(unneeded);
    }

    /// Drops a pod from the state; whether the core knew it. The inline volumes it alone
    /// needed are removed into `unneeded`.
    fn forget_pod(&mut self, key: &str, unneeded: &mut Vec<Input<Kube>>) -> bool {
        let Some(old) = self.pods.remove(key) else {
            return false;
        };
        for claim in old.claims() {
            self.unlink_claim(&old.namespace, &claim.name, key);
        }
        unlink(&mut self.pods_by_node, &old.node, key);
        for unique in &old.inline_sent {
            self.remove_inline_user(unique, key, unneeded);
        }
        let Some((node, sent)) = old.sent else {
            return false;
        };
        let mut index = self.index.write();
        for volume in &sent {
            unlink_user(&mut index, &node, volume, key);
        }
        index.pods.remove(key);
        true
    }

    /// Sends the active pods on `node` the core does not know (the node became this
    /// controller's, or is no longer known as kubelet's), except, during a pod relist, those
    /// the listing has not shown yet.
    fn reveal_pods(&mut self, node: &str, out: &mut Vec<Input<Kube>>) {
        for key in self.pods_on(node) {
            if self.unlisted(&key) {
                continue;
            }
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod.sent.is_none() {
                let volumes = self.resolve(pod);
                self.send_pod(&key, volumes, out);
            }
        }
    }

    /// Takes every active pod on `node` back from the core: the node is kubelet's.
    fn hide_pods(&mut self, node: &str, out: &mut Vec<Input<Kube>>) {
        for key in self.pods_on(node) {
            self.hide_pod(&key, out);
        }
    }

    fn pods_on(&self, node: &str) -> Vec<String> {
        self.pods_by_node
            .get(node)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a pod relist is running and has not shown `key` yet.
    fn unlisted(&self, key: &str) -> bool {
        self.relists
            .get(&Source::Pods)
            .is_some_and(|seen| !seen.contains(key))
    }

    /// The unique names of the volumes a pod needs that resolve now, on its node.
    fn resolve(&self, pod: &PodEntry) -> Vec<String> {
        let mut volumes: Vec<String> = Vec::new();
        for volume in &pod.volumes {
            let translated = match volume {
                PodVolume::Claim(claim) => self.resolve_claim(&pod.namespace, &pod.uid, claim),
                PodVolume::Inline(inline) => Some(&inline.0),
            };
            if let Some(translated) = translated
                && self.usable_on(&pod.node, translated)
                && !volumes.contains(&translated.unique)
            {
                volumes.push(translated.unique.clone());
            }
        }
        volumes
    }

    fn resolve_claim(&self, namespace: &str, pod_uid: &str, claim: &Claim) -> Option<&Translated> {
        let pvc = self.claims.get(&pod_key(namespace, &claim.name))?;
        if claim.ephemeral && pvc.owner.as_deref() != Some(pod_uid) {
            return None;
        }
        let pv = self.pvs.get(pvc.bound.as_ref()?)?;
        // Upstream's getPVSpecFromCache: a PV whose `claimRef` is unset is not bound yet
        // (the binder sets it before the claim's `volumeName`), and one naming another claim
        // uid is someone else's.
        if pv.claim_uid.as_deref() != Some(pvc.uid.as_str()) {
            return None;
        }
        pv.csi.as_ref()
    }

    /// Sends again the pods named by these claims whose volumes changed.
    fn rederive(&mut self, claims: impl IntoIterator<Item = String>, out: &mut Vec<Input<Kube>>) {
        let mut pods = BTreeSet::new();
        for claim in claims {
            if let Some(users) = self.pods_by_claim.get(&claim) {
                pods.extend(users.iter().cloned());
            }
        }
        self.rederive_pods(pods, out);
    }

    /// Sends again these pods, if the core knows them and their volumes changed.
    fn rederive_pods(&mut self, pods: BTreeSet<String>, out: &mut Vec<Input<Kube>>) {
        for key in pods {
            if self.unlisted(&key) {
                continue;
            }
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod.sent.is_none() {
                // Not the core's (its node is kubelet's).
                continue;
            }
            let volumes = self.resolve(pod);
            if volumes != pod.sent_volumes() {
                self.send_pod(&key, volumes, out);
            }
        }
    }

    // ---- claims ----

    /// One event of the PersistentVolumeClaim watcher.
    pub fn claims(&mut self, event: Event<PersistentVolumeClaim>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::Claims),
            Event::InitApply(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.seen(Source::Claims, &key);
                    self.apply_claim(key, &pvc, &mut out);
                }
            }
            Event::Apply(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.apply_claim(key, &pvc, &mut out);
                }
            }
            Event::Delete(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.remove_claim(&key);
                    self.rederive([key], &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.claims.keys().cloned().collect();
                let gone = self.relist_end(Source::Claims, known.into_iter());
                for key in &gone {
                    self.remove_claim(key);
                }
                self.rederive(gone, &mut out);
            }
        }
        out
    }

    fn apply_claim(
        &mut self,
        key: String,
        pvc: &PersistentVolumeClaim,
        out: &mut Vec<Input<Kube>>,
    ) {
        let bound = (pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .then(|| pvc.spec.as_ref().and_then(|s| s.volume_name.clone()))
            .flatten()
            .filter(|name| !name.is_empty());
        let owner = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        let entry = ClaimEntry {
            uid: pvc.metadata.uid.clone().unwrap_or_default(),
            bound,
            owner,
        };
        if self.claims.get(&key) == Some(&entry) {
            return;
        }
        self.remove_claim(&key);
        if let Some(pv) = &entry.bound {
            self.claims_by_pv
                .entry(pv.clone())
                .or_default()
                .insert(key.clone());
        }
        self.claims.insert(key.clone(), entry);
        self.rederive([key], out);
    }

    fn remove_claim(&mut self, key: &str) {
        let Some(old) = self.claims.remove(key) else {
            return;
        };
        if let Some(pv) = old.bound
            && let Some(claims) = self.claims_by_pv.get_mut(&pv)
        {
            claims.remove(key);
            if claims.is_empty() {
                self.claims_by_pv.remove(&pv);
            }
        }
    }

    // ---- volumes ----

    /// One event of the PersistentVolume watcher.
    pub fn volumes(&mut self, event: Event<PersistentVolume>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Volumes);
                out.push(Input::RelistStarted { kind: Kind::Volume });
            }
            Event::InitApply(pv) => self.apply_pv(&pv, true, &mut out),
            Event::Apply(pv) => self.apply_pv(&pv, false, &mut out),
            Event::Delete(pv) => {
                if let Some(name) = pv.metadata.name.clone() {
                    self.remove_pv(&name, true, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.pvs.keys().cloned().collect();
                for name in self.relist_end(Source::Volumes, known.into_iter()) {
                    // The core removes the volume at RelistDone unless another PV set it.
                    self.remove_pv(&name, false, &mut out);
                }
                // An inline volume has no PV to be listed: set, it counts as seen.
                out.extend(self.inline_only());
                out.push(Input::RelistDone { kind: Kind::Volume });
            }
        }
        out
    }

    fn apply_pv(&mut self, pv: &PersistentVolume, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(name) = pv.metadata.name.clone() else {
            return;
        };
        if relist {
            self.seen(Source::Volumes, &name);
        }
        let spec = pv.spec.as_ref();
        let csi = match translate_persistent_volume(pv) {
            Ok(csi) => csi,
            Err(error) => {
                warn!(pv = name, %error, "CSI migration cannot translate the PersistentVolume: \
                      its pods do not get it attached");
                None
            }
        };
        let csi = csi.map(|csi| translated(&csi, AttachSource::PersistentVolume(name.clone())));
        let entry = PvEntry {
            csi,
            claim_uid: spec
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.clone())
                .filter(|uid| !uid.is_empty()),
        };
        let previous = self.pvs.get(&name).cloned();
        if previous.as_ref() == Some(&entry) && !relist {
            return;
        }
        // A PV whose unique name changed (deleted and created again in a gap) leaves the old.
        if let Some(old) = &previous
            && old.csi.as_ref().map(|c| &c.unique) != entry.csi.as_ref().map(|c| &c.unique)
        {
            self.remove_pv(&name, true, out);
        }
        if let Some(Translated { unique, spec, .. }) = &entry.csi {
            self.index
                .write()
                .pvs
                .entry(unique.clone())
                .or_default()
                .insert(name.clone());
            if self.tracked(&spec.payload.driver) {
                out.push(Input::SetVolume {
                    volume: unique.clone(),
                    spec: spec.clone(),
                });
            }
        }
        self.pvs.insert(name.clone(), entry);
        let claims: Vec<String> = self
            .claims_by_pv
            .get(&name)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default();
        self.rederive(claims, out);
    }

    /// Drops a PV; `announce`: send `VolumeRemoved` (or `SetVolume` from the PV that still
    /// has the unique name) rather than leave the volume to the core's relist.
    fn remove_pv(&mut self, name: &str, announce: bool, out: &mut Vec<Input<Kube>>) {
        let Some(old) = self.pvs.remove(name) else {
            return;
        };
        if let Some(Translated { unique, spec, .. }) = &old.csi {
            let remaining = {
                let mut index = self.index.write();
                let remaining = index.pvs.get_mut(unique).and_then(|pvs| {
                    pvs.remove(name);
                    pvs.first().cloned()
                });
                if remaining.is_none() {
                    index.pvs.remove(unique);
                }
                remaining
            };
            if announce && self.tracked(&spec.payload.driver) {
                // Another PV of the volume, or pods needing it inline, keep it.
                let kept = remaining
                    .and_then(|pv| self.spec_of(&pv))
                    .or_else(|| self.inline.get(unique).map(|entry| entry.spec.clone()));
                match kept {
                    Some(spec) => out.push(Input::SetVolume {
                        volume: unique.clone(),
                        spec,
                    }),
                    None => out.push(Input::VolumeRemoved {
                        volume: unique.clone(),
                    }),
                }
            }
        }
        let claims: Vec<String> = self
            .claims_by_pv
            .get(name)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default();
        self.rederive(claims, out);
    }

    // ---- nodes ----

    /// One event of the Node watcher.
    pub fn nodes(&mut self, event: Event<Node>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Nodes);
                out.push(Input::RelistStarted { kind: Kind::Node });
            }
            Event::InitApply(node) => self.apply_node(&node, true, &mut out),
            Event::Apply(node) => self.apply_node(&node, false, &mut out),
            Event::Delete(node) => {
                if let Some(name) = node.metadata.name
                    && self.forget_node(&name, &mut out)
                {
                    out.push(Input::NodeRemoved { node: name });
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.nodes.keys().cloned().collect();
                let mut revealed = Vec::new();
                for name in self.relist_end(Source::Nodes, known.into_iter()) {
                    // The core removes a managed one at RelistDone.
                    self.forget_node(&name, &mut revealed);
                }
                out.push(Input::RelistDone { kind: Kind::Node });
                out.extend(revealed);
            }
        }
        out
    }

    /// Drops a node (deleted, or missing from a relist); whether the core knew it. The pods
    /// of a node kubelet managed are sent from then on, as any pod whose node is not known
    /// (the core lets them wait for it).
    fn forget_node(&mut self, name: &str, out: &mut Vec<Input<Kube>>) -> bool {
        let Some(entry) = self.nodes.remove(name) else {
            return false;
        };
        self.managed.remove(name);
        self.index.write().nodes.remove(name);
        if !entry.managed {
            self.reveal_pods(name, out);
        }
        entry.managed
    }

    fn apply_node(&mut self, node: &Node, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if relist {
            self.seen(Source::Nodes, &name);
        }
        if let Some(uid) = &node.metadata.uid {
            self.index.write().nodes.insert(name.clone(), uid.clone());
        }
        let annotated = controller_managed(&node.metadata);
        let facts = node_facts(node);
        let previous = self.nodes.get(&name);
        let was_managed = previous.is_some_and(|entry| entry.managed);
        if was_managed && !annotated && previous.is_some_and(|entry| entry.annotated) {
            warn!(
                node = name,
                "the node lost its controller-managed-attach-detach annotation: its kubelet \
                 attaches by itself from now on, but this controller keeps managing it (as \
                 upstream does) until the node is deleted or the controller restarts"
            );
        }
        let entry = NodeEntry {
            managed: was_managed || annotated,
            annotated,
            facts,
        };
        if !entry.managed {
            let known = previous.is_some();
            self.nodes.insert(name.clone(), entry);
            self.managed.set(&name, false);
            if !known {
                // Pods sent before the node was seen are kubelet's.
                self.hide_pods(&name, out);
            }
            return;
        }
        let unchanged = was_managed && previous.is_some_and(|old| old.facts == entry.facts);
        let revealed = previous.is_some() && !was_managed;
        let facts = entry.facts.clone();
        self.nodes.insert(name.clone(), entry);
        self.managed.set(&name, true);
        if relist || !unchanged {
            out.push(Input::NodeUpdated {
                node: name.clone(),
                facts,
            });
        }
        if revealed {
            self.reveal_pods(&name, out);
        }
    }

    // ---- CSI nodes ----

    /// One event of the CSINode watcher: what a node's CSINode says of CSI migration
    /// ([`MigratedNode`]) decides whether its pods' volumes of an in-tree plugin whose
    /// migration is not complete are the core's; when it changes, they are sent again.
    pub fn csi_nodes(&mut self, event: Event<CSINode>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::CsiNodes),
            Event::InitApply(csi_node) | Event::Apply(csi_node) => {
                if let Some(name) = csi_node.metadata.name.clone() {
                    self.seen(Source::CsiNodes, &name);
                    let migrated = MigratedNode::of(&csi_node);
                    if self.csi_nodes.get(&name) != Some(&migrated) {
                        self.csi_nodes.insert(name.clone(), migrated);
                        self.rederive_pods(self.pods_on(&name).into_iter().collect(), &mut out);
                    }
                }
            }
            Event::Delete(csi_node) => {
                if let Some(name) = csi_node.metadata.name {
                    self.forget_csi_node(&name, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.csi_nodes.keys().cloned().collect();
                for name in self.relist_end(Source::CsiNodes, known.into_iter()) {
                    self.forget_csi_node(&name, &mut out);
                }
            }
        }
        out
    }

    fn forget_csi_node(&mut self, name: &str, out: &mut Vec<Input<Kube>>) {
        if self.csi_nodes.remove(name).is_some() {
            self.rederive_pods(self.pods_on(name).into_iter().collect(), out);
        }
    }

    // ---- drivers ----

    /// The registry of which drivers need attach, as the CSIDriver watcher shows it: hand it
    /// to the backend ([`VolumeAttachmentBackend::new`](crate::VolumeAttachmentBackend::new)).
    pub fn csi_drivers(&self) -> CsiDrivers {
        self.csi_drivers.clone()
    }

    /// One event of the CSIDriver watcher: the registry is updated, and when a driver starts
    /// or stops needing attach, its volumes are set or removed and their pods sent again.
    pub fn drivers(&mut self, event: Event<CSIDriver>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::Drivers),
            Event::InitApply(driver) | Event::Apply(driver) => {
                if let Some(name) = driver.metadata.name.clone() {
                    self.seen(Source::Drivers, &name);
                    self.drivers.insert(name.clone());
                    self.change_driver(&name, |registry| registry.apply(&driver), &mut out);
                }
            }
            Event::Delete(driver) => {
                if let Some(name) = driver.metadata.name {
                    self.drivers.remove(&name);
                    self.change_driver(&name, |registry| registry.remove(&name), &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.drivers.iter().cloned().collect();
                for name in self.relist_end(Source::Drivers, known.into_iter()) {
                    self.drivers.remove(&name);
                    self.change_driver(&name, |registry| registry.remove(&name), &mut out);
                }
            }
        }
        out
    }

    /// Applies `change` to the registry; if `driver` starts or stops needing attach, its
    /// volumes are set (or removed) and the pods bound to them are sent again.
    fn change_driver(
        &mut self,
        driver: &str,
        change: impl FnOnce(&CsiDrivers),
        out: &mut Vec<Input<Kube>>,
    ) {
        let before = self.tracked(driver);
        change(&self.csi_drivers);
        if self.tracked(driver) == before {
            return;
        }
        let volumes: Vec<(String, String)> = {
            let index = self.index.read();
            let mut volumes: Vec<(String, String)> = index
                .pvs
                .iter()
                .filter(|(unique, _)| split_unique_name(unique).is_some_and(|(d, _)| d == driver))
                .filter_map(|(unique, pvs)| Some((unique.clone(), pvs.first()?.clone())))
                .collect();
            volumes.sort();
            volumes
        };
        let mut claims = BTreeSet::new();
        for (unique, pv) in volumes {
            match self.spec_of(&pv) {
                Some(spec) => out.push(Input::SetVolume {
                    volume: unique,
                    spec,
                }),
                None => out.push(Input::VolumeRemoved { volume: unique }),
            }
        }
        for (name, entry) in &self.pvs {
            if entry
                .csi
                .as_ref()
                .is_some_and(|c| c.spec.payload.driver == driver)
                && let Some(bound) = self.claims_by_pv.get(name)
            {
                claims.extend(bound.iter().cloned());
            }
        }
        self.rederive(claims, out);
        // And the pods with an inline volume of the driver.
        let inline: BTreeSet<String> = self
            .pods
            .iter()
            .filter(|(_, pod)| {
                pod.volumes.iter().any(|volume| {
                    matches!(volume, PodVolume::Inline(inline)
                        if inline.0.spec.payload.driver == driver)
                })
            })
            .map(|(key, _)| key.clone())
            .collect();
        self.rederive_pods(inline, out);
    }
}

/// Takes `member` out of the set at `key`, dropping the set once empty.
fn unlink(sets: &mut HashMap<String, BTreeSet<String>>, key: &str, member: &str) {
    if let Some(set) = sets.get_mut(key) {
        set.remove(member);
        if set.is_empty() {
            sets.remove(key);
        }
    }
}

fn unlink_user(index: &mut IndexInner, node: &str, volume: &str, pod: &str) {
    let at = (node.to_owned(), volume.to_owned());
    if let Some(pods) = index.users.get_mut(&at) {
        pods.remove(pod);
        if pods.is_empty() {
            index.users.remove(&at);
        }
    }
}

/// `namespace/name` of a namespaced object.
fn key_of<K: Resource>(object: &K) -> Option<String> {
    let meta = object.meta();
    Some(pod_key(meta.namespace.as_deref()?, meta.name.as_deref()?))
}

fn scheduled_node(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|node| !node.is_empty())
}

/// Upstream's `IsPodTerminated`: phase `Failed` or `Succeeded`, or being deleted with every
/// init, regular and ephemeral container stopped. A container has stopped only when its state
/// says `terminated` or `waiting` (upstream's `notRunning`): one with no state yet may be
/// running, and a debugging container still writes to the pod's volumes.
fn is_terminated(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return pod.metadata.deletion_timestamp.is_some();
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    pod.metadata.deletion_timestamp.is_some()
        && status
            .init_container_statuses
            .iter()
            .chain(status.container_statuses.iter())
            .chain(status.ephemeral_container_statuses.iter())
            .flatten()
            .all(|c| {
                c.state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some() || s.waiting.is_some())
            })
}

/// What the pod's volumes may need attached, in the pod's order: its claims (a generic
/// ephemeral volume's is `{pod}-{volume}`), and its inline in-tree volumes as CSI migration
/// translates them (one that does not translate is skipped, as upstream skips it).
fn volumes_of(pod: &Pod, pod_name: &str, namespace: &str) -> Vec<PodVolume> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                return Some(PodVolume::Claim(Claim {
                    name: pvc.claim_name.clone(),
                    ephemeral: false,
                }));
            }
            if v.ephemeral.is_some() {
                return Some(PodVolume::Claim(Claim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                }));
            }
            match translate_inline_volume(v, namespace) {
                Ok(Some(csi)) => {
                    let name = csi.name().to_owned();
                    let source = AttachSource::Inline(Box::new(csi.spec()));
                    Some(PodVolume::Inline(Box::new((
                        translated(&csi, source),
                        name,
                    ))))
                }
                Ok(None) => None,
                Err(error) => {
                    warn!(pod = pod_key(namespace, pod_name), volume = v.name, %error,
                        "skipping an inline volume CSI migration cannot translate");
                    None
                }
            }
        })
        .collect()
}

/// A translated volume with the attachment source `source`, as the core takes it.
fn translated(csi: &CsiSpec, source: AttachSource) -> Translated {
    Translated {
        unique: csi.unique_name(),
        spec: VolumeSpec {
            access: csi.access(),
            payload: CsiVolume {
                source,
                driver: csi.driver().to_owned(),
                handle: csi.handle().to_owned(),
            },
            attach_required: true,
        },
        plugin: csi.plugin(),
    }
}

/// A node's facts (see [`InformerState`]).
pub fn node_facts(node: &Node) -> NodeFacts<String> {
    let status = node.status.as_ref();
    facts_of(
        status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str())),
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|t| t.key.as_str()),
        status.and_then(|s| s.volumes_in_use.as_deref()),
    )
}

/// One event of any of the six watchers. Variants differ in size; one lives at a time, so
/// boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Update {
    Pod(Event<Pod>),
    Claim(Event<PersistentVolumeClaim>),
    Volume(Event<PersistentVolume>),
    Node(Event<Node>),
    Driver(Event<CSIDriver>),
    CsiNode(Event<CSINode>),
}

type Updates = Pin<Box<dyn Stream<Item = Result<Update, watcher::Error>> + Send>>;

fn stream<K>(api: Api<K>, wrap: fn(Event<K>) -> Update) -> Updates
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    watch::watcher(api, watch::Config::default())
        .default_backoff()
        .map(move |event| event.map(wrap))
        .boxed()
}

/// kube-runtime's watchers on Pods, PVCs, PVs, Nodes, CSIDrivers and CSINodes (all namespaces), merged
/// and mapped through an [`InformerState`].
///
/// Each watcher has kube-runtime's default configuration and default backoff: a failed list or
/// watch is retried, and a watch that cannot resume lists again (a relist, see
/// [`InformerState`]). Errors are logged, never fatal.
///
/// ```no_run
/// # async fn demo(client: kube::Client, handle: attach_detach::controller::ControllerHandle<attach_detach_kube::Kube>) {
/// use attach_detach_kube::Informers;
/// let mut informers = Informers::new(client.clone());
/// // Hand the backend the registries the informers keep.
/// let backend = attach_detach_kube::VolumeAttachmentBackend::new(client.clone(), informers.csi_drivers())
///     .with_managed_nodes(informers.managed_nodes());
/// # let _ = backend;
/// let world = informers.initial_sync().await; // every watcher has listed once
/// # let _ = world;
/// // … build and spawn a controller from `world`, then:
/// informers.run(handle).await;
/// # }
/// ```
pub struct Informers {
    state: InformerState,
    updates: Updates,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// The six watchers on `client`'s cluster, with upstream's default CSI migration
    /// ([`CsiMigration::default`]); nothing is listed until polled.
    pub fn new(client: Client) -> Self {
        Self::with_csi_migration(client, CsiMigration::default())
    }

    /// The same, with CSI migration as `migration` says (say, every plugin's complete, when
    /// kube-controller-manager runs with `InTreePluginPortworxUnregister`).
    pub fn with_csi_migration(client: Client, migration: CsiMigration) -> Self {
        let updates = futures::stream::select_all([
            stream(Api::<Pod>::all(client.clone()), Update::Pod),
            stream(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                Update::Claim,
            ),
            stream(Api::<PersistentVolume>::all(client.clone()), Update::Volume),
            stream(Api::<Node>::all(client.clone()), Update::Node),
            stream(Api::<CSIDriver>::all(client.clone()), Update::Driver),
            stream(Api::<CSINode>::all(client), Update::CsiNode),
        ])
        .boxed();
        Informers {
            state: InformerState::with_csi_migration(migration),
            updates,
        }
    }

    /// The view the event recorder reads.
    pub fn index(&self) -> ObjectIndex {
        self.state.index()
    }

    /// Which nodes this controller manages, as the Node watcher shows them: hand it to the
    /// backend ([`VolumeAttachmentBackend::with_managed_nodes`](crate::VolumeAttachmentBackend::with_managed_nodes)).
    pub fn managed_nodes(&self) -> ManagedNodes {
        self.state.managed_nodes()
    }

    /// Which drivers need attach, as the CSIDriver watcher shows them: hand it to the
    /// backend ([`VolumeAttachmentBackend::new`](crate::VolumeAttachmentBackend::new)).
    pub fn csi_drivers(&self) -> CsiDrivers {
        self.state.csi_drivers()
    }

    /// The inputs of the next watch event; `None` when the streams ended (they do not, in
    /// practice).
    async fn next(&mut self) -> Option<Vec<Input<Kube>>> {
        loop {
            match self.updates.next().await? {
                Ok(Update::Pod(e)) => return Some(self.state.pods(e)),
                Ok(Update::Claim(e)) => return Some(self.state.claims(e)),
                Ok(Update::Volume(e)) => return Some(self.state.volumes(e)),
                Ok(Update::Node(e)) => return Some(self.state.nodes(e)),
                Ok(Update::Driver(e)) => return Some(self.state.drivers(e)),
                Ok(Update::CsiNode(e)) => return Some(self.state.csi_nodes(e)),
                Err(error) => warn!(%error, "watch failed; kube-runtime retries with backoff"),
            }
        }
    }

    /// Consumes watch events until every watcher has listed once, and returns the cluster as
    /// a controller's start-up [`World`] ([`InformerState::world`]).
    ///
    /// Starting a controller from the whole picture matters: a controller fed pods before
    /// their claims would see their volumes as not needed for a moment.
    pub async fn initial_sync(&mut self) -> World<Kube> {
        while !self.state.synced() {
            if self.next().await.is_none() {
                break;
            }
        }
        info!("informers synced");
        self.state.world()
    }

    /// Forwards every change to `handle`, one `send_all` batch per watch event, until the
    /// controller stops (or the watch streams end). Inputs the core refuses are logged.
    pub async fn run(mut self, handle: ControllerHandle<Kube>) {
        while let Some(inputs) = self.next().await {
            if inputs.is_empty() {
                continue;
            }
            debug!(count = inputs.len(), "informer inputs");
            match handle.send_all(inputs.clone()).await {
                Ok(refused) => {
                    for rejection in refused {
                        warn!(input = ?inputs.get(rejection.index), error = %rejection.error, "the controller refused an input");
                    }
                }
                Err(ControllerError::Stopped) => return,
                Err(error) => {
                    warn!(%error, "the controller is gone; informers stop");
                    return;
                }
            }
        }
    }
}
