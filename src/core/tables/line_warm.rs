//! Reading a short list's every cache line ahead of the work that searches it.
//!
//! A node's sorted lists (its attachments, the list the store holds for it) are searched by
//! halves or walked, and each probe of a cold list waits for the line before it. At a million
//! attachments every node's lists are cold when a move first reaches them: read line by line
//! in one short loop first, their misses are in flight together.

use std::hash::{BuildHasher, Hash};
use std::hint::black_box;
use std::mem::size_of;

use rustc_hash::FxBuildHasher;

/// Bytes in a cache line on the machines this crate targets (x86-64 and most ARM64 cores).
const LINE: usize = 64;

/// Reads an item on each cache line `items` spans. Each is read by hashing it, which reads
/// the whole item and, for a text id, its text, as a compare would; a plain read of a
/// generic item would need `unsafe` or a copy.
pub(crate) fn warm_lines<T: Hash>(items: &[T]) {
    let step = (LINE / size_of::<T>().max(1)).max(1);
    for item in items.iter().step_by(step) {
        black_box(FxBuildHasher.hash_one(item));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists of every length up to a few lines, of small and large items, and empty ones: no
    /// step is zero and no read goes past the end.
    #[test]
    fn warming_takes_lists_of_any_length_and_item_size() {
        for len in 0..40 {
            let small: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let large: Vec<[u64; 16]> = (0..len).map(|i| [i as u64; 16]).collect();
            let text: Vec<String> = (0..len).map(|i| format!("pvc-{i}")).collect();
            warm_lines(&small);
            warm_lines(&large);
            warm_lines(&text);
            warm_lines::<()>(&vec![(); len]);
        }
    }
}
