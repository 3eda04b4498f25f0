//! The operations the core planned and has no result for yet, by id; and, per volume, how many
//! of them attach or detach it.
//!
//! A removed volume is forgotten once nothing is attached and nothing runs on it. Asked by a
//! scan of every running operation, that check made a mass removal quadratic: retiring 30,000
//! volumes with their detaches finishing a thousand at a time cost 1.8 s of passes, the worst
//! one 186 ms. The count answers it in one lookup.

use rustc_hash::FxHashMap;

use crate::domain::Domain;
use crate::gate::trim_map;
use crate::operation::{InFlight, OpId};

/// Every running operation, and the number of attaches and detaches running per volume.
#[derive(Debug)]
pub(crate) struct InFlightTable<D: Domain> {
    ops: FxHashMap<OpId, InFlight<D>>,
    /// Only volumes with at least one: an entry is dropped at zero.
    per_volume: FxHashMap<D::Volume, u32>,
}

impl<D: Domain> Default for InFlightTable<D> {
    fn default() -> Self {
        InFlightTable {
            ops: FxHashMap::default(),
            per_volume: FxHashMap::default(),
        }
    }
}

impl<D: Domain> InFlightTable<D> {
    /// Records `op`, planned under `id`.
    pub(crate) fn insert(&mut self, id: OpId, op: InFlight<D>) {
        if let Some(volume) = op.volume() {
            *self.per_volume.entry(volume.clone()).or_default() += 1;
        }
        if let Some(replaced) = self.ops.insert(id, op) {
            // Ids are never reused; were one, the count must not keep the old operation.
            self.forget_volume_of(&replaced);
        }
    }

    /// Takes out the operation planned under `id`.
    pub(crate) fn remove(&mut self, id: &OpId) -> Option<InFlight<D>> {
        let op = self.ops.remove(id)?;
        self.forget_volume_of(&op);
        Some(op)
    }

    fn forget_volume_of(&mut self, op: &InFlight<D>) {
        let Some(volume) = op.volume() else {
            return;
        };
        if let Some(count) = self.per_volume.get_mut(volume) {
            *count -= 1;
            if *count == 0 {
                self.per_volume.remove(volume);
            }
        }
    }

    /// Whether an attach or a detach of `volume` is running.
    pub(crate) fn runs_on(&self, volume: &D::Volume) -> bool {
        self.per_volume.contains_key(volume)
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
        self.ops.values()
    }

    /// Gives back what a burst left allocated.
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.ops);
        trim_map(&mut self.per_volume);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    fn detach(volume: &'static str, node: &'static str) -> InFlight<D> {
        InFlight::Detach {
            volume,
            node,
            access: crate::volume::Access::SingleNode,
            force: None,
        }
    }

    #[test]
    fn a_volume_runs_while_any_of_its_attaches_or_detaches_does() {
        let mut t = InFlightTable::<D>::default();
        t.insert(OpId(1), detach("v", "a"));
        t.insert(OpId(2), detach("v", "b"));
        t.insert(OpId(3), InFlight::WriteStatus { node: "a" });
        assert!(t.runs_on(&"v"));
        assert!(!t.runs_on(&"w"));
        assert!(t.remove(&OpId(1)).is_some());
        assert!(t.runs_on(&"v"), "the detach from b still runs");
        assert!(t.remove(&OpId(1)).is_none(), "taken once");
        assert!(t.remove(&OpId(2)).is_some());
        assert!(!t.runs_on(&"v"));
        assert_eq!(t.len(), 1);
        // A reused id replaces its operation, and the count with it.
        t.insert(OpId(3), detach("w", "a"));
        t.insert(OpId(3), InFlight::WriteStatus { node: "a" });
        assert!(!t.runs_on(&"w"));
        assert_eq!(t.len(), 1);
    }
}
