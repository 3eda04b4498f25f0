//! [`Spares`]: a few allocations kept for the next use, so that something a move fills and
//! lets go of again (a node's detach requests, a status write's list) does not cost an
//! allocation and a free each time.
//!
//! Bounded in number, and each caller keeps no large spare: a spare is memory nobody uses, so
//! a burst must not leave many behind, nor a large one.

/// At most this many spares are kept.
const KEEP: usize = 4;

/// Allocations of one kind that nothing uses, waiting to be filled again.
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

    /// The last spare kept that `fits`, if any.
    pub(crate) fn take_where(&mut self, fits: impl Fn(&T) -> bool) -> Option<T> {
        let i = self.items.iter().rposition(fits)?;
        Some(self.items.swap_remove(i))
    }

    /// Keeps `spare` (emptied by the caller, or held to be written over), in place of the
    /// oldest spare once [`KEEP`] are kept, so that a few spares no use would find cannot keep
    /// the useful ones out for good. The caller drops a spare with too much room instead.
    pub(crate) fn give(&mut self, spare: T) {
        if self.items.len() == KEEP {
            self.items.remove(0);
        }
        self.items.push(spare);
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
    fn keeps_the_last_few_spares_and_hands_them_back_last_first() {
        let mut spares = Spares::default();
        for i in 0..10 {
            spares.give(i);
        }
        assert_eq!(spares.len(), KEEP, "no more than KEEP are kept");
        assert_eq!(spares.take(), Some(9), "the last given comes back first");
        assert_eq!(spares.take_where(|&i| i < 8), Some(7));
        assert_eq!(spares.take_where(|&i| i < 6), None, "the oldest made room");
    }
}
