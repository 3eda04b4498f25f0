//! The Prometheus exposition after a real run of the controller on virtual time: names, labels
//! and values (feature `prometheus`).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::time::sleep;

use attach_detach::Ids;
use attach_detach::config::{BackendLoad, Config, RateLimit};
use attach_detach::controller::{Controller, ControllerHandle, World};
use attach_detach::core::{Input, Kind, NodeFacts, VolumeSpec};
use attach_detach::memory::{BackendOp, MemoryBackend, MemoryStore};
use attach_detach::traits::BackendError;

type D = Ids<&'static str, &'static str, &'static str, ()>;

const A: &str = "node-a";
const B: &str = "node-b";

fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text
}

/// The sample lines of `text` whose name (with labels) starts with `prefix`.
fn samples<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|line| !line.starts_with('#') && line.starts_with(prefix))
        .collect()
}

/// The value of the one sample named exactly `series` (name and labels as written).
fn value(text: &str, series: &str) -> String {
    let found: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .collect();
    assert_eq!(found.len(), 1, "{series} in:\n{text}");
    found[0].to_string()
}

/// Three volumes attached (one after a failed attempt), one of them force-detached from a
/// fenced node; every backend call takes 300 ms of tokio's (paused) clock.
async fn run() -> (ControllerHandle<D>, Registry) {
    let backend = MemoryBackend::<D>::new().with_latency(Duration::from_millis(300));
    backend.fail_next(
        BackendOp::Attach,
        "vol-1",
        A,
        1,
        BackendError::transient("503"),
    );
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    store.add_node(B);
    store.set_in_use(&B, vec!["vol-3"]);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .volume("vol-2", VolumeSpec::single_node(()))
        .volume("vol-3", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default())
        .node(
            B,
            NodeFacts {
                in_use: Some(vec!["vol-3"]),
                ..NodeFacts::default()
            },
        )
        .workload("w1", A, ["vol-1", "vol-2"])
        .workload("w2", B, ["vol-3"]);
    let controller = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        Arc::new(store.clone()),
        world,
    )
    .unwrap();
    let mut registry = Registry::default();
    let (handle, _task) = controller.spawn();
    handle.register_metrics(&mut registry);

    sleep(Duration::from_secs(10)).await;
    assert_eq!(backend.attachments().len(), 3);

    // Node B dies with vol-3 mounted; its workload goes; the node is fenced.
    handle.workload_removed("w2").await.unwrap();
    store.set_fenced(&B, true);
    store.set_healthy(&B, false);
    handle
        .node_updated(
            B,
            NodeFacts {
                healthy: false,
                fenced: true,
                in_use: Some(vec!["vol-3"]),
                attach_limit: None,
                driver_limits: Vec::new(),
            },
        )
        .await
        .unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(backend.attachments(), vec![("vol-1", A), ("vol-2", A)]);
    (handle, registry)
}

#[tokio::test(start_paused = true)]
async fn a_scrape_after_a_run_says_what_happened() {
    let (handle, registry) = run().await;
    let text = scrape(&registry);

    // Upstream's names.
    let volumes = "attachdetach_controller_total_volumes";
    assert_eq!(
        samples(&text, volumes),
        vec![
            "attachdetach_controller_total_volumes{plugin_name=\"N/A\",state=\"desired_state_of_world\"} 2",
            "attachdetach_controller_total_volumes{plugin_name=\"N/A\",state=\"actual_state_of_world\"} 2",
        ]
    );
    assert!(text.contains("# TYPE attachdetach_controller_total_volumes gauge\n"));
    assert!(text.contains(
        "# HELP attachdetach_controller_total_volumes Number of volumes in A/D Controller\n"
    ));
    assert_eq!(
        samples(&text, "attachdetach_controller_forced_detaches"),
        vec![
            "attachdetach_controller_forced_detaches_total{reason=\"out-of-service\"} 1",
            "attachdetach_controller_forced_detaches_total{reason=\"timeout\"} 0",
            "attachdetach_controller_forced_detaches_total{reason=\"node-deleted\"} 0",
            "attachdetach_controller_forced_detaches_total{reason=\"powered-off\"} 0",
        ]
    );
    assert!(text.contains("# TYPE attachdetach_controller_forced_detaches counter\n"));

    // Three attaches of 300 ms each, one failed attempt, one detach, on tokio's clock.
    let labels_ok = "volume_plugin=\"N/A\",operation_name=\"volume_attach\",status=\"success\",migrated=\"false\"";
    let attach_ok = "{volume_plugin=\"N/A\",operation_name=\"volume_attach\",status=\"success\",migrated=\"false\"";
    let h = "storage_operation_duration_seconds";
    assert_eq!(value(&text, &format!("{h}_count{attach_ok}}}")), "3");
    assert_eq!(value(&text, &format!("{h}_sum{attach_ok}}}")), "0.9");
    assert_eq!(
        value(&text, &format!("{h}_bucket{{le=\"0.25\",{labels_ok}}}")),
        "0"
    );
    assert_eq!(
        value(&text, &format!("{h}_bucket{{le=\"0.5\",{labels_ok}}}")),
        "3"
    );
    assert_eq!(
        value(&text, &format!("{h}_bucket{{le=\"+Inf\",{labels_ok}}}")),
        "3"
    );
    let attach_failed = "{volume_plugin=\"N/A\",operation_name=\"volume_attach\",status=\"fail-unknown\",migrated=\"false\"";
    assert_eq!(value(&text, &format!("{h}_count{attach_failed}}}")), "1");
    let detach_ok = "{volume_plugin=\"N/A\",operation_name=\"volume_detach\",status=\"success\",migrated=\"false\"";
    assert_eq!(value(&text, &format!("{h}_count{detach_ok}}}")), "1");
    assert_eq!(value(&text, &format!("{h}_sum{detach_ok}}}")), "0.3");
    // Nothing is written for a combination that never happened.
    assert!(!text.contains("operation_name=\"volume_detach\",status=\"fail-unknown\""));

    // Ours, and they agree with the snapshot.
    let m = handle.metrics();
    assert_eq!(
        value(
            &text,
            "attach_detach_operations_total{kind=\"attach\",outcome=\"succeeded\"}"
        ),
        "3"
    );
    assert_eq!(
        value(
            &text,
            "attach_detach_operations_total{kind=\"attach\",outcome=\"failed\"}"
        ),
        "1"
    );
    assert_eq!(
        value(
            &text,
            "attach_detach_operations_total{kind=\"detach\",outcome=\"succeeded\"}"
        ),
        "1"
    );
    assert_eq!(
        value(&text, "attach_detach_status_writes_total"),
        m.store_writes.to_string()
    );
    assert_eq!(
        value(&text, "attach_detach_reconcile_passes_total"),
        m.reconcile_passes.to_string()
    );
    assert_eq!(value(&text, "attach_detach_operations_in_flight"), "0");
    assert_eq!(
        value(&text, "attach_detach_oldest_operation_age_seconds"),
        "0.0"
    );
    assert_eq!(value(&text, "attach_detach_recovering"), "0");
    assert_eq!(value(&text, "attach_detach_refused_inputs_total"), "0");
    assert_eq!(
        value(&text, "attach_detach_call_timeouts_total{call=\"attach\"}"),
        "0"
    );
}

#[tokio::test(start_paused = true)]
async fn the_gauges_follow_a_call_in_flight_and_the_queue() {
    let backend = MemoryBackend::<D>::new().with_latency(Duration::from_secs(4));
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default());
    let controller =
        Controller::new(Config::default(), Arc::new(backend), Arc::new(store), world).unwrap();
    let handle = controller.handle();
    let mut registry = Registry::with_prefix("embedder");
    handle
        .prometheus_metrics()
        .volume_plugin("kubernetes.io/csi:ebs.csi.aws.com")
        .register(&mut registry);
    // Not running yet: the controller is recovering, two inputs wait in its queue.
    let queued = handle.workload_scheduled("w1", A, vec!["vol-1"]);
    let refused = handle.send(Input::RelistDone { kind: Kind::Node });
    let mut task = None;
    let check = async {
        tokio::task::yield_now().await;
        let text = scrape(&registry);
        assert_eq!(value(&text, "embedder_attach_detach_inputs_queued"), "2");
        assert_eq!(value(&text, "embedder_attach_detach_recovering"), "1");
        task = Some(controller.spawn().1);
    };
    let (queued, refused, ()) = tokio::join!(queued, refused, check);
    queued.unwrap();
    assert!(refused.is_err());
    let task = task.unwrap();
    // The recovery listing of the backend takes 4 s, then the attach 4 s: 3 s into it.
    sleep(Duration::from_secs(7)).await;
    let text = scrape(&registry);
    assert_eq!(value(&text, "embedder_attach_detach_inputs_queued"), "0");
    assert_eq!(value(&text, "embedder_attach_detach_recovering"), "0");
    assert_eq!(
        value(&text, "embedder_attach_detach_refused_inputs_total"),
        "1"
    );
    assert_eq!(
        value(&text, "embedder_attach_detach_operations_in_flight"),
        "1"
    );
    assert_eq!(
        value(&text, "embedder_attach_detach_oldest_operation_age_seconds"),
        "3.0"
    );
    assert_eq!(
        value(&text, "embedder_attach_detach_pending_workloads"),
        "0"
    );
    assert_eq!(
        value(
            &text,
            "embedder_attachdetach_controller_total_volumes{plugin_name=\"kubernetes.io/csi:ebs.csi.aws.com\",state=\"desired_state_of_world\"}"
        ),
        "1"
    );
    handle.shutdown(Duration::ZERO).await.unwrap();
    task.await.unwrap();
    // After the controller stopped the collector still answers, with what was last seen.
    let text = scrape(&registry);
    assert_eq!(
        value(
            &text,
            "embedder_attach_detach_operations_total{kind=\"attach\",outcome=\"abandoned\"}"
        ),
        "1"
    );
    assert_eq!(value(&text, "embedder_attach_detach_inputs_queued"), "0");
}

#[tokio::test(start_paused = true)]
async fn the_backend_load_gauges_show_the_queue_and_its_oldest_wait() {
    let backend = MemoryBackend::<D>::new().with_latency(Duration::from_secs(4));
    let store = MemoryStore::<D>::new();
    store.add_node(A);
    let world = World::new()
        .volume("vol-1", VolumeSpec::single_node(()))
        .volume("vol-2", VolumeSpec::single_node(()))
        .volume("vol-3", VolumeSpec::single_node(()))
        .node(A, NodeFacts::default())
        .workload("w1", A, ["vol-1"])
        .workload("w2", A, ["vol-2"])
        .workload("w3", A, ["vol-3"]);
    let config = Config {
        backend_load: BackendLoad {
            max_attaches: Some(1),
            max_detaches: Some(1),
            rate: Some(RateLimit {
                every: Duration::from_secs(1),
                burst: 5,
            }),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    };
    let controller =
        Controller::new(config, Arc::new(backend.clone()), Arc::new(store), world).unwrap();
    let mut registry = Registry::default();
    let (handle, task) = controller.spawn();
    handle.register_metrics(&mut registry);
    // The recovery listing takes 4 s, then one attach at a time, 4 s each: 3 s into the first.
    sleep(Duration::from_secs(7)).await;
    let text = scrape(&registry);
    let attach = |name: &str| value(&text, &format!("{name}{{class=\"attach\"}}"));
    let detach = |name: &str| value(&text, &format!("{name}{{class=\"detach\"}}"));
    assert_eq!(attach("attach_detach_backend_slots_used"), "1");
    assert_eq!(attach("attach_detach_backend_queued"), "2");
    // Queued in the pass that started the first attach: it has waited as long as that ran.
    assert_eq!(
        attach("attach_detach_backend_oldest_wait_seconds"),
        value(&text, "attach_detach_oldest_operation_age_seconds")
    );
    assert_eq!(detach("attach_detach_backend_queued"), "0");
    assert_eq!(detach("attach_detach_backend_oldest_wait_seconds"), "0.0");
    assert_eq!(value(&text, "attach_detach_backend_tokens"), "4");
    let snapshot = handle.metrics();
    assert_eq!(snapshot.backend_queue.attach.queued, 2);
    // Two more attaches, 4 s each, then everything is attached and nothing waits.
    sleep(Duration::from_secs(10)).await;
    assert_eq!(backend.attachments().len(), 3);
    let text = scrape(&registry);
    assert_eq!(
        value(&text, "attach_detach_backend_queued{class=\"attach\"}"),
        "0"
    );
    assert_eq!(
        value(
            &text,
            "attach_detach_backend_oldest_wait_seconds{class=\"attach\"}"
        ),
        "0.0"
    );
    handle.shutdown(Duration::ZERO).await.unwrap();
    task.await.unwrap();
}
