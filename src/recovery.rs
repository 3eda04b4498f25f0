//! Restart recovery (correction C7): the core's first phase, in which it plans the store's
//! and the backend's listings and nothing else until both are handed back.
//!
//! Upstream starts its reconciler only after the actual state is populated from node statuses
//! and the backend; a controller that plans earlier detaches what it has not seen yet, or
//! attaches twice. Each listing is retried with backoff until it loads.

use std::time::Duration;

use rustc_hash::FxHashSet;

use crate::backend::BackendAttachment;
use crate::domain::Domain;
use crate::schedule::earliest;
use crate::store::NodeStatus;

/// Every node's status, as the store lists it.
pub(crate) type Statuses<D> = Vec<(<D as Domain>::Node, NodeStatus<D>)>;

/// One listing to load.
#[derive(Debug)]
pub(crate) enum Load<T> {
    /// A call should start at this time.
    Due(Duration),
    /// A call is running.
    Listing,
    /// Handed back.
    Loaded(T),
}

impl<T> Load<T> {
    fn due_at(&self) -> Option<Duration> {
        match self {
            Load::Due(at) => Some(*at),
            Load::Listing | Load::Loaded(_) => None,
        }
    }

    /// Whether a call should start at `now`.
    pub(crate) fn is_due(&self, now: Duration) -> bool {
        self.due_at().is_some_and(|at| at <= now)
    }
}

/// The two listings a new core needs before it may plan.
#[derive(Debug)]
pub(crate) struct Recovery<D: Domain> {
    pub(crate) statuses: Load<Statuses<D>>,
    pub(crate) attachments: Load<Vec<BackendAttachment<D>>>,
    /// The nodes whose object was deleted while the listings ran: the store's listing may
    /// hold the deleted object's status, which says nothing of a successor of the same name.
    pub(crate) removed: FxHashSet<D::Node>,
}

impl<D: Domain> Default for Recovery<D> {
    fn default() -> Self {
        Recovery {
            statuses: Load::Due(Duration::ZERO),
            attachments: Load::Due(Duration::ZERO),
            removed: FxHashSet::default(),
        }
    }
}

impl<D: Domain> Recovery<D> {
    /// When a listing should next start, if one waits to.
    pub(crate) fn wake_at(&self) -> Option<Duration> {
        earliest([self.statuses.due_at(), self.attachments.due_at()])
    }

    /// Both listings, once both are loaded.
    pub(crate) fn take_loaded(&mut self) -> Option<(Statuses<D>, Vec<BackendAttachment<D>>)> {
        if !matches!(
            (&self.statuses, &self.attachments),
            (Load::Loaded(_), Load::Loaded(_))
        ) {
            return None;
        }
        let statuses = std::mem::replace(&mut self.statuses, Load::Listing);
        let attachments = std::mem::replace(&mut self.attachments, Load::Listing);
        match (statuses, attachments) {
            (Load::Loaded(s), Load::Loaded(a)) => Some((s, a)),
            _ => None,
        }
    }
}
