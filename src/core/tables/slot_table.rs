//! A hash table whose entries keep their place: an entry's slot number holds from its insert
//! to its removal, so other records can point at it by a 4-byte number instead of a copy of
//! its key.
//!
//! What it is for: the desired state's placed workloads. Each node lists the workloads placed
//! on it; with the workloads' ids in that list, taking one out compared ids one by one (with
//! text ids a `memcmp` of text spread over the heap per entry, 30 entries a node at a million
//! attachments), and the workload table's swap-remove then probed the hash table again to
//! repoint the entry it moved. With slot numbers in the list the scan compares numbers, and a
//! removal leaves a free slot for the next insert instead of moving an entry: no second probe.
//! A move (a workload taken out, then put in elsewhere) takes the slot it just left.
//!
//! The price is the free slots: a removal leaves a hole until an insert fills it. The periodic
//! trim closes the holes left ([`SlotTable::close_holes`]): the last entries move into them,
//! and each move is told, so the lists pointing at them can follow.
//!
//! A removed entry stays in its slot, [vacated](SlotTable::vacated), until an insert takes the
//! slot or the holes are closed: the caller reads it there instead of being handed it. Why
//! not `Option<T>` slots: the placed workloads' entries are 24 bytes with `u32` ids, with no
//! value to spare for `None`, so an `Option` made each 32 (8.4 bytes an attachment at a
//! million, over the 160-byte goal). Which slots are used is one bit each.

use std::fmt;

use crate::core::tables::dense_table::{Keyed, TRIM_ABOVE, grow, hash_of, slot};
use crate::core::tables::position_index::PositionIndex;

/// A slot's number: where an entry of a [`SlotTable`] sits while it is in the table.
pub(crate) type Slot = u32;

/// Entries found by their key, each in a slot whose number does not change while it is in.
pub(crate) struct SlotTable<T> {
    /// The slot of each entry, hashed by its key.
    index: PositionIndex,
    /// The entries, and in free slots the entries last removed from them.
    slots: Vec<T>,
    /// One bit per slot, set while the slot holds an entry of the table.
    used: Vec<u64>,
    /// Free slots, the last freed taken first.
    free: Vec<Slot>,
}

impl<T> Default for SlotTable<T> {
    fn default() -> Self {
        SlotTable {
            index: PositionIndex::default(),
            slots: Vec::new(),
            used: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for SlotTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T> SlotTable<T> {
    /// Whether slot `at` holds an entry of the table.
    #[inline]
    fn is_used(&self, at: usize) -> bool {
        self.used[at / 64] & (1 << (at % 64)) != 0
    }

    /// Marks slot `at` used or free.
    #[inline]
    fn set_used(&mut self, at: usize, used: bool) {
        if used {
            self.used[at / 64] |= 1 << (at % 64);
        } else {
            self.used[at / 64] &= !(1 << (at % 64));
        }
    }

    /// Every entry, in the order of their slots.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(at, _)| self.is_used(*at))
            .map(|(_, entry)| entry)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The entry in `slot`: a number handed out by [`insert`](SlotTable::insert) points at its
    /// entry until the entry is removed or moved by [`close_holes`](SlotTable::close_holes).
    #[inline]
    pub(crate) fn at(&self, slot: Slot) -> &T {
        debug_assert!(self.is_used(slot as usize), "slot {slot} is free");
        &self.slots[slot as usize]
    }

    /// The entry in `slot`, to change (all but its key, which the table finds it by).
    #[inline]
    pub(crate) fn at_mut(&mut self, slot: Slot) -> &mut T {
        debug_assert!(self.is_used(slot as usize), "slot {slot} is free");
        &mut self.slots[slot as usize]
    }

    /// The entry [`vacate`](SlotTable::vacate) took out of `slot`, until an insert takes the
    /// slot again.
    #[inline]
    pub(crate) fn vacated(&self, slot: Slot) -> &T {
        debug_assert!(!self.is_used(slot as usize), "slot {slot} is in use");
        &self.slots[slot as usize]
    }
}

impl<T: Keyed> SlotTable<T> {
    /// The slot of `key`, whose hash is `hash`, if present.
    #[inline]
    fn find(&self, hash: u64, key: &T::Key) -> Option<Slot> {
        let slots = &self.slots;
        self.index.find(hash, |at| slots[at as usize].key() == key)
    }

    /// The slot of `key`, if present.
    #[inline]
    pub(crate) fn slot_of(&self, key: &T::Key) -> Option<Slot> {
        self.find(hash_of(key), key)
    }

    /// The entry of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &T::Key) -> Option<&T> {
        self.slot_of(key).map(|at| self.at(at))
    }

    /// Puts `entry` in, in place of the entry of the same key if there is one (returned), and
    /// returns its slot: the replaced entry's, else the last one freed (whose vacated entry is
    /// dropped), else a new one.
    pub(crate) fn insert(&mut self, entry: T) -> (Slot, Option<T>) {
        let hash = hash_of(entry.key());
        if let Some(at) = self.find(hash, entry.key()) {
            let old = std::mem::replace(&mut self.slots[at as usize], entry);
            return (at, Some(old));
        }
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at as usize] = entry;
                at
            }
            None => {
                let at = self.slots.len();
                grow(&mut self.slots);
                self.slots.push(entry);
                if at % 64 == 0 {
                    self.used.push(0);
                }
                slot(at)
            }
        };
        self.set_used(at as usize, true);
        let slots = &self.slots;
        self.index
            .insert(hash, at, |i| hash_of(slots[i as usize].key()));
        (at, None)
    }

    /// Takes the entry of `key` out of the table and returns its slot, now free: the entry
    /// stays there to read ([`vacated`](SlotTable::vacated)) until an insert takes the slot.
    pub(crate) fn vacate(&mut self, key: &T::Key) -> Option<Slot> {
        let slots = &self.slots;
        let at = self
            .index
            .remove(hash_of(key), |at| slots[at as usize].key() == key)?;
        self.set_used(at as usize, false);
        self.free.push(at);
        Some(at)
    }

    /// Closes every free slot: the entries in the last slots move into the free ones (each
    /// move is told to `moved(entry, from, to)`, so that what points at the slot can follow),
    /// the vacated entries are dropped, and a table at most a quarter full gives back room.
    /// Run where nothing reads a vacated entry any more (the periodic trim): a move's insert
    /// takes back the slot its removal freed, so in a settled table there is nothing to do.
    pub(crate) fn close_holes(&mut self, mut moved: impl FnMut(&T, Slot, Slot)) {
        let mut free = std::mem::take(&mut self.free);
        free.sort_unstable();
        let mut holes = free.iter().copied();
        loop {
            // Free slots at the end are dropped, not filled.
            while !self.slots.is_empty() && !self.is_used(self.slots.len() - 1) {
                self.slots.pop();
            }
            let Some(hole) = holes.find(|&hole| (hole as usize) < self.slots.len()) else {
                break;
            };
            let last = self.slots.len() - 1;
            let entry = self.slots.pop().expect("the last slot is used");
            self.slots[hole as usize] = entry;
            self.set_used(last, false);
            self.set_used(hole as usize, true);
            let entry = &self.slots[hole as usize];
            let from = slot(last);
            *self
                .index
                .find_mut(hash_of(entry.key()), |at| at == from)
                .expect("every entry has a slot") = hole;
            moved(entry, from, hole);
        }
        // The list keeps its room for the next removals (the trim runs every few moves, and
        // a move's removal then allocated the list again), unless a burst left it large.
        free.clear();
        if free.capacity() <= TRIM_ABOVE {
            self.free = free;
        }
        self.used.truncate(self.slots.len().div_ceil(64));
        let len = self.slots.len();
        if self.slots.capacity() > TRIM_ABOVE && len * 4 <= self.slots.capacity() {
            self.slots.shrink_to(len * 2);
            self.used.shrink_to(len.div_ceil(64) * 2);
            let slots = &self.slots;
            self.index
                .shrink_to(len * 2, |at| hash_of(slots[at as usize].key()));
        }
    }

    /// Number of free slots.
    #[cfg(test)]
    pub(crate) fn holes(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::core::tables::counted::Lcg;
    use crate::core::tables::dense_table::tests::Entry;

    /// Every operation checked against `std`'s map after each step, through growth, draining
    /// and closing holes; a slot number handed out keeps pointing at its entry until the entry
    /// is removed or a closing says where it moved, and a drained table gives back its room.
    #[test]
    fn slots_hold_their_entries_through_a_random_walk() {
        let mut rng = Lcg(11);
        let mut table: SlotTable<Entry> = SlotTable::default();
        let mut model: HashMap<u32, (u64, Slot)> = HashMap::new();
        let (mut moves, mut shrinks) = (0, 0);
        for step in 0..200_000u64 {
            // Phases of growth and of draining, so the table fills and empties.
            let growing = (step / 20_000) % 2 == 0;
            let key = (rng.next() % 5_000) as u32;
            let inserting = if growing { 0..4 } else { 0..1 };
            match rng.next() % 8 {
                n if inserting.contains(&n) => {
                    let value = rng.next();
                    let (at, old) = table.insert(Entry(key, value));
                    let before = model.insert(key, (value, at));
                    assert_eq!(old.map(|e| e.1), before.map(|(v, _)| v));
                    if let Some((_, was)) = before {
                        assert_eq!(was, at, "a replaced entry keeps its slot");
                    }
                }
                n if n < 6 => {
                    let removed = table.vacate(&key).map(|at| (table.vacated(at).1, at));
                    let expected = model.remove(&key);
                    assert_eq!(
                        removed, expected,
                        "removal gives the slot the entry had, where it stays to read"
                    );
                }
                6 => assert_eq!(table.get(&key).map(|e| e.1), model.get(&key).map(|v| v.0)),
                _ => assert_eq!(table.slot_of(&key), model.get(&key).map(|v| v.1)),
            }
            if step % 997 == 0 {
                let room = table.slots.capacity();
                table.close_holes(|entry, from, to| {
                    let at = &mut model.get_mut(&entry.0).expect("in the table").1;
                    assert_eq!(*at, from, "a move is told where the entry was");
                    *at = to;
                    moves += 1;
                });
                assert_eq!(table.holes(), 0);
                assert_eq!(table.slots.len(), table.len(), "no slot is free");
                let room_after = table.slots.capacity();
                if room_after < room {
                    shrinks += 1;
                }
                assert!(room_after <= TRIM_ABOVE || table.len() * 4 > room_after);
            }
            assert_eq!(table.len(), model.len());
        }
        for (key, (value, at)) in &model {
            assert_eq!(*table.at(*at), Entry(*key, *value));
        }
        let mut listed: Vec<u32> = table.iter().map(|e| e.0).collect();
        listed.sort_unstable();
        let mut keys: Vec<u32> = model.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(listed, keys);
        assert!(moves > 0 && shrinks > 0, "{moves} moves, {shrinks} shrinks");
    }

    /// A move takes the slot it just left: the entry's cache line is the one just read.
    #[test]
    fn an_insert_after_a_removal_takes_the_freed_slot() {
        let mut table: SlotTable<Entry> = SlotTable::default();
        for key in 0..10 {
            table.insert(Entry(key, 0));
        }
        let freed = table.vacate(&3).unwrap();
        assert_eq!(table.vacated(freed), &Entry(3, 0));
        assert_eq!(table.len(), 9);
        assert!(
            table.iter().all(|e| e.0 != 3),
            "a vacated entry is not listed"
        );
        assert_eq!(table.insert(Entry(3, 1)).0, freed);
        assert_eq!(table.at(freed), &Entry(3, 1));
        assert_eq!(table.len(), 10);
    }

    /// The trim runs every few moves: closing the holes keeps the list of free slots' room,
    /// so that the next removal does not allocate it again.
    #[test]
    fn closing_the_holes_keeps_the_free_list_room() {
        let mut table: SlotTable<Entry> = SlotTable::default();
        for key in 0..10 {
            table.insert(Entry(key, 0));
        }
        table.vacate(&3);
        let room = table.free.capacity();
        table.close_holes(|_, _, _| {});
        assert_eq!(table.holes(), 0);
        assert_eq!(table.free.capacity(), room, "the list's room is kept");
        table.vacate(&4);
        assert_eq!(table.free.capacity(), room, "and used by the next removal");
    }
}
