//! Workloads to explain if they still wait ([`Config::explain_waits_after`]): each placement
//! is stamped by the next pass and looked at once, that long after.
//!
//! A queue in stamp order is due order (one delay for all), so a pass pops its front; a
//! workload placed again (moved, or sent back to waiting and placed) is a new episode with
//! an entry of its own, and an entry whose placement changed since is stale.
//!
//! [`Config::explain_waits_after`]: crate::config::Config::explain_waits_after

use std::collections::VecDeque;
use std::time::Duration;

use crate::domain::Domain;

/// At most this many due workloads are looked at per pass: a restart's relist places every
/// workload at once, and their looks are spread over passes (the next comes at once).
pub(crate) const LOOKS_PER_PASS: usize = 1_000;

/// The workloads placed and not yet looked at.
#[derive(Debug)]
pub(crate) struct WaitWatch<D: Domain> {
    after: Option<Duration>,
    /// Placed since the last pass: (workload, node), not yet stamped.
    unstamped: Vec<(D::Workload, D::Node)>,
    /// Stamped: (due, workload, node), in due order.
    due: VecDeque<(Duration, D::Workload, D::Node)>,
}

impl<D: Domain> WaitWatch<D> {
    /// Looks at each placement `after` it (never with `None`).
    pub(crate) fn new(after: Option<Duration>) -> Self {
        WaitWatch {
            after,
            unstamped: Vec::new(),
            due: VecDeque::new(),
        }
    }

    /// Whether placements are watched at all.
    pub(crate) fn is_on(&self) -> bool {
        self.after.is_some()
    }

    /// `workload` was placed on `node`.
    pub(crate) fn placed(&mut self, workload: D::Workload, node: D::Node) {
        if self.after.is_some() {
            self.unstamped.push((workload, node));
        }
    }

    /// When a pass has work here: at once while a placement is not stamped, else the first
    /// due.
    pub(crate) fn next_wake(&self) -> Option<Duration> {
        if !self.unstamped.is_empty() {
            return Some(Duration::ZERO);
        }
        self.due.front().map(|(at, ..)| *at)
    }

    /// Stamps the placements since the last pass with `now`, and takes those due at `now`, at
    /// most [`LOOKS_PER_PASS`].
    pub(crate) fn take_due(&mut self, now: Duration) -> Vec<(D::Workload, D::Node)> {
        let Some(after) = self.after else {
            return Vec::new();
        };
        let at = now.saturating_add(after);
        self.due
            .extend(self.unstamped.drain(..).map(|(w, n)| (at, w, n)));
        let mut taken = Vec::new();
        while taken.len() < LOOKS_PER_PASS {
            match self.due.front() {
                Some((due, ..)) if *due <= now => {}
                _ => break,
            }
            if let Some((_, workload, node)) = self.due.pop_front() {
                taken.push((workload, node));
            }
        }
        if self.due.is_empty() && self.due.capacity() > 64 {
            self.due.shrink_to_fit();
        }
        taken
    }

    /// Placements watched, stamped or not.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.unstamped.len() + self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_placement_is_due_its_delay_after_the_pass_that_stamps_it() {
        let mut watch = WaitWatch::<D>::new(Some(s(120)));
        watch.placed("p1", "n1");
        assert_eq!(watch.next_wake(), Some(Duration::ZERO));
        assert!(watch.take_due(s(10)).is_empty());
        assert_eq!(watch.next_wake(), Some(s(130)));
        watch.placed("p2", "n1");
        assert!(watch.take_due(s(20)).is_empty());
        assert_eq!(watch.take_due(s(130)), vec![("p1", "n1")]);
        assert_eq!(watch.take_due(s(200)), vec![("p2", "n1")]);
        assert_eq!((watch.len(), watch.next_wake()), (0, None));
    }

    #[test]
    fn off_watches_nothing_and_a_burst_is_taken_over_passes() {
        let mut off = WaitWatch::<D>::new(None);
        off.placed("p1", "n1");
        assert_eq!((off.len(), off.next_wake()), (0, None));
        let mut watch = WaitWatch::<D>::new(Some(s(1)));
        for _ in 0..LOOKS_PER_PASS + 1 {
            watch.placed("p", "n");
        }
        watch.take_due(s(0));
        assert_eq!(watch.take_due(s(1)).len(), LOOKS_PER_PASS);
        assert_eq!(watch.next_wake(), Some(s(1)), "the rest at once");
        assert_eq!(watch.take_due(s(1)).len(), 1);
    }
}
