//! The lists sorted by volume that a node's record keeps (its attachments, its detach
//! requests), and how an entry is found, set or removed in one.

use crate::core::tables::id_search;
use crate::core::tables::spares::Spares;

/// Finds `volume` in a list sorted by volume: a list of names is walked by equality first
/// ([`id_search`]), so a volume that is there is found without reading the names passed.
pub(super) fn find<V: Ord + 'static, T>(list: &[(V, T)], volume: &V) -> Result<usize, usize> {
    id_search::find_by(list, |(v, _)| v, volume)
}

/// A list sorted by volume that is usually empty (device paths, for backends that give none;
/// detach requests): 8 bytes per node while empty instead of a `Vec`'s 24.
#[derive(Debug)]
// The box is the point: one pointer while empty (a `Vec` is three words), grown in place once
// filled (a boxed slice would reallocate on every change).
#[allow(clippy::box_collection)]
pub(super) struct Sparse<T>(Option<Box<Vec<T>>>);

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse(None)
    }
}

impl<T> Sparse<T> {
    pub(super) fn as_slice(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

/// A spare list of detach requests with room for more than this many is dropped.
pub(super) const MAX_SPARE_REQUESTS: usize = 8;

/// [`put`] on a [`Sparse`] list, which holds no allocation once empty. The allocation an
/// emptied list gives up goes to `spares`, and a list begun takes one from there: a move
/// requests a detach on a node with none and settles it again, which was an allocation and a
/// free on every move (2.6 % of a `u32` move's instructions).
// The spares are the `Sparse` lists' own boxes.
#[allow(clippy::box_collection)]
pub(super) fn put_sparse<V: Ord + Clone + 'static, T>(
    list: &mut Sparse<(V, T)>,
    volume: &V,
    value: Option<T>,
    spares: &mut Spares<Box<Vec<(V, T)>>>,
) {
    match (&mut list.0, value) {
        (None, None) => {}
        (slot, value) => {
            let items = slot.get_or_insert_with(|| spares.take().unwrap_or_default());
            put(items, volume, value);
            if items.is_empty() {
                let emptied = slot.take();
                // A large one is dropped: a spare is memory nobody uses.
                if let Some(emptied) = emptied.filter(|e| e.capacity() <= MAX_SPARE_REQUESTS) {
                    spares.give(emptied);
                }
            }
        }
    }
}

/// Sets or removes `volume`'s entry in a list sorted by volume.
pub(super) fn put<V: Ord + Clone + 'static, T>(
    list: &mut Vec<(V, T)>,
    volume: &V,
    value: Option<T>,
) -> Option<T> {
    put_at(list, find(list, volume), volume, value)
}

/// [`put`] for a volume the list most likely lacks (a new record): placed by order at once,
/// without first walking a list of names for it.
pub(super) fn put_new<V: Ord + Clone, T>(
    list: &mut Vec<(V, T)>,
    volume: &V,
    value: T,
) -> Option<T> {
    let at = list.binary_search_by(|(v, _)| v.cmp(volume));
    put_at(list, at, volume, Some(value))
}

/// Sets or removes `volume`'s entry, found (`Ok`) or to go (`Err`) at `at`. Returns the
/// entry's value before, if it had one.
fn put_at<V: Clone, T>(
    list: &mut Vec<(V, T)>,
    at: Result<usize, usize>,
    volume: &V,
    value: Option<T>,
) -> Option<T> {
    match (at, value) {
        (Ok(i), Some(value)) => Some(std::mem::replace(&mut list[i].1, value)),
        (Ok(i), None) => Some(list.remove(i).1),
        (Err(i), Some(value)) => {
            list.insert(i, (volume.clone(), value));
            None
        }
        (Err(_), None) => None,
    }
}
