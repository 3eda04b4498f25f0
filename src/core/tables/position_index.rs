//! [`PositionIndex`]: the hash index of the core's large tables, whose tags and values share a
//! cache line.
//!
//! The dense tables ([`DenseTable`](crate::core::tables::dense_table::DenseTable),
//! [`SlotTable`](crate::core::tables::slot_table::SlotTable)) keep their entries in an array and hash only a
//! 4-byte position per entry. In `hashbrown`'s layout a slot's tag and its value sit in two
//! arrays, megabytes apart in a large table, so a cold lookup waits for three misses one after
//! the other: the tag group, the slot (whose address is known only once a tag matched), then
//! the entry. At a million attachments a move makes several such lookups (the workload, its
//! volume in two tables, two nodes in three tables), and a move at a million cost 2.3 times one
//! at a thousand.
//!
//! Here the slots come in chunks of twelve, each one cache line: twelve tags, twelve values
//! and the chunk's overflow count, the layout of folly's F14 tables. A lookup reads its chunk
//! (tags and values in one miss), then the entry. A chunk's overflow count says how many values
//! whose probe started at or before it were put past it, so a lookup stops at the first chunk
//! with none, and a removal needs no tombstone: it counts down the chunks its value's probe had
//! passed. Tables that churn (a move removes and puts back a workload) never fill with
//! tombstones and never need a rehash to clear them.
//!
//! Memory: a chunk of 64 bytes holds up to 10 values (a load of five sixths), and the chunk count
//! is a power of two: 8.4 bytes a value at a million (`hashbrown`: 2^21 slots of 5 bytes, 10.5).

use std::fmt;

/// Slots in a chunk.
const SLOTS: usize = 12;
const _: () = assert!(SLOTS % 6 == 0, "a load of five sixths is whole slots");

/// Values a table of `chunks` chunks holds at most: five sixths of its slots. Past that the
/// probes of absent keys grow long.
fn limit(chunks: usize) -> usize {
    chunks.saturating_mul(SLOTS / 6).saturating_mul(5)
}

/// Twelve slots and their tags in one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk {
    /// Sixteen bytes as two words. Bytes 0 to 11 are the slots' tags: a used slot's is its
    /// value's hash's top seven bits, a free slot's [`FREE`]. Byte 12 counts the values put
    /// past this chunk by a probe that found it full (saturating: once at the top it is never
    /// counted down, and lookups only probe further than they must). Bytes 13 to 15 are
    /// unused.
    ctrl: [u64; 2],
    /// The slots' values.
    values: [u32; SLOTS],
}

/// Where the second control word keeps the overflow count.
const OVERFLOW_SHIFT: u32 = 32;

/// [`Chunk::matching`] eight bytes at a time in a word, where SSE2 is not there (and in the
/// tests, against a byte-by-byte match).
#[cfg(any(test, not(target_arch = "x86_64")))]
mod by_words {
    /// The low seven bits of every byte.
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    /// One in every byte.
    const ONES: u64 = 0x0101_0101_0101_0101;
    /// The bytes of the second word that are slots' tags (slots 8 to 11).
    const HIGH_SLOTS: u64 = 0x0000_0000_FFFF_FFFF;

    /// The top bit of each byte of `x` that is zero, and no other bit: no carry crosses a
    /// byte, so no byte is flagged for its neighbour's sake.
    #[inline(always)]
    fn zero_bytes(x: u64) -> u64 {
        !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
    }

    /// One bit per byte flagged by [`zero_bytes`]: bit `i` for byte `i`.
    #[inline(always)]
    fn byte_bits(flags: u64) -> u16 {
        ((flags >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u16
    }

    /// One bit per slot of `ctrl` whose tag is `tag`.
    #[inline(always)]
    pub(super) fn matching(ctrl: [u64; 2], tag: u8) -> u16 {
        let pattern = u64::from(tag) * ONES;
        let low = zero_bytes(ctrl[0] ^ pattern);
        let high = zero_bytes((ctrl[1] ^ pattern) | !HIGH_SLOTS);
        byte_bits(low) | byte_bits(high) << 8
    }
}

impl Chunk {
    const EMPTY: Chunk = Chunk {
        ctrl: [
            u64::from_le_bytes([FREE; 8]),
            u32::from_le_bytes([FREE; 4]) as u64,
        ],
        values: [0; SLOTS],
    };

    /// The slots whose tag is `tag` ([`FREE`] for the free ones), one bit each.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn matching(&self, tag: u8) -> Hits {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set_epi64x, _mm_set1_epi8};
        // One compare and one mask move for the sixteen bytes. (Eight at a time in a word, as
        // `by_words` does, made a move about 4 % dearer still at a thousand attachments: a
        // move makes about a hundred lookups.)
        // SAFETY: SSE2 is part of the x86-64 baseline, so these instructions exist wherever
        // this code runs; the intrinsics take values, not pointers.
        let bits = unsafe {
            let ctrl = _mm_set_epi64x(self.ctrl[1] as i64, self.ctrl[0] as i64);
            _mm_movemask_epi8(_mm_cmpeq_epi8(ctrl, _mm_set1_epi8(tag as i8)))
        };
        Hits(bits as u16 & SLOT_BITS)
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn matching(&self, tag: u8) -> Hits {
        Hits(by_words::matching(self.ctrl, tag))
    }

    /// Sets slot `slot`'s tag.
    #[inline(always)]
    fn set_tag(&mut self, slot: usize, tag: u8) {
        let shift = (slot % 8) * 8;
        let word = &mut self.ctrl[slot / 8];
        *word = (*word & !(0xFF << shift)) | u64::from(tag) << shift;
    }

    /// Whether slot `slot` holds a value.
    #[inline(always)]
    fn is_used(&self, slot: usize) -> bool {
        (self.ctrl[slot / 8] >> ((slot % 8) * 8)) as u8 != FREE
    }

    /// The values put past this chunk.
    #[inline(always)]
    fn overflow(&self) -> u8 {
        (self.ctrl[1] >> OVERFLOW_SHIFT) as u8
    }

    #[inline(always)]
    fn set_overflow(&mut self, count: u8) {
        self.ctrl[1] =
            (self.ctrl[1] & !(0xFF << OVERFLOW_SHIFT)) | u64::from(count) << OVERFLOW_SHIFT;
    }
}

/// Slots a match found, bit `i` for slot `i`.
struct Hits(u16);

/// One bit for each slot of a chunk.
const SLOT_BITS: u16 = (1 << SLOTS) - 1;

impl Iterator for Hits {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let slot = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(slot)
    }
}

/// The tag of `hash`: its top seven bits. (Not its top eight: a free slot's tag must be one
/// no hash has, and with the free tag 0 and the top bit set in every other, each lookup spent
/// two instructions more on setting it.)
#[inline(always)]
fn tag_of(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// The tag of a free slot: its top bit set, which no hash's tag has.
const FREE: u8 = 0x80;

/// Where a value sits: its chunk and its slot there.
struct Place {
    chunk: usize,
    slot: usize,
}

/// A hash index of 4-byte values (positions of entries kept elsewhere), each found by its key's
/// hash and a test of the value (the caller compares the key at the position).
#[derive(Default)]
pub(crate) struct PositionIndex {
    /// A power of two of them, or none.
    chunks: Vec<Chunk>,
    len: usize,
}

impl fmt::Debug for PositionIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PositionIndex")
            .field("len", &self.len)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl PositionIndex {
    /// Number of values.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Where the value for `hash` that `is` accepts sits, and the value, if any.
    #[inline(always)]
    fn place(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<(Place, u32)> {
        let tag = tag_of(hash);
        let mask = self.chunks.len().wrapping_sub(1);
        let mut chunk = hash as usize & mask;
        // At most every chunk once: a table whose every count saturated ends too.
        let mut left = self.chunks.len();
        while left > 0 {
            let c = &self.chunks[chunk];
            for slot in c.matching(tag) {
                let value = c.values[slot];
                if is(value) {
                    return Some((Place { chunk, slot }, value));
                }
            }
            if c.overflow() == 0 {
                return None;
            }
            chunk = (chunk + 1) & mask;
            left -= 1;
        }
        None
    }

    /// The value for `hash` that `is` accepts, if any.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.place(hash, is).map(|(_, value)| value)
    }

    /// The value for `hash` that `is` accepts, to change.
    #[inline(always)]
    pub(crate) fn find_mut(&mut self, hash: u64, is: impl FnMut(u32) -> bool) -> Option<&mut u32> {
        let (p, _) = self.place(hash, is)?;
        Some(&mut self.chunks[p.chunk].values[p.slot])
    }

    /// The first value whose tag matches `hash`'s, without testing it: for reading ahead, where
    /// a one-in-128 tag collision only makes the read miss.
    #[inline(always)]
    pub(crate) fn first_match(&self, hash: u64) -> Option<u32> {
        let chunk = &self
            .chunks
            .get(hash as usize & self.chunks.len().wrapping_sub(1))?;
        let slot = chunk.matching(tag_of(hash)).next()?;
        Some(chunk.values[slot])
    }

    /// Takes out the value for `hash` that `is` accepts, and returns it.
    pub(crate) fn remove(&mut self, hash: u64, is: impl FnMut(u32) -> bool) -> Option<u32> {
        let (p, value) = self.place(hash, is)?;
        self.chunks[p.chunk].set_tag(p.slot, FREE);
        self.len -= 1;
        // The chunks before it on its probe counted it as put past them.
        let mask = self.chunks.len() - 1;
        let mut chunk = hash as usize & mask;
        while chunk != p.chunk {
            let c = &mut self.chunks[chunk];
            let count = c.overflow();
            if count != u8::MAX {
                c.set_overflow(count - 1);
            }
            chunk = (chunk + 1) & mask;
        }
        Some(value)
    }

    /// Puts in `value` for `hash`, which the caller knows is not in yet. `rehash` gives the hash
    /// of a value already in, should the index grow.
    pub(crate) fn insert(&mut self, hash: u64, value: u32, rehash: impl Fn(u32) -> u64) {
        if self.len + 1 > limit(self.chunks.len()) {
            self.resize(self.len + 1, &rehash);
        }
        self.put(hash, value);
    }

    /// Puts `value` in the first free slot of its probe, counting it past the full chunks.
    fn put(&mut self, hash: u64, value: u32) {
        let mask = self.chunks.len() - 1;
        let mut chunk = hash as usize & mask;
        loop {
            let c = &mut self.chunks[chunk];
            if let Some(slot) = c.matching(FREE).next() {
                c.set_tag(slot, tag_of(hash));
                c.values[slot] = value;
                self.len += 1;
                return;
            }
            c.set_overflow(c.overflow().saturating_add(1));
            chunk = (chunk + 1) & mask;
        }
    }

    /// Makes room for `additional` more values at once.
    pub(crate) fn reserve(&mut self, additional: usize, rehash: impl Fn(u32) -> u64) {
        let needed = self.len.saturating_add(additional);
        if needed > limit(self.chunks.len()) {
            self.resize(needed, &rehash);
        }
    }

    /// Gives back room, keeping enough for `min` values (and for those it holds).
    pub(crate) fn shrink_to(&mut self, min: usize, rehash: impl Fn(u32) -> u64) {
        let chunks = Self::chunks_for(min.max(self.len));
        if chunks < self.chunks.len() {
            self.rebuild(chunks, &rehash);
        }
    }

    /// The fewest chunks (a power of two, at least one) that hold `values`.
    fn chunks_for(values: usize) -> usize {
        let mut chunks: usize = 1;
        while limit(chunks) < values {
            // As `Vec`'s: a count of values no memory could hold.
            chunks = chunks.checked_mul(2).expect("capacity overflow");
        }
        chunks
    }

    /// Grows to hold `values` values: at least double, so that growing one at a time costs a
    /// constant per value.
    fn resize(&mut self, values: usize, rehash: &impl Fn(u32) -> u64) {
        let chunks = Self::chunks_for(values).max(self.chunks.len() * 2);
        self.rebuild(chunks, rehash);
    }

    /// Puts every value again into `chunks` new chunks.
    fn rebuild(&mut self, chunks: usize, rehash: &impl Fn(u32) -> u64) {
        let old = std::mem::replace(&mut self.chunks, vec![Chunk::EMPTY; chunks]);
        self.len = 0;
        for c in &old {
            for slot in 0..SLOTS {
                if c.is_used(slot) {
                    let value = c.values[slot];
                    self.put(rehash(value), value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::core::tables::counted::Lcg;

    #[test]
    fn a_chunk_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Chunk>(), 64);
        assert_eq!(std::mem::align_of::<Chunk>(), 64);
    }

    /// The word-at-a-time match against a byte-by-byte one, for tags, free slots and the
    /// bytes that are no slots (the count, whatever it holds, never matches).
    #[test]
    fn a_match_finds_exactly_the_slots_with_the_tag() {
        let mut rng = Lcg(7);
        for _ in 0..20_000 {
            let mut chunk = Chunk::EMPTY;
            chunk.ctrl = [rng.next() << 31 ^ rng.next(), rng.next() << 31 ^ rng.next()];
            // Tags from a few values, so that several slots share one.
            for slot in 0..SLOTS {
                let tag = [0, 0x7F, 0x33, FREE][(rng.next() % 4) as usize];
                chunk.set_tag(slot, tag);
            }
            for tag in [0u8, 0x7F, 0x33, FREE, chunk.overflow()] {
                let naive: Vec<usize> = (0..SLOTS)
                    .filter(|&slot| (chunk.ctrl[slot / 8] >> (slot % 8 * 8)) as u8 == tag)
                    .collect();
                let hits: Vec<usize> = chunk.matching(tag).collect();
                assert_eq!(hits, naive, "tag {tag:#x} in {:x?}", chunk.ctrl);
                let by_words: Vec<usize> = Hits(by_words::matching(chunk.ctrl, tag)).collect();
                assert_eq!(
                    by_words, naive,
                    "by words: tag {tag:#x} in {:x?}",
                    chunk.ctrl
                );
            }
        }
    }

    /// Keys whose hashes are drawn from a few values, so that chunks fill, probes run past them
    /// and overflow counts saturate: every step is checked against `std`'s map, and every key
    /// ever put in is looked up after each removal.
    fn walk(distinct_hashes: u64, steps: usize, seed: u64) {
        let hash =
            |key: u32| (u64::from(key) % distinct_hashes).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut index = PositionIndex::default();
        let mut model: HashSet<u32> = HashSet::new();
        let mut rng = Lcg(seed);
        for step in 0..steps {
            let key = (rng.next() % 600) as u32;
            if rng.next() % 3 == 0 {
                let removed = index.remove(hash(key), |v| v == key);
                assert_eq!(removed.is_some(), model.remove(&key), "step {step}");
            } else if model.insert(key) {
                index.insert(hash(key), key, hash);
            }
            if rng.next() % 97 == 0 {
                index.shrink_to(0, hash);
            }
            assert_eq!(index.len(), model.len());
            if step % 7 == 0 {
                for key in 0..600 {
                    assert_eq!(
                        index.find(hash(key), |v| v == key),
                        model.contains(&key).then_some(key),
                        "key {key} at step {step}"
                    );
                }
            }
        }
    }

    #[test]
    fn values_are_found_removed_and_put_back_like_a_map() {
        walk(u64::MAX, 20_000, 1);
    }

    #[test]
    fn colliding_hashes_probe_past_full_chunks_and_come_back() {
        // Forty hashes for up to 600 keys: long probes over full chunks.
        walk(40, 20_000, 2);
        // One hash for all: every chunk's overflow count saturates.
        walk(1, 5_000, 3);
    }

    /// A reserve no memory could hold stops with `Vec`'s message, not in an endless doubling.
    #[test]
    #[should_panic(expected = "capacity overflow")]
    fn a_reserve_past_any_memory_panics_as_a_vec_does() {
        PositionIndex::default().reserve(usize::MAX, u64::from);
    }

    #[test]
    fn a_value_changed_in_place_is_found_by_its_new_test() {
        let mut index = PositionIndex::default();
        let hash = |v: u32| u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for v in 0..100 {
            index.insert(hash(v), v, hash);
        }
        *index.find_mut(hash(7), |v| v == 7).unwrap() = 1_000;
        assert_eq!(index.find(hash(7), |v| v == 1_000), Some(1_000));
        assert_eq!(index.find(hash(7), |v| v == 7), None);
        assert_eq!(index.first_match(hash(8)), Some(8));
    }

    #[test]
    fn reserving_makes_room_at_once_and_shrinking_gives_it_back() {
        let hash = |v: u32| u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut index = PositionIndex::default();
        index.reserve(10_000, hash);
        let chunks = index.chunks.len();
        assert!(limit(chunks) >= 10_000 && limit(chunks / 2) < 10_000);
        for v in 0..10_000 {
            index.insert(hash(v), v, hash);
        }
        assert_eq!(index.chunks.len(), chunks, "no growth after the reserve");
        for v in 100..10_000 {
            assert_eq!(index.remove(hash(v), |x| x == v), Some(v));
        }
        index.shrink_to(200, hash);
        assert!(index.chunks.len() <= PositionIndex::chunks_for(200));
        for v in 0..100 {
            assert_eq!(index.find(hash(v), |x| x == v), Some(v));
        }
    }
}
