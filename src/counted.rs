//! A test id that counts how often it is ordered: for tests that hold a path to the compares
//! it makes (names ordered cost two cold reads each at a million, PERFORMANCE.md).

use std::cell::Cell;
use std::cmp::Ordering;

thread_local! {
    static ORDERED: Cell<u64> = const { Cell::new(0) };
}

/// An id ordered as its number, counting each order asked of it on this thread; equality and
/// hashing are not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Counted(pub(crate) u32);

impl PartialOrd for Counted {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Counted {
    fn cmp(&self, other: &Self) -> Ordering {
        ORDERED.with(|c| c.set(c.get() + 1));
        self.0.cmp(&other.0)
    }
}

/// How many times a `Counted` was ordered on this thread since the last call.
pub(crate) fn orderings() -> u64 {
    ORDERED.with(|c| c.replace(0))
}
