//! The operations the core planned and has no result for yet, by id; and, per volume, how many
//! of them attach or detach it, and whether a look at the volume waits for them.
//!
//! A removed volume is forgotten once nothing is attached and nothing runs on it. Asked by a
//! scan of every running operation, that check made a mass removal quadratic: retiring 30,000
//! volumes with their detaches finishing a thousand at a time cost 1.8 s of passes, the worst
//! one 186 ms. The count answers it in one lookup.
//!
//! The table also holds a single-node volume's gate key: an attach or detach planned while the
//! volume was single-node may run only alone on it, and the table that counts the volume's
//! operations already knows whether one of them is such. The gate held that key in a set of
//! its own, cloned in at every start and hashed out at every end: two more lookups for each of
//! a move's attach and detach, 2 % of a `u32` move's instructions and 3.5 % of a `String`
//! move's, whose key cloned an allocation.
//!
//! A look at a volume that meets one of its operations running leaves part of its decision to
//! the operation's end ([`InFlightTable::relook_when_done`]). Only then does a successful attach
//! have its volume looked at again: before, every attach's success did, and in a move that
//! look found nothing to do (a twentieth of the move's instructions).

use std::time::Duration;

use hashbrown::hash_map::EntryRef;
use rustc_hash::FxBuildHasher;

use crate::core::operation::OpKind;
use crate::core::operation::{InFlight, OpId};
use crate::core::tables::op_id_map::{self, OpIdMap};
use crate::core::tables::trim::{trim_hash_map, trim_map, would_trim};
use crate::domain::Domain;

/// Every running operation, and the number of attaches and detaches running per volume.
#[derive(Debug)]
pub(crate) struct InFlightTable<D: Domain> {
    /// Laid out in id order: a pass's operations end in about the order it planned them.
    /// Each with when it was planned, for [`explain`](crate::core::Reconciler::explain_volume).
    ops: OpIdMap<OpId, (InFlight<D>, Duration)>,
    /// Only volumes with at least one running, or whose look waits for one that ended (see
    /// [`take`](InFlightTable::take)): an entry is dropped when neither holds. `hashbrown`'s
    /// own map: an operation's end finds the entry once, and drops it through what it found.
    per_volume: hashbrown::HashMap<D::Volume, Runs, FxBuildHasher>,
}

/// A volume's running attaches and detaches.
#[derive(Debug, Default)]
struct Runs {
    count: u32,
    /// One of them was planned while the volume was single-node: it holds the volume's gate
    /// key, so nothing else may start on the volume until it ends.
    single_node: bool,
    /// A look at the volume met one of them running and left something to its end.
    relook: bool,
}

impl<D: Domain> Default for InFlightTable<D> {
    fn default() -> Self {
        InFlightTable {
            ops: op_id_map::new(),
            per_volume: hashbrown::HashMap::default(),
        }
    }
}

impl<D: Domain> InFlightTable<D> {
    /// Records `op`, planned under `id` at `now`.
    pub(crate) fn insert(&mut self, id: OpId, op: InFlight<D>, now: Duration) {
        if let Some(volume) = op.volume() {
            let runs = match self.per_volume.entry_ref(volume) {
                EntryRef::Occupied(entry) => entry.into_mut(),
                EntryRef::Vacant(entry) => entry.insert_with_key(volume.clone(), Runs::default()),
            };
            runs.count += 1;
            if op.holds_volume() {
                debug_assert!(
                    !runs.single_node,
                    "a single-node volume runs one attach or detach at a time"
                );
                runs.single_node = true;
            }
        }
        if let Some((replaced, _)) = self.ops.insert(id, (op, now)) {
            // Ids are never reused; were one, the count must not keep the old operation.
            self.ended(&replaced, false);
        }
    }

    /// Takes out the operation planned under `id` if it is of `kind`, with whether a look at
    /// its volume waits for its end (see [`relook_when_done`](Self::relook_when_done); the
    /// answer is taken, and is `false` for an operation on no volume). `Err(None)`: no
    /// operation runs under `id`; `Err(Some(k))`: the one that does is of kind `k`, and
    /// stays.
    ///
    /// Every attach's and detach's end takes the flag, so one left after the last of a
    /// volume's operations ends is taken by that end. Taking out the operation, then the
    /// flag, found the volume's entry up to three times (the count, the entry dropped, the
    /// flag); here once.
    pub(crate) fn take(
        &mut self,
        id: OpId,
        kind: OpKind,
    ) -> Result<(InFlight<D>, bool), Option<OpKind>> {
        let (op, planned) = self.ops.remove(&id).ok_or(None)?;
        if op.kind() != kind {
            let actual = op.kind();
            self.ops.insert(id, (op, planned));
            return Err(Some(actual));
        }
        let relook = self.ended(&op, true);
        Ok((op, relook))
    }

    /// `op` is over (ended, or replaced under a reused id): its volume counts it no more, the
    /// volume's gate key it held is free, and the entry goes once nothing keeps it. Returns
    /// the volume's relook flag, taken, when `take`.
    fn ended(&mut self, op: &InFlight<D>, take: bool) -> bool {
        let Some(volume) = op.volume() else {
            return false;
        };
        let EntryRef::Occupied(mut entry) = self.per_volume.entry_ref(volume) else {
            return false;
        };
        let runs = entry.get_mut();
        runs.count = runs.count.saturating_sub(1);
        if op.holds_volume() {
            runs.single_node = false;
        }
        let relook = take && std::mem::take(&mut runs.relook);
        if runs.count == 0 && !runs.relook {
            entry.remove();
        }
        relook
    }

    /// Whether an attach or a detach of `volume` is running.
    pub(crate) fn runs_on(&self, volume: &D::Volume) -> bool {
        self.per_volume
            .get(volume)
            .is_some_and(|runs| runs.count > 0)
    }

    /// Whether an attach or detach planned while `volume` was single-node runs: the volume's
    /// gate key is held until it ends.
    pub(crate) fn holds_volume(&self, volume: &D::Volume) -> bool {
        self.per_volume
            .get(volume)
            .is_some_and(|runs| runs.single_node)
    }

    /// A look at `volume` met an attach or detach of it running: the end of that operation
    /// (the next of them to end, if several run) has the volume looked at again. Nothing
    /// when none runs.
    pub(crate) fn relook_when_done(&mut self, volume: &D::Volume) {
        if let Some(runs) = self.per_volume.get_mut(volume) {
            if runs.count > 0 {
                runs.relook = true;
            }
        }
    }

    pub(crate) fn contains_key(&self, id: &OpId) -> bool {
        self.ops.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Room for running operations; for tests of trimming.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.ops.capacity()
    }

    /// Every running operation, in no set order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &InFlight<D>> {
        self.ops.values().map(|(op, _)| op)
    }

    /// Every running operation with when it was planned, in no set order.
    pub(crate) fn planned(&self) -> impl Iterator<Item = (&InFlight<D>, Duration)> {
        self.ops.values().map(|(op, at)| (op, *at))
    }

    /// Whether a burst left room that [`trim`](Self::trim) would give back.
    pub(crate) fn has_room_to_give_back(&self) -> bool {
        would_trim(self.ops.len(), self.ops.capacity())
    }

    /// Gives back what a burst left allocated.
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.ops);
        trim_hash_map(&mut self.per_volume);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::calls::volume::Access;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    /// A detach of a multi-node volume: several may run on the volume at once.
    fn detach(volume: &'static str, node: &'static str) -> InFlight<D> {
        InFlight::Detach {
            volume,
            node,
            access: Access::MultiNode,
            force: None,
        }
    }

    /// An attach of a single-node volume: it holds the volume's gate key.
    fn attach_single(volume: &'static str, node: &'static str) -> InFlight<D> {
        InFlight::Attach {
            volume,
            node,
            access: Access::SingleNode,
            slot: false,
            driver: None,
        }
    }

    #[test]
    fn a_single_node_volume_is_held_while_its_attach_or_detach_runs_and_only_then() {
        let mut t = InFlightTable::<D>::default();
        t.insert(OpId(1), detach("v", "a"), Duration::ZERO);
        assert!(t.runs_on(&"v"));
        assert!(
            !t.holds_volume(&"v"),
            "a multi-node detach holds its attachment only"
        );
        t.insert(OpId(2), attach_single("v", "b"), Duration::ZERO);
        assert!(t.holds_volume(&"v"));
        assert!(!t.holds_volume(&"w"));
        assert!(t.take(OpId(2), OpKind::Attach).is_ok());
        assert!(!t.holds_volume(&"v"), "freed with the attach's end");
        assert!(t.runs_on(&"v"), "the detach still runs");
        // A result of the wrong kind leaves the operation running, and the key held.
        t.insert(OpId(3), attach_single("v", "b"), Duration::ZERO);
        assert_eq!(
            relook(t.take(OpId(3), OpKind::Detach)),
            Err(Some(OpKind::Attach))
        );
        assert!(t.holds_volume(&"v"));
        assert!(t.take(OpId(3), OpKind::Attach).is_ok());
        assert!(t.take(OpId(1), OpKind::Detach).is_ok());
        assert!(!t.holds_volume(&"v"));
        assert!(t.per_volume.is_empty(), "nothing left behind");
        // A reused id's replaced operation gives its key back.
        t.insert(OpId(4), attach_single("w", "a"), Duration::ZERO);
        t.insert(OpId(4), detach("x", "a"), Duration::ZERO);
        assert!(!t.holds_volume(&"w"));
    }

    #[test]
    fn a_volume_runs_while_any_of_its_attaches_or_detaches_does() {
        let mut t = InFlightTable::<D>::default();
        t.insert(OpId(1), detach("v", "a"), Duration::ZERO);
        t.insert(OpId(2), detach("v", "b"), Duration::ZERO);
        t.insert(
            OpId(3),
            InFlight::WriteStatus {
                node: "a",
                object: 1,
            },
            Duration::ZERO,
        );
        assert!(t.runs_on(&"v"));
        assert!(!t.runs_on(&"w"));
        assert!(t.take(OpId(1), OpKind::Detach).is_ok());
        assert!(t.runs_on(&"v"), "the detach from b still runs");
        assert_eq!(
            relook(t.take(OpId(1), OpKind::Detach)),
            Err(None),
            "taken once"
        );
        assert!(t.take(OpId(2), OpKind::Detach).is_ok());
        assert!(!t.runs_on(&"v"));
        assert_eq!(t.len(), 1);
        // A reused id replaces its operation, and the count with it.
        t.insert(OpId(3), detach("w", "a"), Duration::ZERO);
        t.insert(
            OpId(3),
            InFlight::WriteStatus {
                node: "a",
                object: 1,
            },
            Duration::ZERO,
        );
        assert!(!t.runs_on(&"w"));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_relook_is_asked_only_while_something_runs_and_taken_by_the_next_end() {
        let mut t = InFlightTable::<D>::default();
        t.relook_when_done(&"v");
        assert!(t.per_volume.is_empty(), "nothing runs: nothing to wait for");
        for (id, node) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
            t.insert(OpId(id), detach("v", node), Duration::ZERO);
        }
        assert_eq!(
            relook(t.take(OpId(1), OpKind::Detach)),
            Ok(false),
            "not asked"
        );
        t.relook_when_done(&"v");
        // A result of the wrong kind leaves the operation, and the flag, where they were.
        assert_eq!(
            relook(t.take(OpId(2), OpKind::Attach)),
            Err(Some(OpKind::Detach))
        );
        assert_eq!(
            relook(t.take(OpId(2), OpKind::Detach)),
            Ok(true),
            "the next end"
        );
        assert_eq!(
            relook(t.take(OpId(3), OpKind::Detach)),
            Ok(false),
            "taken once"
        );
        t.relook_when_done(&"v");
        assert_eq!(
            relook(t.take(OpId(4), OpKind::Detach)),
            Ok(true),
            "the last end"
        );
        assert!(!t.runs_on(&"v"));
        assert!(t.per_volume.is_empty(), "nothing left behind");
    }

    /// The relook flag of a [`take`](InFlightTable::take), without the operation.
    fn relook(taken: Result<(InFlight<D>, bool), Option<OpKind>>) -> Result<bool, Option<OpKind>> {
        taken.map(|(_, relook)| relook)
    }
}
