//! A hash table for the core's largest tables (one entry per volume; the placed workloads are in
//! a [`SlotTable`](crate::core::tables::slot_table::SlotTable), whose entries keep their place) and for its
//! large records (one per node): the entries live in one dense array, each carrying its own
//! key, and the hash table ([`PositionIndex`]) holds only a 4-byte position, in chunks whose
//! tags and positions share a cache line.
//!
//! For the node records (the actual state's, over 100 bytes, and the status book's) what it
//! saves is the spare slots: a `FxHashMap` holds each record in its slot, at 33,334 nodes in
//! 65,536 slots, so about half its bytes were empty room (5.4 bytes an attachment at a million
//! attachments, `u32` ids).
//!
//! Why not `FxHashMap`: a hash table keeps its load between 7/16 and 7/8, so at a million
//! entries (just past a power of two) it holds 2.1 slots per entry, each as large as a key and
//! its value. Here the table's slots are 4 bytes, and the array grows by a quarter at a time,
//! so it carries at most a quarter of spare room. With `u32` ids that took the settled
//! million-attachment state from about 255 to about 155 bytes per attachment. Not `indexmap`:
//! it keeps an 8-byte hash beside every entry and 8-byte positions, most of the saving.
//!
//! The key lives inside the entry ([`Keyed`]), not beside it: a key of 4 bytes fits in the
//! padding an entry has anyway, and a lookup reads the key and the value on one cache line
//! (with the keys in an array of their own, a lookup at a million entries missed the cache
//! once more).
//!
//! Removing swaps the last entry into the hole (one more probe, to repoint its slot), so a
//! position holds only until an entry is removed, and iteration follows positions, not any
//! order of the keys.

use std::any::TypeId;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU32, Ordering};

use rustc_hash::FxBuildHasher;

use crate::core::tables::position_index::PositionIndex;

/// Keys a batch looks up together ([`DenseTable::warm`]) before its work reads them: enough
/// for several keys' cache misses to overlap, few enough that what they bring in is still in
/// the first-level cache when the batch's work reads it.
#[cfg(not(fuzzing))]
pub(crate) const WARM_BATCH: usize = 16;
/// The fuzzers' worlds hold a few volumes: batches of two give them partial batches too.
#[cfg(fuzzing)]
pub(crate) const WARM_BATCH: usize = 2;

/// Arrays at most this long are not trimmed: a small table's spare room costs nothing.
pub(crate) const TRIM_ABOVE: usize = 1_024;

/// An entry of a [`DenseTable`]: it carries its own key.
pub(crate) trait Keyed {
    /// What the table finds the entry by.
    type Key: Hash + Eq;
    /// The entry's key. It must not change while the entry is in a table: the table found it
    /// by the key it had when inserted.
    fn key(&self) -> &Self::Key;
}

/// Entries found by their key, in one dense array, indexed by a hash table of positions.
pub(crate) struct DenseTable<T> {
    /// Position of each entry in `entries`, hashed by its key.
    index: PositionIndex,
    entries: Vec<T>,
    /// Where the last lookup found its entry. A look at a volume asks the same table for the
    /// same key several times over (its attachments, then the one on each node, then each
    /// change to them), and so does an operation's end: the entry there is checked first,
    /// by its key, before the key is hashed and the index searched. The check is what makes
    /// it right: a removal may have moved another entry there, or none be left. (An atomic,
    /// read and written relaxed, only so that a table behind a shared reference stays
    /// `Sync`: on x86 a plain load and store.)
    last: AtomicU32,
}

impl<T> Default for DenseTable<T> {
    fn default() -> Self {
        DenseTable {
            index: PositionIndex::default(),
            entries: Vec::new(),
            last: AtomicU32::new(0),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for DenseTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(&self.entries).finish()
    }
}

impl<T> DenseTable<T> {
    /// Every entry, in the order of their positions ([`get_with_position`]), which no hash
    /// decides: the order they went in, but for removals.
    ///
    /// [`get_with_position`]: DenseTable::get_with_position
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.entries.iter()
    }

    /// Every entry, to change (all but its key, which the table found it by), in the order of
    /// [`iter`](Self::iter).
    #[cfg(feature = "internals")]
    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.entries.iter_mut()
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at position `at` ([`position`](DenseTable::position)), if there is one.
    #[inline]
    pub(crate) fn at(&self, at: usize) -> Option<&T> {
        self.entries.get(at)
    }

    /// The entry at position `at`, to change (all but its key), if there is one.
    #[inline]
    pub(crate) fn at_mut(&mut self, at: usize) -> Option<&mut T> {
        self.entries.get_mut(at)
    }
}

#[inline]
pub(crate) fn hash_of<K: Hash>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The position `at` as a table slot. A table of 2^32 entries would hold at least 128 GiB; the
/// core's tables never come near.
pub(crate) fn slot(at: usize) -> u32 {
    u32::try_from(at).expect("a dense table holds fewer than 2^32 entries")
}

/// Makes room for one more item, by a quarter of the length at a time (a `Vec` doubles, which
/// leaves up to half of a large array unused).
pub(crate) fn grow<T>(items: &mut Vec<T>) {
    if items.len() == items.capacity() {
        items.reserve_exact((items.len() / 4).max(4));
    }
}

impl<T: Keyed> DenseTable<T> {
    /// Where the entry of `key`, whose hash is `hash`, is, if present.
    #[inline]
    fn find(&self, hash: u64, key: &T::Key) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |at| entries[at as usize].key() == key)
            .map(|at| at as usize)
    }

    /// Where the entry of `key` is, if present: the position holds until an entry is removed
    /// ([`remove_moving`](Self::remove_moving) says which entry then moved where).
    #[inline]
    pub(crate) fn position(&self, key: &T::Key) -> Option<usize> {
        if let Some(at) = self.found_last(key) {
            return Some(at);
        }
        let at = self.find(hash_of(key), key)?;
        self.remember(at);
        Some(at)
    }

    /// The position the last lookup found, if the entry there is `key`'s.
    #[inline]
    fn found_last(&self, key: &T::Key) -> Option<usize> {
        let at = self.last.load(Ordering::Relaxed) as usize;
        self.entries
            .get(at)
            .is_some_and(|entry| entry.key() == key)
            .then_some(at)
    }

    #[inline]
    fn remember(&self, at: usize) {
        // Positions come from the index, which holds them as `u32`.
        self.last.store(at as u32, Ordering::Relaxed);
    }

    /// Brings the slots and entries of `keys` (and, for `String` keys, the text a compare
    /// reads) into the cache before a batch of work looks them up.
    ///
    /// Why: at a million entries every lookup misses the cache several times, one after the
    /// other: the index's chunk, the entry, and for text keys the key's own text (to hash it)
    /// and the entry's (to compare). Work between lookups (a volume's whole
    /// reconcile) is too long for the processor to start the next volume's misses meanwhile;
    /// a loop of lookups alone is short enough that several volumes' misses are in flight at
    /// once. With `String` keys it is not: each lookup calls `memcmp` on text it first has to
    /// reach, and the processor runs only a few keys ahead. Those are warmed in stages
    /// instead ([`warm_in_stages`](Self::warm_in_stages)). Staged, `u32` and `Name` keys
    /// (compared in a register) gained nothing, and `Name` recovery at 1M read about a tenth
    /// slower.
    pub(crate) fn warm<'a>(&self, keys: impl IntoIterator<Item = &'a T::Key>)
    where
        T::Key: 'a + 'static,
    {
        if TypeId::of::<T::Key>() == TypeId::of::<String>() {
            self.warm_in_stages(keys);
        } else {
            for key in keys {
                std::hint::black_box(self.position(key));
            }
        }
    }

    /// [`warm`](Self::warm) in stages, each a short loop over up to [`WARM_BATCH`] keys: hash
    /// each key and find the first slot whose tag matches, then hash that entry's key (reading
    /// the entry and its text, as a compare will). Each stage's misses are independent of each
    /// other and in flight together.
    fn warm_in_stages<'a>(&self, keys: impl IntoIterator<Item = &'a T::Key>)
    where
        T::Key: 'a,
    {
        let mut keys = keys.into_iter();
        let mut found = [u32::MAX; WARM_BATCH];
        loop {
            let mut n = 0;
            for (slot, key) in found.iter_mut().zip(keys.by_ref()) {
                // The slot of the first matching tag: the entry's, but for a one-in-128 tag
                // collision, which only makes the warming miss that key.
                *slot = self.index.first_match(hash_of(key)).unwrap_or(u32::MAX);
                n += 1;
            }
            for &at in &found[..n] {
                if let Some(entry) = self.entries.get(at as usize) {
                    std::hint::black_box(hash_of(entry.key()));
                }
            }
            if n < WARM_BATCH {
                return;
            }
        }
    }

    /// The entry of `key`, with its position: the order of [`iter`](Self::iter), which holds
    /// until an entry is removed (the last one then takes the removed one's place).
    #[inline]
    pub(crate) fn get_with_position(&self, key: &T::Key) -> Option<(usize, &T)> {
        self.position(key).map(|at| (at, &self.entries[at]))
    }

    /// The entry of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &T::Key) -> Option<&T> {
        self.position(key).map(|at| &self.entries[at])
    }

    /// The entry of `key`, to change (all but its key).
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &T::Key) -> Option<&mut T> {
        self.position(key).map(|at| &mut self.entries[at])
    }

    /// Whether `key` has an entry.
    #[inline]
    pub(crate) fn contains_key(&self, key: &T::Key) -> bool {
        self.position(key).is_some()
    }

    /// Appends an entry whose key is known to be absent; returns its position.
    fn push(&mut self, hash: u64, entry: T) -> usize {
        let at = self.entries.len();
        let entries = &self.entries;
        self.index
            .insert(hash, slot(at), |i| hash_of(entries[i as usize].key()));
        grow(&mut self.entries);
        self.entries.push(entry);
        at
    }

    /// Puts `entry` in, in place of the entry of the same key if there is one (returned).
    pub(crate) fn insert(&mut self, entry: T) -> Option<T> {
        let hash = hash_of(entry.key());
        match self.find(hash, entry.key()) {
            Some(at) => Some(std::mem::replace(&mut self.entries[at], entry)),
            None => {
                self.push(hash, entry);
                None
            }
        }
    }

    /// Makes room for `additional` more entries at once, exactly: a table filled from a
    /// listing of known length (restart recovery) is not grown and rehashed on the way.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let entries = &self.entries;
        self.index
            .reserve(additional, |i| hash_of(entries[i as usize].key()));
        self.entries.reserve_exact(additional);
    }

    /// The entry of `key`, made by `make` (from a borrowed key) first if there is none: a
    /// caller holding only a reference clones the key only to make an entry, not on every look
    /// (with text ids a clone is an allocation).
    pub(crate) fn get_or_make(&mut self, key: &T::Key, make: impl FnOnce(&T::Key) -> T) -> &mut T {
        let at = match self.found_last(key) {
            Some(at) => at,
            None => {
                let hash = hash_of(key);
                let at = match self.find(hash, key) {
                    Some(at) => at,
                    None => self.push(hash, make(key)),
                };
                self.remember(at);
                at
            }
        };
        &mut self.entries[at]
    }

    /// Takes the entry of `key` out. The last entry moves into its place.
    pub(crate) fn remove(&mut self, key: &T::Key) -> Option<T> {
        self.remove_moving(key).map(|(entry, _)| entry)
    }

    /// [`remove`](Self::remove), returning with the entry the position it left: unless that
    /// is now past the end, the entry found there is the one that was last, moved in.
    pub(crate) fn remove_moving(&mut self, key: &T::Key) -> Option<(T, usize)> {
        let entries = &self.entries;
        let at =
            self.index
                .remove(hash_of(key), |at| entries[at as usize].key() == key)? as usize;
        let last = self.entries.len() - 1;
        if at != last {
            // The last entry moves to `at`: its slot must say so.
            let moved = self
                .index
                .find_mut(hash_of(self.entries[last].key()), |i| i as usize == last)
                .expect("every entry has a slot");
            *moved = slot(at);
        }
        let entry = self.entries.swap_remove(at);
        self.trim();
        Some((entry, at))
    }

    /// Gives back room left by removals once at most a quarter of it is used: after a mass
    /// removal, the table shrinks to twice what is left.
    fn trim(&mut self) {
        let len = self.entries.len();
        if self.entries.capacity() > TRIM_ABOVE && len * 4 <= self.entries.capacity() {
            self.entries.shrink_to(len * 2);
            let entries = &self.entries;
            self.index
                .shrink_to(len * 2, |i| hash_of(entries[i as usize].key()));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::core::tables::counted::Lcg;

    /// A key and a value, as the core's entries are.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub(crate) struct Entry(pub(crate) u32, pub(crate) u64);

    impl Keyed for Entry {
        type Key = u32;
        fn key(&self) -> &u32 {
            &self.0
        }
    }

    /// An entry keyed by text, which takes the staged warming.
    #[derive(Debug)]
    struct Named(String);

    impl Keyed for Named {
        type Key = String;
        fn key(&self) -> &String {
            &self.0
        }
    }

    /// The staged warming (`String` keys) is given full and partial batches, absent keys and
    /// no keys at all; it must not fail on any, and the table answers as before.
    #[test]
    fn warming_text_keys_in_stages_takes_absent_keys_and_partial_batches() {
        let mut table = DenseTable::default();
        for i in 0..40 {
            table.insert(Named(format!("pvc-{i}")));
        }
        for count in [0, 1, WARM_BATCH - 1, WARM_BATCH, 2 * WARM_BATCH + 3] {
            let keys: Vec<String> = (0..count).map(|i| format!("pvc-{}", 30 + i)).collect();
            table.warm(&keys);
        }
        table.warm(&[String::new()]);
        for i in 0..40 {
            assert!(table.contains_key(&format!("pvc-{i}")));
        }
        assert!(!table.contains_key(&"pvc-40".to_string()));
    }

    /// Every operation, checked against `std`'s map after each step, keys drawn from a small
    /// range so that inserts, replacements and removals of present and absent keys all happen,
    /// through growth, emptying and shrinking.
    #[test]
    fn behaves_like_a_hash_map_through_a_random_walk() {
        let mut rng = Lcg(7);
        let mut dense: DenseTable<Entry> = DenseTable::default();
        let mut model: HashMap<u32, u64> = HashMap::new();
        for step in 0..200_000u64 {
            // Phases of growth and of shrinkage, so the array fills and empties.
            let range = if (step / 20_000) % 2 == 0 { 5_000 } else { 50 };
            let key = (rng.next() % range) as u32;
            match rng.next() % 6 {
                0 | 1 => assert_eq!(
                    dense.insert(Entry(key, step)).map(|e| e.1),
                    model.insert(key, step)
                ),
                2 => {
                    dense.get_or_make(&key, |k| Entry(*k, step)).1 += 1;
                    *model.entry(key).or_insert(step) += 1;
                }
                3 | 4 => assert_eq!(dense.remove(&key).map(|e| e.1), model.remove(&key)),
                _ => {
                    if let Some(entry) = dense.get_mut(&key) {
                        entry.1 ^= 1;
                    }
                    if let Some(value) = model.get_mut(&key) {
                        *value ^= 1;
                    }
                }
            }
            assert_eq!(dense.len(), model.len());
            assert_eq!(dense.get(&key).map(|e| e.1), model.get(&key).copied());
            assert_eq!(dense.contains_key(&key), model.contains_key(&key));
            if step % 997 == 0 {
                let mut seen: Vec<_> = dense.iter().map(|e| (e.0, e.1)).collect();
                let mut want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                seen.sort_unstable();
                want.sort_unstable();
                assert_eq!(seen, want, "step {step}");
            }
        }
    }

    /// The remembered position answers only for the key whose entry is there: after a
    /// removal moved another entry into it, or left it past the end, a lookup of the removed
    /// key finds nothing and the moved one is found where it went.
    #[test]
    fn the_last_position_found_answers_only_for_its_own_key() {
        let mut dense = DenseTable::default();
        for k in 0..4u32 {
            dense.insert(Entry(k, u64::from(k)));
        }
        assert_eq!(
            dense.get(&1),
            Some(&Entry(1, 1)),
            "1 found: its place remembered"
        );
        // 3, the last, moves into 1's place.
        assert_eq!(dense.remove(&1), Some(Entry(1, 1)));
        assert_eq!(dense.get(&1), None, "the place now holds another key");
        assert_eq!(dense.position(&3), Some(1));
        assert_eq!(dense.get(&3), Some(&Entry(3, 3)));
        // The last place, remembered, then removed: past the end.
        assert_eq!(dense.position(&2), Some(2));
        assert_eq!(dense.remove(&2), Some(Entry(2, 2)));
        assert_eq!(dense.get(&2), None);
        assert!(!dense.contains_key(&2));
        // Made again, at the end, and found there.
        dense.get_or_make(&2, |k| Entry(*k, 20)).1 += 1;
        assert_eq!(dense.get(&2), Some(&Entry(2, 21)));
        assert_eq!(dense.get(&0), Some(&Entry(0, 0)));
        assert_eq!(dense.len(), 3);
    }

    #[test]
    fn removing_repoints_the_entry_that_moved() {
        let mut dense = DenseTable::default();
        for k in 0..10u32 {
            dense.insert(Entry(k, u64::from(k) * 10));
        }
        // 9 moves into 3's place; it must still be found, and so must the rest.
        assert_eq!(dense.remove(&3), Some(Entry(3, 30)));
        assert_eq!(dense.get(&9), Some(&Entry(9, 90)));
        assert_eq!(dense.remove(&9), Some(Entry(9, 90)));
        assert_eq!(dense.remove(&9), None);
        for k in [0, 1, 2, 4, 5, 6, 7, 8] {
            assert_eq!(dense.get(&k), Some(&Entry(k, u64::from(k) * 10)));
        }
        assert_eq!(dense.len(), 8);
    }

    #[test]
    fn grows_by_a_quarter_and_shrinks_after_a_mass_removal() {
        let mut dense = DenseTable::default();
        for k in 0..100_000u32 {
            dense.insert(Entry(k, u64::from(k)));
        }
        let spare = dense.entries.capacity() - dense.len();
        assert!(
            spare * 4 <= dense.len() + 4,
            "{spare} spare of {}",
            dense.len()
        );
        for k in 0..99_000u32 {
            dense.remove(&k);
        }
        // Shrunk as it emptied: never more than four times the room the entries need.
        assert!(
            dense.entries.capacity() <= 4_000,
            "{}",
            dense.entries.capacity()
        );
        for k in 99_000..100_000u32 {
            assert!(dense.contains_key(&k));
        }
    }
}
