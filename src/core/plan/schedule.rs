//! When the core has work: the volumes marked dirty, the timers that mark them (or a node's
//! status) again later, the periodic verify and listing, and the pacing of passes.
//!
//! Work per pass is proportional to what changed: inputs and results mark volumes dirty, and
//! timers wake what waits (a backoff, the unmount wait, a re-check), so an idle pass touches
//! nothing and an idle core has no deadline at all.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::core::rules::gate::earliest;
use crate::core::tables::id_sort;
use crate::core::tables::marks::Marks;
use crate::core::tables::trim::trim_map;
use crate::domain::Domain;

/// The periodic work a pass found due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Periodic {
    /// Verify every attachment (`Config::sync_period`).
    pub(crate) sync: bool,
    /// List every attachment the backend knows (`Config::resync_period`).
    pub(crate) resync: bool,
}

/// The core's dirty set, timers and pass pacing.
#[derive(Debug)]
pub(crate) struct Schedule<D: Domain> {
    /// Volumes to look at in the next pass.
    dirty: Marks<D::Volume>,
    /// Volumes to look at in the next pass whatever share of a round it takes
    /// ([`mark_next`](Self::mark_next)), possibly more than once each.
    next: Vec<D::Volume>,
    /// The rest of a round too large for one pass ([`take_dirty`](Self::take_dirty)), in
    /// mark order: the next passes take it first, and new marks wait until it is done.
    round: VecDeque<D::Volume>,
    /// Volumes marked each once in an order of their own ([`mark_distinct`](Self::mark_distinct)),
    /// waiting for the next round.
    distinct: Vec<D::Volume>,
    /// Volume marks are dropped, not kept: while the core recovers, the end of recovery marks
    /// every volume it cannot show settled, whatever marked it before
    /// ([`SettledVolumes`](crate::core::plan::recovery::SettledVolumes)).
    holding: bool,
    /// When to mark a volume dirty again.
    volume_timers: BinaryHeap<Reverse<(Duration, D::Volume)>>,
    /// The earliest pending wake of each volume in `volume_timers`.
    wakes: FxHashMap<D::Volume, Duration>,
    /// When to mark a node's status for another look (a store call's retry).
    node_timers: BinaryHeap<Reverse<(Duration, D::Node)>>,
    last_pass: Option<Duration>,
    next_sync: Option<Duration>,
    next_resync: Option<Duration>,
}

impl<D: Domain> Default for Schedule<D> {
    fn default() -> Self {
        Schedule {
            dirty: Marks::default(),
            next: Vec::new(),
            round: VecDeque::new(),
            distinct: Vec::new(),
            holding: false,
            volume_timers: BinaryHeap::new(),
            wakes: FxHashMap::default(),
            node_timers: BinaryHeap::new(),
            last_pass: None,
            next_sync: None,
            next_resync: None,
        }
    }
}

impl<D: Domain> Schedule<D> {
    /// A schedule that drops volume marks until [`keep_marks`](Self::keep_marks): a
    /// recovering core's. Its inputs marked every volume they registered, a million at a
    /// million attachments, and its first pass sorted and looked at them all, though a restart
    /// over a settled cluster has nothing to do for nearly any of them.
    pub(crate) fn holding_marks() -> Self {
        Schedule {
            holding: true,
            ..Schedule::default()
        }
    }

    /// Volume marks are kept from now on.
    pub(crate) fn keep_marks(&mut self) {
        self.holding = false;
    }

    /// `volume` is looked at in the next pass.
    pub(crate) fn mark(&mut self, volume: D::Volume) {
        if !self.holding {
            self.dirty.mark(volume);
        }
    }

    /// Every volume of `volumes` is looked at in the next pass.
    pub(crate) fn mark_all(&mut self, volumes: impl IntoIterator<Item = D::Volume>) {
        if !self.holding {
            self.dirty.extend(volumes);
        }
    }

    /// Every volume of `volumes` is looked at as [`mark_all`](Self::mark_all) would have it
    /// (one listed twice may be looked at twice), but a round they make is taken in their
    /// order, each pass's share sorted as taken, not sorted whole: the end of recovery marks
    /// every volume it cannot show settled, a million at a million attachments when the store
    /// reported nothing, and sorting them all (by text, with string ids) delayed the first
    /// pass of that restart by about 120 ms.
    pub(crate) fn mark_distinct(&mut self, volumes: Vec<D::Volume>) {
        if !self.holding && !volumes.is_empty() {
            if self.distinct.is_empty() {
                // Taken whole by the round it makes, room and all: nothing to trim after.
                self.distinct = volumes;
            } else {
                self.distinct.extend(volumes);
            }
        }
    }

    /// `volume` is looked at in the very next pass, even one that takes only a share of a
    /// round: what justifies its look (a fresh read's clearance of its detach, the facts a
    /// status write read) serves only that pass, and a volume left to its turn in the round
    /// would find it gone and read its node again. A clearance that joined the round instead
    /// once made the next pass take the whole rest of it: at a million marks, the one long
    /// pass rounds exist to prevent.
    pub(crate) fn mark_next(&mut self, volume: D::Volume) {
        if !self.holding {
            self.next.push(volume);
        }
    }

    /// Every volume of `volumes` is looked at in the very next pass ([`mark_next`](Self::mark_next)).
    pub(crate) fn mark_all_next(&mut self, volumes: impl IntoIterator<Item = D::Volume>) {
        if !self.holding {
            self.next.extend(volumes);
        }
    }

    /// Timers pending, for tests of what a long wait leaves behind.
    #[cfg(test)]
    pub(crate) fn timers(&self) -> usize {
        self.volume_timers.len() + self.node_timers.len()
    }

    pub(crate) fn has_dirty(&self) -> bool {
        !(self.dirty.is_empty()
            && self.round.is_empty()
            && self.next.is_empty()
            && self.distinct.is_empty())
    }

    /// Whether a round of marks too large for one pass is under way: its next pass is due at
    /// once, and the end-of-round work waits for its last.
    pub(crate) fn in_round(&self) -> bool {
        !self.round.is_empty()
    }

    /// The volumes to look at in this pass, in order, each once: at most `budget` marks, and
    /// every volume marked for the next pass ([`mark_next`](Self::mark_next)) besides.
    ///
    /// The marks are taken as a round: once a round's volumes are all looked at, the marks
    /// made meanwhile make the next. A round larger than `budget` is looked at over several
    /// passes, `budget` volumes each, in mark order; new marks wait for its end, so every
    /// volume of it is reached within its length over `budget` passes, whatever arrives.
    #[inline]
    pub(crate) fn take_dirty(&mut self, budget: usize) -> Vec<D::Volume> {
        if self.round.is_empty() && self.next.is_empty() && self.distinct.is_empty() {
            let marks = self.dirty.take();
            if marks.len() <= budget {
                // Nearly every pass: its marks fit.
                return marks;
            }
            self.round = marks.into();
        }
        self.take_beside_next_or_from_round(budget)
    }

    /// [`take_dirty`](Self::take_dirty) with volumes marked for the next pass, or in a round.
    /// Out of line: a move meets it once, in the pass after its old node's status write.
    #[cold]
    #[inline(never)]
    fn take_beside_next_or_from_round(&mut self, budget: usize) -> Vec<D::Volume> {
        if self.round.is_empty() && !self.distinct.is_empty() {
            let mut round = std::mem::take(&mut self.distinct);
            if round.len() <= budget {
                // Few enough to sort with the other marks, as any marks (below): a volume
                // marked both ways is then one mark, not two in a round.
                self.dirty.extend(round);
            } else {
                // In their order, the other marks after them, less those the list holds (a
                // volume is looked at once a round); each share is sorted as taken.
                let marks = self.dirty.take();
                if !marks.is_empty() {
                    let mut listed = vec![false; marks.len()];
                    for volume in &round {
                        // The marks come sorted.
                        if let Ok(at) = marks.binary_search(volume) {
                            listed[at] = true;
                        }
                    }
                    let unlisted = marks.into_iter().zip(listed).filter(|(_, l)| !l);
                    round.extend(unlisted.map(|(volume, _)| volume));
                }
                self.round = round.into();
            }
        }
        if self.round.is_empty() {
            let mut marks = self.dirty.take();
            if marks.len().saturating_add(self.next.len()) <= budget {
                self.add_next(&mut marks);
                return marks;
            }
            self.round = marks.into();
        }
        self.take_from_round(budget)
    }

    /// The next pass's share of the round under way ([`take_dirty`](Self::take_dirty)).
    fn take_from_round(&mut self, budget: usize) -> Vec<D::Volume> {
        let take = budget.min(self.round.len());
        let mut pass: Vec<D::Volume> = self.round.drain(..take).collect();
        if self.round.is_empty() {
            // The round's room goes with it.
            self.round = VecDeque::new();
        }
        // Beside the share, not instead of its turn: one may be looked at again there, and a
        // look is idempotent.
        self.add_next(&mut pass);
        pass
    }

    /// Adds the volumes marked for the next pass to `pass`, and leaves it sorted and each
    /// volume once (the queued admissions binary-search a pass's volumes). Marks and a round
    /// of them come sorted; a share of a [`mark_distinct`](Self::mark_distinct) round does
    /// not, and may hold a volume twice (listed twice).
    fn add_next(&mut self, pass: &mut Vec<D::Volume>) {
        pass.append(&mut self.next);
        if !pass.is_sorted() {
            id_sort::sort_unstable(pass);
        }
        pass.dedup();
    }

    /// Hands back a list [`take_dirty`](Self::take_dirty) gave, for reuse.
    pub(crate) fn recycle_dirty(&mut self, list: Vec<D::Volume>) {
        self.dirty.recycle(list);
    }

    /// Marks `volume` again at `at`. One pending wake per volume, the earliest: a volume made
    /// dirty over and over while it waits would otherwise stack a timer each time.
    pub(crate) fn wake_volume_at(&mut self, at: Duration, volume: D::Volume) {
        match self.wakes.get(&volume) {
            Some(earlier) if *earlier <= at => {}
            _ => {
                self.wakes.insert(volume.clone(), at);
                self.volume_timers.push(Reverse((at, volume)));
            }
        }
    }

    /// Has `node`'s status looked at again at `at`.
    pub(crate) fn wake_node_at(&mut self, at: Duration, node: D::Node) {
        self.node_timers.push(Reverse((at, node)));
    }

    /// When the next pass is due: at once when `has_work` (or anything is dirty), else at the
    /// earliest timer, the periodic verify while `attached`, the periodic listing while
    /// `managing` nodes, or `extra`; never sooner than `period` after the last pass. `None`:
    /// nothing can happen until an input arrives.
    ///
    /// `extra` is asked only when nothing is to do at once: a driver asks this before every
    /// pass, and the pass again, and in a busy cluster the timers do not matter.
    pub(crate) fn next_deadline(
        &self,
        has_work: bool,
        attached: bool,
        managing: bool,
        extra: impl FnOnce() -> Option<Duration>,
        period: Duration,
    ) -> Option<Duration> {
        if self.in_round() {
            // A round's next pass is not paced: its volumes were due at its first.
            return Some(self.last_pass.unwrap_or(Duration::ZERO));
        }
        let earliest = if has_work || self.has_dirty() {
            Duration::ZERO
        } else {
            earliest([
                self.volume_timers.peek().map(|Reverse((t, _))| *t),
                self.node_timers.peek().map(|Reverse((t, _))| *t),
                self.next_sync.filter(|_| attached),
                self.next_resync.filter(|_| managing),
                extra(),
            ])?
        };
        Some(match self.last_pass {
            Some(last) => earliest.max(last.saturating_add(period)),
            None => earliest,
        })
    }

    /// Starts a pass at `now`: the volume timers due mark their volumes dirty, and the nodes
    /// whose timers are due are returned, with the periodic work now due (which is then
    /// scheduled again `sync` and `resync` later; `resync` is only due while `managing`).
    pub(crate) fn start_pass(
        &mut self,
        now: Duration,
        sync: Duration,
        resync: Option<Duration>,
        managing: bool,
    ) -> (Vec<D::Node>, Periodic) {
        self.last_pass = Some(now);
        while let Some(Reverse((at, _))) = self.volume_timers.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, volume)) = self.volume_timers.pop().expect("peeked");
            if self.wakes.get(&volume) == Some(&at) {
                self.wakes.remove(&volume);
            }
            self.dirty.mark(volume);
        }
        let mut nodes = Vec::new();
        while let Some(Reverse((at, _))) = self.node_timers.peek() {
            if *at > now {
                break;
            }
            let Reverse((_, node)) = self.node_timers.pop().expect("peeked");
            nodes.push(node);
        }
        let mut due = Periodic::default();
        match self.next_sync {
            Some(at) if at > now => {}
            Some(_) => {
                due.sync = true;
                self.next_sync = Some(now.saturating_add(sync));
            }
            None => self.next_sync = Some(now.saturating_add(sync)),
        }
        if let Some(period) = resync {
            match self.next_resync {
                Some(at) if at > now || !managing => {}
                Some(_) => {
                    due.resync = true;
                    self.next_resync = Some(now.saturating_add(period));
                }
                None => self.next_resync = Some(now.saturating_add(period)),
            }
        }
        (nodes, due)
    }

    /// Gives back what a past burst left allocated (the heaps keep their peak capacity
    /// otherwise).
    pub(crate) fn trim(&mut self) {
        trim_map(&mut self.wakes);
        trim_heap(&mut self.volume_timers);
        trim_heap(&mut self.node_timers);
        if self.next.capacity() > 64 && self.next.len() * 4 <= self.next.capacity() {
            self.next.shrink_to(self.next.len() * 2);
        }
    }
}

/// Shrinks `heap` to twice its length once it is at most a quarter full (as `trim_map`).
fn trim_heap<T: Ord>(heap: &mut BinaryHeap<T>) {
    if heap.capacity() > 64 && heap.len() * 4 <= heap.capacity() {
        heap.shrink_to(heap.len() * 2);
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

    #[test]
    fn one_pending_wake_per_volume_the_earliest() {
        let mut sched: Schedule<T> = Schedule::default();
        sched.wake_volume_at(s(10), "v");
        sched.wake_volume_at(s(20), "v");
        sched.wake_volume_at(s(5), "v");
        assert_eq!(
            sched.volume_timers.len(),
            2,
            "the later wake is not stacked"
        );
        let period = Duration::from_millis(100);
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            Some(s(5))
        );
        sched.start_pass(s(5), s(60), None, false);
        assert!(sched.take_dirty(usize::MAX).contains(&"v"));
        // The stale heap entry at 10 s still fires, harmlessly.
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            Some(s(10))
        );
    }

    #[test]
    fn a_round_is_taken_a_budget_at_a_time_and_the_marks_made_meanwhile_make_the_next() {
        let mut sched: Schedule<T> = Schedule::default();
        let period = Duration::from_millis(100);
        sched.mark_all(["c", "a", "e", "b", "d"]);
        sched.start_pass(s(1), s(60), None, false);
        assert_eq!(sched.take_dirty(2), ["a", "b"]);
        assert!(sched.in_round());
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            Some(s(1)),
            "a round's next pass is due at once"
        );
        // Marked meanwhile: after the round, however it sorts.
        sched.mark("0");
        assert_eq!(sched.take_dirty(2), ["c", "d"]);
        // Marked again before its turn: looked at in the round, and again in the next.
        sched.mark("e");
        assert_eq!(sched.take_dirty(2), ["e"]);
        assert!(!sched.in_round());
        assert_eq!(sched.take_dirty(2), ["0", "e"]);
        assert!(!sched.in_round() && !sched.has_dirty());
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            None
        );
    }

    #[test]
    fn a_volume_marked_for_the_next_pass_joins_any_share_of_a_round_in_order_and_once() {
        let mut sched: Schedule<T> = Schedule::default();
        sched.mark_all(["c", "a", "e", "b", "d"]);
        sched.start_pass(s(1), s(60), None, false);
        assert_eq!(sched.take_dirty(2), ["a", "b"]);
        // A clearance for "e" and facts for "d" (twice, from two nodes) and "0": the next
        // share, in order and each once, and not the rest of the round.
        sched.mark_all_next(["e", "d", "0", "d"]);
        assert!(sched.has_dirty());
        assert_eq!(sched.take_dirty(2), ["0", "c", "d", "e"]);
        // "e" keeps its turn in the round.
        assert_eq!(sched.take_dirty(2), ["e"]);
        assert!(!sched.in_round());
        // Outside a round: with the marks, when they fit beside it.
        sched.mark("b");
        sched.mark_next("a");
        assert_eq!(sched.take_dirty(2), ["a", "b"]);
        // When they do not, the round starts and the next pass's volume joins its first share.
        sched.mark_all(["x", "y", "z"]);
        sched.mark_next("zz");
        assert_eq!(sched.take_dirty(2), ["x", "y", "zz"]);
        assert_eq!(sched.take_dirty(2), ["z"]);
        assert!(!sched.has_dirty());
        // A recovering core keeps no volume marks, these neither.
        let mut holding: Schedule<T> = Schedule::holding_marks();
        holding.mark_next("v");
        assert!(!holding.has_dirty());
    }

    #[test]
    fn a_distinct_list_makes_a_round_in_its_own_order_each_share_sorted() {
        let mut sched: Schedule<T> = Schedule::default();
        // As the end of recovery: keeps marks, then marks the unsettled volumes in table order.
        sched.mark("c");
        sched.mark_distinct(vec!["e", "a", "d", "b", "c"]);
        sched.mark("0");
        assert!(sched.has_dirty());
        // In the list's order, two at a time, each share sorted; the marks after the list.
        assert_eq!(sched.take_dirty(2), ["a", "e"]);
        assert!(sched.in_round());
        sched.mark_next("z");
        assert_eq!(sched.take_dirty(2), ["b", "d", "z"]);
        // "c", marked before the list too, once.
        assert_eq!(sched.take_dirty(2), ["0", "c"]);
        assert!(!sched.has_dirty());
        // A list that fits a pass is taken with the marks, sorted, each once.
        sched.mark_distinct(vec!["y", "x"]);
        sched.mark("x");
        assert_eq!(sched.take_dirty(4), ["x", "y"]);
        assert!(!sched.in_round() && !sched.has_dirty());
        // While a round is under way it waits for the round's end, as marks do.
        sched.mark_all(["p", "q", "r"]);
        assert_eq!(sched.take_dirty(2), ["p", "q"]);
        sched.mark_distinct(vec!["n", "m", "l"]);
        assert_eq!(sched.take_dirty(2), ["r"]);
        assert_eq!(sched.take_dirty(2), ["m", "n"]);
        assert_eq!(sched.take_dirty(2), ["l"]);
        assert!(!sched.has_dirty());
    }

    #[test]
    fn an_idle_schedule_has_no_deadline_and_passes_are_paced() {
        let mut sched: Schedule<T> = Schedule::default();
        let period = Duration::from_millis(100);
        assert_eq!(
            sched.next_deadline(false, true, true, || None, period),
            None
        );
        let (_, due) = sched.start_pass(s(1), s(60), Some(s(300)), true);
        assert_eq!(due, Periodic::default(), "the first pass only schedules");
        assert_eq!(
            sched.next_deadline(false, true, false, || None, period),
            Some(s(61)),
            "the verify while anything is attached; no listing without nodes"
        );
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            None
        );
        assert_eq!(
            sched.next_deadline(false, false, false, || Some(s(7)), period),
            Some(s(7)),
            "an idle schedule waits for the caller's own timers too"
        );
        sched.mark("v");
        assert_eq!(
            sched.next_deadline(false, false, false, || None, period),
            Some(s(1) + period),
            "work is due at once, but not sooner than a period after the last pass"
        );
        assert_eq!(
            sched.next_deadline(
                false,
                false,
                false,
                || unreachable!("not asked while work is due"),
                period
            ),
            Some(s(1) + period),
        );
        let (_, due) = sched.start_pass(s(301), s(60), Some(s(300)), true);
        assert_eq!(
            due,
            Periodic {
                sync: true,
                resync: true
            }
        );
    }
}
