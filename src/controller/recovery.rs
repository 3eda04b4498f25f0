//! Restart recovery (correction C7): rebuild the actual state from the store and the backend
//! before planning anything.

use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use super::status_writer::StatusWriter;
use crate::backend::{BackendAttachment, BackendError};
use crate::config::BackoffConfig;
use crate::domain::Domain;
use crate::reconciler::Reconciler;
use crate::store::{NodeStatus, StoreError};

/// Which list a recovery call reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `NodeStatusStore::list`: what each node is told it has.
    Store,
    /// `AttachBackend::list`: what is really attached.
    Backend,
}

/// Every node's status, as the store lists it.
type Statuses<D> = Vec<(<D as Domain>::Node, NodeStatus<D>)>;

/// A finished list call.
pub(crate) enum Listed<D: Domain> {
    Store(Result<Statuses<D>, StoreError>),
    Backend(Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>),
}

impl<D: Domain> Listed<D> {
    /// The result to assume when the list call panicked: nothing loaded, try again.
    pub(crate) fn panicked(source: Source) -> Self {
        let message = "the list call panicked".to_string();
        match source {
            Source::Store => Listed::Store(Err(StoreError::transient(message))),
            Source::Backend => Listed::Backend(Err(BackendError::transient(message))),
        }
    }
}

enum State<T> {
    /// A call should start at this time.
    Due(Instant),
    /// The next retry is too far away to represent (only with a backoff that
    /// [`Config::validate`](crate::Config::validate) refuses): never.
    Never,
    /// A call is running.
    Listing(AbortHandle),
    Loaded(T),
}

/// One list to load, retried with backoff.
struct Pending<T> {
    state: State<T>,
    /// Wait before the next retry.
    delay: Duration,
    /// Longest wait.
    max: Duration,
}

impl<T> Pending<T> {
    fn new(now: Instant, backoff: BackoffConfig) -> Self {
        Pending {
            state: State::Due(now),
            delay: backoff.initial,
            max: backoff.max,
        }
    }

    fn finished<E: std::fmt::Display>(
        &mut self,
        result: Result<T, E>,
        source: Source,
        now: Instant,
    ) {
        match result {
            Ok(list) => self.state = State::Loaded(list),
            Err(error) => {
                warn!(?source, %error, retry_in = ?self.delay, "recovery list failed");
                self.state = match now.checked_add(self.delay) {
                    Some(at) => State::Due(at),
                    None => State::Never,
                };
                self.delay = self.delay.saturating_mul(2).min(self.max);
            }
        }
    }

    fn due_at(&self) -> Option<Instant> {
        match self.state {
            State::Due(at) => Some(at),
            _ => None,
        }
    }

    fn abort(&self) {
        if let State::Listing(call) = &self.state {
            call.abort();
        }
    }
}

/// The two lists a restarted controller needs before it may plan.
///
/// Upstream starts its reconciler only after the actual state is populated from node statuses
/// and the backend; a controller that plans earlier detaches what it has not seen yet, or
/// attaches twice. Each list is retried with the core's backoff until it loads.
pub(crate) struct Recovery<D: Domain> {
    store: Pending<Statuses<D>>,
    backend: Pending<Vec<BackendAttachment<D>>>,
}

impl<D: Domain> Recovery<D> {
    pub(crate) fn new(now: Instant, backoff: BackoffConfig) -> Self {
        Recovery {
            store: Pending::new(now, backoff),
            backend: Pending::new(now, backoff),
        }
    }

    /// The list calls that should start now; the caller starts them and hands back
    /// [`listing`](Self::listing).
    pub(crate) fn due(&self, now: Instant) -> impl Iterator<Item = Source> {
        let store = self.store.due_at().is_some_and(|at| at <= now);
        let backend = self.backend.due_at().is_some_and(|at| at <= now);
        [(store, Source::Store), (backend, Source::Backend)]
            .into_iter()
            .filter_map(|(due, source)| due.then_some(source))
    }

    pub(crate) fn listing(&mut self, source: Source, call: AbortHandle) {
        match source {
            Source::Store => self.store.state = State::Listing(call),
            Source::Backend => self.backend.state = State::Listing(call),
        }
    }

    /// When the next retry is due, if one waits.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        self.store
            .due_at()
            .into_iter()
            .chain(self.backend.due_at())
            .min()
    }

    pub(crate) fn finished(&mut self, listed: Listed<D>, now: Instant) {
        match listed {
            Listed::Store(r) => self.store.finished(r, Source::Store, now),
            Listed::Backend(r) => self.backend.finished(r, Source::Backend, now),
        }
    }

    pub(crate) fn is_loaded(&self) -> bool {
        matches!(
            (&self.store.state, &self.backend.state),
            (State::Loaded(_), State::Loaded(_))
        )
    }

    /// Stops the list calls running, for a shutdown.
    pub(crate) fn abort(&self) {
        self.store.abort();
        self.backend.abort();
    }

    /// Feeds both lists into the core, the store's first so that what a node was told it has
    /// counts as Attached, and seeds the writer with every node's revision. Only once
    /// [`is_loaded`](Self::is_loaded).
    pub(crate) fn apply(self, core: &mut Reconciler<D>, writer: &StatusWriter<D>) {
        let (State::Loaded(statuses), State::Loaded(attachments)) =
            (self.store.state, self.backend.state)
        else {
            unreachable!("apply is only called once both lists are loaded");
        };
        info!(
            nodes = statuses.len(),
            attachments = attachments.len(),
            "recovered the actual state"
        );
        for (node, status) in statuses {
            writer.seed(node.clone(), status.revision);
            core.recover_status(node, status.attached);
        }
        for a in attachments {
            core.recover_attachment(a.volume, a.node, a.spec);
        }
    }
}
