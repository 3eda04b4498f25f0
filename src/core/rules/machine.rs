//! Fencing without a human: a backend that can tell whether a node's machine is powered off
//! (a cloud's instance state) lets the core count an unhealthy node as fenced, so that its
//! volumes move in seconds instead of waiting for someone to set the `out-of-service` taint.
//!
//! The rule is "twice, fresh": two consecutive [`MachineState::Off`](crate::traits::MachineState::Off) answers, the second asked
//! at least [`MachineFencing::interval`] after the first came back, and the confirming one no
//! older than [`MachineFencing::max_age`] when a detach is planned on it. Anything else (a
//! `Running` or `Unknown` answer, an error, the node healthy or tainted again, the node object
//! removed) starts over. The detach that follows keeps every other step of the safe path: the
//! volume leaves the node's report, the store acknowledges it, a fresh read of the node must
//! not show it healthy again, and only then the call.

use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::config::MachineFencing;
use crate::core::operation::OpId;
use crate::domain::Domain;

/// What the core knows of one node's machine checks.
#[derive(Clone, Debug, Default)]
struct Watch {
    /// A held detach asked for a check since the last one was planned.
    wanted: bool,
    /// The check running, and whether its answer still counts (a reset since it was asked
    /// makes it count for pacing only).
    running: Option<(OpId, bool)>,
    /// The next check is not asked before this (the last answer plus the interval).
    next_at: Duration,
    /// When the first `Off` of the current run came back.
    first_off: Option<Duration>,
    /// When the last `Off` of the current run came back.
    last_off: Option<Duration>,
    /// When the check whose `Off` answer last confirmed the run was asked.
    confirmed: Option<Duration>,
    /// The confirmation of this run was announced.
    announced: bool,
    /// A failed check of this episode was announced.
    failure_announced: bool,
}

impl Watch {
    fn reset(&mut self) {
        self.first_off = None;
        self.last_off = None;
        self.confirmed = None;
        self.announced = false;
        if let Some((_, counts)) = &mut self.running {
            *counts = false;
        }
    }
}

/// What a check's answer changed, for the core to tell a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Nothing worth an event.
    Quiet,
    /// The node counts as fenced from now, for the first time in this run.
    Fenced,
    /// The check failed, for the first time in this episode.
    Failed,
}

/// The machine checks of every node that has had one, per node.
#[derive(Debug)]
pub(crate) struct MachineWatch<D: Domain> {
    nodes: FxHashMap<D::Node, Watch>,
}

impl<D: Domain> Default for MachineWatch<D> {
    fn default() -> Self {
        MachineWatch {
            nodes: FxHashMap::default(),
        }
    }
}

impl<D: Domain> MachineWatch<D> {
    /// A detach held on `node` wants its machine checked.
    pub(crate) fn want(&mut self, node: &D::Node, now: Duration) {
        match self.nodes.get_mut(node) {
            Some(watch) => watch.wanted = true,
            None => {
                self.nodes.insert(
                    node.clone(),
                    Watch {
                        wanted: true,
                        next_at: now,
                        ..Watch::default()
                    },
                );
            }
        }
    }

    /// The nodes whose check is wanted and due at `now`, in order; also drops what an idle
    /// node left behind once it no longer matters (its last answer older than `max_age`).
    pub(crate) fn due(&mut self, now: Duration, max_age: Duration) -> Vec<D::Node> {
        if self.nodes.is_empty() {
            return Vec::new();
        }
        self.nodes.retain(|_, w| {
            w.wanted || w.running.is_some() || now <= w.next_at.saturating_add(max_age)
        });
        let mut due: Vec<D::Node> = self
            .nodes
            .iter()
            .filter(|(_, w)| w.wanted && w.running.is_none() && w.next_at <= now)
            .map(|(node, _)| node.clone())
            .collect();
        due.sort();
        due
    }

    /// When a wanted check next falls due, if one waits for its pacing.
    pub(crate) fn next_wake(&self) -> Option<Duration> {
        self.nodes
            .values()
            .filter(|w| w.wanted && w.running.is_none())
            .map(|w| w.next_at)
            .min()
    }

    /// The check `id` of `node` was planned.
    pub(crate) fn started(&mut self, node: &D::Node, id: OpId) {
        if let Some(watch) = self.nodes.get_mut(node) {
            watch.wanted = false;
            watch.running = Some((id, true));
        }
    }

    /// The check `id` of `node`, asked at `asked`, came back at `now` with `off` (`Some(true)`:
    /// `Off`; `Some(false)`: running or unknown; `None`: the call failed).
    pub(crate) fn answered(
        &mut self,
        node: &D::Node,
        id: OpId,
        asked: Duration,
        now: Duration,
        off: Option<bool>,
        config: &MachineFencing,
    ) -> Answered {
        let Some(watch) = self.nodes.get_mut(node) else {
            return Answered::Quiet;
        };
        let counts = match watch.running {
            Some((running, counts)) if running == id => counts,
            // Planned for an earlier object of the same name: not this node's.
            _ => return Answered::Quiet,
        };
        watch.running = None;
        watch.next_at = now.saturating_add(config.interval);
        if !counts {
            return Answered::Quiet;
        }
        match off {
            Some(true) => {
                watch.failure_announced = false;
                // A gap longer than max_age since the last Off starts a new run: the two
                // answers that fence a node are consecutive and recent.
                let continues = watch
                    .last_off
                    .is_some_and(|last| asked.saturating_sub(last) <= config.max_age);
                if !continues {
                    watch.first_off = Some(now);
                    watch.confirmed = None;
                    watch.announced = false;
                }
                watch.last_off = Some(now);
                let first = watch.first_off.unwrap_or(now);
                if asked >= first.saturating_add(config.interval) {
                    watch.confirmed = Some(asked);
                    if !watch.announced {
                        watch.announced = true;
                        return Answered::Fenced;
                    }
                }
                Answered::Quiet
            }
            Some(false) => {
                watch.failure_announced = false;
                watch.reset();
                Answered::Quiet
            }
            None => {
                watch.reset();
                if watch.failure_announced {
                    Answered::Quiet
                } else {
                    watch.failure_announced = true;
                    Answered::Failed
                }
            }
        }
    }

    /// Whether `node`'s machine counts as off at `now`: confirmed twice, and the confirming
    /// check asked at most `max_age` ago.
    pub(crate) fn is_off(&self, node: &D::Node, now: Duration, max_age: Duration) -> bool {
        self.nodes
            .get(node)
            .and_then(|w| w.confirmed)
            .is_some_and(|asked| now <= asked.saturating_add(max_age))
    }

    /// The node is healthy or fenced by the orchestrator again: its run of answers starts
    /// over (a check running counts for pacing only).
    pub(crate) fn reset(&mut self, node: &D::Node) {
        if let Some(watch) = self.nodes.get_mut(node) {
            watch.reset();
            watch.wanted = false;
        }
    }

    /// The node object is gone: a node of the same name later is a new object.
    pub(crate) fn forget(&mut self, node: &D::Node) {
        self.nodes.remove(node);
    }

    /// Nodes with a watch, for tests of what is left behind.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn config() -> MachineFencing {
        MachineFencing {
            interval: s(5),
            max_age: s(30),
        }
    }

    /// Plans, then answers, one check of `n` asked at `asked`, answered at `now`.
    fn check(
        w: &mut MachineWatch<T>,
        id: u64,
        asked: u64,
        now: u64,
        off: Option<bool>,
    ) -> Answered {
        w.want(&"n", s(asked));
        assert_eq!(w.due(s(asked), s(30)), vec!["n"], "due at {asked}");
        w.started(&"n", OpId(id));
        assert!(w.due(s(asked), s(30)).is_empty(), "one at a time");
        w.answered(&"n", OpId(id), s(asked), s(now), off, &config())
    }

    #[test]
    fn two_off_answers_an_interval_apart_fence_and_only_while_fresh() {
        let mut w = MachineWatch::<T>::default();
        assert_eq!(check(&mut w, 1, 10, 10, Some(true)), Answered::Quiet);
        assert!(!w.is_off(&"n", s(10), s(30)), "one answer never fences");
        w.want(&"n", s(11));
        assert!(w.due(s(14), s(30)).is_empty(), "paced by the interval");
        assert_eq!(w.next_wake(), Some(s(15)));
        assert_eq!(check(&mut w, 2, 15, 15, Some(true)), Answered::Fenced);
        assert!(w.is_off(&"n", s(45), s(30)));
        assert!(!w.is_off(&"n", s(46), s(30)), "stale after max_age");
        // A third Off refreshes it, quietly.
        assert_eq!(check(&mut w, 3, 20, 21, Some(true)), Answered::Quiet);
        assert!(w.is_off(&"n", s(50), s(30)));
    }

    #[test]
    fn anything_but_off_starts_over() {
        for other in [Some(false), None] {
            let mut w = MachineWatch::<T>::default();
            check(&mut w, 1, 10, 10, Some(true));
            check(&mut w, 2, 15, 15, other);
            assert_eq!(check(&mut w, 3, 20, 20, Some(true)), Answered::Quiet);
            assert!(!w.is_off(&"n", s(20), s(30)), "{other:?} reset the run");
            assert_eq!(check(&mut w, 4, 25, 25, Some(true)), Answered::Fenced);
        }
    }

    #[test]
    fn a_second_answer_asked_too_soon_or_after_a_gap_does_not_confirm() {
        let mut w = MachineWatch::<T>::default();
        check(&mut w, 1, 10, 12, Some(true));
        // Asked 3 s after the first came back (a driver that ignored the pacing).
        w.started(&"n", OpId(2));
        w.answered(&"n", OpId(2), s(15), s(15), Some(true), &config());
        assert!(!w.is_off(&"n", s(15), s(30)));
        // After a gap longer than max_age, the run starts over.
        let mut w = MachineWatch::<T>::default();
        check(&mut w, 1, 10, 10, Some(true));
        assert_eq!(check(&mut w, 2, 41, 41, Some(true)), Answered::Quiet);
        assert!(!w.is_off(&"n", s(41), s(30)));
        assert_eq!(check(&mut w, 3, 46, 46, Some(true)), Answered::Fenced);
    }

    #[test]
    fn a_reset_while_a_check_runs_makes_its_answer_count_for_pacing_only() {
        let mut w = MachineWatch::<T>::default();
        check(&mut w, 1, 10, 10, Some(true));
        w.want(&"n", s(15));
        w.due(s(15), s(30));
        w.started(&"n", OpId(2));
        w.reset(&"n");
        w.answered(&"n", OpId(2), s(15), s(15), Some(true), &config());
        assert!(!w.is_off(&"n", s(15), s(30)));
        // An answer under an id not running (an earlier object of the name) is ignored.
        w.forget(&"n");
        w.want(&"n", s(16));
        w.started(&"n", OpId(3));
        assert_eq!(
            w.answered(&"n", OpId(2), s(16), s(16), None, &config()),
            Answered::Quiet
        );
        assert!(w.due(s(16), s(30)).is_empty(), "3 still runs");
    }

    #[test]
    fn failures_are_announced_once_per_episode_and_idle_watches_go() {
        let mut w = MachineWatch::<T>::default();
        assert_eq!(check(&mut w, 1, 10, 10, None), Answered::Failed);
        assert_eq!(check(&mut w, 2, 15, 15, None), Answered::Quiet);
        check(&mut w, 3, 20, 20, Some(false));
        assert_eq!(check(&mut w, 4, 25, 25, None), Answered::Failed);
        assert_eq!(w.len(), 1);
        assert!(w.due(s(30 + 30), s(30)).is_empty());
        assert_eq!(w.len(), 1, "kept while its last answer may matter");
        w.due(s(30 + 31), s(30));
        assert_eq!(w.len(), 0, "an idle watch goes");
    }
}
