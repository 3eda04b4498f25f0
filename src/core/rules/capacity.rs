//! Per-node attach limits: how many volumes a node holds or is being given, and which volumes
//! wait for room on it.
//!
//! Clouds cap the data disks a machine can hold (Kubernetes reports the cap per driver as the
//! CSINode's allocatable count). Upstream leaves the cap to the scheduler and finds out at
//! attach time, when the cloud refuses; the core counts instead, and never plans an attach past
//! the cap. A volume that would go past it waits, named once in an
//! [`Event::NodeFull`](crate::core::Event::NodeFull), until an attachment on the node ends.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::core::calls::volume::DriverId;
use crate::core::tables::trim::trim_map;
use crate::domain::Domain;

/// The volumes waiting for room on one node, each with the workloads its events named (sorted).
type Waits<D> = BTreeMap<<D as Domain>::Volume, Vec<<D as Domain>::Workload>>;

/// Attaches under way per node, and the volumes waiting for room on each node.
#[derive(Debug)]
pub(crate) struct NodeCapacity<D: Domain> {
    /// Per node, the attaches planned and not finished whose pair had no attachment record
    /// when planned: the record appears only when they finish, so until then they are counted
    /// here. (An attach that retries an Uncertain pair is counted by its record.)
    attaching: FxHashMap<D::Node, u32>,
    /// The same, per node and driver, for volumes counted against a driver's limit.
    attaching_by_driver: FxHashMap<(D::Node, DriverId), u32>,
    /// Per node, the volumes whose attach waits for room there, each with the workloads the
    /// wait's `NodeFull` events named so far (sorted).
    waiting: FxHashMap<D::Node, Waits<D>>,
    /// The nodes each waiting volume waits on: the reverse of `waiting`, so that a volume no
    /// longer wanted somewhere ends its waits without a look at every node with waits.
    waiting_on: FxHashMap<D::Volume, SmallVec<[D::Node; 1]>>,
    /// Nodes whose backend said they are full, until a volume leaves or joins them: only
    /// these have a node-capacity backoff to look at or clear, so an attach or a detach
    /// elsewhere builds no backoff key.
    full: FxHashSet<D::Node>,
}

impl<D: Domain> Default for NodeCapacity<D> {
    fn default() -> Self {
        NodeCapacity {
            attaching: FxHashMap::default(),
            attaching_by_driver: FxHashMap::default(),
            waiting: FxHashMap::default(),
            waiting_on: FxHashMap::default(),
            full: FxHashSet::default(),
        }
    }
}

impl<D: Domain> NodeCapacity<D> {
    /// An attach to `node` of a volume with no record there was planned (of `driver`'s, if
    /// the volume counts against a driver's limit).
    pub(crate) fn attach_started(&mut self, node: &D::Node, driver: Option<DriverId>) {
        *self.attaching.entry(node.clone()).or_default() += 1;
        if let Some(driver) = driver {
            *(self.attaching_by_driver)
                .entry((node.clone(), driver))
                .or_default() += 1;
        }
    }

    /// An attach counted by [`attach_started`](Self::attach_started) finished.
    pub(crate) fn attach_ended(&mut self, node: &D::Node, driver: Option<DriverId>) {
        if let Some(count) = self.attaching.get_mut(node) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.attaching.remove(node);
            }
        }
        if let Some(driver) = driver {
            let key = (node.clone(), driver);
            if let Some(count) = self.attaching_by_driver.get_mut(&key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.attaching_by_driver.remove(&key);
                }
            }
        }
    }

    /// Attaches to `node` of `driver`'s volumes planned that have no record yet.
    pub(crate) fn attaching_of(&self, node: &D::Node, driver: DriverId) -> u32 {
        if self.attaching_by_driver.is_empty() {
            return 0;
        }
        (self.attaching_by_driver.get(&(node.clone(), driver)))
            .copied()
            .unwrap_or(0)
    }

    /// Attaches to `node` planned that have no record yet.
    pub(crate) fn attaching(&self, node: &D::Node) -> u32 {
        self.attaching.get(node).copied().unwrap_or(0)
    }

    /// `volume` waits for room on `node` for `workloads` (sorted). Returns true when an event
    /// is due: the wait starts, or a workload the wait's events have not named joined it (as
    /// a Multi-Attach event is raised again for a workload that joins its wait).
    pub(crate) fn wait(
        &mut self,
        node: &D::Node,
        volume: &D::Volume,
        workloads: &[D::Workload],
    ) -> bool {
        let waits = self.waiting.entry(node.clone()).or_default();
        if !waits.contains_key(volume) {
            let nodes = self.waiting_on.entry(volume.clone()).or_default();
            if !nodes.contains(node) {
                nodes.push(node.clone());
            }
        }
        let named = waits.entry(volume.clone()).or_default();
        let fresh = named.is_empty() || workloads.iter().any(|w| named.binary_search(w).is_err());
        if fresh {
            named.extend(workloads.iter().cloned());
            named.sort();
            named.dedup();
        }
        fresh
    }

    /// `volume` got room on `node` (or no longer needs it): its wait ends.
    pub(crate) fn stop_waiting(&mut self, node: &D::Node, volume: &D::Volume) {
        if let Some(map) = self.waiting.get_mut(node) {
            if map.remove(volume).is_some() {
                unindex(&mut self.waiting_on, volume, node);
            }
            if map.is_empty() {
                self.waiting.remove(node);
            }
        }
    }

    /// The volumes waiting for room on `node`, in volume order; their waits go on until each
    /// gets room or is dropped with [`retain`](Self::retain).
    pub(crate) fn waiting(&self, node: &D::Node) -> Vec<D::Volume> {
        self.waiting
            .get(node)
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Keeps only the waits on `node` that `still` says are still wanted.
    pub(crate) fn retain(&mut self, node: &D::Node, still: impl Fn(&D::Volume) -> bool) {
        if let Some(map) = self.waiting.get_mut(node) {
            let waiting_on = &mut self.waiting_on;
            map.retain(|v, _| {
                let keep = still(v);
                if !keep {
                    unindex(waiting_on, v, node);
                }
                keep
            });
            if map.is_empty() {
                self.waiting.remove(node);
            }
        }
    }

    /// Ends the waits of `volume` on the nodes `wanted` says it is no longer wanted on.
    pub(crate) fn forget_unwanted(
        &mut self,
        volume: &D::Volume,
        wanted: impl Fn(&D::Node) -> bool,
    ) {
        let Some(nodes) = self.waiting_on.get(volume) else {
            return;
        };
        let unwanted: SmallVec<[D::Node; 1]> =
            nodes.iter().filter(|n| !wanted(n)).cloned().collect();
        for node in unwanted {
            self.stop_waiting(&node, volume);
        }
    }

    /// The node is gone: no wait for room on it goes on (its workloads wait for the node).
    pub(crate) fn forget_node(&mut self, node: &D::Node) {
        if let Some(waits) = self.waiting.remove(node) {
            for volume in waits.keys() {
                unindex(&mut self.waiting_on, volume, node);
            }
        }
        self.full.remove(node);
    }

    /// The backend said `node` is full: attaches to it back off until a volume leaves or
    /// joins it.
    pub(crate) fn set_full(&mut self, node: &D::Node) {
        self.full.insert(node.clone());
    }

    /// Whether the backend said `node` is full and nothing left or joined it since.
    pub(crate) fn said_full(&self, node: &D::Node) -> bool {
        !self.full.is_empty() && self.full.contains(node)
    }

    /// A volume left or joined `node`: returns whether it had been said full (its backoff is
    /// then to be cleared).
    pub(crate) fn clear_full(&mut self, node: &D::Node) -> bool {
        !self.full.is_empty() && self.full.remove(node)
    }

    /// Number of volumes waiting for room, over all nodes.
    pub(crate) fn waiting_len(&self) -> usize {
        self.waiting.values().map(BTreeMap::len).sum()
    }

    /// Gives back what a burst left allocated.
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.attaching);
        trim_map(&mut self.attaching_by_driver);
        trim_map(&mut self.waiting);
        trim_map(&mut self.waiting_on);
    }
}

/// Drops `node` from the nodes `volume` waits on.
fn unindex<V: Eq + std::hash::Hash, N: PartialEq>(
    index: &mut FxHashMap<V, SmallVec<[N; 1]>>,
    volume: &V,
    node: &N,
) {
    if let Some(nodes) = index.get_mut(volume) {
        nodes.retain(|n| n != node);
        if nodes.is_empty() {
            index.remove(volume);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    #[test]
    fn counts_attaches_and_waits_per_node() {
        let mut c = NodeCapacity::<T>::default();
        let d = DriverId::new(7).unwrap();
        c.attach_started(&"n1", Some(d));
        c.attach_started(&"n1", None);
        c.attach_started(&"n2", Some(d));
        assert_eq!(c.attaching(&"n1"), 2);
        assert_eq!(c.attaching_of(&"n1", d), 1);
        c.attach_ended(&"n1", Some(d));
        c.attach_ended(&"n1", None);
        c.attach_ended(&"n1", Some(d));
        assert_eq!(c.attaching(&"n1"), 0);
        assert_eq!(c.attaching_of(&"n1", d), 0);
        assert_eq!(c.attaching(&"n2"), 1);
        assert_eq!(c.attaching_of(&"n2", d), 1);

        assert!(c.wait(&"n1", &"v2", &["p2"]));
        assert!(c.wait(&"n1", &"v1", &["p1"]));
        assert!(
            !c.wait(&"n1", &"v1", &["p1"]),
            "a wait already going on is not new"
        );
        assert!(
            c.wait(&"n1", &"v1", &["p0", "p1"]),
            "a workload joined it: named"
        );
        assert!(!c.wait(&"n1", &"v1", &["p0"]), "every one was named");
        assert_eq!(c.waiting(&"n1"), vec!["v1", "v2"]);
        c.retain(&"n1", |v| *v != "v2");
        assert_eq!(c.waiting(&"n1"), vec!["v1"]);
        c.stop_waiting(&"n1", &"v1");
        assert_eq!(c.waiting_len(), 0);
        assert!(
            c.wait(&"n1", &"v1", &["p1"]),
            "a new wait after the last ended"
        );
        c.forget_node(&"n1");
        assert!(c.waiting(&"n1").is_empty());
        assert!(c.waiting_on.is_empty(), "the reverse index follows");
    }

    #[test]
    fn a_volume_no_longer_wanted_on_a_node_ends_just_that_wait() {
        let mut c = NodeCapacity::<T>::default();
        c.wait(&"n1", &"v1", &["p1"]);
        c.wait(&"n2", &"v1", &["p2"]);
        c.wait(&"n2", &"v2", &["p3"]);
        c.forget_unwanted(&"v1", |n| *n == "n2");
        assert!(c.waiting(&"n1").is_empty());
        assert_eq!(c.waiting(&"n2"), vec!["v1", "v2"]);
        c.retain(&"n2", |v| *v == "v2");
        assert_eq!(c.waiting(&"n2"), vec!["v2"]);
        assert_eq!(c.waiting_on.len(), 1, "only v2 still waits");
        c.forget_unwanted(&"v2", |_| false);
        assert_eq!(c.waiting_len(), 0);
        assert!(c.waiting_on.is_empty());
    }

    #[test]
    fn a_full_node_is_remembered_until_a_volume_leaves_or_joins_it() {
        let mut c = NodeCapacity::<T>::default();
        assert!(!c.said_full(&"n1") && !c.clear_full(&"n1"));
        c.set_full(&"n1");
        assert!(c.said_full(&"n1"));
        assert!(c.clear_full(&"n1"));
        assert!(!c.said_full(&"n1") && !c.clear_full(&"n1"));
        c.set_full(&"n2");
        c.forget_node(&"n2");
        assert!(!c.said_full(&"n2"));
    }
}
