//! The controller's metrics for Prometheus (cargo feature `prometheus`), through
//! `prometheus-client`: a [`Collector`] that reads the controller's counters when scraped, so
//! the controller itself does no more work than without it (except the duration histograms,
//! a few relaxed atomic additions per finished operation).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::metrics::{Metrics, MetricsSnapshot, Outcome, op_label};
use crate::config::CallKind;
use crate::gate::OpKind;
use crate::operation::ForceReason;

/// The label value upstream uses when it cannot name a volume's plugin.
const PLUGIN_NOT_AVAILABLE: &str = "N/A";

/// How many inputs wait in the controller's queue now.
pub(crate) type QueueProbe = Arc<dyn Fn() -> usize + Send + Sync>;

/// A [`Collector`] of one controller's metrics, for a caller's
/// [`Registry`]: made by [`ControllerHandle::prometheus_metrics`], registered by
/// [`register`](Self::register) (or in one step by [`ControllerHandle::register_metrics`]).
///
/// Nothing is global: it reads the controller's own counters each time the registry is
/// encoded. It keeps working after the controller stopped (the counters then stay as they
/// were). Upstream's names where upstream has the metric, with its labels and help texts, so
/// dashboards built for kube-controller-manager work:
///
/// | metric | type | labels |
/// | --- | --- | --- |
/// | `attachdetach_controller_total_volumes` | gauge | `plugin_name`, `state` = `desired_state_of_world` \| `actual_state_of_world` |
/// | `attachdetach_controller_forced_detaches` | counter | `reason` = `out-of-service` \| `timeout` \| `node-deleted` \| `powered-off` |
/// | `storage_operation_duration_seconds` | histogram (upstream's buckets, 0.1 s to 600 s) | `volume_plugin`, `operation_name`, `status` = `success` \| `fail-unknown`, `migrated` = `false` |
///
/// `operation_name` is upstream's `volume_attach`, `volume_detach` and
/// `verify_volumes_are_attached_per_node`, and this crate's own `update_node_status`,
/// `read_node_status`, `list_node_statuses`, `list_attachments` and `check_machine_state`
/// (with `Config::machine_fencing`); an operation cut off by a
/// shutdown got no answer and is not observed. The OpenMetrics text format that
/// `prometheus-client` writes ends every counter's name in `_total`
/// (`attachdetach_controller_forced_detaches_total`), as Prometheus does for upstream's when it
/// scrapes OpenMetrics.
///
/// This crate's own, from [`MetricsSnapshot`]:
///
/// | metric | type | what |
/// | --- | --- | --- |
/// | `attach_detach_operations` | counter | operations ended, by `kind` and `outcome` (`succeeded`, `failed`, `abandoned`) |
/// | `attach_detach_operations_in_flight` | gauge | operations running |
/// | `attach_detach_oldest_operation_age_seconds` | gauge | how long the oldest running call has run (0: none runs) |
/// | `attach_detach_inputs_queued` | gauge | inputs (or batches) waiting for the controller's loop |
/// | `attach_detach_pending_workloads` | gauge | workloads waiting for their node or a volume |
/// | `attach_detach_waiting_for_room` | gauge | attaches waiting for room on a node at its attach limit |
/// | `attach_detach_stuck_detaches` | gauge | detaches wanted for `Config::stuck_after` and not done |
/// | `attach_detach_recovering` | gauge | 1 until the recovery listings are in |
/// | `attach_detach_reconcile_passes` | counter | reconcile passes run |
/// | `attach_detach_status_writes` | counter | compare-and-set writes of a node's status |
/// | `attach_detach_status_write_conflicts` | counter | of those, lost to a newer revision |
/// | `attach_detach_refused_inputs` | counter | inputs the core refused |
/// | `attach_detach_call_timeouts` | counter | calls given up at their deadline, by `call` |
/// | `attach_detach_recorder_panics` | counter | panics of the event recorder |
/// | `attach_detach_backend_slots_used` | gauge | attach or detach calls holding a slot (`Config::backend_load`), by `class`; a detach holds one from its fresh read |
/// | `attach_detach_backend_queued` | gauge | attaches or detaches waiting for a slot or a token, by `class` |
/// | `attach_detach_backend_oldest_wait_seconds` | gauge | how long the oldest of them has waited, by `class` (0: none waits) |
/// | `attach_detach_backend_tokens` | gauge | tokens left in the rate limit's bucket (only with a rate limit) |
///
/// ```
/// use std::sync::Arc;
/// use attach_detach::Ids;
/// use attach_detach::config::Config;
/// use attach_detach::controller::{Controller, World};
/// use attach_detach::core::{NodeFacts, VolumeSpec};
/// use attach_detach::memory::{MemoryBackend, MemoryStore};
/// use prometheus_client::registry::Registry;
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let store = MemoryStore::<D>::new();
/// store.add_node("node-a");
/// let world = World::new()
///     .volume("pvc-1", VolumeSpec::single_node(()))
///     .node("node-a", NodeFacts::default())
///     .workload("pod-1", "node-a", ["pvc-1"]);
/// let (handle, _task) =
///     Controller::new(Config::default(), Arc::new(MemoryBackend::new()), Arc::new(store), world)
///         .unwrap()
///         .spawn();
///
/// let mut registry = Registry::default();
/// handle.prometheus_metrics().volume_plugin("kubernetes.io/csi:ebs.csi.aws.com").register(&mut registry);
///
/// tokio::time::sleep(std::time::Duration::from_secs(1)).await;
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains(
///     "attachdetach_controller_total_volumes{plugin_name=\"kubernetes.io/csi:ebs.csi.aws.com\",state=\"actual_state_of_world\"} 1\n"
/// ));
/// assert!(text.contains("attach_detach_operations_total{kind=\"attach\",outcome=\"succeeded\"} 1\n"));
/// # });
/// ```
///
/// [`ControllerHandle::prometheus_metrics`]: super::ControllerHandle::prometheus_metrics
/// [`ControllerHandle::register_metrics`]: super::ControllerHandle::register_metrics
pub struct PrometheusMetrics {
    metrics: Arc<Metrics>,
    queued: QueueProbe,
    volume_plugin: String,
}

impl fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrometheusMetrics")
            .field("volume_plugin", &self.volume_plugin)
            .finish_non_exhaustive()
    }
}

impl PrometheusMetrics {
    pub(crate) fn new(metrics: Arc<Metrics>, queued: QueueProbe) -> Self {
        PrometheusMetrics {
            metrics,
            queued,
            volume_plugin: PLUGIN_NOT_AVAILABLE.to_string(),
        }
    }

    /// The value of the `plugin_name` and `volume_plugin` labels (upstream: the volume's
    /// plugin, e.g. `kubernetes.io/csi:ebs.csi.aws.com`); `N/A` unless set, as upstream
    /// writes when it cannot tell. One controller serves one backend, so one value.
    pub fn volume_plugin(mut self, name: impl Into<String>) -> Self {
        self.volume_plugin = name.into();
        self
    }

    /// Registers this collector into `registry` (under the registry's prefix, if it has one).
    pub fn register(self, registry: &mut Registry) {
        registry.register_collector(Box::new(self));
    }
}

/// `status` label of upstream's `storage_operation_duration_seconds`.
fn status_label(succeeded: bool) -> &'static str {
    if succeeded { "success" } else { "fail-unknown" }
}

/// Upstream's `operation_name` for an operation kind, or ours where upstream has none.
fn operation_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Attach => "volume_attach",
        OpKind::Detach => "volume_detach",
        OpKind::Verify => "verify_volumes_are_attached_per_node",
        OpKind::WriteStatus => "update_node_status",
        OpKind::ReadStatus => "read_node_status",
        OpKind::ListStatuses => "list_node_statuses",
        OpKind::List => "list_attachments",
        OpKind::CheckMachine => "check_machine_state",
    }
}

fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
        Outcome::Abandoned => "abandoned",
    }
}

/// The `call` label of a call kind: [`CallKind::as_str`] in snake case.
fn call_label(call: CallKind) -> &'static str {
    match call {
        CallKind::Attach => "attach",
        CallKind::Detach => "detach",
        CallKind::Verify => "verify",
        CallKind::StatusRead => "status_read",
        CallKind::StatusWrite => "status_write",
        CallKind::StoreList => "store_list",
        CallKind::BackendList => "backend_list",
        CallKind::MachineState => "machine_state",
    }
}

const FORCE_REASONS: [ForceReason; 4] = [
    ForceReason::OutOfService,
    ForceReason::Timeout,
    ForceReason::NodeDeleted,
    ForceReason::PoweredOff,
];

/// Writes one metric without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: MetricType,
    write: impl FnOnce(&mut MetricEncoder) -> fmt::Result,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, metric)?;
    write(&mut metric)
}

/// Writes one metric with a sample per label set.
fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: MetricType,
    samples: impl IntoIterator<Item = (L, Sample)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, metric)?;
    for (labels, sample) in samples {
        let mut labelled = metric.encode_family(&labels)?;
        sample.write(&mut labelled)?;
    }
    Ok(())
}

/// One value of a family.
enum Sample {
    Counter(u64),
    Gauge(u64),
    Seconds(Duration),
}

impl Sample {
    fn write(self, encoder: &mut MetricEncoder) -> fmt::Result {
        match self {
            Sample::Counter(value) => encoder.encode_counter::<NoLabelSet, u64, f64>(&value, None),
            Sample::Gauge(value) => encoder.encode_gauge(&value),
            Sample::Seconds(value) => encoder.encode_gauge(&value.as_secs_f64()),
        }
    }
}

fn counter(encoder: &mut MetricEncoder, value: u64) -> fmt::Result {
    encoder.encode_counter::<NoLabelSet, u64, f64>(&value, None)
}

impl PrometheusMetrics {
    fn encode_upstream(&self, encoder: &mut DescriptorEncoder, s: &MetricsSnapshot) -> fmt::Result {
        let plugin = self.volume_plugin.as_str();
        family(
            encoder,
            "attachdetach_controller_total_volumes",
            "Number of volumes in A/D Controller",
            MetricType::Gauge,
            [
                ("desired_state_of_world", s.desired_attachments),
                ("actual_state_of_world", s.actual_attachments),
            ]
            .map(|(state, n)| {
                (
                    [("plugin_name", plugin), ("state", state)],
                    Sample::Gauge(n),
                )
            }),
        )?;
        family(
            encoder,
            "attachdetach_controller_forced_detaches",
            "Number of times the A/D Controller performed a forced detach",
            MetricType::Counter,
            FORCE_REASONS.map(|reason| {
                (
                    [("reason", reason.as_str())],
                    Sample::Counter(s.forced_detaches(reason)),
                )
            }),
        )?;
        let mut durations = encoder.encode_descriptor(
            "storage_operation_duration_seconds",
            "Storage operation duration",
            None,
            MetricType::Histogram,
        )?;
        for kind in OpKind::ALL {
            for succeeded in [true, false] {
                let histogram = self.metrics.durations(kind, succeeded);
                if histogram.count == 0 {
                    continue;
                }
                let labels = [
                    ("volume_plugin", plugin),
                    ("operation_name", operation_name(kind)),
                    ("status", status_label(succeeded)),
                    ("migrated", "false"),
                ];
                durations
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        histogram.sum,
                        histogram.count,
                        &histogram.buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }

    fn encode_ours(&self, encoder: &mut DescriptorEncoder, s: &MetricsSnapshot) -> fmt::Result {
        let outcomes = [Outcome::Succeeded, Outcome::Failed, Outcome::Abandoned];
        family(
            encoder,
            "attach_detach_operations",
            "Operations the controller ended, by kind and outcome",
            MetricType::Counter,
            OpKind::ALL.iter().flat_map(|kind| {
                let counts = s.operations(*kind);
                outcomes.map(|outcome| {
                    let n = match outcome {
                        Outcome::Succeeded => counts.succeeded,
                        Outcome::Failed => counts.failed,
                        Outcome::Abandoned => counts.abandoned,
                    };
                    (
                        [
                            ("kind", op_label(*kind)),
                            ("outcome", outcome_label(outcome)),
                        ],
                        Sample::Counter(n),
                    )
                })
            }),
        )?;
        single(
            encoder,
            "attach_detach_operations_in_flight",
            "Operations running now",
            MetricType::Gauge,
            |m| m.encode_gauge(&s.in_flight),
        )?;
        single(
            encoder,
            "attach_detach_oldest_operation_age_seconds",
            "How long the oldest running call has run, 0 when none runs",
            MetricType::Gauge,
            |m| m.encode_gauge(&s.oldest_running.unwrap_or_default().as_secs_f64()),
        )?;
        single(
            encoder,
            "attach_detach_inputs_queued",
            "Inputs (single or batched) waiting for the controller's loop",
            MetricType::Gauge,
            |m| m.encode_gauge(&((self.queued)() as u64)),
        )?;
        single(
            encoder,
            "attach_detach_pending_workloads",
            "Workloads waiting for their node or a volume to be known",
            MetricType::Gauge,
            |m| m.encode_gauge(&s.pending_workloads),
        )?;
        single(
            encoder,
            "attach_detach_waiting_for_room",
            "Attaches waiting for room on a node at its attach limit",
            MetricType::Gauge,
            |m| m.encode_gauge(&s.waiting_for_room),
        )?;
        single(
            encoder,
            "attach_detach_stuck_detaches",
            "Detaches wanted for Config::stuck_after or longer and not done",
            MetricType::Gauge,
            |m| m.encode_gauge(&s.stuck_detaches),
        )?;
        single(
            encoder,
            "attach_detach_recovering",
            "1 while the controller waits for its recovery listings",
            MetricType::Gauge,
            |m| m.encode_gauge(&u64::from(s.recovering)),
        )?;
        single(
            encoder,
            "attach_detach_reconcile_passes",
            "Reconcile passes run",
            MetricType::Counter,
            |m| counter(m, s.reconcile_passes),
        )?;
        single(
            encoder,
            "attach_detach_status_writes",
            "Compare-and-set writes of a node's status",
            MetricType::Counter,
            |m| counter(m, s.store_writes),
        )?;
        single(
            encoder,
            "attach_detach_status_write_conflicts",
            "Status writes refused because the node's status had a newer revision",
            MetricType::Counter,
            |m| counter(m, s.store_write_conflicts),
        )?;
        single(
            encoder,
            "attach_detach_refused_inputs",
            "Inputs the core refused",
            MetricType::Counter,
            |m| counter(m, s.refused_inputs),
        )?;
        family(
            encoder,
            "attach_detach_call_timeouts",
            "Calls to the backend or the store given up at their deadline, by call",
            MetricType::Counter,
            CallKind::ALL.map(|call| {
                (
                    [("call", call_label(call))],
                    Sample::Counter(s.timeouts.of(call)),
                )
            }),
        )?;
        single(
            encoder,
            "attach_detach_recorder_panics",
            "Panics of the event recorder (each cost one event)",
            MetricType::Counter,
            |m| counter(m, s.recorder_panics),
        )?;
        self.encode_backend_load(encoder, s)
    }

    /// The backend load gauges, per class.
    fn encode_backend_load(
        &self,
        encoder: &mut DescriptorEncoder,
        s: &MetricsSnapshot,
    ) -> fmt::Result {
        let q = &s.backend_queue;
        let classes = [("attach", q.attach), ("detach", q.detach)];
        family(
            encoder,
            "attach_detach_backend_slots_used",
            "Attach or detach calls holding a slot under the backend load limits, by class",
            MetricType::Gauge,
            classes.map(|(class, c)| {
                (
                    [("class", class)],
                    Sample::Gauge((c.in_flight + c.reserved) as u64),
                )
            }),
        )?;
        family(
            encoder,
            "attach_detach_backend_queued",
            "Attaches or detaches waiting for a slot or a rate limit token, by class",
            MetricType::Gauge,
            classes.map(|(class, c)| ([("class", class)], Sample::Gauge(c.queued as u64))),
        )?;
        family(
            encoder,
            "attach_detach_backend_oldest_wait_seconds",
            "How long the oldest queued attach or detach has waited, by class, 0 when none waits",
            MetricType::Gauge,
            classes.map(|(class, c)| ([("class", class)], Sample::Seconds(c.oldest_wait))),
        )?;
        match q.tokens {
            Some(tokens) => single(
                encoder,
                "attach_detach_backend_tokens",
                "Tokens left in the backend rate limit's bucket",
                MetricType::Gauge,
                |m| m.encode_gauge(&u64::from(tokens)),
            ),
            None => Ok(()),
        }
    }
}

impl Collector for PrometheusMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let snapshot = self.metrics.snapshot();
        self.encode_upstream(&mut encoder, &snapshot)?;
        self.encode_ours(&mut encoder, &snapshot)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::encoding::text::encode;
    use tokio::time::{Instant, advance};

    use super::*;
    use crate::admission::{ClassStats, QueueStats};
    use crate::controller::metrics::StateSizes;

    fn scrape(collector: PrometheusMetrics) -> String {
        let mut registry = Registry::default();
        collector.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Every counter and gauge with a value of its own, every label value written out.
    #[tokio::test(start_paused = true)]
    async fn every_metric_is_written_with_its_name_labels_and_value() {
        let m = Arc::new(Metrics::default());
        // Kind k ends (k + 1) times succeeded, (k + 11) failed, (k + 21) abandoned.
        for (k, kind) in OpKind::ALL.iter().enumerate() {
            let times = |n: usize, outcome| {
                for _ in 0..n {
                    m.operation_finished(*kind, outcome);
                }
            };
            times(k + 1, Outcome::Succeeded);
            times(k + 11, Outcome::Failed);
            times(k + 21, Outcome::Abandoned);
        }
        for (i, reason) in FORCE_REASONS.iter().enumerate() {
            for _ in 0..=i {
                m.forced_detach(*reason);
            }
        }
        for (i, call) in CallKind::ALL.iter().enumerate() {
            for _ in 0..i + 100 {
                m.call_timed_out(*call);
            }
        }
        for _ in 0..5 {
            m.operation_started();
        }
        m.operation_ended();
        for _ in 0..6 {
            m.reconcile_pass();
        }
        for _ in 0..7 {
            m.store_write();
        }
        for _ in 0..2 {
            m.store_write_conflict();
        }
        m.recorder_panicked();
        m.inputs_refused(3);
        m.set_state(StateSizes {
            desired: 40,
            actual: 41,
            pending: 42,
            waiting_for_room: 43,
            stuck_detaches: 44,
            recovering: false,
        });
        m.set_oldest_start(Some(Instant::now()));
        m.set_backend_queue(
            QueueStats {
                attach: ClassStats {
                    in_flight: 3,
                    overdue: 0,
                    reserved: 0,
                    queued: 7,
                    oldest_wait: ms(1500),
                },
                detach: ClassStats {
                    in_flight: 1,
                    overdue: 0,
                    reserved: 2,
                    queued: 0,
                    oldest_wait: Duration::ZERO,
                },
                tokens: Some(4),
            },
            Instant::now(),
        );
        advance(ms(2500)).await;
        let text = scrape(PrometheusMetrics::new(m, Arc::new(|| 9)));

        let expected = [
            "attachdetach_controller_total_volumes{plugin_name=\"N/A\",state=\"desired_state_of_world\"} 40",
            "attachdetach_controller_total_volumes{plugin_name=\"N/A\",state=\"actual_state_of_world\"} 41",
            "attachdetach_controller_forced_detaches_total{reason=\"out-of-service\"} 1",
            "attachdetach_controller_forced_detaches_total{reason=\"timeout\"} 2",
            "attachdetach_controller_forced_detaches_total{reason=\"node-deleted\"} 3",
            "attachdetach_controller_forced_detaches_total{reason=\"powered-off\"} 4",
            "attach_detach_operations_total{kind=\"attach\",outcome=\"succeeded\"} 1",
            "attach_detach_operations_total{kind=\"attach\",outcome=\"failed\"} 11",
            "attach_detach_operations_total{kind=\"attach\",outcome=\"abandoned\"} 21",
            "attach_detach_operations_total{kind=\"detach\",outcome=\"succeeded\"} 2",
            "attach_detach_operations_total{kind=\"detach\",outcome=\"failed\"} 12",
            "attach_detach_operations_total{kind=\"detach\",outcome=\"abandoned\"} 22",
            "attach_detach_operations_total{kind=\"verify\",outcome=\"succeeded\"} 3",
            "attach_detach_operations_total{kind=\"verify\",outcome=\"failed\"} 13",
            "attach_detach_operations_total{kind=\"verify\",outcome=\"abandoned\"} 23",
            "attach_detach_operations_total{kind=\"write_status\",outcome=\"succeeded\"} 4",
            "attach_detach_operations_total{kind=\"write_status\",outcome=\"failed\"} 14",
            "attach_detach_operations_total{kind=\"write_status\",outcome=\"abandoned\"} 24",
            "attach_detach_operations_total{kind=\"read_status\",outcome=\"succeeded\"} 5",
            "attach_detach_operations_total{kind=\"read_status\",outcome=\"failed\"} 15",
            "attach_detach_operations_total{kind=\"read_status\",outcome=\"abandoned\"} 25",
            "attach_detach_operations_total{kind=\"list_statuses\",outcome=\"succeeded\"} 6",
            "attach_detach_operations_total{kind=\"list_statuses\",outcome=\"failed\"} 16",
            "attach_detach_operations_total{kind=\"list_statuses\",outcome=\"abandoned\"} 26",
            "attach_detach_operations_total{kind=\"list\",outcome=\"succeeded\"} 7",
            "attach_detach_operations_total{kind=\"list\",outcome=\"failed\"} 17",
            "attach_detach_operations_total{kind=\"list\",outcome=\"abandoned\"} 27",
            "attach_detach_operations_total{kind=\"check_machine\",outcome=\"succeeded\"} 8",
            "attach_detach_operations_total{kind=\"check_machine\",outcome=\"failed\"} 18",
            "attach_detach_operations_total{kind=\"check_machine\",outcome=\"abandoned\"} 28",
            "attach_detach_operations_in_flight 4",
            "attach_detach_oldest_operation_age_seconds 2.5",
            "attach_detach_inputs_queued 9",
            "attach_detach_pending_workloads 42",
            "attach_detach_waiting_for_room 43",
            "attach_detach_stuck_detaches 44",
            "attach_detach_recovering 0",
            "attach_detach_reconcile_passes_total 6",
            "attach_detach_status_writes_total 7",
            "attach_detach_status_write_conflicts_total 2",
            "attach_detach_refused_inputs_total 3",
            "attach_detach_call_timeouts_total{call=\"attach\"} 100",
            "attach_detach_call_timeouts_total{call=\"detach\"} 101",
            "attach_detach_call_timeouts_total{call=\"verify\"} 102",
            "attach_detach_call_timeouts_total{call=\"status_read\"} 103",
            "attach_detach_call_timeouts_total{call=\"status_write\"} 104",
            "attach_detach_call_timeouts_total{call=\"store_list\"} 105",
            "attach_detach_call_timeouts_total{call=\"backend_list\"} 106",
            "attach_detach_call_timeouts_total{call=\"machine_state\"} 107",
            "attach_detach_recorder_panics_total 1",
            "attach_detach_backend_slots_used{class=\"attach\"} 3",
            "attach_detach_backend_slots_used{class=\"detach\"} 3",
            "attach_detach_backend_queued{class=\"attach\"} 7",
            "attach_detach_backend_queued{class=\"detach\"} 0",
            // Aged by the 2.5 s since it was published; no detach waits, so none is aged.
            "attach_detach_backend_oldest_wait_seconds{class=\"attach\"} 4.0",
            "attach_detach_backend_oldest_wait_seconds{class=\"detach\"} 0.0",
            "attach_detach_backend_tokens 4",
        ];
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples, expected, "{text}");
        // Each metric has its type and help.
        for (name, kind) in [
            ("attachdetach_controller_total_volumes", "gauge"),
            ("attachdetach_controller_forced_detaches", "counter"),
            ("storage_operation_duration_seconds", "histogram"),
            ("attach_detach_operations", "counter"),
            ("attach_detach_operations_in_flight", "gauge"),
            ("attach_detach_oldest_operation_age_seconds", "gauge"),
            ("attach_detach_inputs_queued", "gauge"),
            ("attach_detach_pending_workloads", "gauge"),
            ("attach_detach_waiting_for_room", "gauge"),
            ("attach_detach_stuck_detaches", "gauge"),
            ("attach_detach_recovering", "gauge"),
            ("attach_detach_reconcile_passes", "counter"),
            ("attach_detach_status_writes", "counter"),
            ("attach_detach_status_write_conflicts", "counter"),
            ("attach_detach_refused_inputs", "counter"),
            ("attach_detach_call_timeouts", "counter"),
            ("attach_detach_recorder_panics", "counter"),
            ("attach_detach_backend_slots_used", "gauge"),
            ("attach_detach_backend_queued", "gauge"),
            ("attach_detach_backend_oldest_wait_seconds", "gauge"),
            ("attach_detach_backend_tokens", "gauge"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        }
    }

    /// Every operation kind under upstream's (or our) `operation_name`, each status apart,
    /// each duration in the bucket whose bound it does not exceed.
    #[test]
    fn durations_are_written_per_operation_and_status() {
        let m = Arc::new(Metrics::default());
        // Kind k: one success of k * 100 ms; attach also fails once in exactly 250 ms.
        for (k, kind) in OpKind::ALL.iter().enumerate() {
            m.observe_duration(*kind, true, ms(100 * k as u64));
        }
        m.observe_duration(OpKind::Attach, false, ms(250));
        m.set_state(StateSizes {
            recovering: true,
            ..StateSizes::default()
        });
        let text =
            scrape(PrometheusMetrics::new(m, Arc::new(|| 0)).volume_plugin("kubernetes.io/csi:x"));
        let names = [
            "volume_attach",
            "volume_detach",
            "verify_volumes_are_attached_per_node",
            "update_node_status",
            "read_node_status",
            "list_node_statuses",
            "list_attachments",
            "check_machine_state",
        ];
        let labels = |name: &str, status: &str| {
            format!(
                "volume_plugin=\"kubernetes.io/csi:x\",operation_name=\"{name}\",status=\"{status}\",migrated=\"false\""
            )
        };
        for (k, name) in names.iter().enumerate() {
            let ok = labels(name, "success");
            let h = "storage_operation_duration_seconds";
            assert!(
                text.contains(&format!("{h}_count{{{ok}}} 1\n")),
                "{name}:\n{text}"
            );
            let tenths = ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"][k];
            let sum = format!("{h}_sum{{{ok}}} {tenths}\n");
            assert!(text.contains(&sum), "{sum}:\n{text}");
            // k * 100 ms is in the bucket of the first bound >= it.
            let first = ["0.1", "0.1", "0.25", "0.5", "0.5", "0.5", "1.0", "1.0"][k];
            let bucket = format!("{h}_bucket{{le=\"{first}\",{ok}}} 1\n");
            assert!(text.contains(&bucket), "{bucket}:\n{text}");
            if k >= 2 {
                let below = format!("{h}_bucket{{le=\"0.1\",{ok}}} 0\n");
                assert!(text.contains(&below), "{below}:\n{text}");
            }
        }
        let failed = labels("volume_attach", "fail-unknown");
        let h = "storage_operation_duration_seconds";
        assert!(
            text.contains(&format!("{h}_count{{{failed}}} 1\n")),
            "{text}"
        );
        assert!(text.contains(&format!("{h}_bucket{{le=\"0.1\",{failed}}} 0\n")));
        assert!(text.contains(&format!("{h}_bucket{{le=\"0.25\",{failed}}} 1\n")));
        // No failure of any other kind was observed, so none is written.
        assert_eq!(
            text.matches("status=\"fail-unknown\"").count(),
            16,
            "{text}"
        );
        assert!(text.contains(
            "attachdetach_controller_total_volumes{plugin_name=\"kubernetes.io/csi:x\",state=\"desired_state_of_world\"} 0\n"
        ));
        assert!(text.contains("attach_detach_recovering 1\n"));
        assert!(text.contains("attach_detach_oldest_operation_age_seconds 0.0\n"));
        // Without a rate limit there is no bucket to report.
        assert!(!text.contains("attach_detach_backend_tokens"), "{text}");
        assert!(text.contains("attach_detach_backend_queued{class=\"detach\"} 0\n"));
    }

    #[test]
    fn its_debug_names_the_plugin() {
        let collector =
            PrometheusMetrics::new(Arc::default(), Arc::new(|| 0)).volume_plugin("csi:x");
        assert_eq!(
            format!("{collector:?}"),
            "PrometheusMetrics { volume_plugin: \"csi:x\", .. }"
        );
    }
}
