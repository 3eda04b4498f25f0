//! Every operation runs in a `tracing` span with its kind, volume, node and outcome.
//!
//! Alone in its own test binary: `tracing` caches per-callsite interest and the maximum level
//! process-wide, so a subscriber set on one test thread misses spans while tests on other threads
//! run without one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::controller::{Controller, World};
use attach_detach::core::{NodeFacts, VolumeSpec};
use attach_detach::memory::{BackendOp, MemoryBackend, MemoryStore};
use attach_detach::traits::BackendError;

type D = Ids<&'static str, &'static str, &'static str, ()>;

/// Keeps the fields of every span.
#[derive(Clone, Default)]
struct SpanLog(Arc<Mutex<Vec<BTreeMap<&'static str, String>>>>);

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
}

impl tracing::Subscriber for SpanLog {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut spans = self.0.lock();
        let mut fields = BTreeMap::new();
        fields.insert("name", span.metadata().name().to_string());
        span.record(&mut Fields(&mut fields));
        spans.push(fields);
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.lock();
        values.record(&mut Fields(&mut spans[span.into_u64() as usize - 1]));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn every_operation_runs_in_a_span_naming_volume_node_and_outcome() {
    let log = SpanLog::default();
    tracing::subscriber::set_global_default(log.clone()).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(async {
            let backend = MemoryBackend::<D>::new();
            let store = MemoryStore::<D>::new();
            store.add_node("node-a");
            backend.fail_next(
                BackendOp::Attach,
                None,
                None,
                1,
                BackendError::transient("503"),
            );
            let world = World::new()
                .volume("vol-1", VolumeSpec::single_node(()))
                .node("node-a", NodeFacts::default())
                .workload("w1", "node-a", ["vol-1"]);
            let (handle, task) =
                Controller::new(Config::default(), Arc::new(backend), Arc::new(store), world)
                    .unwrap()
                    .spawn();
            tokio::time::sleep(Duration::from_secs(2)).await;
            handle.shutdown(Duration::from_secs(1)).await.unwrap();
            task.await.unwrap();
        });

    let ops: Vec<Vec<(&str, String)>> = log
        .0
        .lock()
        .iter()
        .filter(|f| f["name"] == "operation")
        .map(|f| {
            ["op", "volume", "node", "outcome"]
                .iter()
                .map(|k| (*k, f.get(k).cloned().unwrap_or_default()))
                .collect()
        })
        .collect();
    let expected = |op: &str, volume: &str, outcome: &str| {
        vec![
            ("op", op.to_string()),
            ("volume", volume.to_string()),
            ("node", "\"node-a\"".to_string()),
            ("outcome", outcome.to_string()),
        ]
    };
    let listing = |op: &str| {
        vec![
            ("op", op.to_string()),
            ("volume", String::new()),
            ("node", String::new()),
            ("outcome", "ok".to_string()),
        ]
    };
    assert_eq!(
        ops,
        vec![
            // Recovery: the store's and the backend's listings, about no one node.
            listing("list_statuses"),
            listing("list"),
            expected("attach", "\"vol-1\"", "transient"),
            expected("attach", "\"vol-1\"", "ok"),
            // A status write names how many volumes it lists.
            expected("write_status", "1", "ok"),
        ]
    );
}
