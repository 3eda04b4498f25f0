//! What the core knows: the [`DesiredState`](desired::DesiredState) the orchestrator asks for,
//! the [`ActualState`](actual::ActualState) of attachments and nodes, and the
//! [`StatusBook`](status::StatusBook) of what each node's published status holds. Records and
//! their indexes only; the rules that decide what to do with them are one floor up.
//!
//! May import `crate::domain`, `crate::config`, `core::tables` and `core::calls`.

pub(crate) mod actual;
pub(crate) mod desired;
pub(crate) mod progress;
pub(crate) mod status;
