//! Fenced leadership: the proof of election every write carries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::client::{Compare, CompareOp};
use tokio::sync::Notify;

use crate::error::Deposed;

/// A replica's leadership, as etcd's election service granted it: the leader key and the
/// revision at which it was created.
///
/// Every write the replica makes (status writes through [`EtcdStatusStore`](crate::EtcdStatusStore),
/// and any backend that keeps its record in etcd) adds [`Fence::compare`] to its transaction:
/// the key must still exist with that create revision. A leader key is deleted when its lease
/// expires, and a later leader's key is a new key with a higher create revision, so a replica
/// that was paused past its lease cannot write even before it notices it lost the election:
/// etcd itself refuses. (A Kubernetes Lease gives no such guarantee: an update after the lease
/// expired is taken.)
///
/// The first refusal marks the fence deposed, which wakes [`Fence::deposed`] so the replica
/// stops its controller.
#[derive(Clone, Debug)]
pub struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    key: Vec<u8>,
    revision: i64,
    deposed: AtomicBool,
    notify: Notify,
}

impl Fence {
    /// The fence of the leader key `key`, created at `revision`.
    pub fn new(key: impl Into<Vec<u8>>, revision: i64) -> Self {
        Fence {
            inner: Arc::new(Inner {
                key: key.into(),
                revision,
                deposed: AtomicBool::new(false),
                notify: Notify::new(),
            }),
        }
    }

    /// The leader key.
    pub fn key(&self) -> &[u8] {
        &self.inner.key
    }

    /// Its create revision.
    pub fn revision(&self) -> i64 {
        self.inner.revision
    }

    /// The comparison to put in every write transaction: the leader key still exists and is
    /// the one this replica was elected with.
    pub fn compare(&self) -> Compare {
        Compare::create_revision(
            self.inner.key.clone(),
            CompareOp::Equal,
            self.inner.revision,
        )
    }

    /// Whether etcd refused a write for this fence, or [`depose`](Fence::depose) was called.
    pub fn is_deposed(&self) -> bool {
        self.inner.deposed.load(Ordering::Acquire)
    }

    /// Marks the leadership lost (the lease expired, a write was refused) and wakes every
    /// [`deposed`](Fence::deposed) waiter. Idempotent.
    pub fn depose(&self) {
        if !self.inner.deposed.swap(true, Ordering::AcqRel) {
            tracing::warn!(key = %String::from_utf8_lossy(&self.inner.key), revision = self.inner.revision, "leadership lost");
        }
        self.inner.notify.notify_waiters();
    }

    /// Resolves once the leadership is lost.
    pub async fn deposed(&self) {
        loop {
            let notified = self.inner.notify.notified();
            if self.is_deposed() {
                return;
            }
            notified.await;
        }
    }

    /// The error a refused write reports.
    pub fn error(&self) -> Deposed {
        Deposed {
            key: String::from_utf8_lossy(&self.inner.key).into_owned(),
            revision: self.inner.revision,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deposing_wakes_waiters_and_is_idempotent() {
        let fence = Fence::new("/p/leader/1", 5);
        let waiter = tokio::spawn({
            let fence = fence.clone();
            async move { fence.deposed().await }
        });
        tokio::task::yield_now().await;
        assert!(!fence.is_deposed());
        fence.depose();
        fence.depose();
        waiter.await.unwrap();
        assert!(fence.is_deposed());
        // A waiter that comes after the fact returns at once.
        fence.deposed().await;
        assert_eq!(
            fence.error().to_string(),
            "this replica is no longer the leader (its leader key \"/p/leader/1\" created at revision 5 is gone): write refused"
        );
    }
}
