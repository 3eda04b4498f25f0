//! Desired state of world: which volumes each node must have, and which workloads need them.

use std::ops::{Deref, DerefMut};

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::domain::Domain;
use crate::volume::VolumeSpec;

/// Misuse of the desired state, reported instead of being silently absorbed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DesiredError<D: Domain> {
    /// Workloads can only be placed on nodes the controller manages.
    #[error(
        "node {node:?} is not managed by this controller; add it before placing workloads on it"
    )]
    UnknownNode {
        /// The node named.
        node: D::Node,
    },
    /// Only volumes with a registered spec can be attached (upstream: "not attachable").
    #[error(
        "volume {volume:?} is not registered; register it with set_volume before a workload uses it"
    )]
    UnknownVolume {
        /// The volume named.
        volume: D::Volume,
    },
    /// A node that still has desired volumes cannot be dropped: its workloads must go first.
    #[error("node {node:?} still has {volumes} desired volume(s); remove its workloads first")]
    NodeHasVolumes {
        /// The node named.
        node: D::Node,
        /// How many volumes are still desired on it.
        volumes: usize,
    },
    /// A volume cannot be removed while workloads use it.
    #[error("volume {volume:?} is still used by {workloads} workload(s); remove them first")]
    VolumeInUse {
        /// The volume named.
        volume: D::Volume,
        /// How many workloads use it.
        workloads: usize,
    },
    /// The workload is not known.
    #[error("workload {workload:?} is not placed on any node")]
    UnknownWorkload {
        /// The workload named.
        workload: D::Workload,
    },
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

/// Where one workload runs and what it uses.
#[derive(Clone, Debug)]
struct Placement<D: Domain> {
    node: D::Node,
    /// Sorted, no duplicates.
    volumes: Few<D::Volume>,
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

/// A registered volume: its spec and the nodes it is desired on (often none, usually one).
#[derive(Debug)]
struct VolumeEntry<D: Domain> {
    spec: VolumeSpec<D::Payload>,
    wanted: Option<Few<WantedOn<D>>>,
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
/// node (idempotently), a volume leaves a node when its last workload there goes, and a node can
/// be dropped only when nothing is desired on it any more.
///
/// ```
/// use attach_detach::{DesiredState, Ids, VolumeSpec};
/// let mut dsw: DesiredState<Ids<&str, &str, &str>> = DesiredState::default();
/// dsw.add_node("node-a");
/// dsw.set_volume("pvc-1", VolumeSpec::single_node(()));
/// dsw.add_workload("pod-1", "node-a", &["pvc-1"]).unwrap();
/// assert!(dsw.is_desired(&"pvc-1", &"node-a"));
/// assert!(dsw.remove_node(&"node-a").is_err()); // pod-1 still needs pvc-1 there
/// dsw.remove_workload(&"pod-1").unwrap();
/// assert!(!dsw.is_desired(&"pvc-1", &"node-a"));
/// dsw.remove_node(&"node-a").unwrap();
/// ```
#[derive(Debug)]
pub struct DesiredState<D: Domain> {
    /// Managed nodes and how many volumes are desired on each.
    nodes: FxHashMap<D::Node, usize>,
    /// Every registered volume. Spec and desired nodes share one entry: one table keyed by
    /// volume instead of two saves a hash-table slot per volume.
    volumes: FxHashMap<D::Volume, VolumeEntry<D>>,
    workloads: FxHashMap<D::Workload, Placement<D>>,
    /// Number of desired (volume, node) pairs.
    pairs: usize,
}

impl<D: Domain> Default for DesiredState<D> {
    fn default() -> Self {
        DesiredState {
            nodes: FxHashMap::default(),
            volumes: FxHashMap::default(),
            workloads: FxHashMap::default(),
            pairs: 0,
        }
    }
}

impl<D: Domain> DesiredState<D> {
    /// Starts managing `node` (idempotent).
    pub fn add_node(&mut self, node: D::Node) {
        self.nodes.entry(node).or_insert(0);
    }

    /// Stops managing `node`; refused while volumes are still desired there.
    pub fn remove_node(&mut self, node: &D::Node) -> Result<(), DesiredError<D>> {
        match self.nodes.get(node) {
            None => Err(DesiredError::UnknownNode { node: node.clone() }),
            Some(&0) => {
                self.nodes.remove(node);
                Ok(())
            }
            Some(&volumes) => Err(DesiredError::NodeHasVolumes {
                node: node.clone(),
                volumes,
            }),
        }
    }

    /// Whether `node` is managed.
    pub fn has_node(&self, node: &D::Node) -> bool {
        self.nodes.contains_key(node)
    }

    /// Registers or updates a volume's spec. Returns whether it changed.
    pub fn set_volume(&mut self, volume: D::Volume, spec: VolumeSpec<D::Payload>) -> bool {
        match self.volumes.get_mut(&volume) {
            Some(entry) if entry.spec == spec => false,
            Some(entry) => {
                entry.spec = spec;
                true
            }
            None => {
                self.volumes
                    .insert(volume, VolumeEntry { spec, wanted: None });
                true
            }
        }
    }

    /// Fails with [`DesiredError::VolumeInUse`] while a workload uses `volume`.
    pub fn check_unused(&self, volume: &D::Volume) -> Result<(), DesiredError<D>> {
        let workloads: usize = self
            .wanted_on(volume)
            .iter()
            .map(|w| w.workloads.len())
            .sum();
        if workloads == 0 {
            Ok(())
        } else {
            Err(DesiredError::VolumeInUse {
                volume: volume.clone(),
                workloads,
            })
        }
    }

    /// Drops an unused volume's spec.
    pub(crate) fn forget_volume(&mut self, volume: &D::Volume) {
        if self.check_unused(volume).is_ok() {
            self.volumes.remove(volume);
        }
    }

    /// A volume's spec, if registered.
    pub fn spec(&self, volume: &D::Volume) -> Option<&VolumeSpec<D::Payload>> {
        self.volumes.get(volume).map(|entry| &entry.spec)
    }

    /// Places `workload` on `node` using `volumes`, replacing any earlier placement of it.
    ///
    /// All or nothing: on error nothing changes. Returns the volumes whose desired nodes changed
    /// (old and new), so the caller can look at just those.
    pub fn add_workload(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
    ) -> Result<Vec<D::Volume>, DesiredError<D>> {
        if !self.nodes.contains_key(&node) {
            return Err(DesiredError::UnknownNode { node });
        }
        if let Some(volume) = volumes.iter().find(|v| !self.volumes.contains_key(v)) {
            return Err(DesiredError::UnknownVolume {
                volume: volume.clone(),
            });
        }
        let mut wanted: Vec<D::Volume> = volumes.to_vec();
        wanted.sort();
        wanted.dedup();
        if let Some(old) = self.workloads.get(&workload) {
            if old.node == node && *old.volumes == *wanted {
                return Ok(Vec::new());
            }
        }
        let mut changed = match self.workloads.remove(&workload) {
            Some(old) => self.unplace(&workload, old),
            None => Vec::new(),
        };
        for volume in &wanted {
            let entry = self.volumes.get_mut(volume).expect("checked above");
            match entry.wanted_mut().iter_mut().find(|w| w.node == node) {
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
                        node: node.clone(),
                        workloads: Few::One(workload.clone()),
                        multi_attach_reported: false,
                    };
                    match &mut entry.wanted {
                        None => entry.wanted = Some(Few::One(on)),
                        Some(list) => list.insert(list.len(), on),
                    }
                    *self.nodes.get_mut(&node).expect("checked above") += 1;
                    self.pairs += 1;
                }
            }
            changed.push(volume.clone());
        }
        self.workloads.insert(
            workload,
            Placement {
                node,
                volumes: Few::from_vec(wanted),
            },
        );
        changed.sort();
        changed.dedup();
        Ok(changed)
    }

    /// Removes `workload`; volumes it alone needed on its node stop being desired there.
    /// Returns the volumes whose desired nodes changed.
    pub fn remove_workload(
        &mut self,
        workload: &D::Workload,
    ) -> Result<Vec<D::Volume>, DesiredError<D>> {
        let placement =
            self.workloads
                .remove(workload)
                .ok_or_else(|| DesiredError::UnknownWorkload {
                    workload: workload.clone(),
                })?;
        Ok(self.unplace(workload, placement))
    }

    fn unplace(&mut self, workload: &D::Workload, placement: Placement<D>) -> Vec<D::Volume> {
        let mut changed = Vec::with_capacity(placement.volumes.len());
        for volume in placement.volumes.into_vec() {
            let Some(entry) = self.volumes.get_mut(&volume) else {
                continue;
            };
            if let Some(i) = entry.wanted().iter().position(|w| w.node == placement.node) {
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
                        self.pairs -= 1;
                        if let Some(count) = self.nodes.get_mut(&placement.node) {
                            *count = count.saturating_sub(1);
                        }
                    }
                    Ok(at) => {
                        on.workloads.remove(at);
                    }
                    Err(_) => {}
                }
            }
            changed.push(volume);
        }
        changed
    }

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

    pub(crate) fn wanted_on(&self, volume: &D::Volume) -> &[WantedOn<D>] {
        self.volumes.get(volume).map_or(&[], |e| e.wanted())
    }

    /// Remembers whether the Multi-Attach event for (`volume`, `node`) was emitted in this
    /// episode; the episode ends when the volume stops being desired there.
    pub fn set_multi_attach_reported(&mut self, volume: &D::Volume, node: &D::Node, value: bool) {
        if let Some(entry) = self
            .volumes
            .get_mut(volume)
            .and_then(|e| e.wanted_mut().iter_mut().find(|w| w.node == *node))
        {
            entry.multi_attach_reported = value;
        }
    }

    /// Where `workload` runs and which volumes it uses.
    pub fn placement(&self, workload: &D::Workload) -> Option<(&D::Node, &[D::Volume])> {
        self.workloads.get(workload).map(|p| (&p.node, &*p.volumes))
    }

    /// Every (volume, node) that must be attached, in no particular order.
    pub fn volumes_to_attach(&self) -> impl Iterator<Item = (&D::Volume, &D::Node)> {
        self.volumes
            .iter()
            .flat_map(|(v, e)| e.wanted().iter().map(move |w| (v, &w.node)))
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

    #[test]
    fn add_workload_needs_a_managed_node_and_a_known_volume() {
        let mut d = dsw();
        assert_eq!(
            d.add_workload("p", "n9", &["v1"]),
            Err(DesiredError::UnknownNode { node: "n9" })
        );
        assert_eq!(
            d.add_workload("p", "n1", &["v1", "v9"]),
            Err(DesiredError::UnknownVolume { volume: "v9" })
        );
        assert!(d.is_empty(), "a refused placement changes nothing");
        assert!(d.placement(&"p").is_none());
    }

    #[test]
    fn adding_twice_is_idempotent_and_last_workload_drops_the_volume() {
        let mut d = dsw();
        assert_eq!(d.add_workload("p1", "n1", &["v1"]).unwrap(), vec!["v1"]);
        assert!(d.add_workload("p1", "n1", &["v1"]).unwrap().is_empty());
        d.add_workload("p2", "n1", &["v1"]).unwrap();
        assert_eq!(d.len(), 1);
        d.remove_workload(&"p1").unwrap();
        assert!(d.is_desired(&"v1", &"n1"), "p2 still needs it");
        d.remove_workload(&"p2").unwrap();
        assert!(!d.is_desired(&"v1", &"n1"));
        assert_eq!(d.len(), 0);
        assert_eq!(
            d.remove_workload(&"p2"),
            Err(DesiredError::UnknownWorkload { workload: "p2" })
        );
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
    }

    #[test]
    fn a_spec_outlives_the_desire_and_counts_follow_the_pairs() {
        let mut d = dsw();
        d.add_workload("a", "n1", &["v2"]).unwrap();
        d.add_workload("b", "n2", &["v2", "v1"]).unwrap();
        assert_eq!((d.len(), d.is_empty()), (3, false));
        d.remove_workload(&"b").unwrap();
        d.remove_workload(&"a").unwrap();
        assert_eq!((d.len(), d.is_empty()), (0, true));
        assert_eq!(d.volumes_to_attach().count(), 0);
        assert_eq!(d.wanted(&"v2").count(), 0);
        assert!(
            !d.set_volume("v1", VolumeSpec::single_node(())),
            "still registered"
        );
        assert!(d.set_volume("v1", VolumeSpec::multi_node(())), "changed");
        d.add_workload("c", "n1", &["v1"]).unwrap();
        assert!(d.is_desired(&"v1", &"n1"));
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
        assert!(std::mem::size_of::<(u32, VolumeEntry<Small>)>() <= 40);
        assert!(std::mem::size_of::<(u32, Placement<Small>)>() <= 32);
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
        d.remove_workload(&"b").unwrap();
        d.remove_workload(&"c").unwrap();
        assert_eq!(wanted(&d), vec![("n1", vec!["a", "d"])]);
        assert_eq!(d.len(), 1);
        d.add_workload("a", "n2", &["v2", "v1", "v2"]).unwrap();
        assert_eq!(d.placement(&"a"), Some((&"n2", &["v1", "v2"][..])));
        assert_eq!(wanted(&d), vec![("n1", vec!["d"]), ("n2", vec!["a"])]);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn a_node_with_volumes_cannot_be_removed() {
        let mut d = dsw();
        d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
        assert_eq!(
            d.remove_node(&"n1"),
            Err(DesiredError::NodeHasVolumes {
                node: "n1",
                volumes: 2
            })
        );
        d.remove_workload(&"p").unwrap();
        d.remove_node(&"n1").unwrap();
        assert!(!d.has_node(&"n1"));
        assert_eq!(
            d.remove_node(&"n1"),
            Err(DesiredError::UnknownNode { node: "n1" })
        );
    }

    #[test]
    fn multi_attach_flag_lives_as_long_as_the_desire() {
        let mut d = dsw();
        d.add_workload("p", "n2", &["v1"]).unwrap();
        d.set_multi_attach_reported(&"v1", &"n2", true);
        assert!(d.wanted_on(&"v1")[0].multi_attach_reported);
        d.remove_workload(&"p").unwrap();
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
}
