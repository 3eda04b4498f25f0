//! The status store against a real etcd: compare-and-set between writers, the fence, and etcd
//! killed in the middle of writes.

mod common;

use std::sync::Arc;

use attach_detach::Ids;
use attach_detach::traits::{NodeStatusStore, ReportedVolume, Revision, StoreError};
use attach_detach_etcd::{ClusterWriter, Deposed, EtcdStatusStore, Fence, KeyLayout};

type D = Ids<String, String, String, ()>;

fn list(volumes: &[&str]) -> Vec<ReportedVolume<D>> {
    volumes
        .iter()
        .map(|v| ReportedVolume {
            volume: v.to_string(),
            device: Some(Arc::from(format!("/dev/{v}"))),
        })
        .collect()
}

fn names(attached: &[ReportedVolume<D>]) -> Vec<&str> {
    attached.iter().map(|r| r.volume.as_str()).collect()
}

/// The node's agent reports v1 in use and holds its lease; the node is fenced.
async fn agents_report_v1_in_use_alive_and_fenced(cluster: &ClusterWriter<D>, node: &String) {
    cluster.set_in_use(node, &["v1".to_string()]).await.unwrap();
    cluster.set_alive(node, None).await.unwrap();
    cluster.fence(node, "powered off by ipmi").await.unwrap();
}

#[tokio::test]
async fn a_node_reads_its_five_keys_as_one_status() {
    let etcd = etcd_or_skip!("a_node_reads_its_five_keys_as_one_status");
    let layout = KeyLayout::new("/t1");
    let client = etcd.client().await;
    let store = EtcdStatusStore::<D>::new(client.clone(), layout.clone());
    let cluster = ClusterWriter::<D>::new(client, layout);
    let node = "n1".to_string();

    assert_eq!(store.read(&node).await, Err(StoreError::not_found()));
    cluster.add_node(&node).await.unwrap();
    let fresh = store.read(&node).await.unwrap();
    assert!(fresh.attached.is_empty());
    assert_eq!(fresh.revision, Revision::from(0));
    assert_eq!(
        (fresh.in_use, fresh.fenced, fresh.healthy),
        (None, Some(false), Some(false))
    );

    agents_report_v1_in_use_alive_and_fenced(&cluster, &node).await;
    let written = store
        .write(&node, &list(&["v1", "v2"]).into(), fresh.revision)
        .await
        .unwrap();
    let status = store.read(&node).await.unwrap();
    assert_eq!(status.revision, written);
    assert_eq!(status.attached, list(&["v1", "v2"]));
    assert_eq!(status.in_use, Some(vec!["v1".to_string()]));
    assert_eq!((status.fenced, status.healthy), (Some(true), Some(true)));

    let listed = store.list().await.unwrap();
    assert_eq!(listed, vec![(node.clone(), status)]);

    // A write to a node that is gone is NotFound, and creates nothing.
    cluster.remove_node(&node).await.unwrap();
    assert_eq!(
        store.write(&node, &[].into(), written).await,
        Err(StoreError::not_found())
    );
    assert_eq!(store.read(&node).await, Err(StoreError::not_found()));
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_write_reads_the_nodes_facts_in_its_own_transaction() {
    let etcd = etcd_or_skip!("a_write_reads_the_nodes_facts_in_its_own_transaction");
    let layout = KeyLayout::new("/t5");
    let client = etcd.client().await;
    let store = EtcdStatusStore::<D>::new(client.clone(), layout.clone());
    let cluster = ClusterWriter::<D>::new(client, layout);
    let node = "n1".to_string();
    cluster.add_node(&node).await.unwrap();

    // Nothing reported yet: no in-use list, not fenced, no lease.
    let first = store
        .write_reading_facts(&node, &list(&["v1"]).into(), Revision::from(0))
        .await
        .unwrap();
    let facts = first.facts.expect("the transaction read the facts");
    assert_eq!(
        (facts.in_use, facts.fenced, facts.healthy),
        (None, Some(false), Some(false))
    );

    agents_report_v1_in_use_alive_and_fenced(&cluster, &node).await;
    let second = store
        .write_reading_facts(&node, &[].into(), first.revision.clone())
        .await
        .unwrap();
    // The facts are what a read at the write's revision gives.
    let read = store.read(&node).await.unwrap();
    assert_eq!(read.revision, second.revision);
    assert_eq!(second.facts, Some(read.facts()));
    assert_eq!(read.in_use, Some(vec!["v1".to_string()]));
    assert_eq!((read.fenced, read.healthy), (Some(true), Some(true)));

    // A lost race reads nothing and writes nothing.
    assert_eq!(
        store
            .write_reading_facts(&node, &list(&["v2"]).into(), first.revision)
            .await,
        Err(StoreError::conflict(second.revision))
    );
    assert!(store.read(&node).await.unwrap().attached.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_on_one_revision_one_wins_the_other_conflicts() {
    let etcd = etcd_or_skip!("two_writers_racing_on_one_revision_one_wins_the_other_conflicts");
    let layout = KeyLayout::new("/t2");
    // Two clients, as two controller replicas would have.
    let a = EtcdStatusStore::<D>::new(etcd.client().await, layout.clone());
    let b = EtcdStatusStore::<D>::new(etcd.client().await, layout.clone());
    let cluster = ClusterWriter::<D>::new(etcd.client().await, layout);
    let node = "n1".to_string();
    cluster.add_node(&node).await.unwrap();

    let mut wins = [0; 2];
    for round in 0..50 {
        let seen = a.read(&node).await.unwrap().revision;
        let mine = list(&[&format!("a{round}")]);
        let theirs = list(&[&format!("b{round}")]);
        let (mine_packed, theirs_packed) = (mine.clone().into(), theirs.clone().into());
        let (ra, rb) = tokio::join!(
            a.write(&node, &mine_packed, seen.clone()),
            b.write(&node, &theirs_packed, seen.clone())
        );
        let now = a.read(&node).await.unwrap();
        match (ra, rb) {
            (Ok(won), Err(StoreError::Conflict { current, .. })) => {
                wins[0] += 1;
                assert_eq!((now.revision, current), (won.clone(), Some(won)));
                assert_eq!(now.attached, mine);
            }
            (Err(StoreError::Conflict { current, .. }), Ok(won)) => {
                wins[1] += 1;
                assert_eq!((now.revision, current), (won.clone(), Some(won)));
                assert_eq!(now.attached, theirs);
            }
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        }
    }
    assert_eq!(wins[0] + wins[1], 50);
}

#[tokio::test]
async fn a_deposed_leaders_write_is_refused_by_etcd_itself() {
    let etcd = etcd_or_skip!("a_deposed_leaders_write_is_refused_by_etcd_itself");
    let layout = KeyLayout::new("/t3");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let node = "n1".to_string();
    cluster.add_node(&node).await.unwrap();

    // Elected: a leader key bound to a lease.
    let lease = client.lease_client().grant(60, None).await.unwrap().id();
    let mut election = client.election_client();
    let leader = election
        .campaign(layout.election(), "replica-a", lease)
        .await
        .unwrap()
        .take_leader()
        .unwrap();
    let fence = Fence::new(leader.key(), leader.rev());
    let store = EtcdStatusStore::<D>::new(client.clone(), layout.clone()).fenced(fence.clone());
    let first = store
        .write(&node, &list(&["v1"]).into(), Revision::from(0))
        .await
        .unwrap();

    // The lease ends (as it does when the leader is paused past its TTL): the leader key goes.
    client.lease_client().revoke(lease).await.unwrap();
    let refused = store
        .write(&node, &list(&["v1", "v2"]).into(), first.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::Transient { .. }),
        "{refused:?}"
    );
    let source = std::error::Error::source(&refused).expect("the refusal's cause");
    assert!(source.downcast_ref::<Deposed>().is_some(), "{source}");
    assert!(fence.is_deposed());
    assert_eq!(store.stats().refused_by_fence(), 1);
    let unfenced = EtcdStatusStore::<D>::new(client.clone(), layout.clone());
    let status = unfenced.read(&node).await.unwrap();
    assert_eq!(
        (status.revision, names(&status.attached)),
        (first.clone(), vec!["v1"])
    );

    // A new leader's key is another key: the old fence does not hold for it either.
    let lease = client.lease_client().grant(60, None).await.unwrap().id();
    let next = election
        .campaign(layout.election(), "replica-b", lease)
        .await
        .unwrap()
        .take_leader()
        .unwrap();
    assert!(next.rev() > leader.rev());
    assert!(store.write(&node, &[].into(), first.clone()).await.is_err());
    let new_store = unfenced.fenced(Fence::new(next.key(), next.rev()));
    new_store.write(&node, &[].into(), first).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_in_the_middle_of_writes_loses_no_acknowledged_write() {
    let mut etcd = etcd_or_skip!("etcd_killed_in_the_middle_of_writes_loses_no_acknowledged_write");
    let layout = KeyLayout::new("/t4");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let store = EtcdStatusStore::<D>::new(client, layout);
    let node = "n1".to_string();
    cluster.add_node(&node).await.unwrap();

    // A writer that follows the core's protocol: write against the revision it holds; after a
    // conflict or an uncertain answer, read before writing again.
    let writer = tokio::spawn(async move {
        let mut held: Option<Revision> = Some(Revision::from(0));
        let mut acked: Option<usize> = None;
        let mut uncertain_after_ack = Vec::new();
        let mut failures = (0, 0);
        for k in 0..400 {
            let revision = match held.take() {
                Some(revision) => revision,
                None => match store.read(&node).await {
                    Ok(status) => status.revision,
                    Err(StoreError::Transient { .. }) => {
                        failures.0 += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        continue;
                    }
                    Err(e) => panic!("read failed with {e:?}"),
                },
            };
            match store
                .write(&node, &list(&[&format!("v{k}")]).into(), revision)
                .await
            {
                Ok(revision) => {
                    held = Some(revision);
                    acked = Some(k);
                    uncertain_after_ack.clear();
                }
                Err(StoreError::Uncertain { .. }) => {
                    failures.1 += 1;
                    uncertain_after_ack.push(k);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(StoreError::Transient { .. } | StoreError::Conflict { .. }) => {
                    failures.0 += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("write failed with {e:?}"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        (acked, uncertain_after_ack, failures)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // SIGKILL, no clean shutdown, then start again on the same data: writes fail meanwhile.
    let etcd = tokio::task::spawn_blocking(move || {
        etcd.kill();
        std::thread::sleep(std::time::Duration::from_millis(500));
        etcd.restart();
        etcd
    })
    .await
    .unwrap();
    let (acked, uncertain, failures) = writer.await.unwrap();
    assert!(
        failures.0 + failures.1 > 0,
        "etcd's restart went unnoticed: the test did not test it"
    );
    let acked = acked.expect("writes were acknowledged");
    let read = EtcdStatusStore::<D>::new(etcd.client().await, KeyLayout::new("/t4"));
    let status = read.read(&"n1".to_string()).await.unwrap();
    // What etcd holds is the last acknowledged list, or one written after it whose answer was
    // lost: never an older one.
    let last = format!("v{acked}");
    let allowed: Vec<String> = std::iter::once(last)
        .chain(uncertain.iter().map(|k| format!("v{k}")))
        .collect();
    let holds = names(&status.attached).join(",");
    assert!(
        allowed.contains(&holds),
        "etcd holds {holds}, allowed {allowed:?}"
    );
    eprintln!(
        "acknowledged up to v{acked}; failed writes: {} did nothing, {} uncertain",
        failures.0, failures.1
    );
}
