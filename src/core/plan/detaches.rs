//! Per-node indexes of the detaches under way, derived from the records' states
//! ([`DetachProgress`](crate::core::state::progress::DetachProgress)): one status write's
//! acknowledgement, one fresh read, or one verify serves every detach on its node that waits
//! for it, and a node's call finds them here instead of a scan of the node's records (each a
//! lookup in the volume table). The state itself lives only on the records; the reconciler
//! changes a record's stage and its entry here in one step (`Reconciler::move_detach`), and
//! [`DetachIndex::check`] proves the two agree.

use std::time::Duration;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::core::rules::fresh_read::WrittenFacts;
#[cfg(any(test, debug_assertions, feature = "internals", feature = "testkit"))]
use crate::core::state::actual::ActualState;
use crate::core::state::progress::{DetachStage, Release, Told};
use crate::core::tables::trim::trim_map;
use crate::domain::Domain;

type Volumes<D> = SmallVec<[<D as Domain>::Volume; 2]>;

/// The detaches a node's next read cleared, and when that read answered.
#[derive(Debug)]
struct Clearances<D: Domain> {
    /// When the read answered: its clearances serve until the pass due a reconcile period
    /// later. A node is read once at a time and every clearance lapses at the end of the next
    /// pass, so the node's clearances all come from one read.
    at: Duration,
    volumes: Volumes<D>,
}

/// The indexes. Every list is in the order its detaches entered it, which is the order they
/// are served in.
#[derive(Debug)]
pub(crate) struct DetachIndex<D: Domain> {
    /// [`DetachStage::AwaitingAck`], per node.
    awaiting_ack: FxHashMap<D::Node, Volumes<D>>,
    /// [`DetachStage::ReadWanted`], per node.
    reads_wanted: FxHashMap<D::Node, Volumes<D>>,
    /// [`DetachStage::Cleared`], per node.
    cleared: FxHashMap<D::Node, Clearances<D>>,
    /// A pending [`Release`], per node.
    releases: FxHashMap<D::Node, Volumes<D>>,
    /// Per node, the facts its last acknowledged status write read, for the pass right after
    /// it: the detaches that waited for the write are judged on them without a read. Facts of
    /// the node, not of one detach.
    written_facts: FxHashMap<D::Node, WrittenFacts<D>>,
    /// How many records were told [`Told::BLOCKED`] and [`Told::STUCK`].
    blocked: usize,
    stuck: usize,
}

impl<D: Domain> Default for DetachIndex<D> {
    fn default() -> Self {
        DetachIndex {
            awaiting_ack: FxHashMap::default(),
            reads_wanted: FxHashMap::default(),
            cleared: FxHashMap::default(),
            releases: FxHashMap::default(),
            written_facts: FxHashMap::default(),
            blocked: 0,
            stuck: 0,
        }
    }
}

fn add<V: PartialEq + Clone>(list: &mut SmallVec<[V; 2]>, volume: &V) {
    if !list.contains(volume) {
        list.push(volume.clone());
    }
}

fn remove<N: std::hash::Hash + Eq, V: PartialEq>(
    map: &mut FxHashMap<N, SmallVec<[V; 2]>>,
    node: &N,
    volume: &V,
) {
    if let Some(list) = map.get_mut(node) {
        list.retain(|v| v != volume);
        if list.is_empty() {
            map.remove(node);
        }
    }
}

impl<D: Domain> DetachIndex<D> {
    /// A record of (`volume`, `node`) moved from stage `from` to `to`. A move within one
    /// variant (a read wanted for another force reason) keeps the detach's place.
    pub(crate) fn moved(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        from: DetachStage,
        to: DetachStage,
    ) {
        if std::mem::discriminant(&from) == std::mem::discriminant(&to) {
            return;
        }
        match from {
            DetachStage::AwaitingAck => remove(&mut self.awaiting_ack, node, volume),
            DetachStage::ReadWanted { .. } => remove(&mut self.reads_wanted, node, volume),
            DetachStage::Cleared { .. } => {
                if let Some(c) = self.cleared.get_mut(node) {
                    c.volumes.retain(|v| v != volume);
                    if c.volumes.is_empty() {
                        self.cleared.remove(node);
                    }
                }
            }
            DetachStage::Idle | DetachStage::Reading { .. } | DetachStage::Detaching => {}
        }
        match to {
            DetachStage::AwaitingAck => {
                add(self.awaiting_ack.entry(node.clone()).or_default(), volume)
            }
            DetachStage::ReadWanted { .. } => {
                add(self.reads_wanted.entry(node.clone()).or_default(), volume);
            }
            DetachStage::Cleared { .. } => {
                // `read_answered` opened the node's entry.
                if let Some(c) = self.cleared.get_mut(node) {
                    add(&mut c.volumes, volume);
                } else {
                    debug_assert!(false, "a clearance without a read");
                }
            }
            DetachStage::Idle | DetachStage::Reading { .. } | DetachStage::Detaching => {}
        }
    }

    /// A fresh read of `node` answered at `at`: the clearances it gives count from then.
    pub(crate) fn read_answered(&mut self, node: &D::Node, at: Duration) {
        self.cleared.entry(node.clone()).or_insert(Clearances {
            at,
            volumes: SmallVec::new(),
        });
    }

    /// Drops the entry `read_answered` opened if the read cleared nothing.
    pub(crate) fn read_judged(&mut self, node: &D::Node) {
        if self.cleared.get(node).is_some_and(|c| c.volumes.is_empty()) {
            self.cleared.remove(node);
        }
    }

    /// When the read that cleared the detaches on `node` answered.
    pub(crate) fn cleared_at(&self, node: &D::Node) -> Option<Duration> {
        self.cleared.get(node).map(|c| c.at)
    }

    /// Whether any clearance or written facts are kept (most passes have none).
    pub(crate) fn has_fresh_facts(&self) -> bool {
        !self.cleared.is_empty() || !self.written_facts.is_empty()
    }

    /// The end of a pass: every clearance and every write's facts lapse. Returns the cleared
    /// detaches, whose records go back to [`DetachStage::Idle`].
    pub(crate) fn lapse(&mut self) -> Vec<(D::Volume, D::Node)> {
        self.written_facts.clear();
        let mut lapsed = Vec::new();
        for (node, c) in self.cleared.drain() {
            lapsed.extend(c.volumes.into_iter().map(|v| (v, node.clone())));
        }
        lapsed
    }

    /// The detaches on `node` waiting for its status write's acknowledgement, taken out of
    /// the index: the write ended, and each is looked at again.
    pub(crate) fn take_awaiting_ack(&mut self, node: &D::Node) -> Option<Volumes<D>> {
        self.awaiting_ack.remove(node)
    }

    /// Whether a detach on `node` waits for its status write's acknowledgement.
    pub(crate) fn awaits_ack(&self, node: &D::Node) -> bool {
        self.awaiting_ack.get(node).is_some_and(|w| !w.is_empty())
    }

    /// The detaches on `node` waiting for a fresh read, taken out of the index: a read is
    /// planned for them.
    pub(crate) fn take_reads_wanted(&mut self, node: &D::Node) -> Volumes<D> {
        self.reads_wanted.remove(node).unwrap_or_default()
    }

    /// Whether a detach on `node` waits for a fresh read.
    pub(crate) fn wants_read(&self, node: &D::Node) -> bool {
        self.reads_wanted.get(node).is_some_and(|w| !w.is_empty())
    }

    /// `node` is gone: no write will be acknowledged for it, and its detaches ask for a read
    /// of their own. Returns the detaches whose waits ended, for their records to go back to
    /// [`DetachStage::Idle`].
    pub(crate) fn node_gone(&mut self, node: &D::Node) -> Vec<D::Volume> {
        self.written_facts.remove(node);
        let mut ended: Vec<D::Volume> = Vec::new();
        ended.extend(self.awaiting_ack.remove(node).into_iter().flatten());
        ended.extend(self.reads_wanted.remove(node).into_iter().flatten());
        ended
    }

    /// Keeps the facts a status write of `node` read.
    pub(crate) fn keep_written_facts(&mut self, node: D::Node, facts: WrittenFacts<D>) {
        self.written_facts.insert(node, facts);
    }

    /// The facts `node`'s last acknowledged status write read, if kept.
    pub(crate) fn written_facts(&self, node: &D::Node) -> Option<&WrittenFacts<D>> {
        if self.written_facts.is_empty() {
            return None;
        }
        self.written_facts.get(node)
    }

    /// A record's release changed.
    pub(crate) fn release_changed(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        from: Release,
        to: Release,
    ) {
        match (from == Release::None, to == Release::None) {
            (true, false) => add(self.releases.entry(node.clone()).or_default(), volume),
            (false, true) => remove(&mut self.releases, node, volume),
            _ => {}
        }
    }

    /// Whether any release is pending (most looks meet none).
    pub(crate) fn has_releases(&self) -> bool {
        !self.releases.is_empty()
    }

    /// The volumes with a release pending on `node`.
    pub(crate) fn releases_on(&self, node: &D::Node) -> &[D::Volume] {
        self.releases.get(node).map_or(&[], |v| v.as_slice())
    }

    /// A record's [`Told`] changed.
    pub(crate) fn told_changed(&mut self, from: Told, to: Told) {
        for (what, count) in [
            (Told::BLOCKED, &mut self.blocked),
            (Told::STUCK, &mut self.stuck),
        ] {
            match (from.has(what), to.has(what)) {
                (false, true) => *count += 1,
                (true, false) => *count -= 1,
                _ => {}
            }
        }
    }

    /// How many detaches were told blocked.
    pub(crate) fn blocked(&self) -> usize {
        self.blocked
    }

    /// How many detaches were named stuck.
    pub(crate) fn stuck(&self) -> usize {
        self.stuck
    }

    /// Gives back the memory of a past burst.
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.cleared);
        trim_map(&mut self.written_facts);
        trim_map(&mut self.reads_wanted);
        trim_map(&mut self.awaiting_ack);
        trim_map(&mut self.releases);
    }

    /// Whether the indexes are exactly what the records' states derive: `Err` names the
    /// first disagreement. A scan of every record: for tests, debug builds of small worlds,
    /// the model check and the fuzzers.
    #[cfg(any(test, debug_assertions, feature = "internals", feature = "testkit"))]
    pub(crate) fn check(&self, actual: &ActualState<D>) -> Result<(), String> {
        let mut counts = [0usize; 6];
        for volume in actual.volumes_by_position() {
            for a in actual.attachments(volume) {
                let node = a.node();
                let p = a.detach();
                let listed = |map: &FxHashMap<D::Node, Volumes<D>>| {
                    map.get(node).is_some_and(|l| l.contains(volume))
                };
                let cleared = self
                    .cleared
                    .get(node)
                    .is_some_and(|c| c.volumes.contains(volume));
                let expect = [
                    (
                        matches!(p.stage, DetachStage::AwaitingAck),
                        listed(&self.awaiting_ack),
                        "awaiting an acknowledgement",
                    ),
                    (
                        matches!(p.stage, DetachStage::ReadWanted { .. }),
                        listed(&self.reads_wanted),
                        "wanting a read",
                    ),
                    (
                        matches!(p.stage, DetachStage::Cleared { .. }),
                        cleared,
                        "cleared",
                    ),
                    (
                        p.release != Release::None,
                        listed(&self.releases),
                        "released",
                    ),
                ];
                for (i, (state, index, what)) in expect.into_iter().enumerate() {
                    if state != index {
                        return Err(format!(
                            "{volume:?} on {node:?}: the record says {p:?}, the index {} it {what}",
                            if index { "lists" } else { "does not list" }
                        ));
                    }
                    counts[i] += usize::from(state);
                }
                counts[4] += usize::from(p.told.has(Told::BLOCKED));
                counts[5] += usize::from(p.told.has(Told::STUCK));
            }
        }
        let len = |map: &FxHashMap<D::Node, Volumes<D>>| map.values().map(|l| l.len()).sum();
        let indexed = [
            len(&self.awaiting_ack),
            len(&self.reads_wanted),
            self.cleared.values().map(|c| c.volumes.len()).sum(),
            len(&self.releases),
            self.blocked,
            self.stuck,
        ];
        if counts != indexed {
            return Err(format!(
                "the records count {counts:?} (acks, reads, clearances, releases, blocked, stuck), the index {indexed:?}"
            ));
        }
        Ok(())
    }
}
