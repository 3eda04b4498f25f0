//! The root crate's conformance kit against the etcd store, on a real etcd: unfenced, and as
//! an elected leader whose every write carries its fence.

mod common;

use async_trait::async_trait;
use attach_detach::Ids;
use attach_detach::conformance::{self, HarnessError, StoreHarness, Supported};
use attach_detach::traits::NodeStatusStore;
use attach_detach_etcd::{ClusterWriter, EtcdStatusStore, Fence, KeyLayout};

type D = Ids<String, String, String, ()>;

/// The etcd store, a second one on a connection of its own (another replica), and the
/// scheduler's, node agents' and fencing agent's writes.
struct Harness {
    store: EtcdStatusStore<D>,
    second: EtcdStatusStore<D>,
    cluster: ClusterWriter<D>,
}

#[async_trait]
impl StoreHarness<D> for Harness {
    fn store(&self) -> &dyn NodeStatusStore<D> {
        &self.store
    }

    fn second_store(&self) -> &dyn NodeStatusStore<D> {
        &self.second
    }

    fn node(&self, n: usize) -> String {
        format!("node-{n}")
    }

    fn volume(&self, n: usize) -> String {
        format!("vol-{n}")
    }

    async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
        self.cluster.add_node(node).await?;
        Ok(())
    }

    async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
        self.cluster.remove_node(node).await?;
        Ok(())
    }

    async fn set_in_use(
        &self,
        node: &String,
        in_use: Vec<String>,
    ) -> Result<Supported, HarnessError> {
        self.cluster.set_in_use(node, &in_use).await?;
        Ok(Supported::Yes)
    }

    async fn set_fenced(&self, node: &String, fenced: bool) -> Result<Supported, HarnessError> {
        if fenced {
            self.cluster.fence(node, "conformance").await?;
        } else {
            self.cluster.unfence(node).await?;
        }
        Ok(Supported::Yes)
    }

    async fn set_healthy(&self, node: &String, healthy: bool) -> Result<Supported, HarnessError> {
        if healthy {
            self.cluster.set_alive(node, None).await?;
        } else {
            self.cluster.set_dead(node).await?;
        }
        Ok(Supported::Yes)
    }
}

#[tokio::test]
async fn the_etcd_store_passes_the_conformance_kit() {
    let etcd = etcd_or_skip!("the_etcd_store_passes_the_conformance_kit");
    let client = etcd.client().await;
    let layout = KeyLayout::new("/conformance");
    let harness = Harness {
        store: EtcdStatusStore::new(client.clone(), layout.clone()),
        second: EtcdStatusStore::new(etcd.client().await, layout.clone()),
        cluster: ClusterWriter::new(client, layout),
    };
    if let Err(failures) = conformance::check_store(&harness).await {
        panic!("{failures}");
    }
}

#[tokio::test]
async fn the_fenced_etcd_store_of_a_leader_passes_the_conformance_kit() {
    let etcd = etcd_or_skip!("the_fenced_etcd_store_of_a_leader_passes_the_conformance_kit");
    let client = etcd.client().await;
    let layout = KeyLayout::new("/conformance-fenced");
    let lease = client.lease_client().grant(60, None).await.unwrap().id();
    let leader = client
        .election_client()
        .campaign(layout.election(), "replica", lease)
        .await
        .unwrap()
        .take_leader()
        .unwrap();
    let fence = Fence::new(leader.key(), leader.rev());
    // The second client writes as the same leader, on a connection of its own and with a
    // `Fence` handle of its own on the leader key.
    let second_fence = Fence::new(leader.key(), leader.rev());
    let harness = Harness {
        store: EtcdStatusStore::new(client.clone(), layout.clone()).fenced(fence.clone()),
        second: EtcdStatusStore::new(etcd.client().await, layout.clone())
            .fenced(second_fence.clone()),
        cluster: ClusterWriter::new(client, layout),
    };
    if let Err(failures) = conformance::check_store(&harness).await {
        panic!("{failures}");
    }
    assert!(!fence.is_deposed());
    assert!(!second_fence.is_deposed());
}
