//! The leadership gauge.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The gauge's name (under the registry's prefix, if it has one).
pub const LEADER_METRIC: &str = "attach_detach_leader";

/// `attach_detach_leader`: 1 while this replica leads, 0 otherwise.
///
/// Of several replicas exactly one should show 1; a sum over them other than 1 for longer than
/// a lease is worth an alert. Clones share the value: the embedder keeps one to set and
/// [`register`](Self::register)s another.
#[derive(Clone, Debug, Default)]
pub struct LeaderGauge {
    gauge: Gauge,
}

impl LeaderGauge {
    /// A gauge at 0: a replica starts as a standby.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets it: 1 when `leading`, else 0.
    pub fn set_leading(&self, leading: bool) {
        self.gauge.set(i64::from(leading));
    }

    /// Whether it says this replica leads.
    pub fn is_leading(&self) -> bool {
        self.gauge.get() != 0
    }

    /// Registers it into `registry` as [`LEADER_METRIC`].
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            LEADER_METRIC,
            "1 while this replica leads, 0 otherwise",
            self.gauge.clone(),
        );
    }
}
