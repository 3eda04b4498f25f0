//! Kubernetes watches turned into controller inputs: Pods, PersistentVolumeClaims,
//! PersistentVolumes, Nodes, CSIDrivers and CSINodes become [`Input<Kube>`]s, and the registries the
//! backend reads ([`CsiDrivers`], [`ManagedNodes`]) are kept up to date.
//!
//! The mapping is [`InformerState`]: pure and synchronous, fed one `watcher::Event` at a time,
//! so every rule is unit-tested without an API server. [`Informers`] drives kube-runtime's six
//! watchers through it: [`Informers::initial_sync`] waits until every watcher has listed once
//! (upstream's `WaitForCacheSync`) and hands back the [`World`] a controller starts from, then
//! [`Informers::run`] forwards every later change to a running controller.
//!
//! Here: the state and what it keeps of each object, and the rules every watcher shares (which
//! volumes the core tracks, relists). Beside, one file per watcher's events: `pods`, `volumes`
//! (claims and PersistentVolumes), `nodes` (Nodes and CSINodes), `drivers`; `index` is the view
//! the event recorder reads, `snapshot` the state as a start-up world, `watchers` the watchers.

mod drivers;
mod index;
mod nodes;
mod pods;
mod snapshot;
mod volumes;
mod watchers;
pub use index::{ObjectIndex, PodRef};
pub use nodes::{driver_limits, node_facts};
pub use watchers::Informers;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;

use attach_detach::core::{DriverId, NodeFacts, VolumeSpec};
use kube::Resource;
use tracing::debug;

use crate::domain::{AttachSource, CsiVolume, driver_id, pod_key};
use crate::drivers::CsiDrivers;
use crate::nodes::ManagedNodes;
use crate::translate::{CsiMigration, CsiSpec, InTreePlugin, MigratedNode};
// Only the state's docs name these (the inputs each object becomes).
#[cfg(doc)]
use attach_detach::core::{Input, Kind};

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
    /// Each node's per-driver attach limits, from its CSINode (`allocatable.count`).
    csi_limits: HashMap<String, Vec<(DriverId, u32)>>,
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
}

/// `namespace/name` of a namespaced object.
fn key_of<K: Resource>(object: &K) -> Option<String> {
    let meta = object.meta();
    Some(pod_key(meta.namespace.as_deref()?, meta.name.as_deref()?))
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
            // Counted against the driver's limit on a node (CSINode's allocatable count),
            // a migrated in-tree volume under its CSI driver, as kubelet counts it.
            driver: Some(driver_id(csi.driver())),
        },
        plugin: csi.plugin(),
    }
}
