//! The simulated cloud against a real etcd: the conformance kit's backend suite, the promises
//! about calls under way, the invariants it records, and a deposed leader's calls refused.

mod common;

use std::time::Duration;

use async_trait::async_trait;
use attach_detach::Ids;
use attach_detach::conformance::{self, BackendHarness, HarnessError};
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::traits::{AttachBackend, BackendError};
use attach_detach_etcd::{
    CloudConfig, CloudState, ClusterWriter, Deposed, Fence, KeyLayout, SimulatedCloud,
};

type D = Ids<String, String, String, ()>;

struct Harness {
    cloud: SimulatedCloud<D>,
    cluster: ClusterWriter<D>,
}

#[async_trait]
impl BackendHarness<D> for Harness {
    fn backend(&self) -> &dyn AttachBackend<D> {
        &self.cloud
    }

    fn node(&self, n: usize) -> String {
        format!("node-{n}")
    }

    async fn volume(&self, n: usize, access: Access) -> Result<(String, ()), HarnessError> {
        let volume = format!("vol-{n}");
        self.cluster
            .set_volume(
                &volume,
                &VolumeSpec {
                    access,
                    payload: (),
                    attach_required: true,
                    driver: None,
                },
            )
            .await?;
        Ok((volume, ()))
    }

    fn call_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
}

fn quick() -> CloudConfig {
    CloudConfig {
        latency: Duration::from_millis(20),
        failure_rate: 0.0,
        seed: 3,
    }
}

#[tokio::test]
async fn the_simulated_cloud_passes_the_backend_conformance_suite() {
    let etcd = etcd_or_skip!("the_simulated_cloud_passes_the_backend_conformance_suite");
    let layout = KeyLayout::new("/c1");
    let client = etcd.client().await;
    let harness = Harness {
        cloud: SimulatedCloud::new(client.clone(), layout.clone(), quick()),
        cluster: ClusterWriter::new(client, layout),
    };
    if let Err(failures) = conformance::check_backend(&harness).await {
        panic!("{failures}");
    }
    assert!(harness.cloud.violations().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_under_way_count_as_attached_and_block_the_opposite_call() {
    let etcd = etcd_or_skip!("calls_under_way_count_as_attached_and_block_the_opposite_call");
    let layout = KeyLayout::new("/c2");
    let client = etcd.client().await;
    let slow = CloudConfig {
        latency: Duration::from_millis(600),
        ..quick()
    };
    let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), slow);
    let cluster = ClusterWriter::<D>::new(client, layout);
    let (v, n) = ("v1".to_string(), "n1".to_string());
    cluster
        .set_volume(&v, &VolumeSpec::single_node(()))
        .await
        .unwrap();

    let attaching = tokio::spawn({
        let cloud = cloud.clone();
        let (v, n) = (v.clone(), n.clone());
        async move { cloud.attach(&v, &n, &()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Under way: listed, verified, and a detach of the pair is refused as transient.
    let verified = cloud.verify(&n, &[(v.clone(), ())]).await.unwrap();
    assert_eq!(verified, std::slice::from_ref(&v));
    assert_eq!(cloud.list().await.unwrap().len(), 1);
    assert_eq!(
        cloud.record().await.unwrap()[0].state,
        CloudState::Attaching
    );
    let refused = cloud.detach(&v, &n, &()).await.unwrap_err();
    assert!(
        matches!(refused, BackendError::Transient { .. }),
        "{refused}"
    );
    // A second attach waits for the first and succeeds (idempotent).
    cloud.attach(&v, &n, &()).await.unwrap();
    attaching.await.unwrap().unwrap();
    assert_eq!(cloud.record().await.unwrap()[0].state, CloudState::Attached);

    let detaching = tokio::spawn({
        let cloud = cloud.clone();
        let (v, n) = (v.clone(), n.clone());
        async move { cloud.detach(&v, &n, &()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        cloud.record().await.unwrap()[0].state,
        CloudState::Detaching
    );
    let refused = cloud.attach(&v, &n, &()).await.unwrap_err();
    assert!(
        matches!(refused, BackendError::Transient { .. }),
        "{refused}"
    );
    detaching.await.unwrap().unwrap();
    assert!(cloud.record().await.unwrap().is_empty());
    assert!(cloud.violations().await.unwrap().is_empty());
}

#[tokio::test]
async fn broken_invariants_are_recorded_in_the_transaction_of_the_call() {
    let etcd = etcd_or_skip!("broken_invariants_are_recorded_in_the_transaction_of_the_call");
    let layout = KeyLayout::new("/c3");
    let client = etcd.client().await;
    let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), quick());
    let cluster = ClusterWriter::<D>::new(client, layout);
    let (v, n1, n2) = ("v1".to_string(), "n1".to_string(), "n2".to_string());
    cluster
        .set_volume(&v, &VolumeSpec::single_node(()))
        .await
        .unwrap();
    cloud.attach(&v, &n1, &()).await.unwrap();
    // It does what it is asked, and says what that broke.
    cloud.attach(&v, &n2, &()).await.unwrap();
    let violations = cloud.violations().await.unwrap();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("I1: attach of single-node volume v1 to n2"));

    // I2: n1's agent has v1 in use, n1 is not fenced.
    cluster
        .set_in_use(&n1, std::slice::from_ref(&v))
        .await
        .unwrap();
    cloud.detach(&v, &n1, &()).await.unwrap();
    let violations = cloud.violations().await.unwrap();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[1].starts_with("I2: detach of v1 from n1"));
    // Fenced, the same detach is allowed.
    cluster
        .set_in_use(&n2, std::slice::from_ref(&v))
        .await
        .unwrap();
    cluster.fence(&n2, "powered off").await.unwrap();
    cloud.detach(&v, &n2, &()).await.unwrap();
    assert_eq!(cloud.violations().await.unwrap().len(), 2);
    assert!(cloud.record().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_deposed_leaders_cloud_calls_are_refused_and_do_nothing() {
    let etcd = etcd_or_skip!("a_deposed_leaders_cloud_calls_are_refused_and_do_nothing");
    let layout = KeyLayout::new("/c4");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let v = "v1".to_string();
    cluster
        .set_volume(&v, &VolumeSpec::single_node(()))
        .await
        .unwrap();
    let lease = client.lease_client().grant(60, None).await.unwrap().id();
    let leader = client
        .election_client()
        .campaign(layout.election(), "a", lease)
        .await
        .unwrap()
        .take_leader()
        .unwrap();
    let fence = Fence::new(leader.key(), leader.rev());
    let cloud =
        SimulatedCloud::<D>::new(client.clone(), layout.clone(), quick()).fenced(fence.clone());
    cloud.attach(&v, &"n1".to_string(), &()).await.unwrap();

    client.lease_client().revoke(lease).await.unwrap();
    let refused = cloud.detach(&v, &"n1".to_string(), &()).await.unwrap_err();
    assert!(
        matches!(refused, BackendError::Transient { .. }),
        "{refused}"
    );
    let source = std::error::Error::source(&refused).expect("the refusal's cause");
    assert!(source.downcast_ref::<Deposed>().is_some(), "{source}");
    assert!(cloud.attach(&v, &"n2".to_string(), &()).await.is_err());
    assert!(fence.is_deposed());
    assert_eq!(cloud.refused_by_fence(), 2);
    let record = cloud.record().await.unwrap();
    assert_eq!(record.len(), 1);
    assert_eq!(
        (record[0].node.as_str(), record[0].state),
        ("n1", CloudState::Attached)
    );
}
