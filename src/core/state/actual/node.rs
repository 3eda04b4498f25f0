//! A node's record in the actual state ([`ActualNode`]): the facts the orchestrator feeds in
//! ([`NodeFacts`]), and the node's index of the attachments there, its device paths, detach
//! requests and place in the verify ring. The record is made with the node's first fact or
//! attachment, and dropped once the node is gone and holds nothing.

use std::time::Duration;

use super::ActualState;
use super::sorted::Sparse;
use super::standing::Standing;
use crate::core::calls::volume::DriverId;
use crate::core::tables::dense_table::{DenseTable, Keyed};
use crate::core::tables::device_paths::NodeDevicePaths;
use crate::domain::Domain;

/// What the orchestrator knows about a node, fed in as it changes.
///
/// ```
/// use attach_detach::core::NodeFacts;
/// let fresh: NodeFacts<&str> = NodeFacts::default();   // healthy, not fenced, not heard from
/// assert_eq!(fresh.in_use, None);
/// let fenced = NodeFacts { healthy: false, fenced: true, in_use: Some(vec!["pvc-1"]), ..NodeFacts::default() };
/// # let _ = fenced;
/// // A cloud VM that holds at most 16 data disks (Kubernetes: CSINode allocatable count).
/// let capped: NodeFacts<&str> = NodeFacts { attach_limit: Some(16), ..NodeFacts::default() };
/// # let _ = capped;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts<V> {
    /// The node answers (Kubernetes: Ready). An unhealthy node may still be writing to its disks.
    pub healthy: bool,
    /// The node is known to be powered off or isolated (`node.kubernetes.io/out-of-service`):
    /// its volumes may be detached even if reported mounted.
    pub fenced: bool,
    /// The volumes the node agent reports in use (Kubernetes `volumesInUse`); `None` until the
    /// node has reported, in which case every attached volume counts as mounted.
    pub in_use: Option<Vec<V>>,
    /// How many volumes that need a backend attach the node can hold at once (clouds cap it
    /// per machine type; Kubernetes reports it per driver as CSINode's allocatable count);
    /// `None` for no limit. The core never plans an attach past it: attached, maybe-attached
    /// and attaching volumes all count, and a workload whose volume would go past it waits,
    /// named in an [`Event::NodeFull`](crate::core::Event::NodeFull), until one leaves.
    /// Volumes that need no backend call ([`VolumeSpec::attach_required`](crate::core::VolumeSpec)
    /// false) do not count.
    pub attach_limit: Option<u32>,
    /// Per driver, how many of its volumes the node can hold at once (Kubernetes: each driver's
    /// `allocatable.count` in the node's CSINode), for volumes whose
    /// [`VolumeSpec::driver`](crate::core::VolumeSpec::driver) names it; counted as
    /// `attach_limit` counts, and checked beside it. A driver not listed has no limit.
    pub driver_limits: Vec<(DriverId, u32)>,
}

impl<V> Default for NodeFacts<V> {
    fn default() -> Self {
        NodeFacts {
            healthy: true,
            fenced: false,
            in_use: None,
            attach_limit: None,
            driver_limits: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct ActualNode<D: Domain> {
    /// The node itself: the key of [`ActualState::nodes`].
    pub(super) node: D::Node,
    /// The node object exists (added and not removed).
    pub(crate) present: bool,
    pub(crate) healthy: bool,
    pub(crate) fenced: bool,
    /// Sorted; `None` until the node reports. A boxed slice: replaced whole on each report,
    /// and 8 bytes per node less than a `Vec`.
    pub(crate) in_use: Option<Box<[D::Volume]>>,
    /// [`NodeFacts::attach_limit`].
    pub(crate) attach_limit: Option<u32>,
    /// [`NodeFacts::driver_limits`]: empty (no allocation) for most nodes.
    pub(crate) driver_limits: Box<[(DriverId, u32)]>,
    /// The volumes attached (or maybe attached) here, sorted, each with whether the node must
    /// report it and its generation: the node's report and its verify are read from here,
    /// without a lookup per volume. Exactly the volumes with a record on this node.
    pub(super) attached: Vec<(D::Volume, Standing)>,
    /// The device paths of the attachments here that have one, sorted by volume, their text
    /// in one buffer.
    pub(super) devices: NodeDevicePaths<D::Volume>,
    /// When the controller first wanted each of these attachments gone, sorted by volume.
    pub(super) detach_requested: Sparse<(D::Volume, Duration)>,
    /// Where the node sits in [`VerifyRing::order`]; [`OUT_OF_RING`] while nothing is
    /// attached here. Not an `Option`: the tag cost every node 8 bytes.
    ///
    /// [`VerifyRing::order`]: crate::core::tables::verify_ring::VerifyRing::order
    pub(super) ring_pos: u32,
    /// Changes whenever the node's report may have: see [`ActualState::report_generation`].
    pub(super) report_gen: u64,
    /// The last generation handed out to a record here in this epoch ([`Standing`]).
    pub(super) generations: u32,
    /// How many of `attached` the node reports. A move's status write always differs from
    /// what the store holds by a volume, so the compare before it ends here, on the counts,
    /// instead of walking the node's list to the first difference (4 % of a `u32` move's
    /// instructions).
    pub(super) reported: u32,
    /// Which numbering the generations here belong to: new whenever the node's record is
    /// made or its records renumbered, never one handed out before
    /// ([`ActualState::epoch_of`]). A verify's answer is matched only within the epoch it
    /// was planned in.
    pub(super) epoch: u64,
}

/// `node`'s record, made if it is new.
pub(super) fn node_entry<'a, D: Domain>(
    nodes: &'a mut DenseTable<ActualNode<D>>,
    report_generations: &mut u64,
    node: &D::Node,
) -> &'a mut ActualNode<D> {
    nodes.get_or_make(node, |node| ActualNode {
        report_gen: next_generation(report_generations),
        // From the same counter: any number never handed out before will do.
        epoch: next_generation(report_generations),
        ..ActualNode::unknown(node.clone())
    })
}

/// [`ActualNode::ring_pos`] of a node not in the verify ring.
pub(super) const OUT_OF_RING: u32 = u32::MAX;

/// A report generation never handed out before.
pub(super) fn next_generation(generations: &mut u64) -> u64 {
    *generations += 1;
    *generations
}

impl<D: Domain> Keyed for ActualNode<D> {
    type Key = D::Node;
    fn key(&self) -> &D::Node {
        &self.node
    }
}

impl<D: Domain> ActualNode<D> {
    fn unknown(node: D::Node) -> Self {
        ActualNode {
            node,
            present: false,
            healthy: false,
            fenced: false,
            in_use: None,
            attach_limit: None,
            driver_limits: Box::default(),
            attached: Vec::new(),
            devices: NodeDevicePaths::default(),
            detach_requested: Sparse::default(),
            ring_pos: OUT_OF_RING,
            report_gen: 0,
            generations: 0,
            reported: 0,
            epoch: 0,
        }
    }

    /// Keeps [`reported`](Self::reported) in line with an entry of `attached` that was
    /// reported (`was`; false too when there was no entry) and now is (`now`; false when it
    /// is gone).
    pub(super) fn count_reported(&mut self, was: bool, now: bool) {
        // `was` is counted in `reported`, so the sum does not go below zero.
        self.reported = self.reported + u32::from(now) - u32::from(was);
    }

    /// The greatest generation a record keeps ([`Standing`]'s 31 bits).
    pub(super) const MAX_GENERATION: u32 = !Standing::REPORTED;

    /// Makes room for `draws` more generations in this epoch: if the counter would pass
    /// [`MAX_GENERATION`](Self::MAX_GENERATION), the node's records are renumbered 1 up and
    /// the node takes a new epoch (from `serials`, the actual state's counter of numbers never
    /// handed out twice), so that a running verify's numbers match none of them.
    pub(super) fn make_room(&mut self, draws: usize, serials: &mut u64) {
        if u64::from(self.generations) + draws as u64 <= u64::from(Self::MAX_GENERATION) {
            return;
        }
        let mut generation = 0;
        for (_, standing) in &mut self.attached {
            generation += 1;
            standing.bump(u64::from(generation));
        }
        self.generations = generation;
        self.epoch = next_generation(serials);
    }

    /// A generation never handed out to a record here in this epoch (after
    /// [`make_room`](Self::make_room) for it).
    pub(super) fn draw(&mut self, serials: &mut u64) -> u64 {
        self.make_room(1, serials);
        self.generations += 1;
        u64::from(self.generations)
    }

    pub(super) fn volumes(&self) -> impl Iterator<Item = &D::Volume> {
        self.attached.iter().map(|(v, _)| v)
    }

    /// The volumes the node reports in use that it has no record of here, in order: a merge of
    /// two sorted lists without repeats, so a node whose report holds only what it has costs
    /// no lookup. Equality is asked first, and a record found is passed: a settled node's
    /// report is its records, and with `Name` ids an equality is a pointer's, where an order
    /// reads both names (a restart's million compares were 4 % of it).
    pub(crate) fn in_use_unrecorded(&self) -> impl Iterator<Item = &D::Volume> {
        let mut attached = self.attached.iter().map(|(v, _)| v).peekable();
        self.in_use.iter().flatten().filter(move |v| {
            loop {
                match attached.peek() {
                    Some(a) if a == v => {
                        attached.next();
                        return false;
                    }
                    Some(a) if a < v => {
                        attached.next();
                    }
                    _ => return true,
                }
            }
        })
    }

    pub(crate) fn reports_in_use(&self, volume: &D::Volume) -> Option<bool> {
        self.in_use
            .as_ref()
            .map(|in_use| in_use.binary_search(volume).is_ok())
    }
}

impl<D: Domain> ActualState<D> {
    /// Records what the orchestrator says about `node`, which now exists. Returns the volumes
    /// attached there whose decisions may change.
    pub(crate) fn set_node(
        &mut self,
        node: D::Node,
        facts: NodeFacts<D::Volume>,
    ) -> Vec<D::Volume> {
        let n = node_entry(&mut self.nodes, &mut self.report_generations, &node);
        let in_use: Option<Box<[D::Volume]>> = facts.in_use.map(|mut list| {
            list.sort();
            list.dedup();
            list.into_boxed_slice()
        });
        let affected: Vec<D::Volume> = if n.healthy != facts.healthy
            || n.fenced != facts.fenced
            || n.in_use.is_none() != in_use.is_none()
            || !n.present
        {
            n.volumes().cloned().collect()
        } else {
            let (old, new) = (
                n.in_use.as_deref().unwrap_or(&[]),
                in_use.as_deref().unwrap_or(&[]),
            );
            n.volumes()
                .filter(|v| old.binary_search(v).is_ok() != new.binary_search(v).is_ok())
                .cloned()
                .collect()
        };
        // A change in the report of a volume ends upstream's sticky assumption (141385).
        #[cfg(feature = "upstream-bugs")]
        let (old, new) = (n.in_use.clone(), in_use.clone());
        n.present = true;
        n.healthy = facts.healthy;
        n.fenced = facts.fenced;
        n.in_use = in_use;
        n.attach_limit = facts.attach_limit;
        n.driver_limits = facts.driver_limits.into_boxed_slice();
        #[cfg(feature = "upstream-bugs")]
        for v in &affected {
            let was = old.as_ref().map(|l| l.binary_search(v).is_ok());
            let is = new.as_ref().map(|l| l.binary_search(v).is_ok());
            if was.is_some() && was != is {
                if let Some(a) = self.get_mut(v, &node) {
                    a.assumed_mounted = false;
                }
            }
        }
        affected
    }

    /// The node object is gone. Its attachments stay until detached; it counts as unhealthy and
    /// unheard from. Returns the volumes attached there.
    pub(crate) fn remove_node(&mut self, node: &D::Node) -> Vec<D::Volume> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Vec::new();
        };
        if n.attached.is_empty() {
            self.forget_node(node);
            return Vec::new();
        }
        *n = ActualNode {
            attached: std::mem::take(&mut n.attached),
            devices: std::mem::take(&mut n.devices),
            detach_requested: std::mem::take(&mut n.detach_requested),
            ring_pos: n.ring_pos,
            report_gen: next_generation(&mut self.report_generations),
            // The records stay, and so does their numbering.
            generations: n.generations,
            reported: n.reported,
            epoch: n.epoch,
            ..ActualNode::unknown(n.node.clone())
        };
        n.volumes().cloned().collect()
    }

    pub(crate) fn node(&self, node: &D::Node) -> Option<&ActualNode<D>> {
        self.nodes.get(node)
    }

    /// Whether the node is known to exist.
    pub fn node_present(&self, node: &D::Node) -> bool {
        self.nodes.get(node).is_some_and(|n| n.present)
    }

    /// What is known of `node` for a detach of `volume`: whether it is healthy, whether it is
    /// fenced, and whether it reports `volume` in use (`None` until it has reported). For the
    /// benchmarks' replay of upstream's full scan.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn detach_facts(
        &self,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<(bool, bool, Option<bool>)> {
        let n = self.nodes.get(node)?;
        Some((n.healthy, n.fenced, n.reports_in_use(volume)))
    }
}
