//! Actual state of world: what is attached where, what nodes mount, and what each must report.

use std::time::Duration;

use rustc_hash::FxHashSet;
use smallvec::SmallVec;

use crate::core::calls::reported_volumes::ReportedVolume;
use crate::core::calls::reported_volumes::{ListSpares, ReportedVolumes};
use crate::core::state::progress::DetachProgress;
use crate::core::tables::dense_table::{DenseTable, Keyed, WARM_BATCH};
use crate::core::tables::device_paths::NodeDevicePaths;
use crate::core::tables::id_search;
use crate::core::tables::id_warm;
use crate::core::tables::line_warm::warm_lines;
use crate::core::tables::marks::Marks;
use crate::core::tables::refill::Refill;
use crate::core::tables::spares::Spares;
use crate::core::tables::verify_ring::VerifyRing;
use crate::domain::Domain;

/// What the controller believes about one (volume, node) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachState {
    /// The backend confirmed the attach.
    Attached,
    /// An attach or detach errored or timed out: the volume may or may not be attached. Never
    /// reported to the node, but it holds a single-node volume against other nodes.
    Uncertain,
    /// Not attached (no record).
    Detached,
}

/// What the orchestrator knows about a node, fed in as it changes.
///
/// ```
/// use attach_detach::core::NodeFacts;
/// let fresh: NodeFacts<&str> = NodeFacts::default();   // healthy, not fenced, not heard from
/// assert_eq!(fresh.in_use, None);
/// let fenced = NodeFacts { healthy: false, fenced: true, in_use: Some(vec!["pvc-1"]), attach_limit: None };
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
}

impl<V> Default for NodeFacts<V> {
    fn default() -> Self {
        NodeFacts {
            healthy: true,
            fenced: false,
            in_use: None,
            attach_limit: None,
        }
    }
}

/// One attachment record.
///
/// Kept small (12 bytes with `u32` ids, 4 of them its detach's progress): there is one per
/// attachment in the cluster. What only some attachments have, a device path or a pending
/// detach request, lives with the node (see
/// [`ActualState::device`] and [`ActualState::detach_requested_at`]), and so does the record's
/// generation, which the periodic verify reads node by node.
#[derive(Clone, Debug)]
pub struct Attachment<D: Domain> {
    pub(crate) node: D::Node,
    pub(crate) state: AttachState,
    /// Dropped from the node's report ahead of a detach.
    pub(crate) withheld: bool,
    /// Upstream 141385 (only with `c4_sticky_assumed_mount`): mounted until the report changes.
    #[cfg(feature = "upstream-bugs")]
    pub(crate) assumed_mounted: bool,
    /// An attach of the pair is known to have landed, and no attach of it was planned since:
    /// no call in flight can attach it again behind an operator's back. Only such an
    /// attachment may be released ([`Input::ReleaseVolume`](crate::core::Input)).
    pub(crate) landed: bool,
    /// How far its detach has come.
    pub(crate) detach: DetachProgress,
}

impl<D: Domain> Attachment<D> {
    /// The node.
    pub fn node(&self) -> &D::Node {
        &self.node
    }
    /// Attached or Uncertain.
    pub fn state(&self) -> AttachState {
        self.state
    }
    /// How far its detach has come ([`DetachProgress`]).
    pub fn detach(&self) -> DetachProgress {
        self.detach
    }
    /// Whether the node must list this volume in its status.
    pub fn is_reported(&self) -> bool {
        self.state == AttachState::Attached && !self.withheld
    }

    /// A new record on the node whose record is `on`: not withheld, and landed if Attached.
    fn new(node: D::Node, state: AttachState, on: &ActualNode<D>) -> Self {
        #[cfg(not(feature = "upstream-bugs"))]
        let _ = on;
        Attachment {
            node,
            state,
            withheld: false,
            #[cfg(feature = "upstream-bugs")]
            assumed_mounted: on.in_use.is_none(),
            landed: state == AttachState::Attached,
            detach: DetachProgress::default(),
        }
    }

    /// An attach of it landed: Attached, reported again, and no attach of it in flight.
    fn confirm(&mut self) {
        self.state = AttachState::Attached;
        self.withheld = false;
        self.landed = true;
    }
}

/// The attachments of `volume`, made empty first if it has none.
fn attachments_of<'a, D: Domain>(
    volumes: &'a mut DenseTable<VolumeAttachments<D>>,
    volume: &D::Volume,
) -> &'a mut SmallVec<[Attachment<D>; 1]> {
    &mut volumes
        .get_or_make(volume, |volume| VolumeAttachments {
            volume: volume.clone(),
            list: SmallVec::new(),
        })
        .list
}

/// What a node's index holds of one attachment there, in four bytes: whether the node must
/// report it, and the record's generation, new on every change so that a verify answer
/// planned before the change is ignored.
///
/// Generations are drawn from the node's counter, for a new record as for a change: a record
/// made again for the same pair started at 0 as its predecessor had, so a verify planned
/// before a detach and a new attach took its stale "not attached" for news of the new
/// record, and the core granted an attached single-node volume elsewhere
/// (`a_verify_answer_is_not_taken_for_an_attachment_made_again_since`). A verify matches
/// generations only within one node's list, so one node's numbers need not differ from
/// another's. Before the counter passes 31 bits the node's records are renumbered and the
/// node takes a new epoch ([`ActualNode::draw`]), so that no two of its standing records share
/// a generation either
/// (`a_verify_answer_is_not_taken_for_a_record_whose_generation_came_round_again`): a pause of
/// one node's records, where one counter for all had to renumber a million at once (7 to
/// 10 ms). Eight bytes would have needed no renumbering, at 8 bytes more per attachment with
/// `u32` ids.
///
/// The generation lives here, not in the volume's record, so that a verify reads a node's
/// attachments from the node's one sorted list: kept with the record, it cost every verified
/// attachment two lookups in the volume table (of the three a verify made per attachment),
/// each a likely cache miss at a million attachments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Standing(u32);

impl Standing {
    /// The flag's bit; the generation is the other 31, wrapping.
    const REPORTED: u32 = 1 << 31;

    /// A new record's, with a generation never handed out before.
    fn new(reported: bool, generation: u64) -> Self {
        let mut standing = Standing(if reported { Self::REPORTED } else { 0 });
        standing.bump(generation);
        standing
    }

    /// Whether the node must list the volume in its status.
    pub(crate) fn reported(self) -> bool {
        self.0 & Self::REPORTED != 0
    }

    /// The record's generation.
    pub(crate) fn generation(self) -> u32 {
        self.0 & !Self::REPORTED
    }

    /// Sets the flag; returns whether it changed.
    fn set_reported(&mut self, reported: bool) -> bool {
        let was = self.reported();
        self.0 = self.generation() | if reported { Self::REPORTED } else { 0 };
        was != reported
    }

    /// The record changed: a generation never handed out before (its low 31 bits), the flag
    /// kept.
    fn bump(&mut self, generation: u64) {
        let generation = (generation & u64::from(!Self::REPORTED)) as u32;
        self.0 = (self.0 & Self::REPORTED) | generation;
    }
}

/// The attachments of one volume (a volume is rarely on more than one node).
#[derive(Debug)]
struct VolumeAttachments<D: Domain> {
    /// The key of [`ActualState::volumes`].
    volume: D::Volume,
    list: SmallVec<[Attachment<D>; 1]>,
}

impl<D: Domain> Keyed for VolumeAttachments<D> {
    type Key = D::Volume;
    fn key(&self) -> &D::Volume {
        &self.volume
    }
}

#[derive(Debug)]
pub(crate) struct ActualNode<D: Domain> {
    /// The node itself: the key of [`ActualState::nodes`].
    node: D::Node,
    /// The node object exists (added and not removed).
    pub(crate) present: bool,
    pub(crate) healthy: bool,
    pub(crate) fenced: bool,
    /// Sorted; `None` until the node reports. A boxed slice: replaced whole on each report,
    /// and 8 bytes per node less than a `Vec`.
    pub(crate) in_use: Option<Box<[D::Volume]>>,
    /// [`NodeFacts::attach_limit`].
    pub(crate) attach_limit: Option<u32>,
    /// The volumes attached (or maybe attached) here, sorted, each with whether the node must
    /// report it and its generation: the node's report and its verify are read from here,
    /// without a lookup per volume. Exactly the volumes with a record on this node.
    attached: Vec<(D::Volume, Standing)>,
    /// The device paths of the attachments here that have one, sorted by volume, their text
    /// in one buffer.
    devices: NodeDevicePaths<D::Volume>,
    /// When the controller first wanted each of these attachments gone, sorted by volume.
    detach_requested: Sparse<(D::Volume, Duration)>,
    /// Where the node sits in [`VerifyRing::order`]; [`OUT_OF_RING`] while nothing is
    /// attached here. Not an `Option`: the tag cost every node 8 bytes.
    ring_pos: u32,
    /// Changes whenever the node's report may have: see [`ActualState::report_generation`].
    report_gen: u64,
    /// The last generation handed out to a record here in this epoch ([`Standing`]).
    generations: u32,
    /// How many of `attached` the node reports. A move's status write always differs from
    /// what the store holds by a volume, so the compare before it ends here, on the counts,
    /// instead of walking the node's list to the first difference (4 % of a `u32` move's
    /// instructions).
    reported: u32,
    /// Which numbering the generations here belong to: new whenever the node's record is
    /// made or its records renumbered, never one handed out before
    /// ([`ActualState::epoch_of`]). A verify's answer is matched only within the epoch it
    /// was planned in.
    epoch: u64,
}

/// Finds `volume` in a list sorted by volume: a list of names is walked by equality first
/// ([`id_search`]), so a volume that is there is found without reading the names passed.
fn find<V: Ord + 'static, T>(list: &[(V, T)], volume: &V) -> Result<usize, usize> {
    id_search::find_by(list, |(v, _)| v, volume)
}

/// A list sorted by volume that is usually empty (device paths, for backends that give none;
/// detach requests): 8 bytes per node while empty instead of a `Vec`'s 24.
#[derive(Debug)]
// The box is the point: one pointer while empty (a `Vec` is three words), grown in place once
// filled (a boxed slice would reallocate on every change).
#[allow(clippy::box_collection)]
struct Sparse<T>(Option<Box<Vec<T>>>);

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse(None)
    }
}

impl<T> Sparse<T> {
    fn as_slice(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

/// The emptied lists of detach requests kept for reuse ([`Spares`]).
type RequestSpares<D> = Spares<Box<Vec<(<D as Domain>::Volume, Duration)>>>;

/// A spare list of detach requests with room for more than this many is dropped.
const MAX_SPARE_REQUESTS: usize = 8;

/// [`put`] on a [`Sparse`] list, which holds no allocation once empty. The allocation an
/// emptied list gives up goes to `spares`, and a list begun takes one from there: a move
/// requests a detach on a node with none and settles it again, which was an allocation and a
/// free on every move (2.6 % of a `u32` move's instructions).
// The spares are the `Sparse` lists' own boxes.
#[allow(clippy::box_collection)]
fn put_sparse<V: Ord + Clone + 'static, T>(
    list: &mut Sparse<(V, T)>,
    volume: &V,
    value: Option<T>,
    spares: &mut Spares<Box<Vec<(V, T)>>>,
) {
    match (&mut list.0, value) {
        (None, None) => {}
        (slot, value) => {
            let items = slot.get_or_insert_with(|| spares.take().unwrap_or_default());
            put(items, volume, value);
            if items.is_empty() {
                let emptied = slot.take();
                // A large one is dropped: a spare is memory nobody uses.
                if let Some(emptied) = emptied.filter(|e| e.capacity() <= MAX_SPARE_REQUESTS) {
                    spares.give(emptied);
                }
            }
        }
    }
}

/// Sets or removes `volume`'s entry in a list sorted by volume.
fn put<V: Ord + Clone + 'static, T>(
    list: &mut Vec<(V, T)>,
    volume: &V,
    value: Option<T>,
) -> Option<T> {
    put_at(list, find(list, volume), volume, value)
}

/// [`put`] for a volume the list most likely lacks (a new record): placed by order at once,
/// without first walking a list of names for it.
fn put_new<V: Ord + Clone, T>(list: &mut Vec<(V, T)>, volume: &V, value: T) -> Option<T> {
    let at = list.binary_search_by(|(v, _)| v.cmp(volume));
    put_at(list, at, volume, Some(value))
}

/// Sets or removes `volume`'s entry, found (`Ok`) or to go (`Err`) at `at`. Returns the
/// entry's value before, if it had one.
fn put_at<V: Clone, T>(
    list: &mut Vec<(V, T)>,
    at: Result<usize, usize>,
    volume: &V,
    value: Option<T>,
) -> Option<T> {
    match (at, value) {
        (Ok(i), Some(value)) => Some(std::mem::replace(&mut list[i].1, value)),
        (Ok(i), None) => Some(list.remove(i).1),
        (Err(i), Some(value)) => {
            list.insert(i, (volume.clone(), value));
            None
        }
        (Err(_), None) => None,
    }
}

/// `node`'s record, made if it is new.
fn node_entry<'a, D: Domain>(
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
const OUT_OF_RING: u32 = u32::MAX;

/// Takes the node at `pos` out of the verify ring (nothing for [`OUT_OF_RING`]), keeping the
/// positions of the nodes the ring moves true.
fn leave_ring<D: Domain>(
    ring: &mut VerifyRing<D::Node>,
    nodes: &mut DenseTable<ActualNode<D>>,
    pos: u32,
) {
    if pos == OUT_OF_RING {
        return;
    }
    ring.remove(pos, |moved, at| {
        if let Some(n) = nodes.get_mut(moved) {
            n.ring_pos = at;
        }
    });
}

/// A report generation never handed out before.
fn next_generation(generations: &mut u64) -> u64 {
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
    fn count_reported(&mut self, was: bool, now: bool) {
        // `was` is counted in `reported`, so the sum does not go below zero.
        self.reported = self.reported + u32::from(now) - u32::from(was);
    }

    /// The greatest generation a record keeps ([`Standing`]'s 31 bits).
    const MAX_GENERATION: u32 = !Standing::REPORTED;

    /// Makes room for `draws` more generations in this epoch: if the counter would pass
    /// [`MAX_GENERATION`](Self::MAX_GENERATION), the node's records are renumbered 1 up and
    /// the node takes a new epoch (from `serials`, the actual state's counter of numbers never
    /// handed out twice), so that a running verify's numbers match none of them.
    fn make_room(&mut self, draws: usize, serials: &mut u64) {
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
    fn draw(&mut self, serials: &mut u64) -> u64 {
        self.make_room(1, serials);
        self.generations += 1;
        u64::from(self.generations)
    }

    fn volumes(&self) -> impl Iterator<Item = &D::Volume> {
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

/// The actual state of world.
///
/// Attachments are kept per volume (a volume is rarely on more than one node) with an index per
/// node. A volume is reported when it is Attached and not withheld for a coming detach; the
/// node's index carries that flag beside each volume, so a node's report is read from one sorted
/// list instead of one lookup per volume in the cluster-wide table.
///
/// It changes only as the core's operations finish and the orchestrator's nodes report; read it
/// through [`Reconciler::actual`](crate::core::Reconciler::actual).
#[derive(Debug)]
pub struct ActualState<D: Domain> {
    volumes: DenseTable<VolumeAttachments<D>>,
    nodes: DenseTable<ActualNode<D>>,
    /// The nodes with a pending detach request: exactly those whose `detach_requested` list
    /// is not empty.
    requesting: FxHashSet<D::Node>,
    /// Every node of `nodes` with something attached, in the order the periodic verify walks
    /// them. Only those: a verify slice used to pass over the nodes with nothing attached one
    /// lookup each, and a long run of them (thousands of nodes without volumes) was a pause.
    ring: VerifyRing<D::Node>,
    /// Nodes whose reported list may have changed since last taken.
    report_changed: Marks<D::Node>,
    /// The last report generation handed out ([`report_generation`](Self::report_generation)):
    /// never renumbered, as the status book keeps them. Nodes' epochs are drawn from it too.
    report_generations: u64,
    len: usize,
    /// Emptied lists of detach requests, for the next node that gets one.
    request_spares: RequestSpares<D>,
}

impl<D: Domain> Default for ActualState<D> {
    fn default() -> Self {
        ActualState {
            volumes: DenseTable::default(),
            nodes: DenseTable::default(),
            requesting: FxHashSet::default(),
            ring: VerifyRing::default(),
            report_changed: Marks::default(),
            report_generations: 0,
            len: 0,
            request_spares: Spares::default(),
        }
    }
}

impl<D: Domain> ActualState<D> {
    /// The epoch of `node`'s generations ([`ActualNode::epoch`]); 0, never an epoch, for a
    /// node with no record.
    pub(crate) fn epoch_of(&self, node: &D::Node) -> u64 {
        self.nodes.get(node).map_or(0, |n| n.epoch)
    }

    /// Spends every node's generations ([`Reconciler::spend_generations`]); returns how many
    /// nodes with records had some left.
    ///
    /// [`Reconciler::spend_generations`]: crate::core::Reconciler::spend_generations
    #[cfg(feature = "internals")]
    pub(crate) fn spend_generations(&mut self) -> usize {
        let mut left = 0;
        for n in self.nodes.iter_mut() {
            if !n.attached.is_empty() && n.generations < ActualNode::<D>::MAX_GENERATION {
                left += 1;
            }
            n.generations = ActualNode::<D>::MAX_GENERATION;
        }
        left
    }

    /// Sets `node`'s generation counter, as if `generations` had been handed out there: for
    /// tests of what comes after years of them.
    #[cfg(test)]
    pub(crate) fn set_generations(&mut self, node: &D::Node, generations: u32) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.generations = generations;
        }
    }
}

impl<D: Domain> ActualState<D> {
    /// Brings the records of `volumes` into the cache before a batch reads them
    /// ([`DenseTable::warm`]).
    pub(crate) fn warm<'a>(&self, volumes: impl IntoIterator<Item = &'a D::Volume>)
    where
        D::Volume: 'a,
    {
        self.volumes.warm(volumes);
    }

    /// Reads `node`'s record and every line of its attached list, which a move searches and
    /// walks ([`warm`](Self::warm) for nodes).
    pub(crate) fn warm_node(&self, node: &D::Node) {
        if let Some(n) = self.nodes.get(node) {
            warm_lines(&n.attached);
        }
    }

    /// The state of (`volume`, `node`).
    pub fn state(&self, volume: &D::Volume, node: &D::Node) -> AttachState {
        self.get(volume, node)
            .map_or(AttachState::Detached, |a| a.state)
    }

    /// The record of (`volume`, `node`), if any.
    pub fn get(&self, volume: &D::Volume, node: &D::Node) -> Option<&Attachment<D>> {
        self.volumes
            .get(volume)?
            .list
            .iter()
            .find(|a| a.node == *node)
    }

    pub(crate) fn get_mut(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<&mut Attachment<D>> {
        self.volumes
            .get_mut(volume)?
            .list
            .iter_mut()
            .find(|a| a.node == *node)
    }

    /// Restart recovery: where `volume`'s entry sits in the volume table, and its records. A
    /// position holds until a volume's last record goes, which never happens while the core
    /// recovers, and is below [`volumes_with_records`](Self::volumes_with_records) at the time
    /// the entry was made.
    pub(crate) fn volume_entry(&self, volume: &D::Volume) -> Option<(usize, &[Attachment<D>])> {
        let (at, entry) = self.volumes.get_with_position(volume)?;
        Some((at, entry.list.as_slice()))
    }

    /// How many volumes have a record.
    pub(crate) fn volumes_with_records(&self) -> usize {
        self.volumes.len()
    }

    /// The volumes with a record, by position ([`volume_entry`](Self::volume_entry)).
    pub(crate) fn volumes_by_position(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes.iter().map(|v| &v.volume)
    }

    /// Every node `volume` is attached (or maybe attached) to.
    pub fn attachments(&self, volume: &D::Volume) -> &[Attachment<D>] {
        self.volumes.get(volume).map_or(&[], |a| a.list.as_slice())
    }

    /// Volumes attached (or maybe attached) to `node`, in order.
    pub fn volumes_on(&self, node: &D::Node) -> impl Iterator<Item = &D::Volume> {
        self.nodes.get(node).into_iter().flat_map(|n| n.volumes())
    }

    /// What the backend returned when attaching `volume` to `node` (e.g. a device path).
    pub fn device(&self, volume: &D::Volume, node: &D::Node) -> Option<&str> {
        self.nodes.get(node)?.devices.get(volume)
    }

    /// When the controller first wanted the attachment of `volume` to `node` gone.
    pub fn detach_requested_at(&self, volume: &D::Volume, node: &D::Node) -> Option<Duration> {
        let n = self.nodes.get(node)?;
        let requested = n.detach_requested.as_slice();
        let i = find(requested, volume).ok()?;
        Some(requested[i].1)
    }

    /// The controller wants the attachment gone: returns when it first did, `now` if this is
    /// the first time. Nothing happens without an attachment record.
    #[inline]
    pub(crate) fn request_detach(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        now: Duration,
    ) -> Duration {
        let Some(n) = self.nodes.get_mut(node) else {
            return now;
        };
        match find(n.detach_requested.as_slice(), volume) {
            Ok(i) => n.detach_requested.as_slice()[i].1,
            Err(_) => {
                if find(&n.attached, volume).is_ok() {
                    if n.detach_requested.as_slice().is_empty() {
                        self.requesting.insert(node.clone());
                    }
                    put_sparse(
                        &mut n.detach_requested,
                        volume,
                        Some(now),
                        &mut self.request_spares,
                    );
                }
                now
            }
        }
    }

    /// Every pending detach request: (volume, node, when first wanted), in no set order. Only
    /// the nodes that have one are looked at: at a million attachments a look at every node
    /// (once a sync, for stuck detaches) was a millisecond's pause.
    pub(crate) fn detach_requests(
        &self,
    ) -> impl Iterator<Item = (&D::Volume, &D::Node, Duration)> + '_ {
        self.requesting.iter().flat_map(|node| {
            let requested = self
                .nodes
                .get(node)
                .map_or(&[][..], |n| n.detach_requested.as_slice());
            requested
                .iter()
                .map(move |(volume, since)| (volume, node, *since))
        })
    }

    /// The attachment is wanted again: a later detach waits for the unmount afresh.
    pub(crate) fn cancel_detach_request(&mut self, volume: &D::Volume, node: &D::Node) {
        // Only a node in `requesting` has a request to cancel. That set is small and hot; the
        // node table is not, and every look at an attached volume where it is wanted comes here.
        if !self.requesting.contains(node) {
            return;
        }
        if let Some(n) = self.nodes.get_mut(node) {
            put_sparse(
                &mut n.detach_requested,
                volume,
                None,
                &mut self.request_spares,
            );
            if n.detach_requested.as_slice().is_empty() {
                self.requesting.remove(node);
            }
        }
    }

    /// Brings the node index's "reported" flag of (`volume`, `node`) in line with the record,
    /// which the caller just changed and says is `reported`, noting the node when its report
    /// changes; with `bump`, the record changed and takes a new generation.
    fn sync_reported(&mut self, volume: &D::Volume, node: &D::Node, reported: bool, bump: bool) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if let Ok(i) = find(&n.attached, volume) {
            let generation = bump.then(|| n.draw(&mut self.report_generations));
            let standing = &mut n.attached[i].1;
            if let Some(generation) = generation {
                standing.bump(generation);
            }
            if standing.set_reported(reported) {
                n.count_reported(!reported, reported);
                n.report_gen = next_generation(&mut self.report_generations);
                self.report_changed.mark(node.clone());
            }
        }
    }

    /// Every attachment on `node`, in volume order, with what the node's index holds of it.
    pub(crate) fn standings_on(&self, node: &D::Node) -> &[(D::Volume, Standing)] {
        self.nodes.get(node).map_or(&[], |n| &n.attached)
    }

    /// Every node with an attachment or known facts.
    pub fn nodes(&self) -> impl Iterator<Item = &D::Node> {
        self.nodes.iter().map(|n| &n.node)
    }

    /// Drops `node`'s record and its place in the verify ring.
    fn forget_node(&mut self, node: &D::Node) {
        let Some(gone) = self.nodes.remove(node) else {
            return;
        };
        self.requesting.remove(node);
        leave_ring(&mut self.ring, &mut self.nodes, gone.ring_pos);
    }

    /// Starts a round of the periodic verify: [`next_to_verify`](Self::next_to_verify) walks
    /// every node again from the first.
    pub(crate) fn restart_verify_round(&mut self) {
        self.ring.restart();
    }

    /// The next node this verify round has not reached (every node in the ring has
    /// attachments), with how many it holds; `None` once it reached them all. Nodes that gain
    /// their first attachment during a round are reached in it too.
    pub(crate) fn next_to_verify(&mut self) -> Option<(D::Node, usize)> {
        let node = self.ring.next()?;
        let attached = self.nodes.get(&node).map_or(0, |n| n.attached.len());
        Some((node, attached))
    }

    /// Whether this verify round has reached every node.
    pub(crate) fn verify_round_done(&self) -> bool {
        self.ring.is_done()
    }

    /// Number of attachment records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is attached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records a confirmed attach; the volume is reported (a later detach withholds it again).
    pub(crate) fn set_attached(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        device: Option<&str>,
    ) {
        let Some(a) = self.get_mut(volume, node) else {
            return self.insert(volume, node, AttachState::Attached, device);
        };
        a.confirm();
        let reported = a.is_reported();
        if let Some(n) = self.nodes.get_mut(node) {
            n.devices.set(volume, device);
            n.report_gen = next_generation(&mut self.report_generations);
        }
        self.sync_reported(volume, node, reported, true);
    }

    /// Restart recovery: the store lists `reported` for `node`, so each is Attached there, as
    /// [`set_attached`](Self::set_attached) would make them one by one (a volume listed twice
    /// is set twice, its last device path kept). The node is looked up once and each volume
    /// once, where `set_attached` looks each up three times: at a million attachments those
    /// lookups, each a likely cache miss, were most of taking the store's listing in.
    pub(crate) fn recover_reported(&mut self, node: &D::Node, reported: &[ReportedVolume<D>]) {
        if reported.is_empty() {
            return;
        }
        let n = node_entry(&mut self.nodes, &mut self.report_generations, node);
        // The node's index, in one sort when it is new (at recovery it is); else one
        // insertion each, as `set_attached` makes.
        let fresh = n.attached.is_empty();
        let mut changed = fresh;
        for (i, r) in reported.iter().enumerate() {
            if i % WARM_BATCH == 0 {
                // A restart takes a million of these in: their lookups' misses overlap, and
                // so do those of the names' blocks that the clones below count in.
                let batch = || reported[i..].iter().take(WARM_BATCH).map(|r| &r.volume);
                self.volumes.warm(batch());
                id_warm::warm(batch());
            }
            let list = attachments_of(&mut self.volumes, &r.volume);
            match list.iter_mut().find(|a| a.node == *node) {
                Some(a) => a.confirm(),
                None => {
                    list.push(Attachment::new(node.clone(), AttachState::Attached, n));
                    self.len += 1;
                }
            }
            if !fresh {
                // The index has an entry exactly where a record was found above: that one
                // changes, else a new one goes in.
                match find(&n.attached, &r.volume) {
                    Ok(i) => {
                        let generation = n.draw(&mut self.report_generations);
                        let standing = &mut n.attached[i].1;
                        standing.bump(generation);
                        if standing.set_reported(true) {
                            n.count_reported(false, true);
                            changed = true;
                        }
                    }
                    Err(i) => {
                        let standing = Standing::new(true, n.draw(&mut self.report_generations));
                        n.attached.insert(i, (r.volume.clone(), standing));
                        n.count_reported(false, true);
                        changed = true;
                    }
                }
            }
            n.devices.set(&r.volume, r.device.as_deref());
        }
        if fresh {
            // Every draw below fits this epoch: the list is built apart from the node's, where
            // a renumber would not reach it.
            n.make_room(2 * reported.len(), &mut self.report_generations);
            let mut listed: Vec<_> = reported
                .iter()
                .map(|r| {
                    let standing = Standing::new(true, n.draw(&mut self.report_generations));
                    (r.volume.clone(), standing)
                })
                .collect();
            listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            // A volume listed again was set again: its record changed once more.
            listed.dedup_by(|again, first| {
                let same = again.0 == first.0;
                if same {
                    first.1.bump(n.draw(&mut self.report_generations));
                }
                same
            });
            // Every entry is reported, and the list was empty: so was the count.
            n.reported = u32::try_from(listed.len()).unwrap_or(u32::MAX);
            n.attached = listed;
        }
        if n.ring_pos == OUT_OF_RING {
            // Its first attachments: the verify walks it from now on.
            n.ring_pos = self.ring.push(node.clone());
        }
        n.report_gen = next_generation(&mut self.report_generations);
        if changed {
            self.report_changed.mark(node.clone());
        }
    }

    /// Makes room for `volumes` more volumes with attachments at once: restart recovery knows
    /// how many the store lists before it takes them in.
    pub(crate) fn reserve(&mut self, volumes: usize) {
        self.volumes.reserve(volumes);
    }

    /// An attach of an existing record was planned: until it answers, a call may attach the
    /// volume there again.
    pub(crate) fn attach_planned(&mut self, volume: &D::Volume, node: &D::Node) {
        if let Some(a) = self.get_mut(volume, node) {
            a.landed = false;
        }
    }

    /// Records that the volume may be attached to the node. It stops being reported.
    pub(crate) fn set_uncertain(&mut self, volume: &D::Volume, node: &D::Node) {
        let Some(a) = self.get_mut(volume, node) else {
            return self.insert(volume, node, AttachState::Uncertain, None);
        };
        a.state = AttachState::Uncertain;
        let reported = a.is_reported();
        self.sync_reported(volume, node, reported, true);
    }

    /// A new record, with `device` as its path if it is Attached. The node's index gets its
    /// "reported" flag here, and the node is noted when that changes its report: one lookup
    /// of the node and one of the volume, where making the record and then syncing the flag
    /// (`sync_reported`) took three of each (a new attachment on every move).
    fn insert(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        state: AttachState,
        device: Option<&str>,
    ) {
        let n = node_entry(&mut self.nodes, &mut self.report_generations, node);
        let record = Attachment::new(node.clone(), state, n);
        // A new record is never withheld: it is reported exactly when Attached.
        let reported = record.is_reported();
        let standing = Standing::new(reported, n.draw(&mut self.report_generations));
        let before = put_new(&mut n.attached, volume, standing);
        n.count_reported(before.is_some_and(Standing::reported), reported);
        if state == AttachState::Attached {
            n.devices.set(volume, device);
        }
        n.report_gen = next_generation(&mut self.report_generations);
        if n.ring_pos == OUT_OF_RING {
            // Its first attachment: the verify walks it from now on.
            n.ring_pos = self.ring.push(node.clone());
        }
        attachments_of(&mut self.volumes, volume).push(record);
        self.len += 1;
        if reported {
            self.report_changed.mark(node.clone());
        }
    }

    /// Forgets the attachment: the volume is detached from the node. With `keep_record`, a
    /// volume left attached nowhere keeps its (empty) entry in the volume table, for the
    /// attach that comes next: a move detaches a volume and attaches it elsewhere, and
    /// removing the entry (moving the table's last one into its place) and making it again
    /// was about 1 % of a `u32` move's instructions. The caller keeps it only for a volume
    /// wanted elsewhere, and drops it with [`forget_volume`](Self::forget_volume) once the
    /// volume is wanted nowhere, so that idle volumes hold no entry.
    /// Returns the forgotten record's detach progress, for the indexes derived from it.
    pub(crate) fn set_detached(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        keep_record: bool,
    ) -> Option<DetachProgress> {
        let VolumeAttachments { list, .. } = self.volumes.get_mut(volume)?;
        let i = list.iter().position(|a| a.node == *node)?;
        let gone = list.swap_remove(i);
        if list.is_empty() && !keep_record {
            self.volumes.remove(volume);
        }
        self.len -= 1;
        if let Some(n) = self.nodes.get_mut(node) {
            let before = put(&mut n.attached, volume, None);
            n.count_reported(before.is_some_and(Standing::reported), false);
            n.devices.set(volume, None);
            if gone.is_reported() {
                // A withheld volume's detach leaves the report as it was (the usual detach:
                // withheld, written, then detached), so the status book need not compare it
                // against what the store holds again.
                n.report_gen = next_generation(&mut self.report_generations);
            }
            put_sparse(
                &mut n.detach_requested,
                volume,
                None,
                &mut self.request_spares,
            );
            if n.detach_requested.as_slice().is_empty() {
                self.requesting.remove(node);
            }
            if !n.present && n.attached.is_empty() {
                self.forget_node(node);
            } else if n.attached.is_empty() {
                // Its last attachment: the verify has nothing left to walk here.
                let pos = std::mem::replace(&mut n.ring_pos, OUT_OF_RING);
                leave_ring(&mut self.ring, &mut self.nodes, pos);
            }
        }
        if gone.is_reported() {
            self.report_changed.mark(node.clone());
        }
        Some(gone.detach)
    }

    /// Drops `volume`'s entry in the volume table if it is attached nowhere: the entry
    /// [`set_detached`](Self::set_detached) kept for it.
    pub(crate) fn forget_volume(&mut self, volume: &D::Volume) {
        if self.volumes.get(volume).is_some_and(|v| v.list.is_empty()) {
            self.volumes.remove(volume);
        }
    }

    /// Drops the volume from the node's report ahead of a detach (`true`), or puts it back.
    pub(crate) fn set_withheld(&mut self, volume: &D::Volume, node: &D::Node, withheld: bool) {
        if let Some(a) = self.get_mut(volume, node) {
            a.withheld = withheld;
            let reported = a.is_reported();
            self.sync_reported(volume, node, reported, false);
        }
    }

    /// The list `node` must report, in volume order.
    pub fn report(&self, node: &D::Node) -> ReportedVolumes<D> {
        self.report_with(node, &mut ListSpares::default(), None, false)
    }

    /// [`report`](Self::report), edited from `own`, an older list of the node, or else built
    /// into a spare list from `spares` when one fits. With `warm`, a list built afresh reads
    /// the volumes' names first, all at once ([`id_warm`]): each copy changes a name's count,
    /// an atomic update that waits for its cache miss before the next starts, and at a
    /// million attachments a node's thirty names are all cold.
    pub(crate) fn report_with(
        &self,
        node: &D::Node,
        spares: &mut ListSpares<D>,
        own: Option<ReportedVolumes<D>>,
        warm: bool,
    ) -> ReportedVolumes<D> {
        let Some(n) = self.nodes.get(node) else {
            return ReportedVolumes::default();
        };
        if warm && own.is_none() {
            id_warm::warm(n.attached.iter().map(|(volume, _)| volume));
        }
        // Sized once (room for every volume here): the filter hid the length from `collect`,
        // which grew the list by doubling (four reallocations for a node of 30 volumes, on
        // every status write).
        let len = n.attached.len();
        let fill = |volumes: &mut Refill<'_, D::Volume>| {
            if warm {
                volumes.warm_rest();
            }
            // Copied in runs between the withheld entries (at most one in a move's write, none
            // in most): a run of known length is copied in one tight loop, where a filter
            // checked the room and bumped the length on every entry (a twentieth of a `u32`
            // move).
            let mut rest = &n.attached[..];
            if n.reported as usize == rest.len() {
                // Nothing withheld (an attach's write, and most others): one run, not searched.
                volumes.extend(rest.iter().map(|(volume, _)| volume));
                rest = &[];
            }
            while !rest.is_empty() {
                let run = (rest.iter())
                    .position(|(_, standing)| !standing.reported())
                    .unwrap_or(rest.len());
                volumes.extend(rest[..run].iter().map(|(volume, _)| volume));
                rest = rest.get(run + 1..).unwrap_or_default();
            }
            // No device paths (CSI): the volumes alone. Otherwise the paths are copied in one
            // walk beside the volumes, their text in runs.
            (!n.devices.is_empty()).then(|| n.devices.pack(volumes.written().iter()))
        };
        match own {
            Some(own) => ReportedVolumes::build_over(own, spares, len, fill),
            None => ReportedVolumes::build_sorted(spares, len, fill),
        }
    }

    /// What [`report`](Self::report) lists, borrowed: compared against what the store holds
    /// without copying a device path.
    pub(crate) fn reported(
        &self,
        node: &D::Node,
    ) -> impl Iterator<Item = (&D::Volume, Option<&str>)> {
        let n = self.nodes.get(node);
        let mut devices = n.into_iter().flat_map(|n| n.devices.iter()).peekable();
        n.map_or(&[][..], |n| &n.attached[..])
            .iter()
            .filter(|(_, standing)| standing.reported())
            .map(move |(volume, _)| {
                // Both lists are sorted by volume: walk them together.
                while devices.next_if(|(v, _)| *v < volume).is_some() {}
                let device = devices.next_if(|(v, _)| *v == volume).map(|(_, d)| d);
                (volume, device)
            })
    }

    /// Whether `list` is exactly what [`report`](Self::report) would build for `node`. The
    /// volumes are compared first, then the paths alone: a report that differs from what the
    /// store holds mostly differs by a volume, found without reading a device path.
    pub(crate) fn report_matches(&self, node: &D::Node, list: &ReportedVolumes<D>) -> bool {
        let n = self.nodes.get(node);
        let attached = n.map_or(&[][..], |n| &n.attached[..]);
        let count = n.map_or(0, |n| n.reported as usize);
        debug_assert_eq!(
            count,
            attached.iter().filter(|(_, s)| s.reported()).count(),
            "the node's count of reported volumes is out of line with its list"
        );
        if count != list.volumes().len() {
            // A move's write: one volume more or fewer than the store holds.
            return false;
        }
        let reported = attached
            .iter()
            .filter(|(_, standing)| standing.reported())
            .map(|(volume, _)| volume);
        reported.eq(list.volumes())
            && list
                .devices()
                .eq(self.reported(node).map(|(_, device)| device))
    }

    /// A number that is the same on two calls only if `node`'s report (what
    /// [`reported`](Self::reported) lists) is the same: every change to the node's list, flags
    /// or device paths hands out a new one, and a node made anew never reuses an old one. A
    /// node without a record reports nothing, and is 0. It lets the status book skip
    /// comparing a report it already matched against what the store holds.
    pub(crate) fn report_generation(&self, node: &D::Node) -> u64 {
        self.nodes.get(node).map_or(0, |n| n.report_gen)
    }

    pub(crate) fn has_report_changes(&self) -> bool {
        !self.report_changed.is_empty()
    }

    /// Nodes whose report may have changed since the last call.
    pub(crate) fn take_report_changed(&mut self) -> Vec<D::Node> {
        self.report_changed.take()
    }

    /// Hands back a list [`take_report_changed`](Self::take_report_changed) gave, for reuse.
    pub(crate) fn recycle_report_changed(&mut self, list: Vec<D::Node>) {
        self.report_changed.recycle(list);
    }

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    type U = Ids<u32, u32, u32>;

    /// Everything `recover_reported` may change, in an order no hash decides (report and
    /// record generations left out: only their change is meant, and it is checked apart).
    fn snapshot(a: &ActualState<U>) -> String {
        let mut volumes: Vec<_> = a.volumes.iter().collect();
        volumes.sort_by_key(|v| v.volume);
        let mut nodes: Vec<_> = a.nodes.iter().map(|n| (&n.node, n)).collect();
        nodes.sort_by_key(|(node, _)| **node);
        let mut out = format!("len {}\n", a.len);
        for v in volumes {
            let mut list: Vec<_> = v.list.iter().collect();
            list.sort_by_key(|a| a.node);
            out += &format!("{} {list:?}\n", v.volume);
        }
        for (node, n) in nodes {
            let attached: Vec<_> = n.attached.iter().map(|(v, s)| (v, s.reported())).collect();
            out += &format!(
                "{node}: {attached:?} {:?} {:?} ring {}\n",
                n.devices.iter().collect::<Vec<_>>(),
                n.detach_requested.as_slice(),
                n.ring_pos
            );
        }
        out
    }

    /// Taking a node's listing in at once leaves exactly what setting each listed volume
    /// Attached, one by one, leaves: over random states (records Attached, Uncertain and
    /// withheld, detach requests, device paths) and random listings (volumes listed twice,
    /// unsorted, with and without paths), onto a node with and without records.
    /// The generations of every standing record, by (node, volume).
    fn generations_of(a: &ActualState<T>) -> BTreeMap<(&'static str, &'static str), (u32, bool)> {
        a.nodes
            .iter()
            .flat_map(|on| {
                let n = &on.node;
                on.attached
                    .iter()
                    .map(|(v, s)| ((*n, *v), (s.generation(), s.reported())))
            })
            .collect()
    }

    #[test]
    fn a_node_out_of_generations_renumbers_its_own_records_and_takes_a_new_epoch() {
        let mut a = ActualState::<T>::default();
        for (v, n) in [("v1", "n1"), ("v2", "n1"), ("v3", "n1"), ("v4", "n2")] {
            a.set_attached(&v, &n, None);
        }
        a.set_withheld(&"v2", &"n1", true);
        let max = ActualNode::<T>::MAX_GENERATION;
        a.set_generations(&"n1", max - 1);
        let epochs = (a.epoch_of(&"n1"), a.epoch_of(&"n2"));
        let reports = (a.report_generation(&"n1"), a.report_generation(&"n2"));
        // The last generation of 31 bits is still n1's to hand out.
        a.set_attached(&"v5", &"n1", None);
        let before = generations_of(&a);
        assert_eq!(before[&("n1", "v5")].0, max);
        assert_eq!(a.epoch_of(&"n1"), epochs.0, "not renumbered yet");
        // The next is not: n1's records are renumbered, 1 up, and n1 takes a new epoch.
        a.set_attached(&"v6", &"n1", None);
        let after = generations_of(&a);
        assert_eq!(after.len(), 6);
        let n1: Vec<u32> = ["v1", "v2", "v3", "v5", "v6"]
            .iter()
            .map(|v| after[&("n1", *v)].0)
            .collect();
        assert_eq!(n1, [1, 2, 3, 4, 5], "{after:?}");
        for (key, (_, reported)) in &before {
            assert_eq!(after[key].1, *reported, "{key:?} keeps its flag");
        }
        assert_ne!(a.epoch_of(&"n1"), epochs.0);
        // n2 is not touched: its generation, its epoch.
        assert_eq!(after[&("n2", "v4")], before[&("n2", "v4")]);
        assert_eq!(a.epoch_of(&"n2"), epochs.1);
        // Report generations are the status book's, and never come round again.
        assert!(a.report_generation(&"n1") > reports.0);
        assert_eq!(a.report_generation(&"n2"), reports.1);
        // The next record's generation is new too.
        a.set_attached(&"v7", &"n1", None);
        assert_eq!(generations_of(&a)[&("n1", "v7")].0, 6);
        assert_generations_fit(&a);
    }

    /// Every node's generations are distinct, and every one was handed out in its epoch (none
    /// is above the counter, which would hand it out again).
    fn assert_generations_fit(a: &ActualState<T>) {
        for n in a.nodes.iter() {
            let node = &n.node;
            let mut seen: Vec<u32> = n.attached.iter().map(|(_, s)| s.generation()).collect();
            assert!(
                seen.iter().all(|g| (1..=n.generations).contains(g)),
                "{node}: {seen:?} against the counter's {}",
                n.generations
            );
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), n.attached.len(), "{node}: a generation twice");
        }
    }

    #[test]
    fn a_listing_taken_in_on_a_node_out_of_generations_is_numbered_in_one_epoch() {
        let mut a = ActualState::<T>::default();
        a.set_node("n1", NodeFacts::default());
        a.set_generations(&"n1", ActualNode::<T>::MAX_GENERATION - 1);
        let listed: Vec<ReportedVolume<T>> = ["v2", "v1", "v3", "v1"]
            .into_iter()
            .map(|volume| ReportedVolume {
                volume,
                device: None,
            })
            .collect();
        let epoch = a.epoch_of(&"n1");
        a.recover_reported(&"n1", &listed);
        assert_generations_fit(&a);
        assert_ne!(a.epoch_of(&"n1"), epoch, "renumbered before the listing");
    }

    #[test]
    fn a_node_record_made_again_takes_a_new_epoch() {
        let mut a = ActualState::<T>::default();
        a.set_attached(&"v1", &"n1", None);
        let first = a.epoch_of(&"n1");
        assert_ne!(first, 0);
        a.set_detached(&"v1", &"n1", false);
        assert_eq!(a.epoch_of(&"n1"), 0, "no record, no epoch");
        a.set_attached(&"v1", &"n1", None);
        assert_ne!(a.epoch_of(&"n1"), first);
        assert_ne!(a.epoch_of(&"n1"), 0);
    }

    #[test]
    fn recovering_a_listing_is_setting_each_listed_volume_attached() {
        let mut seed = 11u64;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for case in 0..2_000 {
            // The earlier state, drawn once as steps and built twice (`ActualState` is not
            // `Clone`).
            let steps: Vec<(u64, u32, u32, u64)> = (0..next(12))
                .map(|_| (next(4), next(8) as u32, next(3) as u32, next(5)))
                .collect();
            let build = || {
                let mut a: ActualState<U> = ActualState::default();
                for &(kind, v, n, x) in &steps {
                    match kind {
                        0 => a.set_attached(&v, &n, (x % 2 == 0).then_some("/dev/x")),
                        1 => a.set_uncertain(&v, &n),
                        2 => a.set_withheld(&v, &n, true),
                        _ => {
                            a.request_detach(&v, &n, Duration::from_secs(x));
                        }
                    }
                }
                a.take_report_changed();
                a
            };
            let node = next(3) as u32;
            let listed: Vec<ReportedVolume<U>> = (0..next(10))
                .map(|_| ReportedVolume {
                    volume: next(8) as u32,
                    device: match next(3) {
                        0 => Some("/dev/y".into()),
                        1 => Some("/dev/z".into()),
                        _ => None,
                    },
                })
                .collect();
            let (mut one_by_one, mut at_once) = (build(), build());
            let generation = |a: &ActualState<U>| a.report_generation(&node);
            let before = generation(&at_once);
            let records = |a: &ActualState<U>| -> BTreeMap<u32, u32> {
                let n = a.nodes.get(&node);
                n.into_iter()
                    .flat_map(|n| n.attached.iter().map(|(v, s)| (*v, s.generation())))
                    .collect()
            };
            let (earlier_one, earlier_once) = (records(&one_by_one), records(&at_once));
            for r in &listed {
                one_by_one.set_attached(&r.volume, &node, r.device.as_deref());
            }
            at_once.recover_reported(&node, &listed);
            let context = format!("case {case}: {steps:?}, then {listed:?} on {node}");
            assert_eq!(snapshot(&at_once), snapshot(&one_by_one), "{context}");
            // The same records changed (or are new), each with a generation of its own.
            let changed = |earlier: &BTreeMap<u32, u32>, a: &ActualState<U>| -> Vec<u32> {
                let now = records(a);
                now.iter()
                    .filter(|(v, g)| earlier.get(v) != Some(g))
                    .map(|(v, _)| *v)
                    .collect()
            };
            assert_eq!(
                changed(&earlier_once, &at_once),
                changed(&earlier_one, &one_by_one),
                "{context}"
            );
            assert_eq!(
                at_once.take_report_changed(),
                one_by_one.take_report_changed(),
                "{context}"
            );
            assert_eq!(
                generation(&at_once) != before,
                generation(&one_by_one) != before,
                "the report generation moves exactly when it did: {context}"
            );
        }
    }

    #[test]
    fn report_follows_attached_and_withheld() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v1", &"n1", Some("/dev/a"));
        a.set_attached(&"v0", &"n1", None);
        assert_eq!(
            a.take_report_changed().into_iter().collect::<Vec<_>>(),
            vec!["n1"]
        );
        let names = a.report(&"n1").volumes().to_vec();
        assert_eq!(names, vec!["v0", "v1"]);
        a.set_withheld(&"v1", &"n1", true);
        assert_eq!(a.take_report_changed().len(), 1);
        assert_eq!(a.report(&"n1").len(), 1);
        a.set_withheld(&"v1", &"n1", true);
        assert!(a.take_report_changed().is_empty(), "no change, no write");
        a.set_uncertain(&"v0", &"n1");
        assert!(a.report(&"n1").is_empty());
        a.set_detached(&"v0", &"n1", false);
        a.set_detached(&"v1", &"n1", false);
        assert!(a.is_empty());
        assert_eq!(
            a.nodes().count(),
            0,
            "an unknown node with nothing attached is forgotten"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
            rng_seed: proptest::test_runner::RngSeed::Fixed(23),
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// The report copies the node's reported attachments in runs between the ones it
        /// leaves out: whichever are left out (none, the first, the last, several in a row,
        /// every one), it lists exactly the others, in order, with their paths.
        #[test]
        fn a_report_lists_exactly_what_is_not_withheld_or_uncertain(
            left_out in proptest::collection::vec(0u8..3, 0..12)
        ) {
            let mut a: ActualState<U> = ActualState::default();
            let mut expected = Vec::new();
            for (volume, how) in (0u32..).zip(&left_out) {
                let path = format!("/dev/p{volume}");
                a.set_attached(&volume, &7, (volume % 2 == 0).then_some(path.as_str()));
                match how {
                    0 => expected.push((volume, (volume % 2 == 0).then_some(path))),
                    1 => a.set_withheld(&volume, &7, true),
                    _ => a.set_uncertain(&volume, &7),
                }
            }
            let report = a.report(&7);
            let listed: Vec<(u32, Option<String>)> = report
                .iter()
                .map(|(volume, path)| (*volume, path.map(str::to_string)))
                .collect();
            proptest::prop_assert_eq!(listed, expected);
        }
    }

    #[test]
    fn node_facts_report_only_affected_volumes() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v1", &"n1", None);
        a.set_attached(&"v2", &"n1", None);
        let first = a.set_node(
            "n1",
            NodeFacts {
                in_use: Some(vec!["v1"]),
                ..NodeFacts::default()
            },
        );
        assert_eq!(first, vec!["v1", "v2"], "first report touches all");
        let second = a.set_node(
            "n1",
            NodeFacts {
                in_use: Some(vec!["v2", "v1"]),
                ..NodeFacts::default()
            },
        );
        assert_eq!(second, vec!["v2"]);
        let fenced = a.set_node(
            "n1",
            NodeFacts {
                fenced: true,
                in_use: Some(vec!["v1", "v2"]),
                attach_limit: None,
                healthy: false,
            },
        );
        assert_eq!(fenced, vec!["v1", "v2"]);
        assert_eq!(a.node(&"n1").unwrap().reports_in_use(&"v1"), Some(true));
        assert_eq!(a.remove_node(&"n1"), vec!["v1", "v2"]);
        assert!(!a.node_present(&"n1"));
        assert_eq!(a.node(&"n1").unwrap().reports_in_use(&"v1"), None);
    }

    #[test]
    fn in_use_unrecorded_is_what_the_report_adds_to_the_records() {
        let mut a: ActualState<T> = ActualState::default();
        let unrecorded = |a: &ActualState<T>| -> Vec<&str> {
            a.node(&"n1")
                .unwrap()
                .in_use_unrecorded()
                .copied()
                .collect()
        };
        a.set_node("n1", NodeFacts::default());
        assert!(unrecorded(&a).is_empty(), "no report, nothing");
        for v in ["a", "c", "e"] {
            a.set_attached(&v, &"n1", None);
        }
        a.set_uncertain(&"g", &"n1");
        a.set_node(
            "n1",
            NodeFacts {
                in_use: Some(vec!["f", "b", "a", "g", "d", "c", "h"]),
                ..NodeFacts::default()
            },
        );
        assert_eq!(unrecorded(&a), vec!["b", "d", "f", "h"]);
        a.set_node(
            "n1",
            NodeFacts {
                in_use: Some(vec!["e", "a"]),
                ..NodeFacts::default()
            },
        );
        assert!(unrecorded(&a).is_empty());
    }

    /// The usual detach withholds the volume, writes the node's status, and then detaches: the
    /// detach leaves the report as written, so its generation stays and the status book
    /// compares nothing again. Any other detach changes the report, and its generation.
    #[test]
    fn a_withheld_volumes_detach_keeps_the_report_and_its_generation() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v1", &"n1", Some("/dev/a"));
        a.set_attached(&"v2", &"n1", Some("/dev/b"));
        a.set_withheld(&"v1", &"n1", true);
        let (report, generation) = (a.report(&"n1"), a.report_generation(&"n1"));
        assert!(a.report_matches(&"n1", &report));
        a.set_detached(&"v1", &"n1", false);
        assert_eq!(a.report(&"n1"), report);
        assert_eq!(a.report_generation(&"n1"), generation);
        a.set_detached(&"v2", &"n1", false);
        assert_ne!(a.report_generation(&"n1"), generation);
        assert!(!a.report_matches(&"n1", &report));
        assert!(a.report_matches(&"n1", &a.report(&"n1")));
    }

    /// A list is the node's report only with the same volumes and the same paths.
    #[test]
    fn a_report_matches_only_with_its_volumes_and_paths() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v1", &"n1", Some("/dev/a"));
        a.set_attached(&"v2", &"n1", None);
        let entry = |volume, device: Option<&str>| ReportedVolume {
            volume,
            device: device.map(Into::into),
        };
        let listed = |entries: Vec<ReportedVolume<T>>| ReportedVolumes::from(entries);
        assert!(a.report_matches(
            &"n1",
            &listed(vec![entry("v1", Some("/dev/a")), entry("v2", None)])
        ));
        for other in [
            vec![entry("v1", Some("/dev/x")), entry("v2", None)],
            vec![entry("v1", None), entry("v2", None)],
            vec![entry("v1", Some("/dev/a"))],
            vec![entry("v1", Some("/dev/a")), entry("v3", None)],
            vec![
                entry("v1", Some("/dev/a")),
                entry("v2", None),
                entry("v3", None),
            ],
        ] {
            assert!(
                !a.report_matches(&"n1", &listed(other.clone())),
                "{other:?}"
            );
        }
        assert!(!a.report_matches(&"n2", &listed(vec![entry("v1", None)])));
        assert!(a.report_matches(&"n2", &ReportedVolumes::default()));
    }

    #[test]
    fn report_reads_the_node_index_with_devices() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v1", &"n1", Some("/dev/b"));
        a.set_attached(&"v0", &"n1", None);
        a.set_uncertain(&"v2", &"n1");
        a.set_attached(&"v3", &"n1", Some("/dev/d"));
        let report = |a: &ActualState<T>| -> Vec<(&str, Option<String>)> {
            a.report(&"n1")
                .iter()
                .map(|(v, d)| (*v, d.map(str::to_string)))
                .collect()
        };
        assert_eq!(
            report(&a),
            vec![
                ("v0", None),
                ("v1", Some("/dev/b".into())),
                ("v3", Some("/dev/d".into()))
            ]
        );
        a.set_withheld(&"v1", &"n1", true);
        assert_eq!(
            report(&a),
            vec![("v0", None), ("v3", Some("/dev/d".into()))]
        );
        a.set_attached(&"v1", &"n1", Some("/dev/e"));
        assert_eq!(
            a.report(&"n1").to_vec()[1].device.as_deref(),
            Some("/dev/e")
        );
        a.set_attached(&"v2", &"n1", None);
        assert_eq!(a.report(&"n1").len(), 4, "confirmed: reported");
        a.set_detached(&"v3", &"n1", false);
        assert_eq!(
            a.device(&"v3", &"n1"),
            None,
            "the device goes with the record"
        );
        assert_eq!(a.device(&"v1", &"n1"), Some("/dev/e"));
        a.set_uncertain(&"v1", &"n1");
        assert_eq!(report(&a), vec![("v0", None), ("v2", None)]);
    }

    #[test]
    fn a_detach_request_lives_as_long_as_the_attachment() {
        let mut a: ActualState<T> = ActualState::default();
        let (t1, t2) = (Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(a.request_detach(&"v", &"n", t1), t1);
        assert_eq!(
            a.detach_requested_at(&"v", &"n"),
            None,
            "no record, nothing kept"
        );
        a.set_attached(&"v", &"n", None);
        assert_eq!(a.request_detach(&"v", &"n", t1), t1);
        assert_eq!(
            a.request_detach(&"v", &"n", t2),
            t1,
            "the first request counts"
        );
        assert_eq!(a.detach_requested_at(&"v", &"n"), Some(t1));
        a.cancel_detach_request(&"v", &"n");
        assert_eq!(a.request_detach(&"v", &"n", t2), t2);
        a.remove_node(&"n");
        assert_eq!(
            a.detach_requested_at(&"v", &"n"),
            Some(t2),
            "kept until detached"
        );
        a.set_detached(&"v", &"n", false);
        a.set_attached(&"v", &"n", None);
        assert_eq!(a.detach_requested_at(&"v", &"n"), None);
    }

    #[test]
    fn an_emptied_list_of_detach_requests_serves_the_next_node() {
        let mut a: ActualState<T> = ActualState::default();
        let (t1, t2) = (Duration::from_secs(1), Duration::from_secs(2));
        for (v, n) in [("v1", "n1"), ("v2", "n1"), ("v3", "n2")] {
            a.set_attached(&v, &n, None);
        }
        a.request_detach(&"v1", &"n1", t1);
        a.request_detach(&"v2", &"n1", t1);
        a.cancel_detach_request(&"v1", &"n1");
        assert_eq!(a.request_spares.len(), 0, "a list still in use is kept");
        a.set_detached(&"v2", &"n1", false);
        assert_eq!(a.request_spares.len(), 1, "the emptied list is kept");
        a.request_detach(&"v3", &"n2", t2);
        assert_eq!(a.request_spares.len(), 0, "and serves the next node");
        let requests: Vec<_> = a.detach_requests().collect();
        assert_eq!(requests, vec![(&"v3", &"n2", t2)], "starting empty");
        assert_eq!(a.detach_requested_at(&"v1", &"n1"), None);
        // A list grown past MAX_SPARE_REQUESTS is not kept.
        let many: Vec<&'static str> = (0..=MAX_SPARE_REQUESTS)
            .map(|i| &*Box::leak(format!("w{i}").into_boxed_str()))
            .collect();
        for v in &many {
            a.set_attached(v, &"n3", None);
            a.request_detach(v, &"n3", t1);
        }
        for v in &many {
            a.set_detached(v, &"n3", false);
        }
        assert_eq!(a.request_spares.len(), 0, "a large emptied list is dropped");
    }

    #[test]
    fn an_attachment_record_stays_small() {
        // One per attachment in the cluster: 150,000 of them at Kubernetes' limits.
        // Eight bytes with `u32` ids, and four for its detach's progress.
        type Small = Ids<u32, u32, u32>;
        assert!(std::mem::size_of::<Attachment<Small>>() <= 12);
    }

    #[test]
    fn multi_node_volume_has_one_record_per_node() {
        let mut a: ActualState<T> = ActualState::default();
        a.set_attached(&"v", &"n1", None);
        a.set_uncertain(&"v", &"n2");
        assert_eq!(a.attachments(&"v").len(), 2);
        assert_eq!(a.len(), 2);
        a.set_attached(&"v", &"n2", None);
        assert_eq!(a.state(&"v", &"n2"), AttachState::Attached);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn a_node_whose_report_changed_has_a_new_generation_and_the_ring_holds_attached_nodes() {
        // Every kind of change, in a fixed pseudo-random order over two nodes and three
        // volumes; after each, a node whose report differs must have a new generation, or the
        // status book would skip a write it needs (122413 again).
        let mut a: ActualState<T> = ActualState::default();
        let (nodes, volumes) = (["n1", "n2"], ["v1", "v2", "v3"]);
        let devices = [None, Some("/dev/a"), Some("/dev/b")];
        let seen = |a: &ActualState<T>| nodes.map(|n| (a.report(&n), a.report_generation(&n)));
        let mut before = seen(&a);
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut changes = 0;
        for _ in 0..5_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (v, n) = (
                volumes[(state % 3) as usize],
                nodes[((state >> 8) % 2) as usize],
            );
            match (state >> 16) % 8 {
                0 | 1 => a.set_attached(&v, &n, devices[((state >> 24) % 3) as usize]),
                7 => {
                    // The store's listing at a restart: a volume or two, maybe one twice.
                    let listed: Vec<ReportedVolume<T>> = (0..(state >> 24) % 3 + 1)
                        .map(|i| ReportedVolume {
                            volume: volumes[((state >> (28 + i)) % 3) as usize],
                            device: None,
                        })
                        .collect();
                    a.recover_reported(&n, &listed);
                }
                2 => a.set_uncertain(&v, &n),
                3 => {
                    a.set_detached(&v, &n, (state >> 24) % 2 == 0);
                }
                4 => a.set_withheld(&v, &n, (state >> 24) % 2 == 0),
                5 => {
                    a.remove_node(&n);
                }
                _ => {
                    a.set_node(
                        n,
                        NodeFacts {
                            healthy: true,
                            fenced: false,
                            in_use: None,
                            attach_limit: None,
                        },
                    );
                }
            }
            let after = seen(&a);
            for ((b, now), n) in before.iter().zip(&after).zip(nodes) {
                if b.0 != now.0 {
                    changes += 1;
                    assert_ne!(b.1, now.1, "report changed from {:?} to {:?}", b.0, now.0);
                }
                // The compare a status write rests on: it says "the same" exactly when the
                // lists are (its count of reported volumes kept in line by every change).
                assert_eq!(a.report_matches(&n, &b.0), b.0 == now.0, "{n}: {:?}", now.0);
                assert!(a.report_matches(&n, &now.0));
            }
            before = after;
            // The verify ring holds exactly the nodes with attachments, at their positions.
            let attached: Vec<_> = nodes
                .iter()
                .filter(|n| a.volumes_on(n).next().is_some())
                .collect();
            assert_eq!(a.ring.len(), attached.len(), "ring {:?}", a.ring);
            for n in attached {
                let pos = a.nodes.get(n).expect("a node of the ring").ring_pos;
                assert_ne!(pos, OUT_OF_RING, "in the ring");
                let pos = pos as usize;
                assert_eq!(a.ring.at(pos), Some(n));
            }
        }
        assert!(changes > 1_000, "the walk changed reports {changes} times");
    }

    #[test]
    fn a_report_of_what_the_node_holds_is_merged_without_ordering_a_volume() {
        use crate::core::tables::counted::{Counted, orderings};
        type C = Ids<&'static str, Counted, &'static str>;
        let mut a: ActualState<C> = ActualState::default();
        for v in [1, 3, 5, 7] {
            a.set_attached(&Counted(v), &"n1", None);
        }
        let report = |a: &mut ActualState<C>, in_use: &[u32]| {
            let in_use = in_use.iter().copied().map(Counted).collect();
            a.set_node(
                "n1",
                NodeFacts {
                    in_use: Some(in_use),
                    ..NodeFacts::default()
                },
            );
            orderings();
            let unrecorded: Vec<u32> = a
                .node(&"n1")
                .unwrap()
                .in_use_unrecorded()
                .map(|v| v.0)
                .collect();
            (unrecorded, orderings())
        };
        assert_eq!(
            report(&mut a, &[1, 3, 5, 7]),
            (vec![], 0),
            "equal lists: equality alone"
        );
        let (unrecorded, _) = report(&mut a, &[0, 1, 2, 5, 8]);
        assert_eq!(unrecorded, vec![0, 2, 8]);
        assert_eq!(report(&mut a, &[3, 7]).0, Vec::<u32>::new());
    }
}
