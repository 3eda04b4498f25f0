//! Bringing a batch of names' interned blocks into the cache before their counts change.
//!
//! Dropping or cloning a `Name` changes its reference count, an atomic instruction on the
//! name's own block, and an atomic instruction waits for its cache miss to end before the
//! next memory access starts. A restart's listings and first pass drop a million names whose
//! blocks lie all over the heap, one miss after the other: about a fifth of recovering them.
//! Plain reads of a batch's blocks, made first, miss
//! together; the counts then change in the cache. `String` ids are read the same way, for the
//! allocator's header beside the text that a drop reads.
//!
//! As in [`id_sort`](crate::core::tables::id_sort), the two text types are picked out by their type, since
//! `Id` is a blanket impl; other ids have nothing behind them to read.

use std::any::TypeId;
use std::hint::black_box;

use crate::core::tables::id_sort::head_of;
use crate::domain::name::Name;

/// Reads the block behind each of `ids` that is a `Name` or a `String` (its head, as a sort
/// by heads reads it).
pub(crate) fn warm<'a, T: 'static>(ids: impl IntoIterator<Item = &'a T>) {
    let id_type = TypeId::of::<T>();
    if id_type != TypeId::of::<Name>() && id_type != TypeId::of::<String>() {
        return;
    }
    for id in ids {
        black_box(head_of(id));
    }
}
