//! [`NodeStatusStore`]: where each node's attached volumes are published for the node agents to
//! read, as the driver calls it.

use async_trait::async_trait;

use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::{NodeStatus, Revision, StoreError, WriteReceipt};
use crate::domain::Domain;

/// The store of every node's reported attached volumes.
///
/// Writes are compare-and-set on a [`Revision`] so two writers (or one writer with a stale
/// view) can never silently erase each other's volumes: Kubernetes' status updater once lost
/// attached volumes by diffing against a lagging informer cache, which this contract rules out.
///
/// Calls must not block the thread, as for [`AttachBackend`](crate::traits::AttachBackend): they
/// share a task with the other calls of their pass.
///
/// The trait is dyn-compatible, so a controller can hold an `Arc<dyn NodeStatusStore<D>>`.
#[async_trait]
pub trait NodeStatusStore<D: Domain>: Send + Sync {
    /// Reads `node`'s status fresh from the source of truth, never from a cache.
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError>;

    /// Replaces `node`'s attached volumes if its revision is still `expected`, returning the new
    /// revision; otherwise fails with [`StoreError::Conflict`] and changes nothing.
    async fn write(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError>;

    /// Writes as [`write`](Self::write) does and answers, with the new revision, the node's
    /// facts (in use, fenced, healthy) read **no earlier than the write**: in the same atomic
    /// step (an etcd transaction's reads after its put; the object a Kubernetes PATCH answers
    /// with), or by a read after it.
    ///
    /// The core asks for this instead of `write` when a detach waits for the write
    /// ([`Operation::WriteStatus`](crate::core::Operation::WriteStatus)`::read_facts`). The facts
    /// then stand for the fresh read the detach needs, which saves a store call and a pass per
    /// detach. They are as good as that read: the write removed the volume from the node's
    /// list, and an agent reports a volume in use before it mounts it, so a mount that could
    /// still start shows in facts read at or after the write. Facts read before the write, or
    /// from a cache, would let a detach go under such a mount: never answer those.
    ///
    /// The default calls `write` and answers no facts; the core then reads the node itself,
    /// as it does for a store that does not override this.
    async fn write_reading_facts(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<WriteReceipt<D>, StoreError> {
        self.write(node, attached, expected)
            .await
            .map(WriteReceipt::from)
    }

    /// Every node's status, for recovery after a controller restart.
    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError>;
}

#[cfg(test)]
mockall::mock! {
    /// A store driven by expectations. `write_reading_facts` keeps its default (a plain
    /// `write`, no facts): the driver's tests see the path a store without facts takes.
    pub(crate) NodeStatusStore<D: Domain + 'static> {}

    #[async_trait]
    impl<D: Domain + 'static> NodeStatusStore<D> for NodeStatusStore<D> {
        async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError>;
        async fn write(
            &self,
            node: &D::Node,
            attached: &ReportedVolumes<D>,
            expected: Revision,
        ) -> Result<Revision, StoreError>;
        // The expectation types mockall builds from this signature trip clippy's complexity
        // lint.
        #[allow(clippy::type_complexity)]
        async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError>;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::calls::reported_volumes::ReportedVolume;
    use crate::domain::Ids;

    type D = Ids<String, String, String, ()>;

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
                revision: Revision::from(3),
            })
        });
        mock.expect_write()
            .withf(|n, attached, expected| {
                n == "node-a" && attached.is_empty() && *expected == Revision::from(3)
            })
            .times(1)
            .returning(|_, _, _| Ok(Revision::from(4)));
        mock.expect_list()
            .returning(|| Err(StoreError::not_found()));

        let store: Arc<dyn NodeStatusStore<D>> = Arc::new(mock);
        let node = "node-a".to_string();
        let status = store.read(&node).await.unwrap();
        assert_eq!(status.attached.len(), 1);
        assert_eq!(
            store.write(&node, &[].into(), status.revision).await,
            Ok(Revision::from(4))
        );
        assert_eq!(store.list().await, Err(StoreError::not_found()));
    }
}
