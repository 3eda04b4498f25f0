//! The rules: pure functions and small books that decide whether a step may happen now.
//! [`decision`] decides an attach or a detach from its facts, [`fresh_read`] judges the read
//! that must come before every detach, [`machine`] fences a node whose machine the backend says
//! is off, [`capacity`] keeps a node within its attach limit, [`gate`] runs one operation per
//! key with backoff, and [`admission`] bounds the load on the backend.
//!
//! May import `crate::domain`, `crate::config`, `core::tables`, `core::calls`, `core::state`
//! and the vocabulary (`core::operation`, `core::input`, `core::event`).

pub(crate) mod admission;
pub(crate) mod capacity;
pub(crate) mod decision;
pub(crate) mod fresh_read;
pub(crate) mod gate;
pub(crate) mod machine;
