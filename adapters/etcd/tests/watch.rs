//! The input watcher against a real etcd: the relist batch, what each key becomes, values that
//! do not decode, a compaction under the watch, etcd restarted under it, and a controller fed
//! by it end to end.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::controller::{Controller, World};
use attach_detach::core::{Input, Kind, NodeFacts, Reconciler, VolumeSpec};
use attach_detach::memory::MemoryBackend;
use attach_detach::traits::NodeStatusStore;
use attach_detach_etcd::client::CompactionOptions;
use attach_detach_etcd::{ClusterWriter, EtcdStatusStore, InputWatcher, KeyKind, KeyLayout};

type D = Ids<String, String, String, ()>;

/// How long anything the tests wait for may take (real time, a loaded machine).
const PATIENCE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

fn s(x: &str) -> String {
    x.to_string()
}

fn facts(healthy: bool, fenced: bool, in_use: Option<&[&str]>) -> NodeFacts<String> {
    NodeFacts {
        healthy,
        fenced,
        in_use: in_use.map(|list| list.iter().map(|v| s(v)).collect()),
        attach_limit: None,
        driver_limits: Vec::new(),
    }
}

fn node(n: &str, facts: NodeFacts<String>) -> Input<D> {
    Input::NodeUpdated { node: s(n), facts }
}

fn volume(v: &str, spec: VolumeSpec<()>) -> Input<D> {
    Input::SetVolume { volume: s(v), spec }
}

fn workload(w: &str, n: &str, volumes: &[&str]) -> Input<D> {
    Input::WorkloadScheduled {
        workload: s(w),
        node: s(n),
        volumes: volumes.iter().map(|v| s(v)).collect(),
    }
}

/// A relist batch of these upserts, in the order the watcher sends them.
fn relist(upserts: Vec<Input<D>>) -> Vec<Input<D>> {
    let mut batch: Vec<Input<D>> = [Kind::Volume, Kind::Node, Kind::Workload]
        .map(|kind| Input::RelistStarted { kind })
        .into();
    batch.extend(upserts);
    batch.extend([Kind::Workload, Kind::Node, Kind::Volume].map(|kind| Input::RelistDone { kind }));
    batch
}

fn is_relist(batch: &[Input<D>]) -> bool {
    matches!(batch.first(), Some(Input::RelistStarted { .. }))
}

/// Waits at most [`PATIENCE`] for `future`.
async fn patiently<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {PATIENCE:?}"))
}

/// The next batch, which must come and be Ok.
async fn next(watcher: &mut InputWatcher<D>) -> Vec<Input<D>> {
    patiently("the watcher's next batch", watcher.next())
        .await
        .expect("the watcher's next batch")
}

/// Polls `check` every 50 ms until it holds, for at most [`PATIENCE`].
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// What a core's desired state holds, in a form to compare: nodes, volumes with their spec,
/// workloads with their node and volumes (placed or waiting).
#[derive(Debug, PartialEq)]
struct View {
    nodes: Vec<String>,
    volumes: Vec<(String, VolumeSpec<()>)>,
    workloads: Vec<(String, String, Vec<String>)>,
}

fn view(core: &Reconciler<D>) -> View {
    let desired = core.desired();
    let mut nodes: Vec<String> = desired.nodes().cloned().collect();
    nodes.sort();
    let mut volumes: Vec<(String, VolumeSpec<()>)> = desired
        .registered_volumes()
        .map(|v| (v.clone(), desired.spec(v).unwrap().clone()))
        .collect();
    volumes.sort_by(|a, b| a.0.cmp(&b.0));
    let mut workloads: Vec<(String, String, Vec<String>)> = desired
        .workloads()
        .map(|w| match desired.placement(w) {
            Some((n, vs)) => (w.clone(), n.clone(), vs.to_vec()),
            None => {
                let p = desired.pending(w).unwrap();
                (w.clone(), p.node, p.volumes)
            }
        })
        .collect();
    workloads.sort();
    View {
        nodes,
        volumes,
        workloads,
    }
}

/// A fresh core fed `batches`, none of whose inputs it may refuse.
fn core_fed(batches: &[&[Input<D>]]) -> Reconciler<D> {
    let mut core = Reconciler::new(Config::default());
    for batch in batches {
        let refused = core.handle_all(batch.iter().cloned());
        assert!(refused.is_empty(), "refused: {refused:?}");
    }
    core
}

/// What etcd holds now under `layout`, as a fresh watcher's first listing shows it to a fresh
/// core.
async fn etcd_view(client: &attach_detach_etcd::client::Client, layout: &KeyLayout) -> View {
    let mut fresh = InputWatcher::<D>::new(client.clone(), layout.clone());
    let batch = next(&mut fresh).await;
    view(&core_fed(&[&batch]))
}

#[tokio::test]
async fn the_first_call_lists_every_kind_as_one_relist_batch() {
    let etcd = etcd_or_skip!("the_first_call_lists_every_kind_as_one_relist_batch");
    let layout = KeyLayout::new("/w1");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    // Written in an order the batch does not follow: workloads first.
    cluster
        .schedule(&s("w2"), &s("n2"), &[s("v2")])
        .await
        .unwrap();
    cluster
        .schedule(&s("w1"), &s("n1"), &[s("v1")])
        .await
        .unwrap();
    cluster.add_node(&s("n2")).await.unwrap();
    cluster.fence(&s("n2"), "ipmi off").await.unwrap();
    cluster.add_node(&s("n1")).await.unwrap();
    cluster.set_alive(&s("n1"), None).await.unwrap();
    cluster.set_in_use(&s("n1"), &[s("v1")]).await.unwrap();
    cluster
        .set_volume(&s("v2"), &VolumeSpec::multi_node(()))
        .await
        .unwrap();
    cluster
        .set_volume(&s("v1"), &VolumeSpec::single_node(()))
        .await
        .unwrap();
    // Facts of a node without its node key: cached, not sent.
    cluster.set_alive(&s("n3"), None).await.unwrap();
    // Keys that are no input: the controller's own, another prefix's.
    let mut kv = client.kv_client();
    kv.put(layout.key(KeyKind::Attached, "n1"), "[]", None)
        .await
        .unwrap();
    let other = KeyLayout::new("/w1-other");
    let written = kv
        .put(other.key(KeyKind::Node, "elsewhere"), "{}", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();

    let mut watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    assert_eq!(watcher.revision(), 0);
    let batch = next(&mut watcher).await;
    assert_eq!(
        batch,
        relist(vec![
            volume("v1", VolumeSpec::single_node(())),
            volume("v2", VolumeSpec::multi_node(())),
            node("n1", facts(true, false, Some(&["v1"]))),
            node("n2", facts(false, true, None)),
            workload("w1", "n1", &["v1"]),
            workload("w2", "n2", &["v2"]),
        ])
    );
    assert!(
        watcher.revision() >= written,
        "listed at the current revision"
    );
    assert_eq!((watcher.relists(), watcher.undecodable()), (1, 0));

    // Fed to a core, the batch places both workloads at once: nothing waits.
    let core = core_fed(&[&batch]);
    assert_eq!(core.desired().pending_len(), 0);
    assert!(core.desired().placement(&s("w1")).is_some());

    // The node key of n3 brings its cached facts.
    cluster.add_node(&s("n3")).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n3", facts(true, false, None))]
    );
}

#[tokio::test]
async fn a_relist_spans_several_pages() {
    let etcd = etcd_or_skip!("a_relist_spans_several_pages");
    let layout = KeyLayout::new("/w2");
    let client = etcd.client().await;
    // More keys than one page (1000) holds, written 100 a transaction (etcd's limit is 128).
    let mut kv = client.kv_client();
    for chunk in 0..25 {
        let ops: Vec<attach_detach_etcd::client::TxnOp> = (0..100)
            .map(|i| {
                let n = chunk * 100 + i;
                attach_detach_etcd::client::TxnOp::put(
                    layout.key(KeyKind::Volume, &format!("v{n:04}")),
                    r#"{"access":"single-node","payload":null}"#,
                    None,
                )
            })
            .collect();
        kv.txn(attach_detach_etcd::client::Txn::new().and_then(ops))
            .await
            .unwrap();
    }
    let mut watcher = InputWatcher::<D>::new(client, layout);
    let batch = next(&mut watcher).await;
    let volumes: Vec<&String> = batch
        .iter()
        .filter_map(|i| match i {
            Input::SetVolume { volume, .. } => Some(volume),
            _ => None,
        })
        .collect();
    assert_eq!(volumes.len(), 2_500);
    assert!(
        volumes.windows(2).all(|w| w[0] < w[1]),
        "in key order, once each"
    );
    assert_eq!(batch.len(), 2_506);
}

#[tokio::test]
async fn every_key_kind_maps_to_its_input_on_put_and_delete() {
    let etcd = etcd_or_skip!("every_key_kind_maps_to_its_input_on_put_and_delete");
    let layout = KeyLayout::new("/w3");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let mut watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    assert_eq!(next(&mut watcher).await, relist(vec![]));
    let n1 = s("n1");

    cluster.add_node(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(false, false, None))]
    );
    cluster.set_alive(&n1, None).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, false, None))]
    );
    cluster.set_in_use(&n1, &[s("v1")]).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, false, Some(&["v1"])))]
    );
    cluster.fence(&n1, "isolated").await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, true, Some(&["v1"])))]
    );
    // The same list again changes no fact: nothing is sent (the next change shows it).
    cluster.set_in_use(&n1, &[s("v1")]).await.unwrap();
    cluster.set_in_use(&n1, &[]).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, true, Some(&[])))]
    );
    cluster.unfence(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, false, Some(&[])))]
    );
    cluster.clear_in_use(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, false, None))]
    );
    cluster.set_dead(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(false, false, None))]
    );

    cluster
        .set_volume(&s("v1"), &VolumeSpec::single_node(()))
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![volume("v1", VolumeSpec::single_node(()))]
    );
    cluster.remove_volume(&s("v1")).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![Input::VolumeRemoved { volume: s("v1") }]
    );
    cluster
        .schedule(&s("w1"), &n1, &[s("v1"), s("v2")])
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![workload("w1", "n1", &["v1", "v2"])]
    );
    cluster.remove_workload(&s("w1")).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![Input::WorkloadRemoved { workload: s("w1") }]
    );
    cluster.remove_node(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![Input::NodeRemoved { node: s("n1") }]
    );

    // A removed node's facts are not sent; they come back with its node key.
    cluster.set_alive(&n1, None).await.unwrap();
    cluster.add_node(&n1).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, false, None))]
    );
    // Several events of one watch response (one transaction) come as one batch, in order.
    let txn = attach_detach_etcd::client::Txn::new().and_then([
        attach_detach_etcd::client::TxnOp::delete(layout.key(KeyKind::Alive, "n1"), None),
        attach_detach_etcd::client::TxnOp::put(
            layout.key(KeyKind::Workload, "w2"),
            r#"{"node":"n1","volumes":[]}"#,
            None,
        ),
    ]);
    client.kv_client().txn(txn).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![
            node("n1", facts(false, false, None)),
            workload("w2", "n1", &[]),
        ]
    );
    assert_eq!(watcher.undecodable(), 0);
}

#[tokio::test]
async fn facts_written_before_the_node_key_arrive_with_it() {
    let etcd = etcd_or_skip!("facts_written_before_the_node_key_arrive_with_it");
    let layout = KeyLayout::new("/w4");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let mut watcher = InputWatcher::<D>::new(client, layout);
    assert_eq!(next(&mut watcher).await, relist(vec![]));

    // The agent and the fencing agent are faster than the scheduler: nothing to send yet.
    let n = s("n1");
    cluster.set_in_use(&n, &[s("v1"), s("v2")]).await.unwrap();
    cluster.set_alive(&n, None).await.unwrap();
    cluster.fence(&n, "maintenance").await.unwrap();
    cluster.add_node(&n).await.unwrap();
    // The first batch is the node's: the three fact events before it sent nothing.
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(true, true, Some(&["v1", "v2"])))]
    );

    // Facts that go away before the node key appears are not sent with it.
    let m = s("n2");
    cluster.fence(&m, "x").await.unwrap();
    cluster.unfence(&m).await.unwrap();
    cluster.add_node(&m).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n2", facts(false, false, None))]
    );
}

#[tokio::test]
async fn an_undecodable_value_is_skipped_without_losing_the_next_event() {
    let etcd = etcd_or_skip!("an_undecodable_value_is_skipped_without_losing_the_next_event");
    let layout = KeyLayout::new("/w5");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let mut kv = client.kv_client();
    // Already bad at the first listing: left out, counted.
    kv.put(layout.key(KeyKind::Workload, "bad-from-start"), "{", None)
        .await
        .unwrap();
    cluster.add_node(&s("n1")).await.unwrap();
    cluster
        .set_volume(&s("v1"), &VolumeSpec::single_node(()))
        .await
        .unwrap();
    cluster
        .schedule(&s("w1"), &s("n1"), &[s("v1")])
        .await
        .unwrap();
    let mut watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    let first = next(&mut watcher).await;
    assert_eq!(
        first,
        relist(vec![
            volume("v1", VolumeSpec::single_node(())),
            node("n1", facts(false, false, None)),
            workload("w1", "n1", &["v1"]),
        ])
    );
    assert_eq!(watcher.undecodable(), 1);

    // A bad value, then a good one: the good one comes, the bad one is counted.
    kv.put(layout.key(KeyKind::Volume, "junk"), "not json", None)
        .await
        .unwrap();
    cluster
        .set_volume(&s("v2"), &VolumeSpec::multi_node(()))
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![volume("v2", VolumeSpec::multi_node(()))]
    );
    assert_eq!(watcher.undecodable(), 2);

    // Values that no longer decode: the volume and the workload keep their last input (nothing
    // is sent); an in-use list that does not decode counts as never reported.
    cluster.set_in_use(&s("n1"), &[]).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(false, false, Some(&[])))]
    );
    kv.put(
        layout.key(KeyKind::Volume, "v1"),
        r#"{"access":"both"}"#,
        None,
    )
    .await
    .unwrap();
    kv.put(layout.key(KeyKind::Workload, "w1"), "[]", None)
        .await
        .unwrap();
    kv.put(layout.key(KeyKind::Volume, "v1"), "still bad", None)
        .await
        .unwrap();
    kv.put(layout.key(KeyKind::InUse, "n1"), "{", None)
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n1", facts(false, false, None))]
    );
    assert_eq!(watcher.undecodable(), 6);

    // A relist (after any gap) sends the previous inputs again, so it removes neither.
    watcher.resync();
    let again = next(&mut watcher).await;
    assert_eq!(
        again,
        relist(vec![
            volume("v1", VolumeSpec::single_node(())),
            volume("v2", VolumeSpec::multi_node(())),
            node("n1", facts(false, false, None)),
            workload("w1", "n1", &["v1"]),
        ])
    );
    assert_eq!(
        watcher.undecodable(),
        11,
        "v1, w1, in-use, junk and bad-from-start again"
    );
    let core = core_fed(&[&first, &again]);
    assert!(core.desired().is_registered(&s("v1")));
    assert!(core.desired().placement(&s("w1")).is_some());

    // Written right again: sent, and no longer held.
    cluster
        .set_volume(&s("v1"), &VolumeSpec::multi_node(()))
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![volume("v1", VolumeSpec::multi_node(()))]
    );
    // A bad key that is deleted: its removal is sent (a no-op for a core that never knew it).
    kv.delete(layout.key(KeyKind::Volume, "junk"), None)
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![Input::VolumeRemoved { volume: s("junk") }]
    );
}

#[tokio::test]
async fn a_compaction_under_the_watch_is_caught_and_the_relist_shows_the_gap() {
    let etcd = etcd_or_skip!("a_compaction_under_the_watch_is_caught_and_the_relist_shows_the_gap");
    let layout = KeyLayout::new("/w6");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    for n in ["n1", "n2"] {
        cluster.add_node(&s(n)).await.unwrap();
        cluster.set_in_use(&s(n), &[]).await.unwrap();
    }
    for v in ["v1", "v2"] {
        cluster
            .set_volume(&s(v), &VolumeSpec::single_node(()))
            .await
            .unwrap();
    }
    cluster
        .schedule(&s("w1"), &s("n1"), &[s("v1")])
        .await
        .unwrap();
    cluster
        .schedule(&s("w2"), &s("n2"), &[s("v2")])
        .await
        .unwrap();

    let mut watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    let first = next(&mut watcher).await;
    assert!(is_relist(&first));
    let listed_at = watcher.revision();

    // The watcher pauses. Meanwhile: a workload goes, a node and a volume come, a node's facts
    // change, another node goes; then etcd compacts past all of it.
    cluster.remove_workload(&s("w1")).await.unwrap();
    cluster.add_node(&s("n3")).await.unwrap();
    cluster.set_alive(&s("n3"), None).await.unwrap();
    cluster
        .set_volume(&s("v3"), &VolumeSpec::multi_node(()))
        .await
        .unwrap();
    cluster.fence(&s("n2"), "gone dark").await.unwrap();
    cluster
        .schedule(&s("w3"), &s("n3"), &[s("v3")])
        .await
        .unwrap();
    cluster.remove_node(&s("n1")).await.unwrap();
    let last = cluster.remove_volume(&s("v1")).await.unwrap();
    client
        .kv_client()
        .compact(last, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    assert!(
        last > listed_at + 1,
        "the watch's start revision is compacted"
    );

    // The next call finds its revisions gone and lists again.
    let second = next(&mut watcher).await;
    assert!(is_relist(&second), "not a relist: {second:?}");
    assert_eq!(watcher.relists(), 2);
    assert_eq!(watcher.revision(), last);
    assert!(second.contains(&node("n3", facts(true, false, None))));
    assert!(second.contains(&node("n2", facts(false, true, Some(&[])))));

    // Both batches, applied in order, leave the core with exactly what etcd holds, the
    // deletions of the gap included.
    let core = core_fed(&[&first, &second]);
    let now = etcd_view(&client, &layout).await;
    assert_eq!(view(&core), now);
    assert_eq!(
        now,
        View {
            nodes: vec![s("n2"), s("n3")],
            volumes: vec![
                (s("v2"), VolumeSpec::single_node(())),
                (s("v3"), VolumeSpec::multi_node(())),
            ],
            workloads: vec![
                (s("w2"), s("n2"), vec![s("v2")]),
                (s("w3"), s("n3"), vec![s("v3")]),
            ],
        }
    );
    assert!(core.desired().placement(&s("w1")).is_none());
    assert!(!core.desired().has_node(&s("n1")));

    // And the watch goes on from the relist.
    cluster.remove_workload(&s("w2")).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![Input::WorkloadRemoved { workload: s("w2") }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_broken_by_an_etcd_restart_recovers_with_a_relist() {
    let etcd = etcd_or_skip!("a_watch_broken_by_an_etcd_restart_recovers_with_a_relist");
    let layout = KeyLayout::new("/w7");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    cluster.add_node(&s("n1")).await.unwrap();
    let mut watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    let first = next(&mut watcher).await;
    assert!(is_relist(&first));
    // The watch is up and delivering.
    cluster
        .set_volume(&s("v1"), &VolumeSpec::single_node(()))
        .await
        .unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![volume("v1", VolumeSpec::single_node(()))]
    );

    // etcd dies (SIGKILL) while the watcher waits on its watch.
    let waiting = tokio::spawn(async move {
        let result = watcher.next().await;
        (watcher, result)
    });
    let mut etcd = tokio::task::spawn_blocking(move || {
        let mut etcd = etcd;
        etcd.kill();
        etcd
    })
    .await
    .unwrap();
    let (mut watcher, broken) = patiently("the broken watch", waiting).await.unwrap();
    assert!(broken.is_err(), "{broken:?}");
    // While etcd is down, the relist fails too.
    let down = patiently("a relist while etcd is down", watcher.next()).await;
    assert!(down.is_err(), "{down:?}");

    // etcd comes back; a change is made after the restart.
    let etcd = tokio::task::spawn_blocking(move || {
        etcd.restart();
        etcd
    })
    .await
    .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let removed_at = loop {
        match cluster.remove_node(&s("n1")).await {
            Ok(revision) => break revision,
            Err(e) => {
                assert!(Instant::now() < deadline, "etcd is still down: {e}");
                tokio::time::sleep(POLL).await;
            }
        }
    };

    // The watcher recovers: after errors while the client reconnects, a relist that shows it.
    let deadline = Instant::now() + PATIENCE;
    let recovered = loop {
        match patiently("the watcher after the restart", watcher.next()).await {
            Ok(batch) => break batch,
            Err(e) => {
                assert!(Instant::now() < deadline, "still failing: {e}");
                tokio::time::sleep(POLL).await;
            }
        }
    };
    assert_eq!(
        recovered,
        relist(vec![volume("v1", VolumeSpec::single_node(()))])
    );
    assert!(watcher.revision() >= removed_at);
    let core = core_fed(&[&first, &recovered]);
    assert!(!core.desired().has_node(&s("n1")));
    // And it watches again.
    cluster.add_node(&s("n2")).await.unwrap();
    assert_eq!(
        next(&mut watcher).await,
        vec![node("n2", facts(false, false, None))]
    );
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_fed_by_the_watcher_attaches_and_detaches() {
    let etcd = etcd_or_skip!("a_controller_fed_by_the_watcher_attaches_and_detaches");
    let layout = KeyLayout::new("/w8");
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let store = EtcdStatusStore::<D>::new(client.clone(), layout.clone());
    let backend = MemoryBackend::<D>::new();
    let controller = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        World::new(),
    )
    .unwrap();
    let (handle, task) = controller.spawn();
    let watcher = InputWatcher::<D>::new(client.clone(), layout.clone());
    let feeding = tokio::spawn(watcher.run(handle.clone(), Duration::from_millis(200)));

    let (n1, v1, w1) = (s("n1"), s("v1"), s("w1"));
    cluster.add_node(&n1).await.unwrap();
    cluster.set_alive(&n1, None).await.unwrap();
    cluster.set_in_use(&n1, &[]).await.unwrap();
    cluster
        .set_volume(&v1, &VolumeSpec::single_node(()))
        .await
        .unwrap();
    cluster.schedule(&w1, &n1, &[s("v1")]).await.unwrap();

    eventually("v1 attached to n1 and listed in attached/n1", || {
        let (backend, store, n1, v1) = (backend.clone(), store.clone(), n1.clone(), v1.clone());
        async move {
            backend.is_attached(&v1, &n1)
                && store
                    .read(&n1)
                    .await
                    .is_ok_and(|s| s.attached.iter().any(|r| r.volume == v1))
        }
    })
    .await;

    cluster.remove_workload(&w1).await.unwrap();
    eventually("v1 detached from n1 and gone from attached/n1", || {
        let (backend, store, n1, v1) = (backend.clone(), store.clone(), n1.clone(), v1.clone());
        async move {
            !backend.is_attached(&v1, &n1)
                && store.read(&n1).await.is_ok_and(|s| s.attached.is_empty())
        }
    })
    .await;

    // The controller stops; the watcher's loop notices and ends.
    handle.shutdown(Duration::from_secs(5)).await.unwrap();
    task.await.unwrap();
    patiently("the watcher's loop to end", feeding)
        .await
        .unwrap()
        .unwrap();
}
