//! The agents' grid on the paused clock: where the next pass falls, and scenario times as
//! instants.

use std::time::Duration;

use tokio::time::Instant;

use super::AGENT_PERIOD;
use crate::sim::scenario::MAX_DURATION;

/// `at` on the paused clock. The scenario's bounds keep every time the runner forms far below
/// where `Instant` ends; the fallbacks only keep this from panicking if they did not.
pub(super) fn instant(epoch: Instant, at: Duration) -> Instant {
    epoch
        .checked_add(at)
        .or_else(|| epoch.checked_add(MAX_DURATION.saturating_mul(4)))
        .unwrap_or(epoch)
}

/// The first agent pass at or after `now` and after the pass at `last`, if any.
pub(super) fn next_tick(now: Duration, last: Option<Duration>) -> Duration {
    let period = AGENT_PERIOD.as_nanos();
    let mut tick = now.as_nanos().div_ceil(period);
    if let Some(last) = last {
        tick = tick.max(last.as_nanos() / period + 1);
    }
    let nanos = tick.saturating_mul(period);
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// Whether `at` is on the agents' grid.
pub(super) fn is_tick(at: Duration) -> bool {
    at.as_nanos() % AGENT_PERIOD.as_nanos() == 0
}
