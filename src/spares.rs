//! [`Spares`]: a few emptied allocations kept for the next use, so that something a move fills
//! and empties again (a node's detach requests, a status write's list) does not cost an
//! allocation and a free each time.
//!
//! Bounded in number and in the size of what it keeps: a spare is memory nobody uses, so a
//! burst must not leave many behind, nor a large one.

/// At most this many spares are kept.
const KEEP: usize = 4;

/// Emptied allocations of one kind, waiting to be filled again.
#[derive(Debug)]
pub(crate) struct Spares<T> {
    items: Vec<T>,
}

impl<T> Default for Spares<T> {
    fn default() -> Self {
        Spares { items: Vec::new() }
    }
}

impl<T> Spares<T> {
    /// A spare, if one is kept.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.items.pop()
    }

    /// Keeps `spare` (already emptied by the caller) if there is room and its room for items,
    /// `capacity`, is at most `max_capacity`; drops it otherwise.
    pub(crate) fn give(&mut self, spare: T, capacity: usize, max_capacity: usize) {
        if self.items.len() < KEEP && capacity <= max_capacity {
            self.items.push(spare);
        }
    }

    /// How many are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_few_small_spares_and_hands_them_back_last_first() {
        let mut spares = Spares::default();
        for i in 0..10 {
            spares.give(Vec::<u8>::with_capacity(8 + i), 8 + i, 16);
        }
        assert_eq!(spares.len(), KEEP, "no more than KEEP are kept");
        assert_eq!(spares.take().map(|v| v.capacity() >= 11), Some(true));
        let mut big = Spares::default();
        big.give(Vec::<u8>::with_capacity(64), 64, 16);
        assert!(
            big.take().is_none(),
            "a spare with more room than allowed is dropped"
        );
    }
}
