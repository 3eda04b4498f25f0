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
//! A detach is admitted when it enters its fresh read (the last step before the call, see
//! [`Operation::ReadStatus`](crate::core::Operation::ReadStatus)): the slot and the token are
//! held from then until the detach call ends, so a detach the read cleared is never refused
//! admission and read again (no livelock), and the number of detaches reading never exceeds the
//! free slots. A read that holds the detach back, or a detach no longer wanted, gives its slot
//! back at the end of the pass that sees it (its token is spent).
//!
//! Verifies and listings are not counted: their rate is fixed by `Config::sync_period` (one
//! verify per node with attachments per period) and `Config::resync_period`, and delaying them
//! would delay finding what a lost call did. Budget for them when you pick the rate (see the
//! README's "Fair and bounded backend load").

use std::collections::VecDeque;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::domain::Domain;
use crate::operation::OpId;

/// Limits on the backend calls the core plans: concurrency per class and a shared call rate.
/// Part of [`Config`](crate::config::Config) (`backend_load`).
///
/// The default is unbounded, as upstream Kubernetes: every attach and detach that may start
/// starts at once. Set limits when your backend throttles (cloud APIs do, per account and
/// region) or degrades under load: a burst of attaches at a rollout then neither trips the
/// throttle nor starves the detaches that free volumes for the very pods waiting.
///
/// How to pick values: `max_detaches` and `max_attaches` a little below the concurrency the
/// backend sustains (for a cloud, a few tens each); `rate` a little below the backend's
/// sustained mutating-call quota, minus the verifies (one per node with attachments per
/// `sync_period`), with `burst` what the quota's own bucket allows.
///
/// ```
/// use std::time::Duration;
/// use attach_detach::config::{BackendLoad, Config, RateLimit};
/// let config = Config {
///     backend_load: BackendLoad {
///         max_attaches: Some(20),
///         max_detaches: Some(20),
///         // 10 calls a second, bursts of 20.
///         rate: Some(RateLimit { every: Duration::from_millis(100), burst: 20 }),
///     },
///     ..Config::default()
/// };
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendLoad {
    /// At most this many attach calls under way at once; `None`: no limit.
    pub max_attaches: Option<usize>,
    /// At most this many detaches under way at once, counting those admitted to the fresh
    /// read that precedes their call; `None`: no limit.
    pub max_detaches: Option<usize>,
    /// A token bucket shared by attach and detach calls; `None`: no rate limit.
    pub rate: Option<RateLimit>,
}

impl BackendLoad {
    /// No limit at all: the default.
    pub const UNBOUNDED: BackendLoad = BackendLoad {
        max_attaches: None,
        max_detaches: None,
        rate: None,
    };

    /// The first setting that would stop every call of its class for ever, by name.
    pub(crate) fn zero_field(&self) -> Option<&'static str> {
        if self.max_attaches == Some(0) {
            return Some("backend_load.max_attaches");
        }
        if self.max_detaches == Some(0) {
            return Some("backend_load.max_detaches");
        }
        if self.rate.is_some_and(|r| r.burst == 0) {
            return Some("backend_load.rate.burst");
        }
        None
    }
}

/// A token bucket: it holds at most `burst` tokens, gains one every `every` of the core's
/// virtual time, and each attach or detach admitted takes one.
///
/// Over any stretch of time `t`, at most `burst + t / every` calls are admitted. Integer
/// arithmetic on [`Duration`]s: the same inputs give the same admissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// One token is added every this long; must not be zero.
    pub every: Duration,
    /// The most tokens the bucket holds (it starts full); must not be zero.
    pub burst: u32,
}

/// The two classes of backend call that are limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Attach,
    Detach,
}

/// One class's load, for [`QueueStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Calls of the class planned and not yet finished.
    pub in_flight: usize,
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

/// One class's slots and queue.
#[derive(Debug)]
struct Lane<D: Domain> {
    limit: Option<usize>,
    /// Calls planned and not finished.
    calls: usize,
    /// Waiting, first come first served; `since` has each one's first time in the queue.
    queue: VecDeque<(D::Volume, D::Node)>,
    since: FxHashMap<(D::Volume, D::Node), Duration>,
    /// The queue head popped for the pass to reconsider: admitted if it asks now.
    offered: Option<(D::Volume, D::Node)>,
}

impl<D: Domain> Lane<D> {
    fn new(limit: Option<usize>) -> Self {
        Lane {
            limit,
            calls: 0,
            queue: VecDeque::new(),
            since: FxHashMap::default(),
            offered: None,
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
    pub(crate) fn new(load: BackendLoad, shared: bool) -> Self {
        let shared = shared && (load.max_attaches.is_some() || load.max_detaches.is_some());
        let attach_limit = if shared {
            Some(load.max_attaches.unwrap_or(0) + load.max_detaches.unwrap_or(0))
        } else {
            load.max_attaches
        };
        Admission {
            shared,
            attach: Lane::new(attach_limit),
            detach: Lane::new(load.max_detaches),
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

    /// A call of `class` finished: its slot is free.
    pub(crate) fn finished(&mut self, class: Class) {
        let lane = self.lane(class);
        lane.calls = lane.calls.saturating_sub(1);
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
        let head = lane.queue.pop_front()?;
        lane.since.remove(&head);
        lane.offered = Some(head.clone());
        Some(head)
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
    /// token is missing; `None` when no queue has a free slot (a finishing call, which marks
    /// its volume, makes a pass) or nothing waits.
    pub(crate) fn wake(&self) -> Option<Duration> {
        let ready = [Class::Attach, Class::Detach].into_iter().any(|class| {
            let lane = match class {
                Class::Attach => &self.attach,
                Class::Detach => &self.detach,
            };
            !lane.queue.is_empty() && self.has_slot(class)
        });
        if !ready {
            return None;
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
            crate::gate::trim_map(&mut lane.since);
            if lane.queue.capacity() > 64 && lane.queue.len() * 4 <= lane.queue.capacity() {
                lane.queue.shrink_to(lane.queue.len() * 2);
            }
        }
        crate::gate::trim_map(&mut self.reserved);
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
        let mut a: Admission<T> = Admission::new(BackendLoad::UNBOUNDED, false);
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
        let mut a: Admission<T> = Admission::new(load, false);
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
        a.finished(Class::Attach);
        assert_eq!(a.wake(), Some(Duration::ZERO));
        // The slot is free, but a newcomer may not take it while v1 waits.
        assert!(!a.admit(Class::Attach, &"v9", &"n", ms(11)));
        assert_eq!(a.offer(Class::Attach, ms(11)), Some(("v1", "n")));
        assert!(a.admit(Class::Attach, &"v1", &"n", ms(11)));
        a.withdraw(Class::Attach);
        a.finished(Class::Attach);
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
        let mut a: Admission<T> = Admission::new(load, false);
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
        a.finished(Class::Detach);
        assert_eq!(a.offer(Class::Detach, ms(3)), Some(("v4", "n")));
    }

    #[test]
    fn a_cleared_detach_without_a_reservation_queues_when_full() {
        let load = BackendLoad {
            max_detaches: Some(1),
            ..BackendLoad::UNBOUNDED
        };
        let mut a: Admission<T> = Admission::new(load, false);
        assert!(a.admit(Class::Detach, &"v1", &"n", ms(0)));
        assert!(!a.call_detach(&"v2", &"n", ms(0)), "the slot is v1's");
        assert_eq!(a.stats(ms(0)).detach.queued, 1);
        assert!(a.call_detach(&"v1", &"n", ms(0)));
        a.finished(Class::Detach);
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
        let mut a: Admission<T> = Admission::new(load, false);
        assert!(a.admit(Class::Detach, &"v1", &"n", ms(0)));
        assert!(!a.admit(Class::Attach, &"v2", &"n", ms(10)));
        assert_eq!(a.wake(), Some(ms(250)));
        assert_eq!(a.offer(Class::Attach, ms(249)), None);
        assert_eq!(a.stats(ms(249)).tokens, Some(0));
        assert_eq!(a.offer(Class::Attach, ms(250)), Some(("v2", "n")));
        assert!(a.admit(Class::Attach, &"v2", &"n", ms(250)));
        assert_eq!(a.wake(), None);
    }
}
