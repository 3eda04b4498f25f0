//! Where each node's attached volumes are published for the node agents to read (Kubernetes:
//! `node.status.volumesAttached`), written with optimistic concurrency.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::Domain;

/// A version of one node's status, for compare-and-set writes.
///
/// Revisions only ever grow, so a writer holding an old one learns it lost a race instead of
/// silently overwriting a newer status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One volume a node is told it has, with the device path the node should find it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedVolume<D: Domain> {
    /// The attached volume.
    pub volume: D::Volume,
    /// Where it shows up on the node, as the backend reported on attach.
    ///
    /// Shared, not owned: every status write repeats the node's whole list, and copying each
    /// path again per write was most of the driver's allocation.
    pub device: Option<Arc<str>>,
}

/// A node's published attached volumes, with the revision to write against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus<D: Domain> {
    /// The volumes the node is told are attached.
    pub attached: Vec<ReportedVolume<D>>,
    /// What the node agent reports in use (Kubernetes `volumesInUse`, which lives in the same
    /// node status), when the store holds it: read fresh just before a detach, it closes the
    /// window in which the controller's own view of the node is older than a new mount.
    /// `None` when this store does not know.
    pub in_use: Option<Vec<D::Volume>>,
    /// Whether the node is fenced: known powered off or isolated, so that it can no longer
    /// write to its disks. Read fresh right before a forced detach, whose only justification it
    /// is: a fence lifted since the controller's view of the node was taken must stop the
    /// detach. `None` when this store does not know, in which case no forced detach goes ahead
    /// unless the in-use list shows the volume unused.
    ///
    /// A Kubernetes store derives it from the `node.kubernetes.io/out-of-service` taint on the
    /// Node object (present: `Some(true)`); an etcd store from a fence key that the fencing
    /// agent or the operator writes next to the node's status (see the crate's README).
    pub fenced: Option<bool>,
    /// Whether the node answers (Kubernetes: the Ready condition; etcd: the node agent's lease
    /// is alive). Read fresh before a detach forced by the unmount timeout, which is only
    /// allowed on an unhealthy node. `None` when this store does not know.
    pub healthy: Option<bool>,
    /// The revision this status was read at; pass it to [`NodeStatusStore::write`].
    pub revision: Revision,
}

/// Why a store call failed.
///
/// ```
/// use attach_detach::{Revision, StoreError};
/// let e = StoreError::Conflict { current: Revision(7) };
/// assert_eq!(e.to_string(), "node status changed concurrently, current revision is 7");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Someone else wrote first: re-read, recompute, retry.
    #[error("node status changed concurrently, current revision is {current}")]
    Conflict {
        /// The revision the store holds now.
        current: Revision,
    },
    /// The node does not exist (any more).
    #[error("node not found")]
    NotFound,
    /// The call failed and did nothing; retry with backoff.
    #[error("store call failed and did nothing: {message}")]
    Transient {
        /// The store's explanation.
        message: String,
    },
}

/// The store of every node's reported attached volumes.
///
/// Writes are compare-and-set on a [`Revision`] so two writers (or one writer with a stale
/// view) can never silently erase each other's volumes: Kubernetes' status updater once lost
/// attached volumes by diffing against a lagging informer cache, which this contract rules out.
///
/// The trait is dyn-compatible, so a controller can hold an `Arc<dyn NodeStatusStore<D>>`.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait NodeStatusStore<D: Domain>: Send + Sync {
    /// Reads `node`'s status fresh from the source of truth, never from a cache.
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError>;

    /// Replaces `node`'s attached volumes if its revision is still `expected`, returning the new
    /// revision; otherwise fails with [`StoreError::Conflict`] and changes nothing.
    async fn write(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: Revision,
    ) -> Result<Revision, StoreError>;

    /// Every node's status, for recovery after a controller restart.
    // The mockall expectation types built from this signature trip clippy's complexity lint.
    #[allow(clippy::type_complexity)]
    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError>;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Ids;

    type D = Ids<String, String, String, ()>;

    #[test]
    fn revisions_order_and_display() {
        assert!(Revision(1) < Revision(2));
        assert_eq!(Revision(42).to_string(), "42");
        assert_eq!(StoreError::NotFound.to_string(), "node not found");
    }

    #[tokio::test]
    async fn mock_works_through_dyn() {
        let mut mock = MockNodeStatusStore::<D>::new();
        mock.expect_read().returning(|_| {
            Ok(NodeStatus {
                attached: vec![ReportedVolume {
                    volume: "vol-1".into(),
                    device: None,
                }],
                in_use: None,
                fenced: None,
                healthy: None,
                revision: Revision(3),
            })
        });
        mock.expect_write()
            .withf(|n, attached, expected| {
                n == "node-a" && attached.is_empty() && *expected == Revision(3)
            })
            .times(1)
            .returning(|_, _, _| Ok(Revision(4)));
        mock.expect_list().returning(|| Err(StoreError::NotFound));

        let store: Arc<dyn NodeStatusStore<D>> = Arc::new(mock);
        let node = "node-a".to_string();
        let status = store.read(&node).await.unwrap();
        assert_eq!(status.attached.len(), 1);
        assert_eq!(
            store.write(&node, &[], status.revision).await,
            Ok(Revision(4))
        );
        assert_eq!(store.list().await, Err(StoreError::NotFound));
    }
}
