//! Desired state of world: which volumes each node must have, which workloads need them, and
//! which workloads wait for a node or a volume the core does not know yet.
//!
//! [`DesiredState`] and its tables live here; what they hold and how they change live beside
//! it, one concept a file:
//!
//! - `nodes.rs`: the managed nodes, each with the workloads placed on it.
//! - `volumes.rs`: the volumes with a known spec, and the nodes each is wanted on.
//! - `placement.rs`: placing a workload whose node and volumes are all known, and undoing it.
//! - `pending.rs`: the workloads that wait, and when their waits are reported.
//! - `error.rs`: misuse ([`DesiredError`]) and what a waiting workload lacks ([`Missing`]).
//! - `few.rs`: the short lists the records hold ([`Few`](few::Few)).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::config::Config;
use crate::core::tables::dense_table::DenseTable;
use crate::core::tables::slot_table::SlotTable;
use crate::core::tables::trim::trim_map;
use crate::domain::Domain;

mod error;
mod few;
mod nodes;
mod pending;
mod placement;
mod volumes;

#[cfg(test)]
mod tests;

pub(crate) use error::Names;
pub use error::{DesiredError, Missing};
pub use pending::PendingWorkload;
pub(crate) use volumes::WantedOn;

use nodes::NodeEntry;
use pending::Pending;
use placement::Placed;
use volumes::VolumeEntry;

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
