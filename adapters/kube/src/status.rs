//! What [`lead_with_status`](crate::lead_with_status) tells of this replica's leadership: the
//! answers of `/healthz` and `/readyz`, the `attach_detach_leader` gauge, and the running
//! term's controller metrics.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use attach_detach::controller::ControllerHandle;
use attach_detach_endpoints::prometheus_client::collector::Collector;
use attach_detach_endpoints::prometheus_client::encoding::DescriptorEncoder;
use attach_detach_endpoints::prometheus_client::registry::Registry;
use attach_detach_endpoints::{LeaderGauge, Probes};
use tokio::time::Instant;

use crate::domain::Kube;

/// How long past its deadline a held lease may go unrenewed before health fails:
/// kube-controller-manager's leader-election healthz timeout (client-go's `HealthzAdaptor`).
pub const DEFAULT_HEALTH_TOLERANCE: Duration = Duration::from_secs(20);

/// This replica's leadership as [`lead_with_status`](crate::lead_with_status) updates it, read
/// by the endpoints. Clones share it.
///
/// As [`Probes`]:
/// - **health** fails when the running term's controller died (or stopped unasked), when a term
///   could not be started or its controller died and no new one started since (while the lease
///   is still held: a standby is healthy), and when the lease is held past its deadline
///   (`renewTime + duration - grace / 2`) by more than the tolerance without a read confirming
///   it: the leader loop, which steps down at that deadline, is stuck. As client-go's
///   `HealthzAdaptor`, it never fails for an API server that cannot be reached: `lead` steps
///   down then, and restarting would not bring the server back;
/// - **readiness**: healthy, and either a standby, or a leader whose term started (its
///   informers synced: `start_term` returns once they did, as the example's does with
///   [`Informers::initial_sync`](crate::Informers::initial_sync)) and whose controller finished
///   its recovery. A standby is ready so that a rollout of several replicas, only one of which
///   leads, is not stalled.
#[derive(Clone)]
pub struct LeaderStatus {
    state: Arc<Mutex<State>>,
    gauge: LeaderGauge,
    tolerance: Duration,
}

#[derive(Default)]
struct State {
    /// The lease is held and confirmed by a fresh read: a term starts or runs.
    leading: bool,
    /// When the lease may expire for others, as of the last read that confirmed it.
    held_until: Option<Instant>,
    /// The running term's controller.
    controller: Option<ControllerHandle<Kube>>,
    /// `lead` asked it to shut down: its stopping is no failure.
    stopping: bool,
    /// Why no controller runs although the lease is held.
    failure: Option<String>,
}

impl fmt::Debug for LeaderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("LeaderStatus")
            .field("leading", &state.leading)
            .field("held_until", &state.held_until)
            .field("term", &state.controller.is_some())
            .field("failure", &state.failure)
            .finish_non_exhaustive()
    }
}

impl Default for LeaderStatus {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaderStatus {
    /// A standby, with [`DEFAULT_HEALTH_TOLERANCE`].
    pub fn new() -> Self {
        LeaderStatus {
            state: Arc::default(),
            gauge: LeaderGauge::new(),
            tolerance: DEFAULT_HEALTH_TOLERANCE,
        }
    }

    /// How long past its deadline a held lease may go unconfirmed before health fails.
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Whether this replica leads: it holds the lease, confirmed, and a term starts or runs.
    pub fn is_leading(&self) -> bool {
        self.lock().leading
    }

    /// The running term's controller, if a term runs.
    pub fn controller(&self) -> Option<ControllerHandle<Kube>> {
        self.lock().controller.clone()
    }

    /// Registers the `attach_detach_leader` gauge, and the metrics of whichever term's
    /// controller runs (see `PrometheusMetrics` in `attach_detach::controller`; none while no
    /// term runs), into `registry`. A registry cannot forget what was registered into it, and
    /// every term has a new controller: this follows them.
    pub fn register(&self, registry: &mut Registry) {
        self.gauge.register(registry);
        registry.register_collector(Box::new(TermMetrics(self.clone())));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_leading(&self, state: &mut State, leading: bool) {
        state.leading = leading;
        self.gauge.set_leading(leading);
    }

    /// Not leading (campaigning, or between terms). `holding`: the lease manager still says
    /// the lease is ours, so a failure of the last term still counts.
    pub(crate) fn stand_by(&self, holding: bool) {
        let mut state = self.lock();
        self.set_leading(&mut state, false);
        state.held_until = None;
        state.controller = None;
        state.stopping = false;
        if !holding {
            state.failure = None;
        }
    }

    /// A fresh read showed the lease ours for `left` more.
    pub(crate) fn confirmed(&self, left: Duration) {
        let mut state = self.lock();
        self.set_leading(&mut state, true);
        state.held_until = Some(Instant::now() + left);
    }

    /// A term started with this controller.
    pub(crate) fn term_started(&self, controller: ControllerHandle<Kube>) {
        let mut state = self.lock();
        state.controller = Some(controller);
        state.stopping = false;
        state.failure = None;
    }

    /// A term could not start, or its controller stopped by itself: `reason`.
    pub(crate) fn failed(&self, reason: String) {
        self.lock().failure = Some(reason);
    }

    /// `lead` shuts the term's controller down.
    pub(crate) fn term_stopping(&self) {
        self.lock().stopping = true;
    }

    /// `lead` returned (or was dropped): a standby again, with nothing held.
    pub(crate) fn resign(&self) {
        self.stand_by(false);
    }
}

impl Probes for LeaderStatus {
    fn health(&self) -> Result<(), String> {
        let state = self.lock();
        if let Some(failure) = &state.failure {
            return Err(format!("leading but no controller runs: {failure}"));
        }
        if let Some(controller) = &state.controller
            && !state.stopping
            && controller.is_stopped()
        {
            return Err(match controller.died() {
                Some(message) => format!("the controller died: {message}"),
                None => "the controller stopped without being asked to".into(),
            });
        }
        if state.leading
            && let Some(until) = state.held_until
        {
            let late = Instant::now().saturating_duration_since(until);
            if late > self.tolerance {
                return Err(format!(
                    "the lease went unrenewed past its deadline by {}s: the leader loop is stuck",
                    late.as_secs()
                ));
            }
        }
        Ok(())
    }

    fn readiness(&self) -> Result<(), String> {
        self.health()?;
        let state = self.lock();
        if !state.leading {
            return Ok(());
        }
        match &state.controller {
            None => Err("leading; the term is starting (informers syncing)".into()),
            Some(controller) if controller.metrics().recovering => {
                Err("leading; the controller is recovering".into())
            }
            Some(_) => Ok(()),
        }
    }
}

/// The running term's controller metrics, looked up at every scrape.
#[derive(Debug)]
struct TermMetrics(LeaderStatus);

impl Collector for TermMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        match self.0.controller() {
            Some(controller) => controller.prometheus_metrics().encode(encoder),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use attach_detach::config::Config;
    use attach_detach::controller::{Controller, World};
    use attach_detach::memory::{MemoryBackend, MemoryStore};

    use super::*;

    fn controller() -> ControllerHandle<Kube> {
        let controller = Controller::<Kube>::new(
            Config::default(),
            Arc::new(MemoryBackend::new()),
            Arc::new(MemoryStore::default()),
            World::new(),
        )
        .unwrap();
        let (handle, _task) = controller.spawn();
        handle
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_held_past_its_deadline_without_renewal_fails_health_after_the_tolerance() {
        let status = LeaderStatus::new();
        status.confirmed(Duration::from_secs(12));
        status.term_started(controller());
        assert_eq!(status.health(), Ok(()));
        tokio::time::advance(Duration::from_secs(12 + 20)).await;
        assert_eq!(status.health(), Ok(()), "within the tolerance");
        tokio::time::advance(Duration::from_secs(2)).await;
        let unhealthy = status.health().unwrap_err();
        assert!(
            unhealthy.contains("unrenewed past its deadline by 22s"),
            "{unhealthy}"
        );
        assert!(status.readiness().is_err(), "unhealthy is not ready");

        // A read confirming it again mends it; a standby never holds a deadline.
        status.confirmed(Duration::from_secs(12));
        assert_eq!(status.health(), Ok(()));
        status.confirmed(Duration::ZERO);
        status.stand_by(false);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(status.health(), Ok(()));
        assert_eq!(status.readiness(), Ok(()), "a healthy standby is ready");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_term_fails_health_while_the_lease_is_held_not_once_it_is_gone() {
        let status = LeaderStatus::new();
        status.confirmed(Duration::from_secs(12));
        status.failed("the term could not start: no informers".into());
        status.stand_by(true);
        assert!(status.health().unwrap_err().contains("no informers"));
        status.stand_by(false);
        assert_eq!(status.health(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_controller_shut_down_by_lead_is_no_failure_one_that_stopped_unasked_is() {
        let status = LeaderStatus::new();
        status.confirmed(Duration::from_secs(12));
        let handle = controller();
        status.term_started(handle.clone());
        status.term_stopping();
        handle.shutdown(Duration::ZERO).await.unwrap();
        assert_eq!(status.health(), Ok(()));

        let handle = controller();
        status.term_started(handle.clone());
        handle.shutdown(Duration::ZERO).await.unwrap();
        assert_eq!(
            status.health(),
            Err("the controller stopped without being asked to".into())
        );
    }
}
