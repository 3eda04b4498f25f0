//! A set of things to look at in the next pass, taken whole in order.
//!
//! The core marks volumes and nodes as inputs and results arrive and takes them all at the
//! start of a pass. A `BTreeSet` did that with a tree node allocated and freed per pass and
//! per set, and its consuming walk was 7 % of a workload move's instructions; marks are
//! appended here and sorted once when taken, in the order a `BTreeSet` gave, so plans stay
//! deterministic.

/// Items marked since the last [`take`](Self::take), possibly more than once.
///
/// Bounded by what is marked, not by how often: once the list holds more than twice what
/// it held after its last sort (plus [`SLACK`]), it is sorted and deduplicated in place. A
/// core that takes no marks for a long while (a recovery whose listings keep failing, while
/// the informers go on) so holds at most about twice its distinct items, as a `BTreeSet` did,
/// at an amortised cost of one sort per doubling.
#[derive(Debug)]
pub(crate) struct Marks<T> {
    items: Vec<T>,
    /// How many distinct items the list held after its last sort.
    distinct: usize,
    /// An empty list handed back by [`recycle`](Self::recycle), for the next marks to fill:
    /// taking the marks of every pass used to leave the next mark to allocate anew, and the
    /// three sets of marks were several allocations per workload move.
    spare: Vec<T>,
}

/// Marks taken up to before the list is first sorted in place: a pass's marks are usually
/// far fewer, and then they are sorted once, when taken.
const SLACK: usize = 1024;

/// The largest list [`Marks::recycle`] keeps: a pass usually marks a few dozen items, and a
/// start-up burst's list (a thousand volumes) would otherwise stay allocated for good.
const RECYCLED: usize = 256;

impl<T> Default for Marks<T> {
    fn default() -> Self {
        Marks {
            items: Vec::new(),
            distinct: 0,
            spare: Vec::new(),
        }
    }
}

impl<T: Ord> Marks<T> {
    /// Marks `item`.
    pub(crate) fn mark(&mut self, item: T) {
        self.items.push(item);
        self.bound();
    }

    /// Marks every item of `items`.
    pub(crate) fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        self.items.extend(items);
        self.bound();
    }

    /// Sorts and deduplicates the list in place once repeats may have doubled it.
    fn bound(&mut self) {
        if self.items.len() > 2 * self.distinct + SLACK {
            self.items.sort_unstable();
            self.items.dedup();
            self.distinct = self.items.len();
        }
    }

    /// Whether nothing is marked.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Everything marked, each once, in order; nothing is marked afterwards. Hand the list
    /// back with [`recycle`](Self::recycle) once done with it.
    pub(crate) fn take(&mut self) -> Vec<T> {
        let mut items = std::mem::replace(&mut self.items, std::mem::take(&mut self.spare));
        self.distinct = 0;
        items.sort_unstable();
        items.dedup();
        items
    }

    /// Takes back a list [`take`](Self::take) gave, emptied, to hold later marks without a new
    /// allocation. A list grown past [`RECYCLED`] by a burst is dropped instead, so that the
    /// marks keep no burst's peak.
    pub(crate) fn recycle(&mut self, mut list: Vec<T>) {
        if list.capacity() > RECYCLED {
            return;
        }
        list.clear();
        if self.items.capacity() == 0 {
            self.items = list;
        } else if self.spare.capacity() == 0 {
            self.spare = list;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_once_each_in_order_then_empty() {
        let mut marks = Marks::default();
        marks.mark(3);
        marks.extend([1, 3, 2, 1]);
        assert!(!marks.is_empty());
        assert_eq!(marks.take(), vec![1, 2, 3]);
        assert!(marks.is_empty());
        assert_eq!(marks.take(), Vec::<i32>::new());
    }

    #[test]
    fn marks_repeated_without_a_take_hold_what_was_marked_not_how_often() {
        let mut marks = Marks::default();
        for i in 0..1_000_000u32 {
            marks.mark(i % 10);
        }
        marks.extend((0..100_000u32).map(|i| i % 10));
        assert!(
            marks.items.len() <= SLACK + 20,
            "{} held",
            marks.items.len()
        );
        // Many distinct items: at most about twice them, whatever the repeats.
        for round in 0..5 {
            for i in 0..5_000u32 {
                marks.mark(i + round);
            }
        }
        assert!(
            marks.items.len() <= 2 * 5_004 + SLACK,
            "{} held",
            marks.items.len()
        );
        assert_eq!(marks.take(), (0..5_004).collect::<Vec<u32>>());
        assert_eq!(marks.distinct, 0);
    }

    #[test]
    fn a_recycled_list_holds_the_next_marks_and_a_burst_is_not_kept() {
        let mut marks = Marks::default();
        marks.extend([2, 1, 2]);
        let taken = marks.take();
        assert_eq!(taken, vec![1, 2]);
        let buffer = taken.as_ptr();
        marks.recycle(taken);
        marks.mark(9);
        assert_eq!(marks.items.as_ptr(), buffer, "the same allocation");
        assert_eq!(marks.take(), vec![9], "nothing left of the recycled list");
        // A burst's list is dropped, not kept as the spare.
        marks.extend(0..(RECYCLED as u32) * 2);
        let burst = marks.take();
        marks.recycle(burst);
        assert_eq!(marks.spare.capacity(), 0);
    }
}
