//! Fair and bounded backend load: separate concurrency limits for attaches and detaches, a
//! token bucket on the calls they make, and first-in-first-out queues for what must wait.
//!
//! Clouds throttle: a burst of a thousand attaches at a rollout can exhaust an API quota, and
//! the detaches that free volumes for those very pods then fail or wait behind the attaches.
//! With [`BackendLoad`] set, the core admits an attach or a detach it would otherwise plan only
//! when its class has a free slot and the bucket a token; otherwise it joins its class's queue,
//! and freed capacity goes to the queue's head first (newcomers never overtake). The two
//! classes have separate slots, so neither can starve the other of concurrency; the bucket is
//! shared, and each pass offers it to the detach queue first, then the attach queue.
//!
//! A detach is admitted when it enters its fresh read (the last check before the call, see
//! [`Operation::ReadStatus`](crate::core::Operation::ReadStatus)): the slot and the token are
//! held from then until the detach call ends, so a detach the read cleared is never refused
//! admission and read again (no livelock), and the number of detaches reading never exceeds the
//! free slots. A read that holds the detach back, or a detach no longer wanted, gives its slot
//! back at the end of the pass that sees it (its token is spent).
//!
//! Verifies and listings are not counted: their rate is fixed by `Config::sync_period` (one
//! verify per node with attachments per period) and `Config::resync_period`, and delaying them
//! would delay finding what a lost call did. Budget for them when you pick the rate (see
//! docs/design.md, "Backend load").
//!
//! A call that hangs (the backend cannot reach its node: a partitioned zone) would hold its
//! slot until the driver's deadline gives up on it, two minutes by default, and its retry would
//! take a slot again: with as many hung nodes as slots, healthy nodes got nothing for minutes,
//! round after round. So a call still running [`OverdueCalls::after`] after it was planned is
//! *overdue*: it gives its slot back, while the core still awaits it. Nothing is assumed about
//! its effect: until its answer (or the driver's deadline, which makes it Uncertain) comes, its
//! attachment is held as any with a call under way, and its gate key keeps any other call of
//! the volume from starting. At most [`OverdueCalls::max`] overdue calls per class hold no
//! slot; past that, an overdue call keeps its slot. So the calls of a class under way never
//! exceed its limit plus `max`, and those younger than `after` never exceed its limit.
//!
//! Fairness per node: a node with an overdue call, or whose last overdue call ended without a
//! success (its deadline made it Uncertain, say), is *suspect* for that class. A suspect node's
//! queued call lets the queued calls of other nodes go first, those that join the queue less
//! than one call deadline (`Config::call_timeouts`) after it: the time its hung call would have
//! held a slot. So a node whose calls hang does not take the slots back from other nodes'
//! calls with its retries or its other volumes, and still waits a bounded time. A call of the
//! node that ends before it is overdue, or an overdue one that succeeds, ends the suspicion.
//!
use std::collections::VecDeque;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::config::{BackendLoad, OverdueCalls, RateLimit};
use crate::core::operation::OpId;
use crate::domain::Domain;

/// The two classes of backend call that are limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Attach,
    Detach,
}

/// One class's load, for [`QueueStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Calls of the class planned and not yet finished that hold a slot.
    pub in_flight: usize,
    /// Calls of the class planned and not yet finished that are overdue and hold no slot
    /// ([`OverdueCalls`]); at most `OverdueCalls::max`.
    pub overdue: usize,
    /// Detaches admitted to their fresh read, holding a slot until their call ends (always 0
    /// for attaches, which are admitted when their call is planned).
    pub reserved: usize,
    /// Attaches or detaches waiting for a slot or a token, first come first served.
    pub queued: usize,
    /// How long the oldest of them has waited; zero when none waits.
    pub oldest_wait: Duration,
}

/// The backend load at a moment: what runs, what waits and for how long, and the tokens left.
/// From [`Reconciler::backend_queue`](crate::core::Reconciler::backend_queue); the controller's
/// metrics export it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Attaches.
    pub attach: ClassStats,
    /// Detaches.
    pub detach: ClassStats,
    /// Tokens in the bucket; `None` without a rate limit.
    pub tokens: Option<u32>,
}

/// The token bucket's state.
#[derive(Clone, Debug)]
struct Bucket {
    every: Duration,
    burst: u32,
    tokens: u32,
    /// When `tokens` was last brought up to date: the next token comes `every` after it.
    stamp: Duration,
}

impl Bucket {
    fn new(rate: RateLimit) -> Self {
        Bucket {
            // Validated non-zero; kept non-zero anyway, as a divisor.
            every: rate.every.max(Duration::from_nanos(1)),
            burst: rate.burst,
            tokens: rate.burst,
            stamp: Duration::ZERO,
        }
    }

    /// The tokens at `now`, and the stamp they are counted from.
    fn at(&self, now: Duration) -> (u32, Duration) {
        if self.tokens >= self.burst {
            return (self.burst, self.stamp.max(now));
        }
        let elapsed = now.saturating_sub(self.stamp);
        let gained = elapsed.as_nanos() / self.every.as_nanos();
        let room = u128::from(self.burst - self.tokens);
        if gained >= room {
            (self.burst, now.max(self.stamp))
        } else {
            // gained < room <= u32::MAX, so both conversions are exact.
            let gained = gained as u32;
            (
                self.tokens + gained,
                self.stamp.saturating_add(self.every.saturating_mul(gained)),
            )
        }
    }

    fn refill(&mut self, now: Duration) {
        (self.tokens, self.stamp) = self.at(now);
    }

    /// Takes a token at `now` if there is one.
    fn take(&mut self, now: Duration) -> bool {
        self.refill(now);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// When a token is (or was) next available.
    fn next_token(&self) -> Duration {
        if self.tokens > 0 {
            self.stamp
        } else {
            self.stamp.saturating_add(self.every)
        }
    }
}

/// A call of a limited class under way, as its lane knows it.
#[derive(Debug)]
struct Tracked<D: Domain> {
    node: D::Node,
    /// Overdue, holding no slot.
    overdue: bool,
}

/// What makes a node suspect in a lane: its calls may hang.
#[derive(Debug, Default)]
struct Suspect {
    /// Its calls under way that are overdue.
    overdue: u32,
    /// Its last overdue call ended without a success (a deadline, an error): its retry may
    /// hang again.
    hung: bool,
}

/// How far past a suspect queue head [`Lane::pick`] looks for a call of another node: the
/// pick is a scan, and a queue of thousands of one hung node's calls must not make each offer
/// cost thousands of steps. Past it, the queue is served in its order.
const SUSPECT_SCAN: usize = 256;

/// One class's slots and queue.
#[derive(Debug)]
struct Lane<D: Domain> {
    limit: Option<usize>,
    /// Calls planned and not finished that hold a slot.
    calls: usize,
    /// Waiting, first come first served; `since` has each one's first time in the queue.
    queue: VecDeque<(D::Volume, D::Node)>,
    since: FxHashMap<(D::Volume, D::Node), Duration>,
    /// The queue head popped for the pass to reconsider: admitted if it asks now.
    offered: Option<(D::Volume, D::Node)>,
    /// When a call is overdue, and how many overdue calls hold no slot at most; `None` when
    /// the lane has no limit, or calls never give their slot back.
    overdue_calls: Option<OverdueCalls>,
    /// Every call of the lane under way, with a limit and `overdue_calls` set.
    tracked: FxHashMap<OpId, Tracked<D>>,
    /// The calls holding a slot, in the order planned, with when: the front is the next to
    /// be overdue. Entries of calls that ended or went overdue are dropped as they reach the
    /// front.
    running: VecDeque<(Duration, OpId)>,
    /// Overdue calls holding no slot.
    overdue: usize,
    /// Nodes whose calls may hang (see [`Suspect`]).
    suspects: FxHashMap<D::Node, Suspect>,
    /// How long after a suspect node's queued call the calls of other nodes that join the
    /// queue still go first: the deadline of the class's calls, the time a hung call of the
    /// node would have held its slot without `overdue_calls`.
    yield_for: Duration,
}

impl<D: Domain> Lane<D> {
    fn new(limit: Option<usize>, overdue_calls: Option<OverdueCalls>, yield_for: Duration) -> Self {
        Lane {
            yield_for,
            limit,
            calls: 0,
            queue: VecDeque::new(),
            since: FxHashMap::default(),
            offered: None,
            overdue_calls: overdue_calls.filter(|_| limit.is_some()),
            tracked: FxHashMap::default(),
            running: VecDeque::new(),
            overdue: 0,
            suspects: FxHashMap::default(),
        }
    }

    /// Whether `node` is suspect here.
    fn suspect(&self, node: &D::Node) -> bool {
        !self.suspects.is_empty() && self.suspects.contains_key(node)
    }

    /// The queue position to offer next: the head, unless its node is suspect and a call of a
    /// node that is not suspect joined the queue behind it less than the class's call deadline
    /// after it; then the first such call.
    fn pick(&self) -> usize {
        let Some(head) = self.queue.front() else {
            return 0;
        };
        if !self.suspect(&head.1) {
            return 0;
        }
        let Some(head_since) = self.since.get(head) else {
            return 0;
        };
        let until = head_since.saturating_add(self.yield_for);
        self.queue
            .iter()
            .enumerate()
            .skip(1)
            .take(SUSPECT_SCAN)
            .take_while(|(_, key)| self.since.get(*key).is_some_and(|t| *t < until))
            .find(|(_, (_, node))| !self.suspect(node))
            .map_or(0, |(i, _)| i)
    }

    /// A call of the lane was planned as `id` at `now`: tracked, if overdue calls may give
    /// their slot back.
    #[inline]
    fn started(&mut self, id: OpId, node: &D::Node, now: Duration) {
        if self.overdue_calls.is_none() {
            return;
        }
        self.track(id, node, now);
    }

    fn track(&mut self, id: OpId, node: &D::Node, now: Duration) {
        self.tracked.insert(
            id,
            Tracked {
                node: node.clone(),
                overdue: false,
            },
        );
        self.running.push_back((now, id));
    }

    /// The call `id` ended, `succeeded` or not: its slot is free, or, overdue, its place
    /// among the overdue calls.
    #[inline]
    fn finished(&mut self, id: OpId, succeeded: bool) {
        if self.tracked.is_empty() {
            // No limit, or overdue calls off: every call held a slot. (A move's path.)
            self.calls = self.calls.saturating_sub(1);
            return;
        }
        self.finish_tracked(id, succeeded);
    }

    fn finish_tracked(&mut self, id: OpId, succeeded: bool) {
        let Some(call) = self.tracked.remove(&id) else {
            self.calls = self.calls.saturating_sub(1);
            return;
        };
        if call.overdue {
            self.overdue = self.overdue.saturating_sub(1);
        } else {
            self.calls = self.calls.saturating_sub(1);
        }
        let Some(suspect) = self.suspects.get_mut(&call.node) else {
            return;
        };
        if call.overdue {
            suspect.overdue = suspect.overdue.saturating_sub(1);
            suspect.hung = !succeeded;
        } else {
            // It answered in time: the backend reaches the node.
            suspect.hung = false;
        }
        if suspect.overdue == 0 && !suspect.hung {
            self.suspects.remove(&call.node);
        }
    }

    /// Makes overdue the calls planned `after` or longer before `now`, oldest first, while
    /// fewer than `max` are: each gives its slot back.
    fn mark_overdue(&mut self, now: Duration) {
        let Some(OverdueCalls { after, max }) = self.overdue_calls else {
            return;
        };
        while let Some(&(at, id)) = self.running.front() {
            let live = self.tracked.get(&id).is_some_and(|call| !call.overdue);
            if live && (self.overdue >= max || at.saturating_add(after) > now) {
                break;
            }
            self.running.pop_front();
            let Some(call) = self.tracked.get_mut(&id).filter(|_| live) else {
                continue;
            };
            call.overdue = true;
            self.overdue += 1;
            self.calls = self.calls.saturating_sub(1);
            let suspect = self.suspects.entry(call.node.clone()).or_default();
            suspect.overdue += 1;
        }
    }

    /// When the next call holding a slot is overdue, if one may be.
    fn next_overdue(&self) -> Option<Duration> {
        let OverdueCalls { after, max } = self.overdue_calls?;
        if self.overdue >= max {
            return None;
        }
        self.running
            .iter()
            .find(|(_, id)| self.tracked.get(id).is_some_and(|call| !call.overdue))
            .map(|(at, _)| at.saturating_add(after))
    }

    /// `node` is gone: a node of its name later is a new object, with no past.
    fn forget_node(&mut self, node: &D::Node) {
        if let Some(suspect) = self.suspects.get_mut(node) {
            suspect.hung = false;
            if suspect.overdue == 0 {
                self.suspects.remove(node);
            }
        }
    }

    fn enqueue(&mut self, volume: &D::Volume, node: &D::Node, now: Duration) {
        let key = (volume.clone(), node.clone());
        if !self.since.contains_key(&key) {
            self.since.insert(key.clone(), now);
            self.queue.push_back(key);
        }
    }

    fn stats(&self, reserved: usize, now: Duration) -> ClassStats {
        ClassStats {
            in_flight: self.calls,
            overdue: self.overdue,
            reserved,
            queued: self.queue.len(),
            oldest_wait: self
                .queue
                .front()
                .and_then(|k| self.since.get(k))
                .map_or(Duration::ZERO, |t| now.saturating_sub(*t)),
        }
    }
}

/// The admission state of a core: slots, queues, reservations and the bucket.
#[derive(Debug)]
pub(crate) struct Admission<D: Domain> {
    attach: Lane<D>,
    detach: Lane<D>,
    /// Detaches admitted to their fresh read and not yet called, with the read that carries
    /// their check once it is planned. Each holds a detach slot and has spent its token.
    reserved: FxHashMap<(D::Volume, D::Node), Option<OpId>>,
    bucket: Option<Bucket>,
    /// Upstream-bug L2 only: both classes use the attach lane, with the sum of the limits.
    shared: bool,
    /// The class whose queue head is offered first in the next round: the one that did not
    /// take the last capacity offered, so that under a shared bucket the classes take turns.
    first: Class,
}

impl<D: Domain> Admission<D> {
    /// The admission of `load`; `shared` puts upstream-bug L2 back (one lane for both).
    /// `deadlines` are the attach and detach calls' (`Config::call_timeouts`): how long a
    /// suspect node's queued call of each class lets other nodes' calls go first.
    pub(crate) fn new(load: BackendLoad, shared: bool, deadlines: [Duration; 2]) -> Self {
        let shared = shared && (load.max_attaches.is_some() || load.max_detaches.is_some());
        let attach_limit = if shared {
            Some(load.max_attaches.unwrap_or(0) + load.max_detaches.unwrap_or(0))
        } else {
            load.max_attaches
        };
        // One lane for both classes: room for both classes' overdue calls.
        let shared_overdue = load.overdue.map(|o| OverdueCalls {
            max: o.max.saturating_mul(2),
            ..o
        });
        Admission {
            shared,
            attach: Lane::new(
                attach_limit,
                if shared { shared_overdue } else { load.overdue },
                deadlines[0],
            ),
            detach: Lane::new(load.max_detaches, load.overdue, deadlines[1]),
            reserved: FxHashMap::default(),
            bucket: load.rate.map(Bucket::new),
            first: Class::Detach,
        }
    }

    fn lane(&mut self, class: Class) -> &mut Lane<D> {
        if self.shared {
            return &mut self.attach;
        }
        match class {
            Class::Attach => &mut self.attach,
            Class::Detach => &mut self.detach,
        }
    }

    /// Whether calls of `class` are limited at all (else admission is a no-op).
    fn gated(&self, class: Class) -> bool {
        self.bucket.is_some()
            || self.shared
            || match class {
                Class::Attach => self.attach.limit.is_some(),
                Class::Detach => self.detach.limit.is_some(),
            }
    }

    /// Whether `class` has a free slot.
    fn has_slot(&self, class: Class) -> bool {
        if self.shared {
            return self
                .attach
                .limit
                .is_none_or(|l| self.attach.calls + self.reserved.len() < l);
        }
        match class {
            Class::Attach => self.attach.limit.is_none_or(|l| self.attach.calls < l),
            Class::Detach => self
                .detach
                .limit
                .is_none_or(|l| self.detach.calls + self.reserved.len() < l),
        }
    }

    /// An attach (whose call is planned at once when admitted) or a detach (admitted to its
    /// fresh read) of (`volume`, `node`) would be planned at `now`: whether it may go. One that
    /// may not joins its class's queue (once), and a pass offers it the capacity when its turn
    /// comes; it may not go while others wait before it, whatever the capacity.
    pub(crate) fn admit(
        &mut self,
        class: Class,
        volume: &D::Volume,
        node: &D::Node,
        now: Duration,
    ) -> bool {
        if !self.gated(class) {
            if class == Class::Attach {
                self.attach.calls += 1;
            }
            return true;
        }
        if class == Class::Detach && !self.reserved.is_empty() {
            let key = (volume.clone(), node.clone());
            if self.reserved.contains_key(&key) {
                // Admitted already: a read that failed, or one more read before the call.
                return true;
            }
        }
        let offered = self
            .lane(class)
            .offered
            .as_ref()
            .is_some_and(|(v, n)| v == volume && n == node);
        let waiting = !self.lane(class).queue.is_empty();
        if (waiting && !offered)
            || !self.has_slot(class)
            || !self.bucket.as_mut().is_none_or(|b| b.take(now))
        {
            self.lane(class).enqueue(volume, node, now);
            return false;
        }
        if offered {
            self.lane(class).offered = None;
            self.first = match class {
                Class::Attach => Class::Detach,
                Class::Detach => Class::Attach,
            };
        }
        match class {
            Class::Attach => self.attach.calls += 1,
            Class::Detach => {
                self.reserved.insert((volume.clone(), node.clone()), None);
            }
        }
        true
    }

    /// A detach of (`volume`, `node`) that a fresh read cleared is about to be planned:
    /// whether it may. One admitted to its read turns its reservation into a call; one that
    /// was not (its read started before an earlier episode of it ended) is admitted now or
    /// queued, and then reads again when its turn comes.
    pub(crate) fn call_detach(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        now: Duration,
    ) -> bool {
        if !self.gated(Class::Detach) {
            self.detach.calls += 1;
            return true;
        }
        let key = (volume.clone(), node.clone());
        if self.reserved.remove(&key).is_none() {
            if !self.admit(Class::Detach, volume, node, now) {
                return false;
            }
            self.reserved.remove(&key);
        }
        self.lane(Class::Detach).calls += 1;
        true
    }

    /// The call of `class` admitted last was planned as `id`, to `node`, at `now`: from now on
    /// it may be overdue.
    #[inline]
    pub(crate) fn started(&mut self, class: Class, id: OpId, node: &D::Node, now: Duration) {
        self.lane(class).started(id, node, now);
    }

    /// The call `id` of `class` finished, `succeeded` or not: its slot (or its place among the
    /// overdue calls) is free.
    #[inline]
    pub(crate) fn finished(&mut self, class: Class, id: OpId, succeeded: bool) {
        self.lane(class).finished(id, succeeded);
    }

    /// A call of `class` admitted was not made after all: its slot is free.
    pub(crate) fn give_back(&mut self, class: Class) {
        let lane = self.lane(class);
        lane.calls = lane.calls.saturating_sub(1);
    }

    /// Makes overdue every call of a limited class that has run its `OverdueCalls::after` by
    /// `now`, while the class has room for overdue calls: their slots are free.
    #[inline]
    pub(crate) fn mark_overdue(&mut self, now: Duration) {
        // Every pass asks: with no call tracked (no limit, or none running), one branch.
        if !self.attach.running.is_empty() {
            self.attach.mark_overdue(now);
        }
        if !self.detach.running.is_empty() {
            self.detach.mark_overdue(now);
        }
    }

    /// `node` is gone: it is no longer suspect (see [`OverdueCalls`]).
    pub(crate) fn forget_node(&mut self, node: &D::Node) {
        self.attach.forget_node(node);
        self.detach.forget_node(node);
    }

    /// The fresh read `id` carries the checks of `volumes` on `node`.
    pub(crate) fn reading<'a>(
        &mut self,
        node: &D::Node,
        volumes: impl Iterator<Item = &'a D::Volume>,
        id: OpId,
    ) {
        if self.reserved.is_empty() {
            return;
        }
        for volume in volumes {
            if let Some(read) = self.reserved.get_mut(&(volume.clone(), node.clone())) {
                *read = Some(id);
            }
        }
    }

    /// Gives back the slot of every reserved detach that `live` no longer vouches for (its
    /// read held it back, it is no longer wanted, its clearance went unused): called at the
    /// start and the end of each pass, so that freed slots are offered at once.
    pub(crate) fn release_unless(
        &mut self,
        mut live: impl FnMut(&D::Volume, &D::Node, Option<OpId>) -> bool,
    ) {
        if !self.reserved.is_empty() {
            self.reserved.retain(|(v, n), read| live(v, n, *read));
        }
    }

    /// Pops the head of `class`'s queue if its class has a free slot and the bucket a token
    /// at `now`: the pass reconsiders its volume next, and [`admit`](Self::admit) lets it go.
    /// [`withdraw`](Self::withdraw) then drops it if it did not ask (no longer wanted, waiting
    /// for something else): it queues again, at the back, when it next asks.
    pub(crate) fn offer(&mut self, class: Class, now: Duration) -> Option<(D::Volume, D::Node)> {
        if self.lane(class).queue.is_empty() || !self.has_slot(class) {
            return None;
        }
        if let Some(bucket) = &mut self.bucket {
            bucket.refill(now);
            if bucket.tokens == 0 {
                return None;
            }
        }
        let lane = self.lane(class);
        let at = lane.pick();
        let head = lane.queue.remove(at)?;
        lane.since.remove(&head);
        lane.offered = Some(head.clone());
        Some(head)
    }

    /// When (`volume`, `node`) joined `class`'s queue, while it waits there.
    pub(crate) fn queued_since(
        &self,
        class: Class,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<Duration> {
        let lane = match class {
            Class::Attach => &self.attach,
            Class::Detach => &self.detach,
        };
        if lane.since.is_empty() {
            return None;
        }
        lane.since.get(&(volume.clone(), node.clone())).copied()
    }

    /// The classes in the order their queue heads are offered: the one that did not take the
    /// last offer first (detaches at the start).
    pub(crate) fn order(&self) -> [Class; 2] {
        match self.first {
            Class::Detach => [Class::Detach, Class::Attach],
            Class::Attach => [Class::Attach, Class::Detach],
        }
    }

    /// Ends the offer of `class`'s popped head: see [`offer`](Self::offer).
    pub(crate) fn withdraw(&mut self, class: Class) {
        self.lane(class).offered = None;
    }

    /// When queued work can next be admitted: now (`Duration::ZERO`) when a class with a
    /// queue has a free slot and the bucket a token, the next token's time when only the
    /// token is missing; when a call holding a slot is next overdue, if no queue has a free
    /// slot; `None` when nothing frees one in time (a finishing call, which marks its volume,
    /// makes a pass) or nothing waits.
    pub(crate) fn wake(&self) -> Option<Duration> {
        if self.attach.queue.is_empty() && self.detach.queue.is_empty() {
            // Nothing waits (a move's every deadline).
            return None;
        }
        let mut overdue = None;
        let ready = [Class::Attach, Class::Detach].into_iter().any(|class| {
            let lane = match (class, self.shared) {
                (Class::Attach, _) | (Class::Detach, true) => &self.attach,
                (Class::Detach, false) => &self.detach,
            };
            if lane.queue.is_empty() {
                return false;
            }
            if self.has_slot(class) {
                return true;
            }
            overdue = crate::core::rules::gate::earliest([overdue, lane.next_overdue()]);
            false
        });
        if !ready {
            return overdue;
        }
        Some(
            self.bucket
                .as_ref()
                .map_or(Duration::ZERO, Bucket::next_token),
        )
    }

    /// The load at `now`.
    pub(crate) fn stats(&self, now: Duration) -> QueueStats {
        QueueStats {
            attach: self.attach.stats(0, now),
            detach: self.detach.stats(self.reserved.len(), now),
            tokens: self.bucket.as_ref().map(|b| b.at(now).0),
        }
    }

    /// Gives back what a past burst left allocated.
    pub(crate) fn trim(&mut self) {
        for lane in [&mut self.attach, &mut self.detach] {
            crate::core::tables::trim::trim_map(&mut lane.since);
            if lane.overdue_calls.is_some() {
                crate::core::tables::trim::trim_map(&mut lane.tracked);
                crate::core::tables::trim::trim_map(&mut lane.suspects);
                if lane.running.capacity() > 64 && lane.running.len() * 4 <= lane.running.capacity()
                {
                    lane.running.shrink_to(lane.running.len() * 2);
                }
            }
            if lane.queue.capacity() > 64 && lane.queue.len() * 4 <= lane.queue.capacity() {
                lane.queue.shrink_to(lane.queue.len() * 2);
            }
        }
        crate::core::tables::trim::trim_map(&mut self.reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The admission of `load`, with calls whose deadline is 2 minutes.
    fn admission(load: BackendLoad) -> Admission<T> {
        Admission::new(load, false, [Duration::from_secs(120); 2])
    }

    fn bucket(every: u64, burst: u32) -> Bucket {
        Bucket::new(RateLimit {
            every: ms(every),
            burst,
        })
    }

    #[test]
    fn the_bucket_paces_on_virtual_time() {
        let mut b = bucket(100, 3);
        // Starts full: a burst of three, then one per 100 ms.
        assert!((0..3).all(|_| b.take(ms(0))));
        assert!(!b.take(ms(0)));
        assert_eq!(b.next_token(), ms(100));
        assert!(!b.take(ms(99)));
        assert!(b.take(ms(100)));
        assert!(!b.take(ms(150)));
        assert!(b.take(ms(200)));
        // A long idle stretch fills it to the burst, no further.
        assert_eq!(b.at(ms(10_000)).0, 3);
        assert!((0..3).all(|_| b.take(ms(10_000))));
        assert!(!b.take(ms(10_000)));
        // The next token comes one interval after the take that emptied a full bucket.
        assert_eq!(b.next_token(), ms(10_100));
        // Partial intervals carry over: tokens at 10_150 and 10_250 count from 10_000.
        assert!(b.take(ms(10_150)));
        assert!(b.take(ms(10_250)));
        assert!(!b.take(ms(10_299)));
    }

    #[test]
    fn the_bucket_admits_at_most_burst_plus_elapsed_over_every() {
        let mut b = bucket(7, 4);
        let mut taken = 0u64;
        for t in 0..1_000u64 {
            // Tries three times per millisecond.
            for _ in 0..3 {
                taken += u64::from(b.take(ms(t)));
            }
            assert!(taken <= 4 + t / 7, "{taken} by {t} ms");
        }
        assert_eq!(taken, 4 + 999 / 7, "and it does admit that many");
    }

    #[test]
    fn the_bucket_is_overflow_safe_at_the_largest_durations() {
        let max = crate::config::Config::MAX_DURATION;
        let mut b = bucket(1, u32::MAX);
        assert!(b.take(Duration::ZERO));
        assert_eq!(b.at(max).0, u32::MAX);
        let mut slow = Bucket::new(RateLimit {
            every: max,
            burst: 1,
        });
        assert!(slow.take(max));
        assert_eq!(slow.next_token(), max.saturating_add(max));
        assert!(!slow.take(max + max - Duration::from_nanos(1)));
        assert!(slow.take(max + max));
        let mut b = bucket(3, 2);
        assert!(b.take(Duration::MAX) && b.take(Duration::MAX) && !b.take(Duration::MAX));
        // Time going backwards gains nothing.
        assert!(!b.take(Duration::ZERO));
    }

    #[test]
    fn an_unbounded_admission_counts_calls_and_queues_nothing() {
        let mut a: Admission<T> = admission(BackendLoad::UNBOUNDED);
        for n in ["n1", "n2", "n3"] {
            assert!(a.admit(Class::Attach, &"v", &n, ms(0)));
            assert!(a.admit(Class::Detach, &"w", &n, ms(0)));
            assert!(a.call_detach(&"w", &n, ms(0)));
        }
        let stats = a.stats(ms(0));
        assert_eq!((stats.attach.in_flight, stats.detach.in_flight), (3, 3));
        assert_eq!(stats.detach.reserved, 0);
        assert_eq!(a.wake(), None);
    }

    #[test]
    fn queues_are_first_come_first_served_and_deduplicated() {
        let load = BackendLoad {
            max_attaches: Some(1),
            ..BackendLoad::UNBOUNDED
        };
        let mut a: Admission<T> = admission(load);
        assert!(a.admit(Class::Attach, &"v0", &"n", ms(0)));
        for (i, v) in ["v1", "v2", "v3"].iter().enumerate() {
            assert!(!a.admit(Class::Attach, v, &"n", ms(i as u64)));
        }
        assert!(!a.admit(Class::Attach, &"v1", &"n", ms(9)), "no overtaking");
        assert_eq!(a.stats(ms(10)).attach.queued, 3, "asked twice, queued once");
        assert_eq!(
            a.stats(ms(10)).attach.oldest_wait,
            ms(10),
            "from its first time"
        );
        assert_eq!(a.offer(Class::Attach, ms(10)), None, "no slot");
        assert_eq!(a.wake(), None);
        a.finished(Class::Attach, OpId(0), true);
        assert_eq!(a.wake(), Some(Duration::ZERO));
        // The slot is free, but a newcomer may not take it while v1 waits.
        assert!(!a.admit(Class::Attach, &"v9", &"n", ms(11)));
        assert_eq!(a.offer(Class::Attach, ms(11)), Some(("v1", "n")));
        assert!(a.admit(Class::Attach, &"v1", &"n", ms(11)));
        a.withdraw(Class::Attach);
        a.finished(Class::Attach, OpId(0), true);
        // v2 was not wanted any more when offered: dropped, and v3 is next.
        assert_eq!(a.offer(Class::Attach, ms(12)), Some(("v2", "n")));
        a.withdraw(Class::Attach);
        assert_eq!(a.offer(Class::Attach, ms(12)), Some(("v3", "n")));
        assert!(
            !a.admit(Class::Attach, &"v9", &"n", ms(12)),
            "v3 is offered"
        );
        assert!(a.admit(Class::Attach, &"v3", &"n", ms(12)));
        a.withdraw(Class::Attach);
        assert_eq!(a.stats(ms(12)).attach.queued, 1, "v9 waits");
    }

    #[test]
    fn a_reserved_detach_holds_its_slot_until_its_call_ends_or_it_is_released() {
        let load = BackendLoad {
            max_detaches: Some(2),
            ..BackendLoad::UNBOUNDED
        };
        let mut a: Admission<T> = admission(load);
        assert!(a.admit(Class::Detach, &"v1", &"n", ms(0)));
        assert!(a.admit(Class::Detach, &"v2", &"n", ms(0)));
        assert!(
            !a.admit(Class::Detach, &"v3", &"n", ms(0)),
            "both slots reading"
        );
        assert!(
            a.admit(Class::Detach, &"v1", &"n", ms(1)),
            "admitted once, reads again"
        );
        a.reading(&"n", [&"v1", &"v2"].into_iter(), OpId(7));
        // The read cleared v1: its call never waits for admission.
        assert!(a.call_detach(&"v1", &"n", ms(2)));
        // The read held v2 back: its slot goes back when the pass sees it.
        a.release_unless(|v, _, read| *v == "v1" && read == Some(OpId(7)));
        let stats = a.stats(ms(2));
        assert_eq!((stats.detach.in_flight, stats.detach.reserved), (1, 0));
        assert_eq!(a.offer(Class::Detach, ms(2)), Some(("v3", "n")));
        assert!(a.admit(Class::Detach, &"v3", &"n", ms(2)));
        a.withdraw(Class::Detach);
        assert!(!a.admit(Class::Detach, &"v4", &"n", ms(2)));
        a.finished(Class::Detach, OpId(0), true);
        assert_eq!(a.offer(Class::Detach, ms(3)), Some(("v4", "n")));
    }

    #[test]
    fn a_cleared_detach_without_a_reservation_queues_when_full() {
        let load = BackendLoad {
            max_detaches: Some(1),
            ..BackendLoad::UNBOUNDED
        };
        let mut a: Admission<T> = admission(load);
        assert!(a.admit(Class::Detach, &"v1", &"n", ms(0)));
        assert!(!a.call_detach(&"v2", &"n", ms(0)), "the slot is v1's");
        assert_eq!(a.stats(ms(0)).detach.queued, 1);
        assert!(a.call_detach(&"v1", &"n", ms(0)));
        a.finished(Class::Detach, OpId(0), true);
        assert_eq!(a.offer(Class::Detach, ms(1)), Some(("v2", "n")));
        assert!(
            a.call_detach(&"v2", &"n", ms(1)),
            "offered: admitted and called"
        );
        assert_eq!(a.stats(ms(1)).detach.in_flight, 1);
    }

    #[test]
    fn the_bucket_wakes_the_queue_at_the_next_token() {
        let load = BackendLoad {
            rate: Some(RateLimit {
                every: ms(250),
                burst: 1,
            }),
            ..BackendLoad::UNBOUNDED
        };
        let mut a: Admission<T> = admission(load);
        assert!(a.admit(Class::Detach, &"v1", &"n", ms(0)));
        assert!(!a.admit(Class::Attach, &"v2", &"n", ms(10)));
        assert_eq!(a.wake(), Some(ms(250)));
        assert_eq!(a.offer(Class::Attach, ms(249)), None);
        assert_eq!(a.stats(ms(249)).tokens, Some(0));
        assert_eq!(a.offer(Class::Attach, ms(250)), Some(("v2", "n")));
        assert!(a.admit(Class::Attach, &"v2", &"n", ms(250)));
        assert_eq!(a.wake(), None);
    }

    /// Admits (`volume`, `node`) as an attach at `now`, planned as `id`, if it may go.
    fn attach(
        a: &mut Admission<T>,
        volume: &'static str,
        node: &'static str,
        id: u64,
        now: u64,
    ) -> bool {
        let admitted = a.admit(Class::Attach, &volume, &node, ms(now));
        if admitted {
            a.started(Class::Attach, OpId(id), &node, ms(now));
        }
        admitted
    }

    /// Offers the attach queue at `now` and admits what is offered as `id`: what went.
    fn offer_attach(
        a: &mut Admission<T>,
        id: u64,
        now: u64,
    ) -> Option<(&'static str, &'static str)> {
        a.mark_overdue(ms(now));
        let (volume, node) = a.offer(Class::Attach, ms(now))?;
        assert!(attach(a, volume, node, id, now));
        a.withdraw(Class::Attach);
        Some((volume, node))
    }

    fn overdue_after(after: u64, max: usize, max_attaches: usize) -> Admission<T> {
        admission(BackendLoad {
            max_attaches: Some(max_attaches),
            overdue: Some(OverdueCalls {
                after: ms(after),
                max,
            }),
            ..BackendLoad::UNBOUNDED
        })
    }

    #[test]
    fn an_overdue_call_gives_its_slot_back_within_the_bound() {
        let mut a = overdue_after(1_000, 1, 2);
        assert!(attach(&mut a, "v1", "h1", 1, 0));
        assert!(attach(&mut a, "v2", "h2", 2, 0));
        assert!(!attach(&mut a, "v3", "n", 3, 10), "both slots taken");
        assert!(!attach(&mut a, "v4", "n", 4, 10));
        // Nothing is overdue before its time; the queue wakes when the first call is.
        assert_eq!(offer_attach(&mut a, 3, 999), None);
        assert_eq!(a.wake(), Some(ms(1_000)));
        // At 1 s both are due, but only one overdue call may hold no slot: the older goes.
        assert_eq!(offer_attach(&mut a, 3, 1_000), Some(("v3", "n")));
        let stats = a.stats(ms(1_000)).attach;
        assert_eq!((stats.in_flight, stats.overdue, stats.queued), (2, 1, 1));
        assert_eq!(offer_attach(&mut a, 4, 1_500), None, "the bound is reached");
        assert_eq!(a.wake(), None, "only an ending call frees a slot now");
        // The overdue call ends: its place among the overdue calls goes to the next due.
        a.finished(Class::Attach, OpId(1), false);
        assert_eq!(a.stats(ms(1_500)).attach.overdue, 0);
        assert_eq!(offer_attach(&mut a, 4, 1_500), Some(("v4", "n")));
        let stats = a.stats(ms(1_500)).attach;
        assert_eq!((stats.in_flight, stats.overdue, stats.queued), (2, 1, 0));
        // A young call that ends frees its slot as before.
        a.finished(Class::Attach, OpId(3), true);
        assert_eq!(a.stats(ms(1_600)).attach.in_flight, 1);
        assert!(attach(&mut a, "v5", "n", 5, 1_600));
        // At every moment: at most 2 calls younger than 1 s, 3 in all.
        let stats = a.stats(ms(1_600)).attach;
        assert_eq!(stats.in_flight + stats.overdue, 3);
    }

    #[test]
    fn a_suspect_nodes_calls_let_other_nodes_go_first_for_a_deadline() {
        let mut a = overdue_after(1_000, 4, 1);
        assert!(attach(&mut a, "a1", "h", 1, 0));
        assert!(!attach(&mut a, "a2", "h", 2, 100));
        assert!(!attach(&mut a, "b1", "n", 3, 500));
        // a1 hangs: at 1 s it is overdue, h is suspect, and b1 passes a2.
        assert_eq!(offer_attach(&mut a, 3, 1_000), Some(("b1", "n")));
        a.finished(Class::Attach, OpId(3), true);
        // Nothing else waits: h's call goes (it may hang too, and then gives its slot back).
        assert_eq!(offer_attach(&mut a, 2, 1_200), Some(("a2", "h")));
        // a1's deadline ends it without an answer: h stays suspect after it.
        a.finished(Class::Attach, OpId(1), false);
        assert!(!attach(&mut a, "a3", "h", 4, 1_300));
        assert!(!attach(&mut a, "b2", "n", 5, 1_400));
        // a2 hangs too: overdue at 2.2 s, its slot goes to b2, not to h's a3.
        assert_eq!(offer_attach(&mut a, 5, 2_200), Some(("b2", "n")));
        a.finished(Class::Attach, OpId(2), false);
        // Only calls that join within a deadline (2 min) of a3 go first: c1, at 121.3 s, not.
        a.finished(Class::Attach, OpId(5), true);
        assert!(!attach(&mut a, "c1", "n", 6, 121_300));
        assert_eq!(
            offer_attach(&mut a, 4, 121_300),
            Some(("a3", "h")),
            "a3 waited its time"
        );
        // a3 answers in time: h is no longer suspect, and the queue is first come first served.
        a.finished(Class::Attach, OpId(4), true);
        assert!(!a.lane(Class::Attach).suspect(&"h"));
        assert_eq!(offer_attach(&mut a, 6, 121_400), Some(("c1", "n")));
    }

    #[test]
    fn an_overdue_call_that_lands_ends_the_suspicion() {
        let mut a = overdue_after(1_000, 4, 1);
        assert!(attach(&mut a, "a1", "h", 1, 0));
        assert!(!attach(&mut a, "a2", "h", 2, 100));
        assert!(!attach(&mut a, "b1", "n", 3, 200));
        assert_eq!(offer_attach(&mut a, 3, 1_000), Some(("b1", "n")));
        // The partition heals and a1 lands: h is reachable, a2 is first again.
        a.finished(Class::Attach, OpId(1), true);
        assert!(!attach(&mut a, "b2", "n", 4, 1_100));
        a.finished(Class::Attach, OpId(3), true);
        assert_eq!(offer_attach(&mut a, 2, 1_200), Some(("a2", "h")));
        // A node removed is no longer suspect.
        a.mark_overdue(ms(2_200));
        assert!(a.lane(Class::Attach).suspect(&"h"));
        a.forget_node(&"h");
        assert!(
            a.lane(Class::Attach).suspect(&"h"),
            "its overdue call still runs"
        );
        a.finished(Class::Attach, OpId(2), false);
        assert!(
            a.lane(Class::Attach).suspect(&"h"),
            "it ended without an answer"
        );
        a.forget_node(&"h");
        assert!(!a.lane(Class::Attach).suspect(&"h"));
    }

    #[test]
    fn without_a_limit_or_with_overdue_off_no_call_is_tracked() {
        let mut a = admission(BackendLoad::UNBOUNDED);
        assert!(attach(&mut a, "v1", "n", 1, 0));
        a.mark_overdue(ms(60_000));
        assert_eq!(a.stats(ms(60_000)).attach.overdue, 0);
        assert!(a.attach.tracked.is_empty());
        let mut a = admission(BackendLoad {
            max_attaches: Some(1),
            overdue: None,
            ..BackendLoad::UNBOUNDED
        });
        assert!(attach(&mut a, "v1", "h", 1, 0));
        assert!(!attach(&mut a, "v2", "n", 2, 0));
        a.mark_overdue(ms(119_000));
        assert_eq!(
            a.offer(Class::Attach, ms(119_000)),
            None,
            "the hung call keeps its slot"
        );
        assert_eq!(a.wake(), None);
    }
}
