//! Tables keyed by operation ids (`OpId`, or any key that hashes as one `u64` numbered in the
//! order the core plans), hashed so that neighbouring ids sit in neighbouring buckets.
//!
//! The core numbers its operations in the order it plans them, and a pass's operations run
//! together and mostly end in that order. With Fx (a multiply) each end looked its operation
//! up at a random place in a table of every running call: at 150,000 attachments a pass plans
//! tens of thousands, the table outgrows the cache, and taking out the running operation was
//! the largest single entry of the controller's loop. Here an id's low bits are its bucket,
//! so the ends of one pass walk the table in order; its top seven bits, which hashbrown keeps
//! beside each bucket to tell keys apart without reading them, are mixed, so that ids a
//! table's width apart still differ there.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from operation ids (`K` hashes as one `u64`), laid out in id order (see the module's
/// doc).
pub(crate) type OpIdMap<K, V> = HashMap<K, V, BuildHasherDefault<OpIdHasher>>;

/// The hasher of [`OpIdMap`]: the id itself, its top seven bits replaced by a mix of the rest.
#[derive(Default)]
pub(crate) struct OpIdHasher(u64);

/// The bits hashbrown takes its per-bucket tag from (the top seven of a 64-bit hash).
const TAG_BITS: u64 = 0x7f << 57;

impl Hasher for OpIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, id: u64) {
        // A table would need 2^57 buckets before the tag bits chose a bucket, so below that
        // the bucket is the id's low bits: ids in a row fill buckets in a row.
        let mixed = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = (id & !TAG_BITS) | (mixed & TAG_BITS);
    }

    fn write(&mut self, bytes: &[u8]) {
        // An operation id hashes as one `u64`; anything else still gets a usable hash.
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }
}

/// An empty [`OpIdMap`].
pub(crate) fn new<K, V>() -> OpIdMap<K, V> {
    HashMap::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(id: u64) -> u64 {
        BuildHasherDefault::<OpIdHasher>::default().hash_one(id)
    }

    #[test]
    fn ids_in_a_row_have_buckets_in_a_row_and_mixed_tags() {
        let mask = (1u64 << 20) - 1;
        for id in 1_000..1_100u64 {
            assert_eq!(hash(id + 1) & mask, (hash(id) & mask) + 1, "id {id}");
        }
        // Ids a power of two apart share their low bits; their tags tell them apart.
        let tags: std::collections::HashSet<u64> =
            (0..64u64).map(|k| hash(k << 20) >> 57).collect();
        assert!(tags.len() > 32, "only {} distinct tags", tags.len());
    }

    #[test]
    fn a_map_keeps_every_id_through_growth_and_removal() {
        let mut map: OpIdMap<u64, u64> = new();
        let mut model = std::collections::BTreeMap::new();
        // Sequential ids, with stragglers far behind and ids a table's width apart.
        for id in 0..50_000u64 {
            map.insert(id, id);
            model.insert(id, id);
            if id % 3 != 0 && id >= 10 {
                assert_eq!(map.remove(&(id - 10)), model.remove(&(id - 10)));
            }
        }
        for k in 0..40u64 {
            let id = (k << 16) | 7;
            map.insert(id, k);
            model.insert(id, k);
        }
        assert_eq!(map.len(), model.len());
        for (id, v) in &model {
            assert_eq!(map.get(id), Some(v));
        }
        assert_eq!(map.get(&u64::MAX), None);
    }
}
