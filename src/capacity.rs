//! Per-node attach limits: how many volumes a node holds or is being given, and which volumes
//! wait for room on it.
//!
//! Clouds cap the data disks a machine can hold (Kubernetes reports the cap per driver as the
//! CSINode's allocatable count). Upstream leaves the cap to the scheduler and finds out at
//! attach time, when the cloud refuses; the core counts instead, and never plans an attach past
//! the cap. A volume that would go past it waits, named once in an
//! [`Event::NodeFull`](crate::core::Event::NodeFull), until an attachment on the node ends.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::domain::Domain;
use crate::gate::trim_map;

/// The volumes waiting for room on one node, each with the workloads its events named (sorted).
type Waits<D> = BTreeMap<<D as Domain>::Volume, Vec<<D as Domain>::Workload>>;

/// Attaches under way per node, and the volumes waiting for room on each node.
#[derive(Debug)]
pub(crate) struct NodeCapacity<D: Domain> {
    /// Per node, the attaches planned and not finished whose pair had no attachment record
    /// when planned: the record appears only when they finish, so until then they are counted
    /// here. (An attach that retries an Uncertain pair is counted by its record.)
    attaching: FxHashMap<D::Node, u32>,
    /// Per node, the volumes whose attach waits for room there, each with the workloads the
    /// wait's `NodeFull` events named so far (sorted).
    waiting: FxHashMap<D::Node, Waits<D>>,
}

impl<D: Domain> Default for NodeCapacity<D> {
    fn default() -> Self {
        NodeCapacity {
            attaching: FxHashMap::default(),
            waiting: FxHashMap::default(),
        }
    }
}

impl<D: Domain> NodeCapacity<D> {
    /// An attach to `node` of a volume with no record there was planned.
    pub(crate) fn attach_started(&mut self, node: &D::Node) {
        *self.attaching.entry(node.clone()).or_default() += 1;
    }

    /// An attach counted by [`attach_started`](Self::attach_started) finished.
    pub(crate) fn attach_ended(&mut self, node: &D::Node) {
        if let Some(count) = self.attaching.get_mut(node) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.attaching.remove(node);
            }
        }
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
        let named = self
            .waiting
            .entry(node.clone())
            .or_default()
            .entry(volume.clone())
            .or_default();
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
            map.remove(volume);
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
            map.retain(|v, _| still(v));
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
        if self.waiting.is_empty() {
            return;
        }
        self.waiting.retain(|node, map| {
            if map.contains_key(volume) && !wanted(node) {
                map.remove(volume);
            }
            !map.is_empty()
        });
    }

    /// The node is gone: no wait for room on it goes on (its workloads wait for the node).
    pub(crate) fn forget_node(&mut self, node: &D::Node) {
        self.waiting.remove(node);
    }

    /// Number of volumes waiting for room, over all nodes.
    pub(crate) fn waiting_len(&self) -> usize {
        self.waiting.values().map(BTreeMap::len).sum()
    }

    /// Gives back what a burst left allocated.
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.attaching);
        trim_map(&mut self.waiting);
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
        c.attach_started(&"n1");
        c.attach_started(&"n1");
        c.attach_started(&"n2");
        assert_eq!(c.attaching(&"n1"), 2);
        c.attach_ended(&"n1");
        c.attach_ended(&"n1");
        c.attach_ended(&"n1");
        assert_eq!(c.attaching(&"n1"), 0);
        assert_eq!(c.attaching(&"n2"), 1);

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
    }
}
