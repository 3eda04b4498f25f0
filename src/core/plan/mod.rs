//! When the core acts: the [`schedule`] of wakes and periodic work, the
//! [`in_flight`] table of operations planned and not yet answered, and the [`recovery`] a new
//! core runs before it plans anything else (the store's and the backend's listings).
//!
//! May import everything below: `crate::domain`, `crate::config`, `core::tables`,
//! `core::calls`, `core::state`, the vocabulary and `core::rules`.

pub(crate) mod detaches;
pub(crate) mod in_flight;
pub(crate) mod recovery;
pub(crate) mod schedule;
pub(crate) mod waits;
