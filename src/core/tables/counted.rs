//! Test helpers for the tables. Ids that count how often they are ordered, or cloned: for
//! tests that hold a path to the compares or copies it makes (at a million attachments, each
//! compare of two names costs two cold reads, and each clone a count on a cold block). And a
//! small deterministic generator for the tables' randomised tests.

use std::cell::Cell;
use std::cmp::Ordering;

thread_local! {
    static ORDERED: Cell<u64> = const { Cell::new(0) };
    static CLONED: Cell<u64> = const { Cell::new(0) };
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

/// An id counting each clone made of it on this thread.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Cloned(pub(crate) u32);

impl Clone for Cloned {
    fn clone(&self) -> Self {
        CLONED.with(|c| c.set(c.get() + 1));
        Cloned(self.0)
    }
}

/// How many times a `Cloned` was cloned on this thread since the last call.
pub(crate) fn clones() -> u64 {
    CLONED.with(|c| c.replace(0))
}

/// A small deterministic generator, so a failure replays.
pub(crate) struct Lcg(pub(crate) u64);
impl Lcg {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}
