//! A set of things to look at in the next pass, taken whole in order.
//!
//! The core marks volumes and nodes as inputs and results arrive and takes them all at the
//! start of a pass. A `BTreeSet` did that with a tree node allocated and freed per pass and
//! per set, and its consuming walk was 7 % of a workload move's instructions; marks are
//! appended here and sorted once when taken, in the order a `BTreeSet` gave, so plans stay
//! deterministic.

/// Items marked since the last [`take`](Self::take), possibly more than once.
#[derive(Debug)]
pub(crate) struct Marks<T> {
    items: Vec<T>,
}

impl<T> Default for Marks<T> {
    fn default() -> Self {
        Marks { items: Vec::new() }
    }
}

impl<T: Ord> Marks<T> {
    /// Marks `item`.
    pub(crate) fn mark(&mut self, item: T) {
        self.items.push(item);
    }

    /// Marks every item of `items`.
    pub(crate) fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        self.items.extend(items);
    }

    /// Whether nothing is marked.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Everything marked, each once, in order; nothing is marked afterwards.
    pub(crate) fn take(&mut self) -> Vec<T> {
        let mut items = std::mem::take(&mut self.items);
        items.sort_unstable();
        items.dedup();
        items
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
}
