//! The root crate's conformance kit against the etcd store, on a real etcd: unfenced, and as
//! an elected leader whose every write carries its fence; and against clients that put a
//! flawed compare-and-set in front of it, to show the kit's two-client checks catch them over
//! a real etcd where its single-client checks cannot.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use attach_detach::Ids;
use attach_detach::conformance::{self, HarnessError, StoreHarness, Supported};
use attach_detach::traits::{NodeStatus, NodeStatusStore, ReportedVolumes, Revision, StoreError};
use attach_detach_etcd::{ClusterWriter, EtcdStatusStore, Fence, KeyLayout};

type D = Ids<String, String, String, ()>;

/// The etcd store, a second one on a connection of its own (another replica), and the
/// scheduler's, node agents' and fencing agent's writes.
struct Harness<S = EtcdStatusStore<D>> {
    store: S,
    second: S,
    cluster: ClusterWriter<D>,
}

#[async_trait]
impl<S: NodeStatusStore<D>> StoreHarness<D> for Harness<S> {
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

/// How a [`Flawed`] client gets the compare-and-set wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flaw {
    /// Compares the expected revision with the one this client last saw of the node (read,
    /// listed or written), then writes at whatever revision the node holds now: no condition
    /// the caller asked for reaches etcd.
    ComparesOnClient,
    /// Sends a write at a revision this client once read at the newest revision it read of
    /// the node, as if the caller had merely not caught up.
    WritesAtNewestRead,
}

/// What a [`Flawed`] client remembers of a node.
#[derive(Default)]
struct Seen {
    /// Every revision its reads returned, oldest first.
    read: Vec<Revision>,
    /// The revision it last saw.
    last: Option<Revision>,
}

/// An etcd store client with a [`Flaw`] in front of it. Its memory is its own, as a second
/// replica's would be.
struct Flawed {
    etcd: EtcdStatusStore<D>,
    flaw: Flaw,
    seen: Mutex<BTreeMap<String, Seen>>,
}

impl Flawed {
    fn new(etcd: EtcdStatusStore<D>, flaw: Flaw) -> Self {
        Flawed {
            etcd,
            flaw,
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    fn saw(&self, node: &str, change: impl FnOnce(&mut Seen)) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        change(seen.entry(node.to_owned()).or_default());
    }

    fn seen<T>(&self, node: &str, look: impl FnOnce(Option<&Seen>) -> T) -> T {
        look(
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(node),
        )
    }
}

#[async_trait]
impl NodeStatusStore<D> for Flawed {
    async fn read(&self, node: &String) -> Result<NodeStatus<D>, StoreError> {
        let status = self.etcd.read(node).await?;
        self.saw(node, |seen| {
            seen.read.push(status.revision.clone());
            seen.last = Some(status.revision.clone());
        });
        Ok(status)
    }

    async fn write(
        &self,
        node: &String,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let sent = match self.flaw {
            Flaw::ComparesOnClient => {
                if let Some(last) = self.seen(node, |seen| seen.and_then(|s| s.last.clone()))
                    && last != expected
                {
                    return Err(StoreError::conflict(last));
                }
                self.etcd.read(node).await?.revision
            }
            Flaw::WritesAtNewestRead => self
                .seen(node, |seen| {
                    seen.filter(|s| s.read.contains(&expected))
                        .and_then(|s| s.read.last().cloned())
                })
                .unwrap_or(expected),
        };
        let revision = self.etcd.write(node, attached, sent).await?;
        self.saw(node, |seen| seen.last = Some(revision.clone()));
        Ok(revision)
    }

    async fn list(&self) -> Result<Vec<(String, NodeStatus<D>)>, StoreError> {
        let listed = self.etcd.list().await?;
        for (node, status) in &listed {
            self.saw(node, |seen| seen.last = Some(status.revision.clone()));
        }
        Ok(listed)
    }
}

/// Over a real etcd, each flawed client passes every check made through one client and is
/// caught by a check that races two.
#[tokio::test]
async fn flawed_clients_over_etcd_are_caught_by_the_two_client_checks() {
    let etcd = etcd_or_skip!("flawed_clients_over_etcd_are_caught_by_the_two_client_checks");
    let two_clients = [
        "clients_read_each_others_writes",
        "write_after_another_clients_write_conflicts",
        "two_clients_racing_one_wins",
        "write_at_a_revision_older_than_the_last_read_conflicts",
    ];
    for (flaw, caught_by) in [
        (
            Flaw::ComparesOnClient,
            "write_after_another_clients_write_conflicts",
        ),
        (
            Flaw::WritesAtNewestRead,
            "write_at_a_revision_older_than_the_last_read_conflicts",
        ),
    ] {
        let layout = KeyLayout::new(format!("/conformance-{flaw:?}"));
        let client =
            |connection| Flawed::new(EtcdStatusStore::new(connection, layout.clone()), flaw);
        let harness = Harness {
            store: client(etcd.client().await),
            second: client(etcd.client().await),
            cluster: ClusterWriter::new(etcd.client().await, layout.clone()),
        };
        let failures = conformance::check_store(&harness)
            .await
            .expect_err("a flawed client passed every check");
        let failed = failures.failed_checks();
        assert!(failed.contains(&caught_by), "{flaw:?}: {failures}");
        // Of the single-client checks, only two concurrent writes through the one client can
        // catch a client-side compare, and only when the second checks before the first
        // lands, which the scheduler decides: the two-client checks catch it every time.
        assert!(
            failed
                .iter()
                .all(|check| two_clients.contains(check) || *check == "concurrent_writers_one_wins"),
            "{flaw:?} failed a single-client check: {failures}"
        );
    }
}
