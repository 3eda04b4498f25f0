//! How far one attachment's detach has come: an explicit state on the attachment's record
//! ([`Attachment::detach`](super::actual::Attachment::detach)), where it used to be spread
//! over eight tables beside the records.
//!
//! A detach that no workload needs any more goes, each step made in one place of the
//! reconciler:
//!
//! ```text
//! Idle -> AwaitingAck -> ReadWanted -> Reading -> Cleared -> Detaching -> (record gone)
//!           (C5: the store      (a fresh read of the node       (the call)
//!            drops it first)     decides: the irreversible step's proof)
//! ```
//!
//! Any look may send it back (the store lists it again, the read held it back, the workload
//! came back: `Idle`). Beside the step, the record keeps what a human was told in this episode
//! ([`Told`], so that each event goes out once) and whether an operator released it
//! ([`Release`]). The reconciler's per-node indexes (which detaches one acknowledgement or one
//! read serves) are derived from these states and checked against them.

use std::fmt;

/// Why a detach goes ahead although the node still reports the volume mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForceReason {
    /// The node is fenced (`out-of-service`): it can no longer write. Safe.
    OutOfService,
    /// The unmount wait expired on an unhealthy node and `force_detach_on_timeout` is on. Unsafe
    /// if the node is in fact still running.
    Timeout,
    /// The node object was deleted and `Config::deleted_node_is_fenced` says a deleted node's
    /// machine is gone. The detach is confirmed by a fresh read that finds no such node.
    NodeDeleted,
    /// The node is unhealthy and the backend said twice, fresh, that its machine is powered
    /// off (`Config::machine_fencing`): it cannot write. The detach is planned only while the
    /// confirming answer is younger than `MachineFencing::max_age`, and after a fresh read of
    /// the node that does not show it healthy again.
    PoweredOff,
}

impl ForceReason {
    /// Upstream's metric label for the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ForceReason::OutOfService => "out-of-service",
            ForceReason::Timeout => "timeout",
            ForceReason::NodeDeleted => "node-deleted",
            ForceReason::PoweredOff => "powered-off",
        }
    }
}

/// The step a detach is at. `force` is the reason the detach would be forced for (`None`:
/// unforced), which the fresh read checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DetachStage {
    /// No detach under way: the attachment is wanted, or its detach waits for the node to
    /// unmount, for a human, or for its backoff (the reasons are in the record's [`Told`] and
    /// the core's timers, not here).
    #[default]
    Idle,
    /// Dropped from the node's report; waits for the store to acknowledge a list without it
    /// (C5), so that the node's agent does not start mounting it meanwhile.
    AwaitingAck,
    /// Waits for a fresh read of the node, which the node's next status pass plans.
    ReadWanted {
        /// What the read checks the detach for.
        force: Option<ForceReason>,
    },
    /// A fresh read of the node is running for it.
    Reading {
        /// What the read checks the detach for.
        force: Option<ForceReason>,
    },
    /// A fresh read justified it: the next pass plans the call, or the clearance lapses.
    Cleared {
        /// What the read checked the detach for.
        force: Option<ForceReason>,
    },
    /// The detach call runs.
    Detaching,
}

/// What a human was told about this detach in its current episode, so that each event goes
/// out once. An episode ends when the detach is planned, or the attachment is gone or wanted
/// again.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Told(u8);

impl Told {
    /// [`Event::DetachBlocked`](crate::core::Event::DetachBlocked): only a human can unblock it.
    pub const BLOCKED: Told = Told(1);
    /// [`Event::WaitingForUnmount`](crate::core::Event::WaitingForUnmount): a fresh read held
    /// it back. Also a fact for the next decision: the unmount wait's timeout then applies.
    pub const WAITING_FOR_UNMOUNT: Told = Told(2);
    /// [`Event::DetachStuck`](crate::core::Event::DetachStuck).
    pub const STUCK: Told = Told(4);

    /// Whether `what` was told.
    pub fn has(self, what: Told) -> bool {
        self.0 & what.0 != 0
    }

    /// Notes `what`; returns whether it is news (not told before in this episode).
    pub(crate) fn tell(&mut self, what: Told) -> bool {
        let news = !self.has(what);
        self.0 |= what.0;
        news
    }

    /// Forgets `what`: a new episode tells it again.
    pub(crate) fn forget(&mut self, what: Told) {
        self.0 &= !what.0;
    }
}

impl fmt::Debug for Told {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Told::BLOCKED, "Blocked"),
            (Told::WAITING_FOR_UNMOUNT, "WaitingForUnmount"),
            (Told::STUCK, "Stuck"),
        ];
        f.debug_set()
            .entries(names.iter().filter(|(t, _)| self.has(*t)).map(|(_, n)| n))
            .finish()
    }
}

/// An operator's release of the attachment ([`Input::ReleaseVolume`](crate::core::Input)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Release {
    /// None pending.
    #[default]
    None,
    /// Accepted: the next verify of the node to end decides it (a claim's, a fresh read).
    Pending,
    /// Accepted while a verify of the node ran, planned before the release: its answer is
    /// older than the operator's word and decides nothing. Pending once that verify ends.
    BehindVerify,
}

/// One attachment's detach: its step, what was told, its release. Four bytes, copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DetachProgress {
    /// The step.
    pub stage: DetachStage,
    /// What a human was told in this episode.
    pub told: Told,
    /// An operator's release.
    pub release: Release,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_pays_at_most_four_bytes_for_its_progress() {
        assert!(std::mem::size_of::<DetachProgress>() <= 4);
    }

    #[test]
    fn told_says_each_thing_once() {
        let mut told = Told::default();
        assert!(told.tell(Told::BLOCKED));
        assert!(!told.tell(Told::BLOCKED));
        assert!(told.tell(Told::STUCK));
        assert_eq!(format!("{told:?}"), r#"{"Blocked", "Stuck"}"#);
        told.forget(Told::BLOCKED);
        assert!(!told.has(Told::BLOCKED) && told.has(Told::STUCK));
    }
}
