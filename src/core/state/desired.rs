//! Desired state of world: which volumes each node must have, which workloads need them, and
//! which workloads wait for a node or a volume the core does not know yet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use thiserror::Error;

use crate::config::Config;
use crate::core::calls::volume::VolumeSpec;
use crate::core::tables::dense_table::{self, DenseTable, Keyed};
use crate::core::tables::slot_table::{Slot, SlotTable};
use crate::core::tables::trim::trim_map;
use crate::domain::Domain;

/// Misuse of the desired state, reported instead of being silently absorbed.
///
/// Inputs in any order are not misuse: a workload naming a node or volume not known yet waits,
/// and removing something unknown is a no-op. What is left is what would grow without bound.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DesiredError<D: Domain> {
    /// The workload names something not known yet, so it would wait, but
    /// [`Config::max_pending_workloads`] workloads wait already. Nothing changed: an earlier
    /// placement of the workload stands.
    #[error(
        "workload {workload:?} would wait for {}, but {limit} workloads wait already (Config::max_pending_workloads); send the nodes and volumes they wait for, or remove those that will never run",
        Names(missing)
    )]
    TooManyPending {
        /// The workload refused.
        workload: D::Workload,
        /// What it would have waited for.
        missing: Vec<Missing<D>>,
        /// The limit.
        limit: usize,
    },
}

/// Something a waiting workload names that the core does not know: never seen, or removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Missing<D: Domain> {
    /// A node the orchestrator has not announced ([`Input::NodeUpdated`](crate::core::Input)).
    Node(D::Node),
    /// A volume the orchestrator has not registered ([`Input::SetVolume`](crate::core::Input)).
    Volume(D::Volume),
}

impl<D: Domain> fmt::Display for Missing<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Node(node) => write!(f, "node {node:?}"),
            Missing::Volume(volume) => write!(f, "volume {volume:?}"),
        }
    }
}

/// A list of [`Missing`] names for a message: `node "a", volume "b"`.
pub(crate) struct Names<'a, D: Domain>(pub(crate) &'a [Missing<D>]);

impl<D: Domain> fmt::Display for Names<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}")?;
        }
        Ok(())
    }
}

/// A workload that waits: where it is scheduled, what it needs, and what of that the core does
/// not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWorkload<D: Domain> {
    /// The workload.
    pub workload: D::Workload,
    /// The node it is scheduled on.
    pub node: D::Node,
    /// Every volume it needs, sorted.
    pub volumes: Vec<D::Volume>,
    /// What it waits for: the node first if missing, then the missing volumes, sorted. Never
    /// empty.
    pub missing: Vec<Missing<D>>,
    /// When the core first saw it wait: the time of the first [`poll`](crate::core::Reconciler::poll)
    /// after it began to (the core has no clock of its own); `None` before that poll.
    pub since: Option<Duration>,
}

/// One item, or a boxed slice of several, read as a slice.
///
/// The desired state holds a few of these per volume and per workload, and nearly always with a
/// single item (a volume wanted on one node by one workload). Unlike a `SmallVec` it carries no
/// capacity word, and the enum tag hides in the box's non-null pointer, so with `u32` ids it is
/// 16 bytes. Adding or removing an item reallocates the box: fine for lists this short.
#[derive(Clone, Debug)]
pub(crate) enum Few<T> {
    One(T),
    Many(Box<[T]>),
}

impl<T> Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Few::One(item) => std::slice::from_ref(item),
            Few::Many(items) => items,
        }
    }
}

impl<T> DerefMut for Few<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Few::One(item) => std::slice::from_mut(item),
            Few::Many(items) => items,
        }
    }
}

impl<T: Ord + Clone> Few<T> {
    /// `items` sorted and each once, copied: a single item (a workload's usual one volume)
    /// without a list in between.
    fn sorted_from(items: &[T]) -> Self {
        match items {
            [item] => Few::One(item.clone()),
            _ => {
                let mut items = items.to_vec();
                items.sort();
                items.dedup();
                Few::from_vec(items)
            }
        }
    }
}

impl<T> Few<T> {
    fn from_vec(mut items: Vec<T>) -> Self {
        match items.len() {
            1 => Few::One(items.pop().expect("one item")),
            _ => Few::Many(items.into_boxed_slice()),
        }
    }

    fn into_vec(self) -> Vec<T> {
        match self {
            Few::One(item) => vec![item],
            Few::Many(items) => items.into_vec(),
        }
    }

    fn insert(&mut self, at: usize, item: T) {
        let mut items = std::mem::replace(self, Few::Many(Box::default())).into_vec();
        items.insert(at, item);
        *self = Few::from_vec(items);
    }

    fn remove(&mut self, at: usize) -> T {
        let mut items = std::mem::replace(self, Few::Many(Box::default())).into_vec();
        let item = items.remove(at);
        *self = Few::from_vec(items);
        item
    }
}

/// Where one workload runs and what it uses: a waiting workload's, or a placed one's on its
/// way in or out.
#[derive(Clone, Debug)]
struct Placement<D: Domain> {
    node: D::Node,
    /// Sorted, no duplicates.
    volumes: Few<D::Volume>,
}

/// A placed workload: its [`Placement`], with its node found once, as the position of the
/// node's entry. Placing and unplacing then reach the node's list without a lookup by node id
/// (with text ids a hash of the text and a compare with the entry's copy), and a placed
/// workload holds no copy of its node's id (with `String` ids the copy and its text came to
/// 47 bytes an attachment at a million).
#[derive(Debug)]
struct Placed<D: Domain> {
    /// The workload itself: the key of [`DesiredState::workloads`].
    workload: D::Workload,
    /// The position of its node's entry in [`DesiredState::nodes`], renumbered when a node's
    /// removal moves that entry.
    node: u32,
    /// Sorted, no duplicates.
    volumes: Few<D::Volume>,
}

/// A managed node, with the slots of the workloads placed on it (unordered): a workload
/// leaving is found by comparing numbers, not ids ([`SlotTable`]).
#[derive(Debug)]
struct NodeEntry<D: Domain> {
    /// The node itself: the key of [`DesiredState::nodes`].
    node: D::Node,
    placed: Vec<Slot>,
}

impl<D: Domain> Keyed for NodeEntry<D> {
    type Key = D::Node;
    fn key(&self) -> &D::Node {
        &self.node
    }
}

/// One wait of a workload, from the moment it could not be placed until it is placed or
/// removed; a change of what it waits for does not start a new one.
#[derive(Clone, Copy, Debug, Default)]
struct Episode {
    /// Stamped by the first poll after the wait began.
    since: Option<Duration>,
    /// The wait was reported in an event.
    warned: bool,
}

/// A workload that cannot be placed yet.
#[derive(Clone, Debug)]
struct Pending<D: Domain> {
    placement: Placement<D>,
    episode: Episode,
}

/// One node on which a volume is desired.
#[derive(Clone, Debug)]
pub(crate) struct WantedOn<D: Domain> {
    pub(crate) node: D::Node,
    /// Sorted, never empty: the entry goes with its last workload.
    pub(crate) workloads: Few<D::Workload>,
    /// The Multi-Attach event of this episode was already emitted.
    pub(crate) multi_attach_reported: bool,
}

/// A volume's spec and the nodes it is desired on, read together.
pub(crate) type SpecAndWanted<'a, D> = (&'a VolumeSpec<<D as Domain>::Payload>, &'a [WantedOn<D>]);

/// A volume with a known spec, and the nodes it is desired on (often none, usually one).
#[derive(Debug)]
struct VolumeEntry<D: Domain> {
    /// The volume itself: the key of [`DesiredState::volumes`].
    volume: D::Volume,
    spec: VolumeSpec<D::Payload>,
    /// The orchestrator registered it, so workloads may use it. Otherwise the spec is kept
    /// only to detach the volume (removed, or known only from the backend), and it is desired
    /// nowhere.
    registered: bool,
    wanted: Option<Few<WantedOn<D>>>,
}

impl<D: Domain> Keyed for VolumeEntry<D> {
    type Key = D::Volume;
    fn key(&self) -> &D::Volume {
        &self.volume
    }
}

impl<D: Domain> Keyed for Placed<D> {
    type Key = D::Workload;
    fn key(&self) -> &D::Workload {
        &self.workload
    }
}

impl<D: Domain> VolumeEntry<D> {
    fn wanted(&self) -> &[WantedOn<D>] {
        self.wanted.as_deref().unwrap_or(&[])
    }

    fn wanted_mut(&mut self) -> &mut [WantedOn<D>] {
        self.wanted.as_deref_mut().unwrap_or(&mut [])
    }
}

/// The desired state of world.
///
/// Semantics follow upstream's `DesiredStateOfWorld`: placing a workload adds its volumes to its
/// node (idempotently), and a volume leaves a node when its last workload there goes. Unlike
/// upstream, inputs may come in any order: a workload naming a node or a volume not known yet
/// *waits* (it is [pending](Self::pending_workloads)) and desires nothing until all it names is
/// known; a node or volume removed under its workloads sends them back to waiting.
///
/// It changes only through [`Reconciler::handle`](crate::core::Reconciler::handle); read it through
/// [`Reconciler::desired`](crate::core::Reconciler::desired).
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::config::Config;
/// use attach_detach::core::{Input, Missing, NodeFacts, Reconciler, VolumeSpec};
/// let mut core: Reconciler<Ids<&str, &str, &str>> = Reconciler::new(Config::default());
/// core.handle(Input::WorkloadScheduled { workload: "pod-1", node: "node-a", volumes: vec!["pvc-1"] })
///     .unwrap();
/// let waiting = core.desired().pending(&"pod-1").unwrap();
/// assert_eq!(waiting.missing, vec![Missing::Node("node-a"), Missing::Volume("pvc-1")]);
/// core.handle(Input::NodeUpdated { node: "node-a", facts: NodeFacts::default() }).unwrap();
/// core.handle(Input::SetVolume { volume: "pvc-1", spec: VolumeSpec::single_node(()) }).unwrap();
/// assert!(core.desired().pending(&"pod-1").is_none());
/// assert!(core.desired().is_desired(&"pvc-1", &"node-a"));
/// // The node goes first: the pod waits for it again, and its volume is wanted nowhere.
/// core.handle(Input::NodeRemoved { node: "node-a" }).unwrap();
/// assert!(!core.desired().is_desired(&"pvc-1", &"node-a"));
/// assert_eq!(core.desired().pending(&"pod-1").unwrap().missing, vec![Missing::Node("node-a")]);
/// core.handle(Input::WorkloadRemoved { workload: "pod-1" }).unwrap();
/// assert_eq!(core.desired().pending_len(), 0);
/// ```
#[derive(Debug)]
pub struct DesiredState<D: Domain> {
    /// Managed nodes, each with the workloads placed on it.
    nodes: DenseTable<NodeEntry<D>>,
    /// Every volume with a known spec. Spec and desired nodes share one entry: one table keyed
    /// by volume instead of two saves a hash-table slot per volume.
    volumes: DenseTable<VolumeEntry<D>>,
    /// Placed workloads, each in a slot its node's list points at.
    workloads: SlotTable<Placed<D>>,
    /// Workloads that wait for a node or a volume.
    pending: FxHashMap<D::Workload, Pending<D>>,
    /// Pending workloads by the node they name, whether it is known or not: an arriving node
    /// wakes just its own.
    pending_on_node: FxHashMap<D::Node, FxHashSet<D::Workload>>,
    /// Pending workloads by each volume they name.
    pending_on_volume: FxHashMap<D::Volume, FxHashSet<D::Workload>>,
    /// Pending workloads whose wait the next poll stamps (it may have ended meanwhile).
    unstamped: Vec<D::Workload>,
    /// When to report a wait, per workload; entries of waits that ended are skipped.
    warnings: BinaryHeap<Reverse<(Duration, D::Workload)>>,
    /// [`Config::max_pending_workloads`].
    max_pending: usize,
    /// [`Config::pending_workload_warning`].
    warn_after: Duration,
    /// Number of desired (volume, node) pairs.
    pairs: usize,
}

impl<D: Domain> Default for DesiredState<D> {
    fn default() -> Self {
        DesiredState::new(&Config::default())
    }
}

impl<D: Domain> DesiredState<D> {
    /// Brings the entries of `volumes` into the cache before a batch reads them
    /// ([`DenseTable::warm`]).
    pub(crate) fn warm<'a>(&self, volumes: impl IntoIterator<Item = &'a D::Volume>)
    where
        D::Volume: 'a,
    {
        self.volumes.warm(volumes);
    }

    /// An empty desired state with `config`'s limits on waiting workloads.
    pub(crate) fn new(config: &Config) -> Self {
        DesiredState {
            nodes: DenseTable::default(),
            volumes: DenseTable::default(),
            workloads: SlotTable::default(),
            pending: FxHashMap::default(),
            pending_on_node: FxHashMap::default(),
            pending_on_volume: FxHashMap::default(),
            unstamped: Vec::new(),
            warnings: BinaryHeap::new(),
            max_pending: config.max_pending_workloads,
            warn_after: config.pending_workload_warning,
            pairs: 0,
        }
    }

    // ---- nodes --------------------------------------------------------------------------------

    /// Starts managing `node` (idempotent). Workloads that waited for it, and for nothing else,
    /// are placed. Returns the volumes whose desired nodes changed.
    pub(crate) fn add_node(&mut self, node: D::Node) -> Vec<D::Volume> {
        if self.nodes.contains_key(&node) {
            return Vec::new();
        }
        self.nodes.insert(NodeEntry {
            node: node.clone(),
            placed: Vec::new(),
        });
        let waiting = sorted(self.pending_on_node.get(&node));
        self.wake(waiting)
    }

    /// Stops managing `node` (a no-op for a node not managed). Workloads placed on it wait for
    /// it again, so the volumes they needed are no longer desired there. Returns the volumes
    /// whose desired nodes changed.
    pub(crate) fn remove_node(&mut self, node: &D::Node) -> Vec<D::Volume> {
        let Some((entry, at)) = self.nodes.remove_moving(node) else {
            return Vec::new();
        };
        // The entry that was last sits where this one was: its workloads must say so.
        if let Some(moved) = self.nodes.at(at) {
            for &slot in &moved.placed {
                self.workloads.at_mut(slot).node = dense_table::slot(at);
            }
        }
        let mut placed: Vec<D::Workload> = entry
            .placed
            .iter()
            .map(|&slot| self.workloads.at(slot).workload.clone())
            .collect();
        placed.sort();
        let mut changed = Vec::new();
        for workload in placed {
            if let Some(slot) = self.workloads.vacate(&workload) {
                // Its node's entry is gone: only the volumes are left to undo.
                let placed = self.workloads.vacated(slot);
                unwant(
                    &mut self.volumes,
                    &mut self.pairs,
                    placed,
                    &entry.node,
                    &mut changed,
                );
                let placement = self.placement_of_vacated(slot, entry.node.clone());
                self.pend(workload, placement, None);
            }
        }
        sort_dedup(changed)
    }

    /// Whether `node` is managed.
    pub fn has_node(&self, node: &D::Node) -> bool {
        self.nodes.contains_key(node)
    }

    /// Every managed node, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = &D::Node> {
        self.nodes.iter().map(|entry| &entry.node)
    }

    // ---- volumes ------------------------------------------------------------------------------

    /// Registers or updates a volume's spec. Workloads that waited for it, and for nothing
    /// else, are placed. Returns the volumes whose desired nodes changed, and `volume` itself
    /// if its spec or registration changed.
    pub(crate) fn set_volume(
        &mut self,
        volume: D::Volume,
        spec: VolumeSpec<D::Payload>,
    ) -> Vec<D::Volume> {
        match self.volumes.get_mut(&volume) {
            Some(entry) if entry.registered => {
                if entry.spec == spec {
                    return Vec::new();
                }
                entry.spec = spec;
                return vec![volume];
            }
            Some(entry) => {
                entry.spec = spec;
                entry.registered = true;
            }
            None => {
                self.volumes.insert(VolumeEntry {
                    volume: volume.clone(),
                    spec,
                    registered: true,
                    wanted: None,
                });
            }
        }
        let waiting = sorted(self.pending_on_volume.get(&volume));
        let mut changed = self.wake(waiting);
        changed.push(volume);
        sort_dedup(changed)
    }

    /// Keeps `spec` for a volume the orchestrator has not registered, so that it can be
    /// detached; workloads cannot use it. Returns whether it was taken (false when a spec is
    /// known already).
    pub(crate) fn keep_spec(&mut self, volume: D::Volume, spec: VolumeSpec<D::Payload>) -> bool {
        if self.volumes.contains_key(&volume) {
            return false;
        }
        self.volumes.insert(VolumeEntry {
            volume,
            spec,
            registered: false,
            wanted: None,
        });
        true
    }

    /// Unregisters `volume` (a no-op unless registered): its spec is kept for the detach, and
    /// workloads using it wait for it again. Returns the volumes whose desired nodes changed,
    /// `volume` included.
    pub(crate) fn unregister_volume(&mut self, volume: &D::Volume) -> Vec<D::Volume> {
        let Some(entry) = self.volumes.get_mut(volume) else {
            return Vec::new();
        };
        if !entry.registered {
            return Vec::new();
        }
        entry.registered = false;
        let mut users: Vec<D::Workload> = entry
            .wanted()
            .iter()
            .flat_map(|on| on.workloads.iter().cloned())
            .collect();
        users.sort();
        users.dedup();
        let mut changed = vec![volume.clone()];
        for workload in users {
            if let Some(slot) = self.workloads.vacate(&workload) {
                let node = self.node_of(self.workloads.vacated(slot)).clone();
                self.unplace(slot, &mut changed);
                let placement = self.placement_of_vacated(slot, node);
                self.pend(workload, placement, None);
            }
        }
        sort_dedup(changed)
    }

    /// Drops the spec of an unregistered volume.
    pub(crate) fn forget_volume(&mut self, volume: &D::Volume) {
        if self.volumes.get(volume).is_some_and(|e| !e.registered) {
            self.volumes.remove(volume);
        }
    }

    /// A volume's spec, if known (registered, or kept to detach it).
    pub fn spec(&self, volume: &D::Volume) -> Option<&VolumeSpec<D::Payload>> {
        self.volumes.get(volume).map(|entry| &entry.spec)
    }

    /// Whether the orchestrator registered `volume` (and has not removed it since), so that
    /// workloads may use it.
    pub fn is_registered(&self, volume: &D::Volume) -> bool {
        self.volumes.get(volume).is_some_and(|e| e.registered)
    }

    /// Every registered volume, in no particular order.
    pub fn registered_volumes(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes
            .iter()
            .filter(|e| e.registered)
            .map(|e| &e.volume)
    }

    // ---- workloads ----------------------------------------------------------------------------

    /// Places `workload` on `node` using `volumes`, replacing any earlier placement of it; if
    /// the node or a volume is not known, the workload waits for it instead (and any earlier
    /// placement is undone).
    ///
    /// All or nothing: on error nothing changes. Returns the volumes whose desired nodes changed
    /// (old and new), sorted, so the caller can look at just those.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn add_workload(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
    ) -> Result<Vec<D::Volume>, DesiredError<D>> {
        let mut changed = Vec::new();
        self.add_workload_into(workload, node, volumes, &mut changed)?;
        Ok(sort_dedup(changed))
    }

    /// [`add_workload`](Self::add_workload), appending the volumes whose desired nodes changed
    /// to `changed` in no order, possibly twice: the core marks them, and marks are sorted and
    /// counted once when taken. Why not a list of its own: three lists a move (the placement's
    /// volumes, the old and the new nodes' changes) were three allocations of a `u32` move's
    /// sixteen.
    pub(crate) fn add_workload_into(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
        changed: &mut Vec<D::Volume>,
    ) -> Result<(), DesiredError<D>> {
        let wanted = Few::sorted_from(volumes);
        if let Some(old) = self.workloads.get(&workload) {
            if *self.node_of(old) == node && *old.volumes == *wanted {
                return Ok(());
            }
        }
        let ready = self.is_ready(&node, &wanted);
        let episode = self.pending.get(&workload).map(|p| p.episode);
        if !ready && episode.is_none() && self.pending.len() >= self.max_pending {
            return Err(DesiredError::TooManyPending {
                missing: self.missing(&node, &wanted),
                workload,
                limit: self.max_pending,
            });
        }
        if let Some(p) = self.pending.get(&workload) {
            if !ready && p.placement.node == node && *p.placement.volumes == *wanted {
                return Ok(());
            }
        }
        if let Some(at) = self.workloads.vacate(&workload) {
            self.unplace(at, changed);
        }
        self.unpend(&workload);
        let placement = Placement {
            node,
            volumes: wanted,
        };
        if ready {
            self.place(workload, placement, changed);
        } else {
            // Still the same wait if it waited already: a workload updated over and over while
            // it waits is reported all the same.
            self.pend(workload, placement, episode);
        }
        Ok(())
    }

    /// Removes `workload`, placed or waiting (a no-op for one not known); volumes it alone
    /// needed on its node stop being desired there. Returns the volumes whose desired nodes
    /// changed.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn remove_workload(&mut self, workload: &D::Workload) -> Vec<D::Volume> {
        let mut changed = Vec::new();
        self.remove_workload_into(workload, &mut changed);
        changed
    }

    /// [`remove_workload`](Self::remove_workload), appending the volumes whose desired nodes
    /// changed to `changed`.
    pub(crate) fn remove_workload_into(
        &mut self,
        workload: &D::Workload,
        changed: &mut Vec<D::Volume>,
    ) {
        match self.workloads.vacate(workload) {
            Some(at) => self.unplace(at, changed),
            None => {
                self.unpend(workload);
            }
        }
    }

    /// Every workload known, placed or waiting, in no particular order.
    pub fn workloads(&self) -> impl Iterator<Item = &D::Workload> {
        self.workloads
            .iter()
            .map(|p| &p.workload)
            .chain(self.pending.keys())
    }

    /// Whether `node` is managed and every one of `volumes` registered.
    fn is_ready(&self, node: &D::Node, volumes: &[D::Volume]) -> bool {
        self.nodes.contains_key(node) && volumes.iter().all(|v| self.is_registered(v))
    }

    /// What of `node` and `volumes` is not known.
    fn missing(&self, node: &D::Node, volumes: &[D::Volume]) -> Vec<Missing<D>> {
        let node = (!self.nodes.contains_key(node)).then(|| Missing::Node(node.clone()));
        node.into_iter()
            .chain(
                volumes
                    .iter()
                    .filter(|v| !self.is_registered(v))
                    .map(|v| Missing::Volume(v.clone())),
            )
            .collect()
    }

    /// Adds a placement whose node and volumes are all known.
    fn place(
        &mut self,
        workload: D::Workload,
        placement: Placement<D>,
        changed: &mut Vec<D::Volume>,
    ) {
        let node = self.nodes.position(&placement.node).expect("managed");
        changed.reserve(placement.volumes.len());
        for volume in placement.volumes.iter() {
            let entry = self.volumes.get_mut(volume).expect("registered");
            match entry
                .wanted_mut()
                .iter_mut()
                .find(|w| w.node == placement.node)
            {
                Some(on) => {
                    if let Err(at) = on.workloads.binary_search(&workload) {
                        on.workloads.insert(at, workload.clone());
                        // A workload joining a node that waits behind Multi-Attach is told
                        // too: the episode's event is raised again, naming every waiting one.
                        on.multi_attach_reported = false;
                    }
                }
                None => {
                    let on = WantedOn {
                        node: placement.node.clone(),
                        workloads: Few::One(workload.clone()),
                        multi_attach_reported: false,
                    };
                    match &mut entry.wanted {
                        None => entry.wanted = Some(Few::One(on)),
                        Some(list) => list.insert(list.len(), on),
                    }
                    self.pairs += 1;
                }
            }
            changed.push(volume.clone());
        }
        let (slot, _) = self.workloads.insert(Placed {
            workload,
            node: dense_table::slot(node),
            volumes: placement.volumes,
        });
        self.nodes.at_mut(node).expect("managed").placed.push(slot);
    }

    /// Undoes the placement [vacated](SlotTable::vacated) from `slot` of `workloads`: takes
    /// it off its node's list, and its volumes, which go to `changed`.
    fn unplace(&mut self, slot: Slot, changed: &mut Vec<D::Volume>) {
        let placed = self.workloads.vacated(slot);
        let entry = self
            .nodes
            .at_mut(placed.node as usize)
            .expect("a placed workload's node is managed");
        if let Some(i) = entry.placed.iter().position(|&w| w == slot) {
            entry.placed.swap_remove(i);
        }
        unwant(
            &mut self.volumes,
            &mut self.pairs,
            placed,
            &entry.node,
            changed,
        );
    }

    /// The node `placed` runs on.
    fn node_of(&self, placed: &Placed<D>) -> &D::Node {
        &self
            .nodes
            .at(placed.node as usize)
            .expect("a placed workload's node is managed")
            .node
    }

    /// The placement [vacated](SlotTable::vacated) from `slot`, on `node`, to wait.
    fn placement_of_vacated(&self, slot: Slot, node: D::Node) -> Placement<D> {
        let placed = self.workloads.vacated(slot);
        Placement {
            node,
            volumes: placed.volumes.clone(),
        }
    }

    /// Makes `workload` wait; `episode` carries on an earlier wait, `None` starts one (stamped
    /// by the next poll).
    fn pend(&mut self, workload: D::Workload, placement: Placement<D>, episode: Option<Episode>) {
        self.pending_on_node
            .entry(placement.node.clone())
            .or_default()
            .insert(workload.clone());
        for volume in placement.volumes.iter() {
            self.pending_on_volume
                .entry(volume.clone())
                .or_default()
                .insert(workload.clone());
        }
        let episode = episode.unwrap_or_else(|| {
            self.unstamped.push(workload.clone());
            Episode::default()
        });
        self.pending
            .insert(workload, Pending { placement, episode });
    }

    /// Ends the wait of `workload`, if it waits.
    fn unpend(&mut self, workload: &D::Workload) -> Option<Pending<D>> {
        if self.pending.is_empty() {
            // Every placement asks; most find nothing waits, without hashing the id.
            return None;
        }
        let pending = self.pending.remove(workload)?;
        let placement = &pending.placement;
        if let Some(set) = self.pending_on_node.get_mut(&placement.node) {
            set.remove(workload);
            if set.is_empty() {
                self.pending_on_node.remove(&placement.node);
            }
        }
        for volume in placement.volumes.iter() {
            if let Some(set) = self.pending_on_volume.get_mut(volume) {
                set.remove(workload);
                if set.is_empty() {
                    self.pending_on_volume.remove(volume);
                }
            }
        }
        Some(pending)
    }

    /// Places those of `candidates` (sorted) that no longer wait for anything.
    fn wake(&mut self, candidates: Vec<D::Workload>) -> Vec<D::Volume> {
        let mut changed = Vec::new();
        for workload in candidates {
            let ready = self
                .pending
                .get(&workload)
                .is_some_and(|p| self.is_ready(&p.placement.node, &p.placement.volumes));
            if ready {
                let pending = self.unpend(&workload).expect("waits");
                self.place(workload, pending.placement, &mut changed);
            }
        }
        changed
    }

    // ---- pending workloads --------------------------------------------------------------------

    /// Number of workloads that wait.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Room for waiting workloads; for tests of trimming.
    #[cfg(test)]
    pub(crate) fn pending_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// What `workload` waits for, if it waits.
    pub fn pending(&self, workload: &D::Workload) -> Option<PendingWorkload<D>> {
        self.pending
            .get(workload)
            .map(|p| self.describe(workload, p))
    }

    /// Every workload that waits, with what it waits for, in no particular order.
    pub fn pending_workloads(&self) -> impl Iterator<Item = PendingWorkload<D>> + '_ {
        self.pending.iter().map(|(w, p)| self.describe(w, p))
    }

    /// The volumes the workloads placed on `node` use, a volume once per workload.
    pub(crate) fn volumes_placed_on(&self, node: &D::Node) -> impl Iterator<Item = &D::Volume> {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|entry| &entry.placed)
            .flat_map(|&slot| self.workloads.at(slot).volumes.iter())
    }

    /// Each node the core does not know that a waiting workload is placed on, with the volumes
    /// the workload uses: after a restart, a node whose object is gone may still run it.
    pub(crate) fn placed_on_absent_nodes(&self) -> impl Iterator<Item = (&D::Node, &[D::Volume])> {
        self.pending
            .values()
            .map(|p| &p.placement)
            .filter(|placement| !self.nodes.contains_key(&placement.node))
            .map(|placement| (&placement.node, &placement.volumes[..]))
    }

    fn describe(&self, workload: &D::Workload, pending: &Pending<D>) -> PendingWorkload<D> {
        let Placement { node, volumes, .. } = &pending.placement;
        PendingWorkload {
            workload: workload.clone(),
            node: node.clone(),
            volumes: volumes.to_vec(),
            missing: self.missing(node, volumes),
            since: pending.episode.since,
        }
    }

    /// When [`poll_pending`](Self::poll_pending) next has work: at once while a wait is not
    /// stamped yet, else the earliest warning.
    pub(crate) fn next_pending_wake(&self) -> Option<Duration> {
        if !self.unstamped.is_empty() {
            return Some(Duration::ZERO);
        }
        self.warnings.peek().map(|Reverse((at, _))| *at)
    }

    /// Stamps the waits that began since the last call with `now`, and returns the waits to
    /// report: those that began [`Config::pending_workload_warning`] ago or more, once each.
    pub(crate) fn poll_pending(&mut self, now: Duration) -> Vec<PendingWorkload<D>> {
        for workload in std::mem::take(&mut self.unstamped) {
            if let Some(p) = self.pending.get_mut(&workload) {
                if p.episode.since.is_none() {
                    p.episode.since = Some(now);
                    let at = now.saturating_add(self.warn_after);
                    self.warnings.push(Reverse((at, workload)));
                }
            }
        }
        let mut due = Vec::new();
        while let Some(Reverse((at, _))) = self.warnings.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, workload)) = self.warnings.pop().expect("peeked");
            let warn_after = self.warn_after;
            let Some(p) = self.pending.get_mut(&workload) else {
                continue;
            };
            // A timer of an earlier wait of the same workload is stale.
            if p.episode.warned || p.episode.since.map(|s| s.saturating_add(warn_after)) != Some(at)
            {
                continue;
            }
            p.episode.warned = true;
            let p = &self.pending[&workload];
            due.push(self.describe(&workload, p));
        }
        due
    }

    /// Gives back what a burst of waiting workloads left allocated, and the slots (and the
    /// records left in them) of placed workloads since removed.
    pub(crate) fn trim(&mut self) {
        let nodes = &mut self.nodes;
        self.workloads.close_holes(|placed, from, to| {
            let listed = nodes
                .at_mut(placed.node as usize)
                .and_then(|entry| entry.placed.iter_mut().find(|at| **at == from));
            if let Some(at) = listed {
                *at = to;
            }
        });
        trim_map(&mut self.pending);
        trim_map(&mut self.pending_on_node);
        trim_map(&mut self.pending_on_volume);
        if self.warnings.capacity() > 64 && self.warnings.len() * 4 <= self.warnings.capacity() {
            self.warnings.shrink_to(self.warnings.len() * 2);
        }
    }

    // ---- what is desired ----------------------------------------------------------------------

    /// Whether `volume` must be attached to `node`.
    pub fn is_desired(&self, volume: &D::Volume, node: &D::Node) -> bool {
        self.volumes
            .get(volume)
            .is_some_and(|e| e.wanted().iter().any(|w| w.node == *node))
    }

    /// The nodes `volume` must be attached to, with the workloads needing it on each.
    pub fn wanted(&self, volume: &D::Volume) -> impl Iterator<Item = (&D::Node, &[D::Workload])> {
        self.volumes
            .get(volume)
            .into_iter()
            .flat_map(|e| e.wanted())
            .map(|w| (&w.node, &*w.workloads))
    }

    /// A volume's spec, if known, and the nodes it is wanted on: one lookup for both; with
    /// where its entry sits, for [`spec_at`](Self::spec_at).
    pub(crate) fn spec_and_wanted(
        &self,
        volume: &D::Volume,
    ) -> Option<(usize, SpecAndWanted<'_, D>)> {
        self.volumes
            .get_with_position(volume)
            .map(|(at, e)| (at, (&e.spec, e.wanted())))
    }

    /// `volume`'s spec, found first at position `at` ([`spec_and_wanted`](Self::spec_and_wanted)):
    /// a look that plans a call takes the payload from there, with no second lookup. Looked up
    /// if the entry there is another volume's (entries move when one is removed).
    pub(crate) fn spec_at(&self, at: usize, volume: &D::Volume) -> Option<&VolumeSpec<D::Payload>> {
        match self.volumes.at(at) {
            Some(e) if e.volume == *volume => Some(&e.spec),
            _ => self.spec(volume),
        }
    }

    /// The position of `volume`'s entry in the volume table, and, if the orchestrator
    /// registered it, its spec and the nodes it is wanted on: what a restart reads to tell
    /// whether the volume is settled ([`SettledVolumes`](crate::core::plan::recovery::SettledVolumes)).
    pub(crate) fn registered_with_position(
        &self,
        volume: &D::Volume,
    ) -> Option<(usize, Option<SpecAndWanted<'_, D>>)> {
        self.volumes
            .get_with_position(volume)
            .map(|(at, e)| (at, e.registered.then(|| (&e.spec, e.wanted()))))
    }

    /// Entries in the volume table: positions run from 0 to this.
    pub(crate) fn volume_positions(&self) -> usize {
        self.volumes.len()
    }

    /// Every volume with an entry (registered or with a spec kept), in the order of their
    /// positions.
    pub(crate) fn volumes_by_position(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes.iter().map(|e| &e.volume)
    }

    pub(crate) fn wanted_on(&self, volume: &D::Volume) -> &[WantedOn<D>] {
        self.volumes.get(volume).map_or(&[], |e| e.wanted())
    }

    /// Remembers whether the Multi-Attach event for (`volume`, `node`) was emitted in this
    /// episode; the episode ends when the volume stops being desired there.
    pub(crate) fn set_multi_attach_reported(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        value: bool,
    ) {
        if let Some(entry) = self
            .volumes
            .get_mut(volume)
            .and_then(|e| e.wanted_mut().iter_mut().find(|w| w.node == *node))
        {
            entry.multi_attach_reported = value;
        }
    }

    /// Where `workload` runs and which volumes it uses, if it is placed (not waiting).
    pub fn placement(&self, workload: &D::Workload) -> Option<(&D::Node, &[D::Volume])> {
        self.workloads
            .get(workload)
            .map(|p| (self.node_of(p), &*p.volumes))
    }

    /// Every (volume, node) that must be attached, in no particular order.
    pub fn volumes_to_attach(&self) -> impl Iterator<Item = (&D::Volume, &D::Node)> {
        self.volumes
            .iter()
            .flat_map(|e| e.wanted().iter().map(move |w| (&e.volume, &w.node)))
    }

    /// Number of desired (volume, node) pairs.
    pub fn len(&self) -> usize {
        self.pairs
    }

    /// Whether nothing is desired.
    pub fn is_empty(&self) -> bool {
        self.pairs == 0
    }

    /// Number of managed nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

/// Takes `placed` off the wanted lists of its volumes on `node`; the volumes go to `changed`,
/// and `pairs` loses each (volume, node) left without a workload. Over the fields it needs,
/// so that `placed` can be read where it sits (a vacated slot) while they change.
fn unwant<D: Domain>(
    volumes: &mut DenseTable<VolumeEntry<D>>,
    pairs: &mut usize,
    placed: &Placed<D>,
    node: &D::Node,
    changed: &mut Vec<D::Volume>,
) {
    let workload = &placed.workload;
    changed.reserve(placed.volumes.len());
    for volume in placed.volumes.iter() {
        let Some(entry) = volumes.get_mut(volume) else {
            continue;
        };
        if let Some(i) = entry.wanted().iter().position(|w| w.node == *node) {
            let on = &mut entry.wanted_mut()[i];
            match on.workloads.binary_search(workload) {
                Ok(_) if on.workloads.len() == 1 => {
                    // Its last workload: the volume is no longer desired on the node.
                    match &mut entry.wanted {
                        Some(list) if list.len() > 1 => {
                            list.remove(i);
                        }
                        _ => entry.wanted = None,
                    }
                    *pairs -= 1;
                }
                Ok(at) => {
                    on.workloads.remove(at);
                }
                Err(_) => {}
            }
        }
        changed.push(volume.clone());
    }
}

/// The members of `set`, sorted, so that what they cause comes out in the same order every run.
fn sorted<T: Ord + Clone>(set: Option<&FxHashSet<T>>) -> Vec<T> {
    let mut items: Vec<T> = set.into_iter().flatten().cloned().collect();
    items.sort();
    items
}

fn sort_dedup<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items.dedup();
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn dsw() -> DesiredState<T> {
        let mut d = DesiredState::default();
        d.add_node("n1");
        d.add_node("n2");
        d.set_volume("v1", VolumeSpec::single_node(()));
        d.set_volume("v2", VolumeSpec::multi_node(()));
        d
    }

    fn missing(d: &DesiredState<T>, w: &'static str) -> Option<Vec<Missing<T>>> {
        d.pending(&w).map(|p| p.missing)
    }

    #[test]
    fn a_workload_naming_what_is_not_known_waits_for_it() {
        let mut d = dsw();
        assert_eq!(d.add_workload("p", "n9", &["v1"]), Ok(vec![]));
        assert_eq!(d.add_workload("q", "n1", &["v1", "v9"]), Ok(vec![]));
        assert!(d.is_empty(), "a waiting workload desires nothing");
        assert!(d.placement(&"p").is_none());
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n9")]));
        assert_eq!(missing(&d, "q"), Some(vec![Missing::Volume("v9")]));
        assert_eq!(d.pending_len(), 2);
        // The last missing name placed it; volumes change as they do for a placement.
        assert_eq!(d.add_node("n9"), vec!["v1"]);
        assert_eq!(d.placement(&"p"), Some((&"n9", &["v1"][..])));
        assert_eq!(
            d.set_volume("v9", VolumeSpec::single_node(())),
            vec!["v1", "v9"]
        );
        assert_eq!(d.placement(&"q"), Some((&"n1", &["v1", "v9"][..])));
        assert_eq!(d.pending_len(), 0);
        assert_eq!(d.len(), 3);
        // A known node again is no arrival: nothing changes.
        assert!(d.add_node("n9").is_empty());
    }

    #[test]
    fn a_workload_waiting_for_several_names_is_placed_by_the_last() {
        let mut d = dsw();
        d.add_workload("p", "n7", &["v7", "v8", "v1"]).unwrap();
        assert_eq!(
            missing(&d, "p"),
            Some(vec![
                Missing::Node("n7"),
                Missing::Volume("v7"),
                Missing::Volume("v8")
            ])
        );
        assert!(d.set_volume("v8", VolumeSpec::single_node(())).len() == 1);
        assert!(d.add_node("n7").is_empty());
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v7")]));
        // One it needed and had is removed meanwhile: it waits for that again.
        d.unregister_volume(&"v8");
        assert_eq!(d.set_volume("v7", VolumeSpec::single_node(())), vec!["v7"]);
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v8")]));
        assert_eq!(
            d.set_volume("v8", VolumeSpec::single_node(())),
            vec!["v1", "v7", "v8"]
        );
        assert!(d.is_desired(&"v1", &"n7"));
        assert_eq!(d.pending_len(), 0);
    }

    /// A burst of placed workloads, mostly removed again, gives its slots back at the next
    /// trim; the nodes' lists are renumbered with them, so the rest stay listed on their nodes
    /// and leave with them. A node's removal moves the last node's entry into its place, and
    /// that node's workloads are renumbered too.
    #[test]
    fn a_trim_after_a_burst_gives_back_its_slots_and_keeps_what_stays_placed() {
        let mut d: DesiredState<Ids<u32, u32, u32>> = DesiredState::default();
        for node in 0..3 {
            d.add_node(node);
        }
        for w in 0..4_000 {
            d.set_volume(w, VolumeSpec::single_node(()));
            d.add_workload(w, w % 3, &[w]).unwrap();
        }
        for w in (0..4_000).filter(|w| w % 10 != 0) {
            d.remove_workload(&w);
        }
        assert_eq!(d.workloads.holes(), 3_600);
        d.trim();
        assert_eq!(d.workloads.holes(), 0, "the slots were given back");
        let placed_on = |d: &DesiredState<Ids<u32, u32, u32>>, node: u32| {
            let mut on: Vec<u32> = d.volumes_placed_on(&node).copied().collect();
            on.sort_unstable();
            on
        };
        for node in 0..3 {
            let expected: Vec<u32> = (0..4_000)
                .filter(|w| w % 10 == 0 && w % 3 == node)
                .collect();
            assert_eq!(placed_on(&d, node), expected);
        }
        // A workload removed after the renumbering leaves its own node's list, no other.
        d.remove_workload(&0);
        assert_eq!(placed_on(&d, 0).len(), 133);
        assert!(!placed_on(&d, 0).contains(&0));
        assert_eq!(placed_on(&d, 2).len(), 133);
        // A node's removal sends exactly its workloads back to waiting.
        d.remove_node(&1);
        assert_eq!(d.pending_len(), 133);
        assert_eq!(d.len(), 266);
        // The last node's entry took the removed one's place: its workloads still say where
        // they run, and leave its list, not another's.
        assert_eq!(d.placement(&20), Some((&2, &[20][..])));
        assert_eq!(d.placement(&30), Some((&0, &[30][..])));
        d.remove_workload(&20);
        assert_eq!(placed_on(&d, 2).len(), 132);
        assert_eq!(placed_on(&d, 0).len(), 133);
        assert_eq!(d.add_workload(30, 2, &[30]), Ok(vec![30]));
        assert_eq!(placed_on(&d, 2).len(), 133);
        assert_eq!(placed_on(&d, 0).len(), 132);
        assert!(d.is_desired(&30, &2) && !d.is_desired(&30, &0));
    }

    #[test]
    fn adding_twice_is_idempotent_and_last_workload_drops_the_volume() {
        let mut d = dsw();
        assert_eq!(d.add_workload("p1", "n1", &["v1"]).unwrap(), vec!["v1"]);
        assert!(d.add_workload("p1", "n1", &["v1"]).unwrap().is_empty());
        d.add_workload("p2", "n1", &["v1"]).unwrap();
        assert_eq!(d.len(), 1);
        d.remove_workload(&"p1");
        assert!(d.is_desired(&"v1", &"n1"), "p2 still needs it");
        assert_eq!(d.remove_workload(&"p2"), vec!["v1"]);
        assert!(!d.is_desired(&"v1", &"n1"));
        assert_eq!(d.len(), 0);
        // A replayed removal is a no-op.
        assert!(d.remove_workload(&"p2").is_empty());
    }

    #[test]
    fn moving_a_workload_changes_old_and_new_node() {
        let mut d = dsw();
        d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
        let changed = d.add_workload("p", "n2", &["v2"]).unwrap();
        assert_eq!(changed, vec!["v1", "v2"]);
        assert!(!d.is_desired(&"v1", &"n1"));
        assert!(!d.is_desired(&"v2", &"n1"));
        assert!(d.is_desired(&"v2", &"n2"));
        assert_eq!(d.placement(&"p"), Some((&"n2", &["v2"][..])));
        // Moved to a node not known yet: its old volumes go, and it waits.
        assert_eq!(d.add_workload("p", "n9", &["v2"]).unwrap(), vec!["v2"]);
        assert!(d.is_empty());
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n9")]));
        // And back to a known one: placed again, no longer waiting.
        assert_eq!(d.add_workload("p", "n1", &["v2"]).unwrap(), vec!["v2"]);
        assert_eq!(d.pending_len(), 0);
        assert!(d.is_desired(&"v2", &"n1"));
    }

    #[test]
    fn a_spec_outlives_the_desire_and_counts_follow_the_pairs() {
        let mut d = dsw();
        d.add_workload("a", "n1", &["v2"]).unwrap();
        d.add_workload("b", "n2", &["v2", "v1"]).unwrap();
        assert_eq!((d.len(), d.is_empty()), (3, false));
        d.remove_workload(&"b");
        d.remove_workload(&"a");
        assert_eq!((d.len(), d.is_empty()), (0, true));
        assert_eq!(d.volumes_to_attach().count(), 0);
        assert_eq!(d.wanted(&"v2").count(), 0);
        assert!(
            d.set_volume("v1", VolumeSpec::single_node(())).is_empty(),
            "still registered, unchanged"
        );
        assert_eq!(
            d.set_volume("v1", VolumeSpec::multi_node(())),
            vec!["v1"],
            "changed"
        );
        d.add_workload("c", "n1", &["v1"]).unwrap();
        assert!(d.is_desired(&"v1", &"n1"));
    }

    #[test]
    fn a_spec_found_at_a_position_is_found_again_after_entries_move() {
        let mut d = dsw();
        d.set_volume("v3", VolumeSpec::multi_node(()));
        let (at, (spec, _)) = d.spec_and_wanted(&"v3").unwrap();
        assert_eq!(spec.access, crate::core::calls::volume::Access::MultiNode);
        assert_eq!(
            d.spec_at(at, &"v3").map(|s| s.access),
            Some(crate::core::calls::volume::Access::MultiNode)
        );
        // v1 goes: the last entry (v3) moves into its place.
        d.unregister_volume(&"v1");
        d.forget_volume(&"v1");
        assert!(d.spec(&"v1").is_none());
        let (moved, _) = d.spec_and_wanted(&"v3").unwrap();
        assert_ne!(moved, at, "the entry moved");
        assert_eq!(
            d.spec_at(at, &"v3").map(|s| s.access),
            Some(crate::core::calls::volume::Access::MultiNode)
        );
        assert_eq!(
            d.spec_at(moved, &"v3").map(|s| s.access),
            Some(crate::core::calls::volume::Access::MultiNode)
        );
        assert!(
            d.spec_at(at, &"v9").is_none(),
            "an unknown volume has no spec anywhere"
        );
    }

    #[test]
    fn few_reads_as_a_slice_through_inserts_and_removes() {
        let mut few = Few::One(2);
        few.insert(0, 1);
        few.insert(2, 3);
        assert_eq!(&*few, &[1, 2, 3]);
        assert_eq!(few.remove(1), 2);
        assert_eq!(few.remove(0), 1);
        assert!(matches!(few, Few::One(3)), "back to one item, no box");
        assert!(Few::<u8>::from_vec(vec![]).is_empty());
        // The sizes the memory budget counts on, with u32 ids.
        type Small = Ids<u32, u32, u32>;
        assert_eq!(std::mem::size_of::<Few<u32>>(), 16);
        assert!(std::mem::size_of::<Option<Few<WantedOn<Small>>>>() <= 24);
        // An entry carries its key in what would be padding (src/dense_table.rs).
        assert_eq!(std::mem::size_of::<VolumeEntry<Small>>(), 32);
        assert_eq!(std::mem::size_of::<Placed<Small>>(), 24);
    }

    #[test]
    fn many_workloads_and_nodes_share_a_volume() {
        let mut d = dsw();
        for (w, n) in [("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", "n1")] {
            d.add_workload(w, n, &["v2"]).unwrap();
        }
        let wanted = |d: &DesiredState<T>| -> Vec<(&str, Vec<&str>)> {
            d.wanted(&"v2").map(|(n, w)| (*n, w.to_vec())).collect()
        };
        assert_eq!(
            wanted(&d),
            vec![("n1", vec!["a", "b", "d"]), ("n2", vec!["c"])]
        );
        d.remove_workload(&"b");
        d.remove_workload(&"c");
        assert_eq!(wanted(&d), vec![("n1", vec!["a", "d"])]);
        assert_eq!(d.len(), 1);
        d.add_workload("a", "n2", &["v2", "v1", "v2"]).unwrap();
        assert_eq!(d.placement(&"a"), Some((&"n2", &["v1", "v2"][..])));
        assert_eq!(wanted(&d), vec![("n1", vec!["d"]), ("n2", vec!["a"])]);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn a_removed_node_sends_its_workloads_back_to_waiting() {
        let mut d = dsw();
        d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
        d.add_workload("q", "n1", &[]).unwrap();
        d.add_workload("r", "n2", &["v2"]).unwrap();
        assert_eq!(d.remove_node(&"n1"), vec!["v1", "v2"]);
        assert!(!d.has_node(&"n1"));
        assert!(!d.is_desired(&"v1", &"n1") && !d.is_desired(&"v2", &"n1"));
        assert!(d.is_desired(&"v2", &"n2"), "other nodes keep theirs");
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n1")]));
        assert_eq!(missing(&d, "q"), Some(vec![Missing::Node("n1")]));
        assert_eq!(d.len(), 1);
        // Removing it again, or a node never seen, is a no-op.
        assert!(d.remove_node(&"n1").is_empty());
        assert!(d.remove_node(&"n9").is_empty());
        // It comes back: its workloads are placed again.
        assert_eq!(d.add_node("n1"), vec!["v1", "v2"]);
        assert_eq!(d.placement(&"p"), Some((&"n1", &["v1", "v2"][..])));
        assert_eq!(d.placement(&"q"), Some((&"n1", &[][..])));
        assert_eq!((d.len(), d.pending_len()), (3, 0));
    }

    #[test]
    fn an_unregistered_volume_keeps_its_spec_and_its_workloads_wait() {
        let mut d = dsw();
        d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
        d.add_workload("q", "n2", &["v1"]).unwrap();
        assert_eq!(d.unregister_volume(&"v1"), vec!["v1", "v2"]);
        assert!(!d.is_registered(&"v1"));
        assert!(d.spec(&"v1").is_some(), "kept for the detach");
        assert!(d.is_empty());
        assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v1")]));
        assert_eq!(missing(&d, "q"), Some(vec![Missing::Volume("v1")]));
        // A new workload naming it waits too, and a second removal is a no-op.
        d.add_workload("s", "n1", &["v1"]).unwrap();
        assert!(d.unregister_volume(&"v1").is_empty());
        assert!(d.unregister_volume(&"v9").is_empty());
        // Registered again, everything waiting for it is placed.
        d.set_volume("v1", VolumeSpec::single_node(()));
        assert_eq!(d.pending_len(), 0);
        assert_eq!(d.len(), 3);
        // Forgetting works only for an unregistered volume.
        d.forget_volume(&"v1");
        assert!(d.spec(&"v1").is_some());
        assert!(d.keep_spec("v8", VolumeSpec::single_node(())));
        assert!(
            !d.keep_spec("v1", VolumeSpec::multi_node(())),
            "known already"
        );
        assert!(!d.is_registered(&"v8"));
        d.add_workload("t", "n1", &["v8"]).unwrap();
        assert_eq!(missing(&d, "t"), Some(vec![Missing::Volume("v8")]));
        d.forget_volume(&"v8");
        assert!(d.spec(&"v8").is_none());
    }

    #[test]
    fn waiting_is_bounded_for_new_waits_only() {
        let mut d = DesiredState::<T>::new(&Config {
            max_pending_workloads: 2,
            ..Config::default()
        });
        d.add_node("n1");
        d.set_volume("v1", VolumeSpec::single_node(()));
        d.add_workload("a", "n9", &[]).unwrap();
        d.add_workload("b", "n1", &["v1"]).unwrap();
        d.add_workload("c", "n1", &["v1"]).unwrap();
        d.add_workload("b2", "n8", &[]).unwrap();
        assert_eq!(
            d.add_workload("x", "n9", &["v9"]),
            Err(DesiredError::TooManyPending {
                workload: "x",
                missing: vec![Missing::Node("n9"), Missing::Volume("v9")],
                limit: 2
            })
        );
        // A placed workload that would start to wait is refused too, and keeps its place.
        assert!(d.add_workload("b", "n9", &["v1"]).is_err());
        assert_eq!(d.placement(&"b"), Some((&"n1", &["v1"][..])));
        // One that waits already may change what it waits for; one that needs no wait goes.
        d.add_workload("a", "n7", &["v7"]).unwrap();
        assert_eq!(
            missing(&d, "a"),
            Some(vec![Missing::Node("n7"), Missing::Volume("v7")])
        );
        d.add_workload("y", "n1", &[]).unwrap();
        // A removal is never refused: its workloads wait beyond the bound.
        d.unregister_volume(&"v1");
        assert_eq!(d.pending_len(), 4);
        assert!(d.add_workload("z", "n9", &[]).is_err());
        d.remove_workload(&"a");
        d.remove_workload(&"b2");
        d.remove_workload(&"b");
        assert_eq!(d.pending_len(), 1);
        d.add_workload("z", "n9", &[]).unwrap();
    }

    #[test]
    fn a_wait_is_stamped_by_the_next_poll_and_reported_once() {
        let warn = Duration::from_secs(120);
        let mut d = dsw();
        let secs = Duration::from_secs;
        assert_eq!(d.next_pending_wake(), None);
        d.add_workload("p", "n9", &["v1"]).unwrap();
        assert_eq!(d.pending(&"p").unwrap().since, None);
        assert_eq!(d.next_pending_wake(), Some(Duration::ZERO), "to stamp it");
        assert!(d.poll_pending(secs(10)).is_empty());
        assert_eq!(d.pending(&"p").unwrap().since, Some(secs(10)));
        assert_eq!(d.next_pending_wake(), Some(secs(10) + warn));
        // Updated while it waits: the same wait.
        d.add_workload("p", "n9", &["v2"]).unwrap();
        assert!(d.poll_pending(secs(20)).is_empty());
        assert_eq!(d.pending(&"p").unwrap().since, Some(secs(10)));
        let due = d.poll_pending(secs(130));
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].workload, due[0].node, &due[0].missing, due[0].since),
            ("p", "n9", &vec![Missing::Node("n9")], Some(secs(10)))
        );
        assert_eq!(due[0].volumes, vec!["v2"]);
        assert_eq!(d.next_pending_wake(), None, "once per wait");
        assert!(d.poll_pending(secs(1000)).is_empty());
        // Placed, then waiting again: a new wait, reported on its own time.
        d.add_node("n9");
        d.remove_node(&"n9");
        assert_eq!(d.pending(&"p").unwrap().since, None);
        assert!(d.poll_pending(secs(2000)).is_empty());
        // A wait that ends before its warning is not reported.
        d.add_workload("q", "n8", &[]).unwrap();
        assert!(d.poll_pending(secs(2001)).is_empty());
        d.remove_workload(&"q");
        let due = d.poll_pending(secs(2000) + warn);
        assert_eq!(
            due.iter().map(|p| p.workload).collect::<Vec<_>>(),
            vec!["p"]
        );
        assert!(d.poll_pending(secs(5000)).is_empty());
        assert_eq!(d.next_pending_wake(), None);
    }

    #[test]
    fn multi_attach_flag_lives_as_long_as_the_desire() {
        let mut d = dsw();
        d.add_workload("p", "n2", &["v1"]).unwrap();
        d.set_multi_attach_reported(&"v1", &"n2", true);
        assert!(d.wanted_on(&"v1")[0].multi_attach_reported);
        d.remove_workload(&"p");
        d.add_workload("p", "n2", &["v1"]).unwrap();
        assert!(
            !d.wanted_on(&"v1")[0].multi_attach_reported,
            "a new episode"
        );
    }

    #[test]
    fn volumes_to_attach_lists_every_pair() {
        let mut d = dsw();
        d.add_workload("a", "n1", &["v2"]).unwrap();
        d.add_workload("b", "n2", &["v2", "v1"]).unwrap();
        let mut pairs: Vec<_> = d.volumes_to_attach().map(|(v, n)| (*v, *n)).collect();
        pairs.sort();
        assert_eq!(pairs, vec![("v1", "n2"), ("v2", "n1"), ("v2", "n2")]);
        let wanted: Vec<_> = d.wanted(&"v2").map(|(n, w)| (*n, w.to_vec())).collect();
        assert_eq!(wanted, vec![("n1", vec!["a"]), ("n2", vec!["b"])]);
    }

    #[test]
    fn listings_name_what_is_known() {
        let mut d = dsw();
        d.keep_spec("v8", VolumeSpec::single_node(()));
        d.add_workload("a", "n1", &[]).unwrap();
        d.add_workload("b", "n9", &[]).unwrap();
        let sorted = |it: &mut dyn Iterator<Item = &&'static str>| {
            let mut v: Vec<&str> = it.copied().collect();
            v.sort();
            v
        };
        assert_eq!(sorted(&mut d.nodes()), vec!["n1", "n2"]);
        assert_eq!(sorted(&mut d.registered_volumes()), vec!["v1", "v2"]);
        assert_eq!(sorted(&mut d.workloads()), vec!["a", "b"]);
        assert_eq!(d.pending_workloads().count(), 1);
    }
}
