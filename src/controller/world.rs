//! The orchestrator's view at controller start: the desired state to rebuild.

use super::handle::Input;
use crate::actual::NodeFacts;
use crate::domain::Domain;
use crate::reconciler::{Reconciler, ReconcilerError};
use crate::volume::VolumeSpec;

/// Volumes, nodes and workload placements as the orchestrator knows them when a controller
/// starts (Kubernetes: the informers' initial lists).
///
/// After a restart this is the only source of the desired state; the actual state comes from
/// the store and the backend. Entries are applied volumes first, then nodes, then workloads, so
/// the builder calls may come in any order.
///
/// ```
/// use attach_detach::{Ids, NodeFacts, VolumeSpec, World};
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// let world = World::<D>::new()
///     .workload("pod-1", "node-a", ["pvc-1"])
///     .node("node-a", NodeFacts::default())
///     .volume("pvc-1", VolumeSpec::single_node(()));
/// assert_eq!(world.len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct World<D: Domain> {
    volumes: Vec<Input<D>>,
    nodes: Vec<Input<D>>,
    workloads: Vec<Input<D>>,
}

impl<D: Domain> Default for World<D> {
    fn default() -> Self {
        World {
            volumes: Vec::new(),
            nodes: Vec::new(),
            workloads: Vec::new(),
        }
    }
}

impl<D: Domain> World<D> {
    /// An empty world.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a volume.
    pub fn volume(mut self, volume: D::Volume, spec: VolumeSpec<D::Payload>) -> Self {
        self.volumes.push(Input::SetVolume { volume, spec });
        self
    }

    /// Adds a node.
    pub fn node(mut self, node: D::Node, facts: NodeFacts<D::Volume>) -> Self {
        self.nodes.push(Input::NodeUpdated { node, facts });
        self
    }

    /// Places a workload on a node.
    pub fn workload(
        mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: impl IntoIterator<Item = D::Volume>,
    ) -> Self {
        self.workloads.push(Input::WorkloadScheduled {
            workload,
            node,
            volumes: volumes.into_iter().collect(),
        });
        self
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.volumes.len() + self.nodes.len() + self.workloads.len()
    }

    /// Whether the world is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies every entry to `core`, stopping at the first the core refuses.
    pub fn apply_to(self, core: &mut Reconciler<D>) -> Result<(), ReconcilerError<D>> {
        for input in self
            .volumes
            .into_iter()
            .chain(self.nodes)
            .chain(self.workloads)
        {
            input.apply_to(core)?;
        }
        Ok(())
    }
}
