//! Removing many volumes at once costs each volume the same, however many operations run.
//!
//! A removed volume is forgotten once nothing is attached and nothing runs on it. That check
//! used to scan every running operation, once per removed volume: retiring 30,000 volumes
//! whose detaches finished a thousand at a time cost 1.8 s of passes (one of 186 ms) where
//! 62 ms do now. Time is not asserted in tests; what the scan did is. Volume ids here count
//! their equality comparisons, and a scan compares the volume with every running attach or
//! detach, so comparisons per removed volume grew with the number running. Now they must not.

use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::core::{Input, NodeFacts, Operation, VolumeSpec};
use attach_detach::testkit::{Harness, echo_outcome};

thread_local! {
    /// Equality comparisons of volume ids made on this thread.
    static COMPARED: Cell<u64> = const { Cell::new(0) };
}

/// A volume id that counts its equality comparisons (its order and hash do not count).
#[derive(Clone, Copy, Debug, PartialOrd, Ord)]
struct Vol(u32);

impl Hash for Vol {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for Vol {
    fn eq(&self, other: &Self) -> bool {
        COMPARED.with(|c| c.set(c.get() + 1));
        self.0 == other.0
    }
}

impl Eq for Vol {}

type D = Ids<u32, Vol, u32, ()>;

const PER_NODE: u32 = 30;
/// Detaches answered per pass: the rest keep running, as a slow backend would have them.
const ANSWERED_PER_PASS: usize = 100;

fn facts() -> NodeFacts<Vol> {
    NodeFacts {
        healthy: true,
        fenced: false,
        in_use: Some(Vec::new()),
        attach_limit: None,
        driver_limits: Vec::new(),
    }
}

/// Answers `ops` with success, now; a read finds what the core last wrote.
fn answer(h: &mut Harness<D>, ops: Vec<Operation<D>>) {
    let running = h.answer(ops, |_, core, op| match op {
        Operation::Verify { .. } | Operation::CheckMachine { .. } => {
            panic!("not planned in this test: {op:?}")
        }
        _ => Some(echo_outcome(core, op)),
    });
    assert!(running.is_empty());
}

/// Settles `size` volumes, one workload each, then removes every workload and volume at once
/// and answers `ANSWERED_PER_PASS` detaches a pass. Returns the volume comparisons the removal
/// made per volume.
fn compared_per_removed_volume(size: u32) -> f64 {
    let config = Config {
        // No periodic verify inside the window.
        sync_period: Duration::from_secs(3600),
        resync_period: None,
        ..Config::default()
    };
    let mut h = Harness::<D>::new(config);
    for n in 0..size.div_ceil(PER_NODE) {
        h.handle(Input::NodeUpdated {
            node: n,
            facts: facts(),
        })
        .unwrap();
    }
    for v in 0..size {
        h.handle(Input::SetVolume {
            volume: Vol(v),
            spec: VolumeSpec::single_node(()),
        })
        .unwrap();
        h.handle(Input::WorkloadScheduled {
            workload: v,
            node: v / PER_NODE,
            volumes: vec![Vol(v)],
        })
        .unwrap();
    }
    h.now = Duration::from_secs(1);
    while let Some(due) = h
        .core
        .next_deadline()
        .filter(|d| *d < Duration::from_secs(600))
    {
        let ops = h.poll_at(due);
        answer(&mut h, ops);
    }
    assert_eq!(h.core.actual().len(), size as usize, "settled");

    let before = COMPARED.with(Cell::get);
    for v in 0..size {
        h.handle(Input::WorkloadRemoved { workload: v }).unwrap();
        h.handle(Input::VolumeRemoved { volume: Vol(v) }).unwrap();
    }
    let mut running = Vec::new();
    let mut most_running = 0;
    for _ in 0..10_000 {
        let Some(due) = h.core.next_deadline() else {
            break;
        };
        let (detaches, others): (Vec<_>, Vec<_>) = h
            .poll_at(due)
            .into_iter()
            .partition(|op| matches!(op, Operation::Detach { .. }));
        running.extend(detaches);
        most_running = most_running.max(running.len());
        answer(&mut h, others);
        let answered = running.len().min(ANSWERED_PER_PASS);
        answer(&mut h, running.drain(..answered).collect());
        if running.is_empty() && h.core.actual().is_empty() && h.core.in_flight() == 0 {
            break;
        }
    }
    assert!(h.core.actual().is_empty(), "every volume detached");
    assert!(
        most_running >= size as usize / 2,
        "the test must keep many detaches running: at most {most_running} ran at once"
    );
    // Forgotten, not kept as removed for ever: registering it again is a new volume.
    assert!(
        h.core.desired().spec(&Vol(0)).is_none(),
        "removed volumes are forgotten"
    );
    (COMPARED.with(Cell::get) - before) as f64 / size as f64
}

#[test]
fn removing_volumes_costs_each_the_same_however_many_detaches_run() {
    let small = compared_per_removed_volume(300);
    let large = compared_per_removed_volume(3_000);
    println!("volume comparisons per removed volume: {small:.1} at 300, {large:.1} at 3,000");
    assert!(
        large <= 2.0 * small.max(10.0),
        "volume comparisons per removed volume grew with the number of detaches running: \
         {small:.1} at 300 volumes, {large:.1} at 3,000"
    );
}
