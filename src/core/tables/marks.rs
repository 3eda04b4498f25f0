//! A set of things to look at in the next pass, taken whole in order.
//!
//! The core marks volumes and nodes as inputs and results arrive and takes them all at the
//! start of a pass. A `BTreeSet` did that with a tree node allocated and freed per pass and
//! per set, and its consuming walk was 7 % of a workload move's instructions; marks are
//! appended here and sorted once when taken, in the order a `BTreeSet` gave, so plans stay
//! deterministic.

use crate::core::tables::id_sort;

/// Items marked since the last [`take`](Self::take), possibly more than once.
///
/// The first `distinct` items are sorted and each there once: a sort leaves them so, and marks
/// are only appended after them.
///
/// Bounded by what is marked, not by how often: once the list holds more than twice what it
/// held after its last sort (plus [`SLACK`]), it is sorted and deduplicated
/// ([`settle`](Self::settle)). A core that takes no marks for a long while (a burst of inputs
/// between two passes; a recovering core keeps none, [`Schedule::holding_marks`]) so holds at
/// most about twice its distinct items, as a `BTreeSet` did, at an amortised cost of one sort
/// per doubling.
///
/// [`Schedule::holding_marks`]: crate::core::plan::schedule::Schedule::holding_marks
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

/// Marks taken up to before the list is first sorted: a pass's marks are usually far fewer,
/// and then they are sorted once, when taken.
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

impl<T: Ord + 'static> Marks<T> {
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

    /// Sorts and deduplicates the list once repeats may have doubled it.
    fn bound(&mut self) {
        if self.items.len() > 2 * self.distinct + SLACK {
            self.settle();
        }
    }

    /// Sorts and deduplicates the list. A list that was sorted before has only the marks added
    /// since sorted, and merged in: about half the compares of sorting it whole.
    fn settle(&mut self) {
        if self.items.len() == self.distinct {
            return;
        }
        if self.items.len() == 1 {
            // A move's pass marks one volume: nothing to sort.
            self.distinct = 1;
            return;
        }
        if self.distinct == 0 {
            // In place: a pass's few marks cost no allocation.
            id_sort::sort_unstable(&mut self.items);
            self.items.dedup();
        } else {
            let mut added = self.items.split_off(self.distinct);
            id_sort::sort_unstable(&mut added);
            added.dedup();
            self.items = id_sort::merge(std::mem::take(&mut self.items), added);
        }
        self.distinct = self.items.len();
    }

    /// Whether nothing is marked.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Everything marked, each once, in order; nothing is marked afterwards. Hand the list
    /// back with [`recycle`](Self::recycle) once done with it.
    pub(crate) fn take(&mut self) -> Vec<T> {
        self.settle();
        self.distinct = 0;
        std::mem::replace(&mut self.items, std::mem::take(&mut self.spare))
    }

    /// Takes back a list [`take`](Self::take) gave, emptied, to hold later marks without a new
    /// allocation. A list grown past [`RECYCLED`] by a burst is dropped instead, so that the
    /// marks keep no burst's peak.
    #[inline(always)]
    pub(crate) fn recycle(&mut self, mut list: Vec<T>) {
        if list.capacity() == 0 || list.capacity() > RECYCLED {
            return drop_list(list);
        }
        if !list.is_empty() {
            // A list the caller drained is empty already: with ids that own something, even an
            // empty clear is a call.
            list.clear();
        }
        // Put in place of a list without room.
        let place = if self.items.capacity() == 0 {
            &mut self.items
        } else if self.spare.capacity() == 0 {
            &mut self.spare
        } else {
            return;
        };
        drop_list(std::mem::replace(place, list));
    }
}

/// Drops `list`; one that never had room is forgotten instead, as it owns nothing (no buffer,
/// so no items). With ids that own something (`Name`, `String`), dropping a list walks its
/// ids out of line, a call even over none, and the core lets go of such lists several times a
/// pass.
#[inline(always)]
pub(crate) fn drop_list<T>(list: Vec<T>) {
    if list.capacity() == 0 {
        std::mem::forget(list);
    } else {
        drop(list);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    use crate::core::tables::counted::{Counted, orderings as compares};

    #[test]
    fn what_a_sort_left_in_order_is_taken_without_another_sort() {
        let mut marks = Marks::default();
        // Enough to pass SLACK: the doubling's sort runs as they are marked.
        marks.extend((0..3_000u32).rev().map(Counted));
        assert!(compares() > 0, "sorted when the list doubled");
        assert_eq!(marks.take().len(), 3_000);
        assert_eq!(compares(), 0, "the doubling's sort left the list in order");
        // Marks added after a sort are sorted when taken, and merged with what was sorted.
        marks.extend((0..3_000u32).map(Counted));
        marks.mark(Counted(5_000));
        marks.mark(Counted(4));
        compares();
        let taken = marks.take();
        assert!(
            compares() > 0,
            "what came after the sort is sorted when taken"
        );
        assert_eq!(
            taken,
            (0..3_000).chain([5_000]).map(Counted).collect::<Vec<_>>()
        );
    }

    /// What is done to the marks, in [`marks_hold_what_a_set_would`].
    #[derive(Debug, Clone)]
    enum Step {
        Mark(u16),
        Extend(Vec<u16>),
        Take,
    }

    fn step() -> impl Strategy<Value = Step> {
        // Few distinct values, so that repeats are common; lists long enough to pass SLACK.
        let item = 0..3_000u16;
        prop_oneof![
            item.clone().prop_map(Step::Mark),
            proptest::collection::vec(item, 0..1_500).prop_map(Step::Extend),
            Just(Step::Take),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
            rng_seed: proptest::test_runner::RngSeed::Fixed(16),
            ..ProptestConfig::default()
        })]

        /// Against a `BTreeSet`: every take gives what was marked since, each once, in order,
        /// however the marks came (one by one, lists) and whatever sorts ran between.
        #[test]
        fn marks_hold_what_a_set_would(steps in proptest::collection::vec(step(), 1..40)) {
            let mut marks = Marks::default();
            let mut set = std::collections::BTreeSet::new();
            for step in steps {
                match step {
                    Step::Mark(i) => {
                        marks.mark(i);
                        set.insert(i);
                    }
                    Step::Extend(items) => {
                        set.extend(items.iter().copied());
                        marks.extend(items);
                    }
                    Step::Take => {
                        let taken = marks.take();
                        prop_assert_eq!(&taken, &std::mem::take(&mut set).into_iter().collect::<Vec<_>>());
                        marks.recycle(taken);
                    }
                }
                prop_assert_eq!(marks.is_empty(), set.is_empty());
                prop_assert!(marks.items.len() <= 2 * set.len() + SLACK + 1_500, "bounded");
            }
            prop_assert_eq!(marks.take(), set.into_iter().collect::<Vec<_>>());
        }
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
