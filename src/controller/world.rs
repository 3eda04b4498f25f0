//! The orchestrator's view at controller start: the desired state to rebuild.

use crate::core::calls::volume::VolumeSpec;
use crate::core::input::Input;
use crate::core::input::ReconcilerError;
use crate::core::reconciler::Reconciler;
use crate::core::state::actual::NodeFacts;
use crate::domain::Domain;

/// Volumes, nodes and workload placements as the orchestrator knows them when a controller
/// starts (Kubernetes: the informers' initial lists).
///
/// After a restart this is the only source of the desired state; the actual state comes from
/// the store and the backend. It is just a list of [`Input`]s, applied in order with
/// [`Reconciler::handle`] when the controller is built. Any order works: a workload listed
/// before its node or its volumes waits until they come, as it would from a watcher. (A world
/// listing more such workloads at once than
/// [`Config::max_pending_workloads`](crate::config::Config) is refused: list volumes and nodes
/// first.)
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::controller::World;
/// use attach_detach::core::{Input, NodeFacts, VolumeSpec};
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// let world = World::<D>::new()
///     .workload("pod-1", "node-a", ["pvc-1"])
///     .node("node-a", NodeFacts::default())
///     .volume("pvc-1", VolumeSpec::single_node(()));
/// assert_eq!(world.len(), 3);
/// // The same, from inputs.
/// let same: World<D> = world.inputs().iter().cloned().collect();
/// assert_eq!(same, world);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct World<D: Domain> {
    inputs: Vec<Input<D>>,
}

impl<D: Domain> Default for World<D> {
    fn default() -> Self {
        World { inputs: Vec::new() }
    }
}

impl<D: Domain> World<D> {
    /// An empty world.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a volume ([`Input::SetVolume`]).
    pub fn volume(self, volume: D::Volume, spec: VolumeSpec<D::Payload>) -> Self {
        self.input(Input::SetVolume { volume, spec })
    }

    /// Adds a node ([`Input::NodeUpdated`]).
    pub fn node(self, node: D::Node, facts: NodeFacts<D::Volume>) -> Self {
        self.input(Input::NodeUpdated { node, facts })
    }

    /// Places a workload on a node ([`Input::WorkloadScheduled`]).
    pub fn workload(
        self,
        workload: D::Workload,
        node: D::Node,
        volumes: impl IntoIterator<Item = D::Volume>,
    ) -> Self {
        self.input(Input::WorkloadScheduled {
            workload,
            node,
            volumes: volumes.into_iter().collect(),
        })
    }

    /// Adds any input.
    pub fn input(mut self, input: Input<D>) -> Self {
        self.inputs.push(input);
        self
    }

    /// The inputs, in the order they are applied.
    pub fn inputs(&self) -> &[Input<D>] {
        &self.inputs
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Whether the world is empty.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Applies every input to `core` with [`Reconciler::handle`], in order, stopping at the
    /// first the core refuses.
    pub fn apply_to(self, core: &mut Reconciler<D>) -> Result<(), ReconcilerError<D>> {
        for input in self.inputs {
            core.handle(input)?;
        }
        Ok(())
    }
}

impl<D: Domain> FromIterator<Input<D>> for World<D> {
    fn from_iter<I: IntoIterator<Item = Input<D>>>(inputs: I) -> Self {
        World {
            inputs: inputs.into_iter().collect(),
        }
    }
}

impl<D: Domain> Extend<Input<D>> for World<D> {
    fn extend<I: IntoIterator<Item = Input<D>>>(&mut self, inputs: I) {
        self.inputs.extend(inputs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    #[test]
    fn a_world_lists_its_inputs_in_order() {
        let empty = World::<D>::new();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        let world = World::<D>::new()
            .volume("v", VolumeSpec::single_node(()))
            .node("n", NodeFacts::default());
        assert!(!world.is_empty());
        assert_eq!(world.len(), 2);
        assert_eq!(
            world.inputs(),
            [
                Input::SetVolume {
                    volume: "v",
                    spec: VolumeSpec::single_node(())
                },
                Input::NodeUpdated {
                    node: "n",
                    facts: NodeFacts::default()
                },
            ]
        );
        let mut more: World<D> = world.inputs().iter().cloned().collect();
        assert_eq!(more, world);
        more.extend([Input::WorkloadRemoved { workload: "w" }]);
        assert_eq!(more.len(), 3);
        assert_eq!(
            more.inputs().last(),
            Some(&Input::WorkloadRemoved { workload: "w" })
        );
    }
}
