//! Backend load through the reconciler: limits never exceeded, queues served in arrival order,
//! the bucket's pacing on virtual time, slots given back by detaches that no longer need them,
//! and neither class starved.

use super::*;
use crate::config::{BackendLoad, RateLimit};

fn name(prefix: &str, i: usize) -> &'static str {
    Box::leak(format!("{prefix}{i:02}").into_boxed_str())
}

/// Backend calls under way, finished `latency` after they were planned.
struct Slow {
    h: H,
    latency: Duration,
    pending: Vec<(Duration, Operation<T>)>,
    /// The most attach and detach calls seen under way at once.
    peak: (usize, usize),
    /// Each attach or detach planned, with its time.
    calls: Vec<(Duration, String)>,
}

impl Slow {
    fn new(config: Config, latency: Duration) -> Self {
        Slow {
            h: H::new(config),
            latency,
            pending: Vec::new(),
            peak: (0, 0),
            calls: Vec::new(),
        }
    }

    fn limits(&self) -> BackendLoad {
        self.h.core.config().backend_load
    }

    /// One pass a period on: fresh reads, writes and verifies answered at once, attaches and detaches
    /// `latency` later; checks the limits on what is under way.
    fn tick(&mut self) {
        for op in self.h.tick_raw() {
            match op.kind() {
                OpKind::Attach | OpKind::Detach => {
                    self.calls.push((self.h.now, render(&op)));
                    self.pending.push((self.h.now + self.latency, op));
                }
                _ => self.h.ok(op),
            }
        }
        let count = |kind| {
            self.pending
                .iter()
                .filter(|(_, op)| op.kind() == kind)
                .count()
        };
        let (attaching, detaching) = (count(OpKind::Attach), count(OpKind::Detach));
        self.peak = (self.peak.0.max(attaching), self.peak.1.max(detaching));
        let stats = self.h.core.backend_queue(self.h.now);
        assert_eq!(
            (stats.attach.in_flight, stats.detach.in_flight),
            (attaching, detaching),
            "the view counts what is under way"
        );
        let load = self.limits();
        if let Some(max) = load.max_attaches {
            assert!(
                attaching <= max,
                "{attaching} attaches under way, limit {max}"
            );
        }
        if let Some(max) = load.max_detaches {
            assert!(
                detaching + stats.detach.reserved <= max,
                "{detaching} detaches under way and {} reading, limit {max}",
                stats.detach.reserved
            );
        }
        let now = self.h.now;
        let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(due, _)| *due <= now);
        self.pending = rest;
        for (_, op) in done {
            self.h.ok(op);
        }
    }

    fn run(&mut self, d: Duration) {
        let end = self.h.now + d;
        while self.h.now < end {
            self.tick();
        }
    }

    fn attached(&self, volume: &'static str, node: &'static str) -> bool {
        self.h.core.actual().state(&volume, &node) == AttachState::Attached
    }
}

fn limited(max_attaches: usize, max_detaches: usize) -> Config {
    Config {
        backend_load: BackendLoad {
            max_attaches: Some(max_attaches),
            max_detaches: Some(max_detaches),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    }
}

/// Twelve volumes move from n1 to n2 while twelve new pods start on n3; every call takes
/// 300 ms. Returns the peak concurrency per class.
fn moves_during_a_burst(config: Config) -> (usize, usize) {
    let mut s = Slow::new(config, Duration::from_millis(300));
    for node in ["n1", "n2", "n3"] {
        s.h.node(node, &[]);
    }
    for i in 0..12 {
        let (v, w) = (name("v", i), name("w", i));
        s.h.rwo(v);
        s.h.rwo(w);
        s.h.pod(name("a", i), "n1", &[v]);
    }
    s.run(secs(30));
    assert!((0..12).all(|i| s.attached(name("v", i), "n1")));
    s.peak = (0, 0);
    for i in 0..12 {
        s.h.unpod(name("a", i));
        s.h.pod(name("b", i), "n2", &[name("v", i)]);
        s.h.pod(name("c", i), "n3", &[name("w", i)]);
    }
    s.run(secs(60));
    for i in 0..12 {
        assert!(s.attached(name("v", i), "n2"), "v{i:02} moved");
        assert!(!s.attached(name("v", i), "n1"));
        assert!(s.attached(name("w", i), "n3"), "w{i:02} attached");
    }
    assert!(s.pending.is_empty());
    let stats = s.h.core.backend_queue(s.h.now);
    assert_eq!((stats.attach.queued, stats.detach.queued), (0, 0));
    assert_eq!(stats.detach.reserved, 0, "no slot left held");
    s.peak
}

#[test]
fn limits_are_never_exceeded_and_every_move_finishes() {
    assert_eq!(
        moves_during_a_burst(limited(2, 2)),
        (2, 2),
        "each class uses its slots, never more"
    );
    assert_eq!(moves_during_a_burst(limited(1, 3)), (1, 3));
    // The check bites: unbounded, the same burst runs far more at once.
    let (attaches, detaches) = moves_during_a_burst(Config::default());
    assert!(attaches > 2 && detaches > 2, "{attaches} {detaches}");
}

#[test]
fn queued_attaches_go_in_arrival_order_not_name_order() {
    let mut s = Slow::new(limited(1, 1), secs(1));
    s.h.node("n1", &[]);
    // Arrivals in reverse name order, one per pass: the dirty set alone would go by name.
    let arrivals: Vec<_> = (0..6).rev().map(|i| name("v", i)).collect();
    for (i, v) in arrivals.iter().enumerate() {
        s.h.rwo(v);
        s.h.pod(name("p", i), "n1", &[v]);
        s.tick();
    }
    let stats = s.h.core.backend_queue(s.h.now);
    assert_eq!(stats.attach.in_flight, 1);
    assert_eq!(stats.attach.queued, 5);
    assert_eq!(
        stats.attach.oldest_wait,
        Duration::from_millis(400),
        "the second arrival, queued one pass after the first, waited since"
    );
    s.run(secs(10));
    let order: Vec<_> = s.calls.iter().map(|(_, c)| c.clone()).collect();
    let expected: Vec<_> = arrivals.iter().map(|v| format!("attach {v} n1")).collect();
    assert_eq!(order, expected);
    // One at a time, each starting once the one before it ended.
    let times: Vec<_> = s.calls.iter().map(|(t, _)| *t).collect();
    assert!(
        times.windows(2).all(|w| w[1] >= w[0] + secs(1)),
        "{times:?}"
    );
}

#[test]
fn the_rate_limit_paces_calls_on_virtual_time() {
    let config = Config {
        backend_load: BackendLoad {
            rate: Some(RateLimit {
                every: secs(1),
                burst: 2,
            }),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    };
    let mut s = Slow::new(config, Duration::ZERO);
    s.h.node("n1", &[]);
    for i in 0..6 {
        s.h.rwo(name("v", i));
        s.h.pod(name("p", i), "n1", &[name("v", i)]);
    }
    s.tick();
    let start = s.calls[0].0;
    assert_eq!(s.calls.len(), 2, "the burst");
    assert_eq!(s.h.core.backend_queue(start).tokens, Some(0));
    assert_eq!(s.h.core.backend_queue(start).attach.queued, 4);
    // The two attached are written; then the core sleeps until the next token, not a pass
    // every period.
    for _ in 0..3 {
        s.tick();
    }
    assert_eq!(s.calls.len(), 2);
    assert_eq!(s.h.core.next_deadline(), Some(start + secs(1)));
    // Jump straight to each token: one call per token.
    for k in 1..=4 {
        s.h.now = start + secs(k) - TICK;
        s.tick();
        for _ in 0..3 {
            s.tick();
        }
        assert_eq!(s.calls.len(), 2 + k as usize, "at {k} s");
        assert_eq!(s.calls.last().unwrap().0, start + secs(k));
    }
    s.run(secs(5));
    assert_eq!(s.calls.len(), 6);
    assert!((0..6).all(|i| s.attached(name("v", i), "n1")));
    // Idle, the bucket fills again to its burst.
    assert_eq!(s.h.core.backend_queue(s.h.now + secs(10)).tokens, Some(2));
}

#[test]
fn a_detach_held_back_by_its_read_gives_its_slot_to_the_next() {
    let mut s = Slow::new(limited(4, 1), TICK);
    s.h.node("n1", &[]);
    for v in ["v1", "v2"] {
        s.h.rwo(v);
        s.h.pod(name("p", v.len() + usize::from(v == "v2")), "n1", &[v]);
    }
    s.run(secs(2));
    assert!(s.attached("v1", "n1") && s.attached("v2", "n1"));
    // Both pods go. The core's view says the node mounts nothing, but its agent still
    // reports v1 in use: v1's fresh read holds it back, again and again.
    s.h.world.store.get_mut("n1").unwrap().0.in_use = Some(vec!["v1"]);
    s.h.unpod(name("p", 2));
    s.h.unpod(name("p", 3));
    s.run(secs(12));
    assert!(
        !s.attached("v2", "n1"),
        "v2 got the slot v1's read gave back"
    );
    assert!(s.attached("v1", "n1"));
    let stats = s.h.core.backend_queue(s.h.now);
    assert_eq!(stats.detach.in_flight, 0);
    assert!(stats.detach.reserved <= 1);
    // The agent lets go: v1 goes too.
    s.h.node("n1", &[]);
    s.run(secs(10));
    assert!(!s.attached("v1", "n1"));
    assert_eq!(s.h.core.backend_queue(s.h.now).detach.reserved, 0);
}

#[test]
fn under_a_shared_bucket_the_classes_take_turns() {
    // One token a pass; 8 detaches and 8 attaches all queued at once: with both queues
    // waiting, calls alternate, so neither class waits for the other to drain.
    let config = Config {
        backend_load: BackendLoad {
            rate: Some(RateLimit {
                every: TICK,
                burst: 1,
            }),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    };
    let mut s = Slow::new(config, TICK);
    s.h.node("n1", &[]);
    s.h.node("n2", &[]);
    for i in 0..8 {
        s.h.rwo(name("v", i));
        s.h.rwo(name("w", i));
        s.h.pod(name("a", i), "n1", &[name("v", i)]);
    }
    s.run(secs(5));
    assert!((0..8).all(|i| s.attached(name("v", i), "n1")));
    s.calls.clear();
    for i in 0..8 {
        s.h.unpod(name("a", i));
        s.h.pod(name("b", i), "n2", &[name("w", i)]);
    }
    s.run(secs(10));
    let kinds: String = s
        .calls
        .iter()
        .map(|(_, c)| if c.starts_with("attach") { 'a' } else { 'd' })
        .collect();
    assert_eq!(kinds.len(), 16, "{kinds} {:?}", s.calls);
    // The attaches are queued before the first detach reaches its admission (a detach waits
    // for the store first), so a few attaches lead; then the classes alternate until the
    // attaches run out.
    let both = kinds.trim_start_matches('a');
    assert!(
        both.len() >= 11 && both.as_bytes().windows(2).take(10).all(|w| w[0] != w[1]),
        "{kinds} {:?}",
        s.calls
    );
}
