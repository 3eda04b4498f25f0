//! Kubernetes watches turned into controller inputs: Pods, PersistentVolumeClaims,
//! PersistentVolumes and Nodes become [`Input<Kube>`]s, CSIDrivers go to a callback.
//!
//! The mapping is [`InformerState`]: pure and synchronous, fed one `watcher::Event` at a time,
//! so every rule is unit-tested without an API server. [`Informers`] drives kube-runtime's five
//! watchers through it: [`Informers::initial_sync`] waits until every watcher has listed once
//! (upstream's `WaitForCacheSync`) and hands back the [`World`] a controller starts from, then
//! [`Informers::run`] forwards every later change to a running controller.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use attach_detach::controller::{ControllerError, ControllerHandle, World};
use attach_detach::core::{Access, Input, Kind, NodeFacts, VolumeSpec};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client, Resource};
use tracing::{debug, info, warn};

use crate::domain::{CsiVolume, Kube, facts_of, pod_key};

/// A change to the set of CSIDrivers, for the registry the backend reads `attachRequired` from.
#[derive(Clone, Debug, PartialEq)]
pub enum DriverChange {
    /// A CSIDriver exists (or changed).
    Applied(Box<CSIDriver>),
    /// The CSIDriver of this name is gone (deleted, or missing from a relist).
    Removed(String),
}

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
    /// share a driver and handle), as upstream's event messages name volumes.
    pub fn pv_name(&self, volume: &str) -> Option<String> {
        self.read().pvs.get(volume)?.first().cloned()
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

/// An active pod: scheduled and not terminal.
#[derive(Clone, Debug)]
struct PodEntry {
    namespace: String,
    uid: String,
    node: String,
    claims: Vec<Claim>,
    /// The volumes last sent with its `WorkloadScheduled`.
    sent: Vec<String>,
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
    /// The unique name and spec of a CSI PV; `None` for another plugin's.
    csi: Option<(String, VolumeSpec<CsiVolume>)>,
    /// `spec.claimRef.uid`.
    claim_uid: Option<String>,
}

/// Which of the five watchers a relist belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Pods,
    Claims,
    Volumes,
    Nodes,
    Drivers,
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
/// `persistentVolumeClaim.claimName` (or a generic ephemeral volume's claim `{pod}-{volume}`,
/// only if the pod controls it) → a PVC of the pod's namespace whose `status.phase` is `Bound`
/// → its `spec.volumeName` → a PV with `spec.csi` whose `claimRef.uid` is the PVC's
/// → [`unique_name`](crate::unique_name). Anything else (a missing or unbound claim, a non-CSI PV, an inline
/// volume) contributes nothing until it resolves; the pod is sent again whenever a PVC or PV
/// change changes what it resolves to. A pod that stops being active, or is deleted, is
/// [`Input::WorkloadRemoved`]. A pod is sent again only if its node or volumes changed (the
/// kubelet updates pod status often), except in a relist, where every active pod is sent.
///
/// **PersistentVolumes** (kind [`Kind::Volume`], volume = unique name). A PV with `spec.csi`
/// is [`Input::SetVolume`] with [`CsiVolume`] as payload, single-node unless its
/// `accessModes` include `ReadWriteMany` or `ReadOnlyMany` (upstream's `isMultiAttachAllowed`;
/// upstream also allows several nodes for a PV without access modes, which validation makes
/// impossible: this takes the safe side). A deleted PV is [`Input::VolumeRemoved`]; should
/// several PVs share a driver and handle, the volume is removed with the last one (and set
/// again from a remaining one). Other plugins' PVs are not this controller's.
///
/// **Nodes** (kind [`Kind::Node`]). [`Input::NodeUpdated`] with [`NodeFacts`]: `healthy` is a
/// `Ready` condition whose status is `"True"`, `fenced` is the presence of the
/// [`OUT_OF_SERVICE_TAINT`](crate::OUT_OF_SERVICE_TAINT), `in_use` is `status.volumesInUse`, or `None` while the node has no
/// `Ready` condition at all (its kubelet never reported: every attached volume counts as
/// mounted). Sent again only when the facts change, except in a relist. A deleted node is
/// [`Input::NodeRemoved`].
///
/// **PersistentVolumeClaims** feed no kind of their own: a change re-derives the pods that
/// name the claim.
///
/// **CSIDrivers** become [`DriverChange`]s, for the backend's registry.
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
/// from a listing are [`DriverChange::Removed`].
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
    /// Node → the facts last sent.
    nodes: HashMap<String, NodeFacts<String>>,
    drivers: HashSet<String>,
    /// Names seen by each watcher's relist in progress.
    relists: HashMap<Source, HashSet<String>>,
    /// Watchers that completed a listing at least once.
    synced: HashSet<Source>,
    index: ObjectIndex,
}

impl InformerState {
    /// An empty state: nothing known, no watcher synced.
    pub fn new() -> Self {
        Self::default()
    }

    /// The view the event recorder reads (see [`ObjectIndex`]).
    pub fn index(&self) -> ObjectIndex {
        self.index.clone()
    }

    /// Whether every watcher (pods, claims, volumes, nodes, drivers) has completed a listing:
    /// from then on the state shows the whole cluster.
    pub fn synced(&self) -> bool {
        self.synced.len() == 5
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
        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_by(|a, b| a.0.cmp(b.0));
        for (node, facts) in nodes {
            inputs.push(Input::NodeUpdated {
                node: node.clone(),
                facts: facts.clone(),
            });
        }
        let mut pods: Vec<_> = self.pods.iter().collect();
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

    fn spec_of(&self, pv: &str) -> Option<VolumeSpec<CsiVolume>> {
        self.pvs.get(pv)?.csi.as_ref().map(|(_, spec)| spec.clone())
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
                for key in self.relist_end(Source::Pods, known.into_iter()) {
                    // The core removes it at RelistDone; the state forgets it.
                    self.forget_pod(&key);
                }
                out.push(Input::RelistDone {
                    kind: Kind::Workload,
                });
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
        let claims = claims_of(pod, &name);
        let previous = self.pods.get(&key).cloned();
        if let Some(old) = &previous {
            for claim in &old.claims {
                self.unlink_claim(&old.namespace, &claim.name, &key);
            }
        }
        for claim in &claims {
            self.pods_by_claim
                .entry(pod_key(&namespace, &claim.name))
                .or_default()
                .insert(key.clone());
        }
        let entry = PodEntry {
            namespace: namespace.clone(),
            uid: uid.clone(),
            node: node.clone(),
            claims,
            sent: previous
                .as_ref()
                .map(|p| p.sent.clone())
                .unwrap_or_default(),
        };
        let volumes = self.resolve(&entry);
        let unchanged = previous
            .as_ref()
            .is_some_and(|p| p.node == node && p.sent == volumes);
        self.pods.insert(key.clone(), entry);
        self.index.write().pods.insert(
            key.clone(),
            PodRef {
                namespace,
                name,
                uid,
            },
        );
        if relist || !unchanged {
            self.send_pod(&key, volumes, previous.map(|p| (p.node, p.sent)), out);
        }
    }

    fn unlink_claim(&mut self, namespace: &str, claim: &str, pod: &str) {
        let claim_key = pod_key(namespace, claim);
        if let Some(pods) = self.pods_by_claim.get_mut(&claim_key) {
            pods.remove(pod);
            if pods.is_empty() {
                self.pods_by_claim.remove(&claim_key);
            }
        }
    }

    /// Sends `WorkloadScheduled` for an active pod and records what was sent.
    fn send_pod(
        &mut self,
        key: &str,
        volumes: Vec<String>,
        previous: Option<(String, Vec<String>)>,
        out: &mut Vec<Input<Kube>>,
    ) {
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        pod.sent = volumes.clone();
        let node = pod.node.clone();
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
        drop(index);
        out.push(Input::WorkloadScheduled {
            workload: key.to_owned(),
            node,
            volumes,
        });
    }

    fn remove_pod(&mut self, key: &str, out: &mut Vec<Input<Kube>>) {
        if self.forget_pod(key) {
            out.push(Input::WorkloadRemoved {
                workload: key.to_owned(),
            });
        }
    }

    /// Drops a pod from the state; whether it was active.
    fn forget_pod(&mut self, key: &str) -> bool {
        let Some(old) = self.pods.remove(key) else {
            return false;
        };
        for claim in &old.claims {
            self.unlink_claim(&old.namespace, &claim.name, key);
        }
        let mut index = self.index.write();
        for volume in &old.sent {
            unlink_user(&mut index, &old.node, volume, key);
        }
        index.pods.remove(key);
        true
    }

    /// The unique names of the volumes a pod needs that resolve now.
    fn resolve(&self, pod: &PodEntry) -> Vec<String> {
        let mut volumes: Vec<String> = Vec::new();
        for claim in &pod.claims {
            if let Some(volume) = self.resolve_claim(&pod.namespace, &pod.uid, claim)
                && !volumes.contains(&volume)
            {
                volumes.push(volume);
            }
        }
        volumes
    }

    fn resolve_claim(&self, namespace: &str, pod_uid: &str, claim: &Claim) -> Option<String> {
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
        pv.csi.as_ref().map(|(unique, _)| unique.clone())
    }

    /// Sends again the pods named by these claims whose volumes changed.
    fn rederive(&mut self, claims: impl IntoIterator<Item = String>, out: &mut Vec<Input<Kube>>) {
        let mut pods = BTreeSet::new();
        for claim in claims {
            if let Some(users) = self.pods_by_claim.get(&claim) {
                pods.extend(users.iter().cloned());
            }
        }
        for key in pods {
            let unlisted = self
                .relists
                .get(&Source::Pods)
                .is_some_and(|seen| !seen.contains(&key));
            if unlisted {
                continue;
            }
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            let volumes = self.resolve(pod);
            if volumes != pod.sent {
                let previous = Some((pod.node.clone(), pod.sent.clone()));
                self.send_pod(&key, volumes, previous, out);
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
        let csi = spec.and_then(|s| s.csi.as_ref()).map(|csi| {
            let payload = CsiVolume {
                pv: name.clone(),
                driver: csi.driver.clone(),
                handle: csi.volume_handle.clone(),
            };
            let access = access_of(spec.and_then(|s| s.access_modes.as_deref()));
            (
                payload.unique_name(),
                VolumeSpec {
                    access,
                    payload,
                    attach_required: true,
                },
            )
        });
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
            && old.csi.as_ref().map(|c| &c.0) != entry.csi.as_ref().map(|c| &c.0)
        {
            self.remove_pv(&name, true, out);
        }
        if let Some((unique, spec)) = &entry.csi {
            self.index
                .write()
                .pvs
                .entry(unique.clone())
                .or_default()
                .insert(name.clone());
            out.push(Input::SetVolume {
                volume: unique.clone(),
                spec: spec.clone(),
            });
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
        if let Some((unique, _)) = &old.csi {
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
            if announce {
                match remaining.and_then(|pv| self.spec_of(&pv)) {
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
                if let Some(name) = node.metadata.name {
                    self.nodes.remove(&name);
                    self.index.write().nodes.remove(&name);
                    out.push(Input::NodeRemoved { node: name });
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.nodes.keys().cloned().collect();
                for name in self.relist_end(Source::Nodes, known.into_iter()) {
                    self.nodes.remove(&name);
                    self.index.write().nodes.remove(&name);
                }
                out.push(Input::RelistDone { kind: Kind::Node });
            }
        }
        out
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
        let facts = node_facts(node);
        if !relist && self.nodes.get(&name) == Some(&facts) {
            return;
        }
        self.nodes.insert(name.clone(), facts.clone());
        out.push(Input::NodeUpdated { node: name, facts });
    }

    // ---- drivers ----

    /// One event of the CSIDriver watcher: changes for the driver registry, no inputs.
    pub fn drivers(&mut self, event: Event<CSIDriver>) -> Vec<DriverChange> {
        match event {
            Event::Init => {
                self.relist_start(Source::Drivers);
                Vec::new()
            }
            Event::InitApply(driver) | Event::Apply(driver) => {
                let Some(name) = driver.metadata.name.clone() else {
                    return Vec::new();
                };
                self.seen(Source::Drivers, &name);
                self.drivers.insert(name);
                vec![DriverChange::Applied(Box::new(driver))]
            }
            Event::Delete(driver) => match driver.metadata.name {
                Some(name) => {
                    self.drivers.remove(&name);
                    vec![DriverChange::Removed(name)]
                }
                None => Vec::new(),
            },
            Event::InitDone => {
                let known: Vec<String> = self.drivers.iter().cloned().collect();
                let gone = self.relist_end(Source::Drivers, known.into_iter());
                gone.into_iter()
                    .map(|name| {
                        self.drivers.remove(&name);
                        DriverChange::Removed(name)
                    })
                    .collect()
            }
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

fn claims_of(pod: &Pod, pod_name: &str) -> Vec<Claim> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(Claim {
                    name: pvc.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| Claim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

fn access_of(modes: Option<&[String]>) -> Access {
    let multi = modes
        .unwrap_or_default()
        .iter()
        .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany");
    if multi {
        Access::MultiNode
    } else {
        Access::SingleNode
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

/// One event of any of the five watchers. Variants differ in size; one lives at a time, so
/// boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Update {
    Pod(Event<Pod>),
    Claim(Event<PersistentVolumeClaim>),
    Volume(Event<PersistentVolume>),
    Node(Event<Node>),
    Driver(Event<CSIDriver>),
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

/// kube-runtime's watchers on Pods, PVCs, PVs, Nodes and CSIDrivers (all namespaces), merged
/// and mapped through an [`InformerState`].
///
/// Each watcher has kube-runtime's default configuration and default backoff: a failed list or
/// watch is retried, and a watch that cannot resume lists again (a relist, see
/// [`InformerState`]). Errors are logged, never fatal.
///
/// ```no_run
/// # async fn demo(client: kube::Client, handle: attach_detach::controller::ControllerHandle<attach_detach_kube::Kube>) {
/// use attach_detach_kube::Informers;
/// let mut informers = Informers::new(client, |change| println!("{change:?}"));
/// let world = informers.initial_sync().await; // every watcher has listed once
/// # let _ = world;
/// // … build and spawn a controller from `world`, then:
/// informers.run(handle).await;
/// # }
/// ```
pub struct Informers {
    state: InformerState,
    updates: Updates,
    on_driver: Box<dyn FnMut(DriverChange) + Send>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// The five watchers on `client`'s cluster; nothing is listed until polled. `on_driver`
    /// receives every CSIDriver change (wire it to the backend's driver registry).
    pub fn new(client: Client, on_driver: impl FnMut(DriverChange) + Send + 'static) -> Self {
        let updates = futures::stream::select_all([
            stream(Api::<Pod>::all(client.clone()), Update::Pod),
            stream(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                Update::Claim,
            ),
            stream(Api::<PersistentVolume>::all(client.clone()), Update::Volume),
            stream(Api::<Node>::all(client.clone()), Update::Node),
            stream(Api::<CSIDriver>::all(client), Update::Driver),
        ])
        .boxed();
        Informers {
            state: InformerState::new(),
            updates,
            on_driver: Box::new(on_driver),
        }
    }

    /// The view the event recorder reads.
    pub fn index(&self) -> ObjectIndex {
        self.state.index()
    }

    /// The inputs of the next watch event (none for a CSIDriver event, whose changes went to
    /// the callback); `None` when the streams ended (they do not, in practice).
    async fn next(&mut self) -> Option<Vec<Input<Kube>>> {
        loop {
            match self.updates.next().await? {
                Ok(Update::Pod(e)) => return Some(self.state.pods(e)),
                Ok(Update::Claim(e)) => return Some(self.state.claims(e)),
                Ok(Update::Volume(e)) => return Some(self.state.volumes(e)),
                Ok(Update::Node(e)) => return Some(self.state.nodes(e)),
                Ok(Update::Driver(e)) => {
                    for change in self.state.drivers(e) {
                        (self.on_driver)(change);
                    }
                    // No inputs, but the caller may be waiting for the drivers' first listing.
                    return Some(Vec::new());
                }
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
