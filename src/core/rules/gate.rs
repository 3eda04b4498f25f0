//! The operation gate: at most one operation per key at a time, and backoff after failures.

use std::hash::Hash;
use std::time::Duration;

use hashbrown::Equivalent;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::core::tables::trim::trimmed;

use crate::config::BackoffConfig;
use crate::core::explain::LastFailure;
use crate::core::operation::OpKind;

/// The earliest of `times`, if any. A plain loop: the core asks for its next deadline after
/// every pass and answer, and the same fold over a flattened iterator was about 130
/// instructions a call, 8 % of a workload move.
pub(crate) fn earliest<const N: usize>(times: [Option<Duration>; N]) -> Option<Duration> {
    times.iter().fold(None, |first, t| match (first, *t) {
        (Some(f), Some(t)) => Some(f.min(t)),
        (f, None) => f,
        (None, t) => t,
    })
}

#[derive(Clone, Debug)]
struct Retry {
    until: Duration,
    next_delay: Duration,
    /// Failures in a row, the last one's time and error: what an explanation shows.
    failures: u32,
    at: Duration,
    error: Box<str>,
}

/// A key's backoffs, one per kind that failed (rarely more than one). Keyed by the key alone,
/// so that a lookup borrows it: keyed by `(key, kind)`, every check cloned the key, an
/// allocation per check with `String` ids.
type Backoffs = SmallVec<[(OpKind, Retry); 1]>;

/// Serialises operations per key and paces retries.
///
/// The key says what must not run twice at once: a single-node volume, a (volume, node) pair of
/// a multi-node volume, or a node whose status is written.
///
/// A look asks with a borrowed key (any `Q` that hashes as the key and is
/// [`Equivalent`] to it): an owned one cloned the ids on each of the million looks of a
/// restart's first pass, a cold reference count per `Name` and an allocation per `String`.
#[derive(Debug)]
pub(crate) struct OperationGate<K> {
    config: BackoffConfig,
    running: hashbrown::HashSet<K, FxBuildHasher>,
    retries: hashbrown::HashMap<K, Backoffs, FxBuildHasher>,
}

impl<K: Clone + Eq + Hash> OperationGate<K> {
    /// An empty gate.
    pub(crate) fn new(config: BackoffConfig) -> Self {
        OperationGate {
            config,
            running: hashbrown::HashSet::default(),
            retries: hashbrown::HashMap::default(),
        }
    }

    /// Whether an operation of `kind` on `key` may start at `now`: `Err(None)` while another
    /// operation on the key runs, `Err(Some(t))` while in backoff until `t`.
    pub(crate) fn may_start<Q: Hash + Equivalent<K> + ?Sized>(
        &self,
        key: &Q,
        kind: OpKind,
        now: Duration,
    ) -> Result<(), Option<Duration>> {
        if self.running.contains(key) {
            return Err(None);
        }
        self.backed_off(key, kind, now)
    }

    /// The backoff half of [`may_start`](Self::may_start) alone, for a key whose running
    /// operation is kept elsewhere (a single-node volume's: see
    /// [`InFlightTable`](crate::core::plan::in_flight::InFlightTable)): `Err(t)` while `kind` is in
    /// backoff on `key` until `t`.
    pub(crate) fn backed_off<Q: Hash + Equivalent<K> + ?Sized>(
        &self,
        key: &Q,
        kind: OpKind,
        now: Duration,
    ) -> Result<(), Option<Duration>> {
        // Most of the time nothing is in backoff: no lookup then.
        if self.retries.is_empty() {
            return Ok(());
        }
        match self
            .retries
            .get(key)
            .and_then(|b| b.iter().find(|(k, _)| *k == kind))
        {
            Some((_, retry)) if retry.until > now => Err(Some(retry.until)),
            _ => Ok(()),
        }
    }

    /// Whether an operation on `key` is running.
    pub(crate) fn is_running<Q: Hash + Equivalent<K> + ?Sized>(&self, key: &Q) -> bool {
        self.running.contains(key)
    }

    /// Marks an operation on `key` as running.
    pub(crate) fn start(&mut self, key: K) {
        self.running.insert(key);
    }

    /// The operation on `key` succeeded: the key is free and its backoff for `kind` forgotten.
    ///
    /// Borrowed: the key the gate holds is the one dropped, and a caller need not clone ids
    /// to build another (a `String` id's allocation, a `Name`'s reference count, on every
    /// operation's end).
    pub(crate) fn succeeded<Q: Hash + Equivalent<K> + ?Sized>(&mut self, key: &Q, kind: OpKind) {
        self.running.remove(key);
        self.cleared(key, kind);
    }

    /// The backoff half of [`succeeded`](Self::succeeded) alone, for a key whose running
    /// operation is kept elsewhere: `kind`'s backoff on `key` is forgotten.
    pub(crate) fn cleared<Q: Hash + Equivalent<K> + ?Sized>(&mut self, key: &Q, kind: OpKind) {
        if self.retries.is_empty() {
            return;
        }
        if let Some(backoffs) = self.retries.get_mut(key) {
            backoffs.retain(|(k, _)| *k != kind);
            if backoffs.is_empty() {
                self.retries.remove(key);
            }
        }
    }

    /// The operation on `key` failed at `now` with `error`: the key is free, and `kind` may
    /// retry at the returned time.
    pub(crate) fn failed(
        &mut self,
        key: K,
        kind: OpKind,
        now: Duration,
        error: &dyn std::fmt::Display,
    ) -> Duration {
        self.running.remove(&key);
        let initial = self.config.initial;
        let max = self.config.max;
        let backoffs = self.retries.entry(key).or_default();
        let at = match backoffs.iter().position(|(k, _)| *k == kind) {
            Some(at) => at,
            None => {
                backoffs.push((
                    kind,
                    Retry {
                        until: now,
                        next_delay: initial,
                        failures: 0,
                        at: now,
                        error: Box::default(),
                    },
                ));
                backoffs.len() - 1
            }
        };
        let retry = &mut backoffs[at].1;
        let delay = retry.next_delay.min(max);
        retry.until = now.saturating_add(delay);
        retry.next_delay = delay.saturating_mul(2).min(max);
        retry.failures = retry.failures.saturating_add(1);
        retry.at = now;
        retry.error = error.to_string().into_boxed_str();
        retry.until
    }

    /// The last failure of `kind` on `key`, while its backoff is remembered.
    pub(crate) fn last_failure<Q: Hash + Equivalent<K> + ?Sized>(
        &self,
        key: &Q,
        kind: OpKind,
    ) -> Option<LastFailure> {
        let (_, retry) = self.retries.get(key)?.iter().find(|(k, _)| *k == kind)?;
        Some(LastFailure {
            kind,
            at: retry.at,
            failures: retry.failures,
            retry_at: retry.until,
            error: retry.error.to_string(),
        })
    }

    /// Forgets every backoff that ran out at least one longest wait before `now`: a failure
    /// that long ago no longer paces anything, and keys whose operation never runs again (a
    /// volume no longer wanted, a node gone) would otherwise keep their entry for ever.
    pub(crate) fn forget_stale(&mut self, now: Duration) {
        let max = self.config.max;
        self.retries.retain(|_, backoffs| {
            backoffs.retain(|(_, retry)| retry.until.saturating_add(max) > now);
            !backoffs.is_empty()
        });
    }

    /// Forgets the backoff of every key `matches` picks (their subject is gone for good).
    pub(crate) fn forget_where(&mut self, matches: impl Fn(&K) -> bool) {
        self.retries.retain(|key, _| !matches(key));
    }

    /// Gives back the memory of a past burst of operations (see [`trim_map`](crate::core::tables::trim::trim_map)).
    pub(crate) fn trim(&mut self) {
        if let Some(to) = trimmed(self.running.len(), self.running.capacity()) {
            self.running.shrink_to(to);
        }
        if let Some(to) = trimmed(self.retries.len(), self.retries.capacity()) {
            self.retries.shrink_to(to);
        }
    }

    /// Number of running keys plus backoffs (one per key and kind); for memory accounting and
    /// tests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.running.len() + self.retries.values().map(|b| b.len()).sum::<usize>()
    }

    /// Whether nothing runs and nothing is in backoff.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty() && self.retries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets_on_success() {
        let mut gate = OperationGate::new(BackoffConfig {
            initial: ms(500),
            max: ms(2000),
        });
        let mut now = ms(0);
        let mut waits = vec![];
        for _ in 0..5 {
            gate.start(1);
            let until = gate.failed(1, OpKind::Detach, now, &"failed");
            waits.push(until - now);
            now = until;
        }
        assert_eq!(waits, vec![ms(500), ms(1000), ms(2000), ms(2000), ms(2000)]);
        gate.start(1);
        gate.succeeded(&1, OpKind::Detach);
        assert!(gate.is_empty());
        assert_eq!(
            gate.failed(1, OpKind::Detach, now, &"failed") - now,
            ms(500)
        );
    }

    #[test]
    fn trimming_gives_back_a_burst_and_keeps_what_runs() {
        let mut gate = OperationGate::new(BackoffConfig::default());
        for key in 0..10_000 {
            gate.start(key);
        }
        let peak = gate.running.capacity();
        for key in 10..10_000 {
            gate.succeeded(&key, OpKind::Attach);
        }
        gate.trim();
        assert!(
            gate.running.capacity() < peak / 100,
            "the burst is given back"
        );
        assert!(
            (0..10).all(|key| gate.is_running(&key)),
            "running keys stay"
        );
        let small = gate.running.capacity();
        gate.trim();
        assert_eq!(
            gate.running.capacity(),
            small,
            "a small table is left alone"
        );
    }

    #[test]
    fn one_operation_per_key_and_backoff_per_kind() {
        let mut gate = OperationGate::new(BackoffConfig::default());
        gate.start("v");
        assert_eq!(gate.may_start(&"v", OpKind::Detach, ms(0)), Err(None));
        assert!(gate.may_start(&"w", OpKind::Detach, ms(0)).is_ok());
        let until = gate.failed("v", OpKind::Attach, ms(0), &"failed");
        assert_eq!(
            gate.may_start(&"v", OpKind::Attach, ms(10)),
            Err(Some(until))
        );
        assert!(gate.may_start(&"v", OpKind::Detach, ms(10)).is_ok());
        assert!(gate.may_start(&"v", OpKind::Attach, until).is_ok());
    }

    #[test]
    fn a_success_or_staleness_forgets_only_its_own_kind() {
        let mut gate = OperationGate::new(BackoffConfig {
            initial: ms(500),
            max: ms(2000),
        });
        let attach = gate.failed("v", OpKind::Attach, ms(0), &"failed");
        let detach = gate.failed("v", OpKind::Detach, ms(100), &"failed");
        gate.failed("w", OpKind::Detach, ms(0), &"failed");
        assert_eq!(gate.len(), 3);
        gate.succeeded(&"v", OpKind::Attach);
        assert!(gate.may_start(&"v", OpKind::Attach, ms(1)).is_ok());
        assert_eq!(
            gate.may_start(&"v", OpKind::Detach, ms(1)),
            Err(Some(detach)),
            "the detach's backoff stays"
        );
        assert!(attach < detach);
        // w's ran out at 500, stale from 2500; v's detach at 600, stale from 2600.
        gate.forget_stale(ms(2550));
        assert_eq!(gate.len(), 1, "only the expired backoff is forgotten");
        gate.forget_where(|key| *key == "v");
        assert!(gate.is_empty());
    }
}
