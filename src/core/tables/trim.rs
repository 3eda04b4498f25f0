//! Giving back the memory of a burst: a table that grew for 150,000 attachments at start-up
//! shrinks once it is mostly empty again, at a cost amortised over the inserts that grew it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// A table is trimmed once it is at most a quarter full, to twice its length: a burst (say
/// 150,000 attaches at start-up) must not keep its peak allocation forever, and halving the
/// threshold keeps the cost of trimming amortised over the inserts that grew the table.
const TRIM_ABOVE: usize = 64;

/// The capacity to shrink a table of `len` entries and `capacity` slots to, if it should be.
pub(crate) fn trimmed(len: usize, capacity: usize) -> Option<usize> {
    (capacity > TRIM_ABOVE && len * 4 <= capacity).then_some(len * 2)
}

/// Whether a table of `len` entries and `capacity` slots is one a trim would shrink.
pub(crate) fn would_trim(len: usize, capacity: usize) -> bool {
    trimmed(len, capacity).is_some()
}

pub(crate) fn trim_map<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if let Some(to) = trimmed(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

/// [`trim_map`] for `hashbrown`'s own map.
pub(crate) fn trim_hash_map<K: Eq + Hash, V, S: BuildHasher>(
    map: &mut hashbrown::HashMap<K, V, S>,
) {
    if let Some(to) = trimmed(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

pub(crate) fn trim_set<K: Eq + Hash, S: BuildHasher>(set: &mut HashSet<K, S>) {
    if let Some(to) = trimmed(set.len(), set.capacity()) {
        set.shrink_to(to);
    }
}
