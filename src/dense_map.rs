//! A hash map for the core's largest tables (one entry per volume or workload): the keys and
//! the values live in two dense arrays, and the hash table holds only a 4-byte position.
//!
//! Why not `FxHashMap`: a hash table keeps its load between 7/16 and 7/8, so at a million
//! entries (just past a power of two) it holds 2.1 slots per entry, each as large as a key and
//! its value. Here the table's slots are 4 bytes, and the arrays grow by a quarter at a time,
//! so they carry at most a quarter of spare room. With `u32` ids that took the settled
//! million-attachment state from about 255 to about 165 bytes per attachment. Not `indexmap`:
//! it keeps an 8-byte hash beside every entry and 8-byte positions, most of the saving.
//!
//! Removing swaps the last entry into the hole (one more probe, to repoint its slot), so
//! positions are not stable and iteration is in no particular order.

use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Arrays at most this long are not trimmed: a small table's spare room costs nothing.
const TRIM_ABOVE: usize = 1_024;

/// A map from `K` to `V` in two dense arrays, indexed by a hash table of positions.
pub(crate) struct DenseMap<K, V> {
    /// Position of each entry in `keys` and `values`, hashed by its key.
    index: HashTable<u32>,
    keys: Vec<K>,
    values: Vec<V>,
}

impl<K, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        DenseMap {
            index: HashTable::new(),
            keys: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for DenseMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K, V> DenseMap<K, V> {
    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.keys.iter().zip(&self.values)
    }

    /// Every key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.keys.iter()
    }
}

#[inline]
fn hash_of<K: Hash>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The position `at` as a table slot. A table of 2^32 entries would hold at least 128 GiB of
/// keys and values; the core's tables never come near.
fn slot(at: usize) -> u32 {
    u32::try_from(at).expect("a dense map holds fewer than 2^32 entries")
}

/// Makes room for one more item, by a quarter of the length at a time (a `Vec` doubles, which
/// leaves up to half of a large array unused).
fn grow<T>(items: &mut Vec<T>) {
    if items.len() == items.capacity() {
        items.reserve_exact((items.len() / 4).max(4));
    }
}

impl<K: Hash + Eq, V> DenseMap<K, V> {
    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Where `key` is, if present.
    #[inline]
    fn position(&self, key: &K) -> Option<usize> {
        let keys = &self.keys;
        self.index
            .find(hash_of(key), |&at| keys[at as usize] == *key)
            .map(|&at| at as usize)
    }

    /// The value of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.position(key).map(|at| &self.values[at])
    }

    /// The value of `key`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.position(key).map(|at| &mut self.values[at])
    }

    /// Whether `key` has an entry.
    #[inline]
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.position(key).is_some()
    }

    /// Appends an entry for a key known to be absent; returns its position.
    fn push(&mut self, hash: u64, key: K, value: V) -> usize {
        let at = self.keys.len();
        let keys = &self.keys;
        self.index
            .insert_unique(hash, slot(at), |&i| hash_of(&keys[i as usize]));
        grow(&mut self.keys);
        grow(&mut self.values);
        self.keys.push(key);
        self.values.push(value);
        at
    }

    /// Sets `key`'s value; returns the value it replaced.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Some(at) => Some(std::mem::replace(&mut self.values[at], value)),
            None => {
                self.push(hash_of(&key), key, value);
                None
            }
        }
    }

    /// `key`'s value, made by `make` first if it has none.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let hash = hash_of(&key);
        let keys = &self.keys;
        let at = match self.index.find(hash, |&at| keys[at as usize] == key) {
            Some(&at) => at as usize,
            None => self.push(hash, key, make()),
        };
        &mut self.values[at]
    }

    /// Removes `key`'s entry and returns its value. The last entry moves into its place.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let keys = &self.keys;
        let found = self
            .index
            .find_entry(hash_of(key), |&at| keys[at as usize] == *key)
            .ok()?;
        let (at, _) = found.remove();
        let at = at as usize;
        let last = self.keys.len() - 1;
        if at != last {
            // The last entry moves to `at`: its slot must say so.
            let moved = self
                .index
                .find_mut(hash_of(&self.keys[last]), |&i| i as usize == last)
                .expect("every entry has a slot");
            *moved = slot(at);
        }
        self.keys.swap_remove(at);
        let value = self.values.swap_remove(at);
        self.trim();
        Some(value)
    }

    /// Gives back room left by removals once at most a quarter of it is used: after a mass
    /// removal, the tables shrink to twice what is left.
    fn trim(&mut self) {
        let len = self.keys.len();
        if self.keys.capacity() > TRIM_ABOVE && len * 4 <= self.keys.capacity() {
            self.keys.shrink_to(len * 2);
            self.values.shrink_to(len * 2);
            let keys = &self.keys;
            self.index
                .shrink_to(len * 2, |&i| hash_of(&keys[i as usize]));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A small deterministic generator, so a failure replays.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
    }

    /// Every operation, checked against `std`'s map after each step, keys drawn from a small
    /// range so that inserts, replacements and removals of present and absent keys all happen,
    /// through growth, emptying and trimming.
    #[test]
    fn behaves_like_a_hash_map_through_a_random_walk() {
        let mut rng = Lcg(7);
        let mut dense: DenseMap<u32, u64> = DenseMap::default();
        let mut model: HashMap<u32, u64> = HashMap::new();
        for step in 0..200_000u64 {
            // Phases of growth and of shrinkage, so the arrays fill and empty.
            let range = if (step / 20_000) % 2 == 0 { 5_000 } else { 50 };
            let key = (rng.next() % range) as u32;
            match rng.next() % 6 {
                0 | 1 => assert_eq!(dense.insert(key, step), model.insert(key, step)),
                2 => {
                    let value = dense.get_or_insert_with(key, || step);
                    *value += 1;
                    *model.entry(key).or_insert(step) += 1;
                }
                3 | 4 => assert_eq!(dense.remove(&key), model.remove(&key)),
                _ => {
                    if let Some(value) = dense.get_mut(&key) {
                        *value ^= 1;
                    }
                    if let Some(value) = model.get_mut(&key) {
                        *value ^= 1;
                    }
                }
            }
            assert_eq!(dense.len(), model.len());
            assert_eq!(dense.get(&key), model.get(&key));
            assert_eq!(dense.contains_key(&key), model.contains_key(&key));
            if step % 997 == 0 {
                let mut seen: Vec<_> = dense.iter().map(|(k, v)| (*k, *v)).collect();
                let mut want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                seen.sort_unstable();
                want.sort_unstable();
                assert_eq!(seen, want, "step {step}");
                assert_eq!(dense.keys().count(), model.len());
            }
        }
    }

    #[test]
    fn removing_repoints_the_entry_that_moved() {
        let mut dense = DenseMap::default();
        for k in 0..10u32 {
            dense.insert(k, k * 10);
        }
        // 9 moves into 3's place; it must still be found, and so must the rest.
        assert_eq!(dense.remove(&3), Some(30));
        assert_eq!(dense.get(&9), Some(&90));
        assert_eq!(dense.remove(&9), Some(90));
        assert_eq!(dense.remove(&9), None);
        for k in [0, 1, 2, 4, 5, 6, 7, 8] {
            assert_eq!(dense.get(&k), Some(&(k * 10)));
        }
        assert_eq!(dense.len(), 8);
    }

    #[test]
    fn arrays_grow_by_a_quarter_and_shrink_after_a_mass_removal() {
        let mut dense = DenseMap::default();
        for k in 0..100_000u32 {
            dense.insert(k, u64::from(k));
        }
        let spare = dense.keys.capacity() - dense.len();
        assert!(
            spare * 4 <= dense.len() + 4,
            "{spare} spare of {}",
            dense.len()
        );
        for k in 0..99_000u32 {
            dense.remove(&k);
        }
        // Shrunk as it emptied: never more than four times the room the entries need.
        assert!(dense.keys.capacity() <= 4_000, "{}", dense.keys.capacity());
        assert!(dense.values.capacity() <= 4_000);
        for k in 99_000..100_000u32 {
            assert!(dense.contains_key(&k));
        }
    }
}
