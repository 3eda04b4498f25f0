//! End to end: the tokio controller with the in-memory backend and store, moving workloads
//! between nodes. Throughput is counted in attach-or-detach operations per second (each move is
//! one detach and one attach, plus two status writes that are not counted).
//!
//! `cargo bench --bench controller` measures on 150,000 attachments and prints the figures
//! against the goals, >= 150,000 operations per second and within 2x of the floor below (set
//! `ATTACH_DETACH_ENFORCE_THROUGHPUT=1` to make a miss fail the run: the figures depend on
//! what else the machine runs); `-- --test` (and `cargo test --benches`) runs one small batch
//! of each on a small cluster, with no goal checked.
//!
//! The moves are sent by 16 tasks at once and a batch ends when every detach and attach of it
//! succeeded, so a batch includes the core's pacing (one pass per 100 ms; a move takes four
//! passes) as well as the work: batches are large (60,000 moves) so that the work dominates.
//!
//! Beside it, the floor: the same backend calls made by a bare tokio loop with no controller,
//! on the same runtime, in the same run. Each of a batch's detaches and attaches is a spawned
//! task calling a `MemoryBackend` (its own, holding the same attachments, so its bookkeeping is
//! the controller's backend's) through the `AttachBackend` trait and sending its result over a
//! channel to one collecting loop. The controller's time over the floor's is what the
//! controller adds (goal: within 2x).

mod common;
use common::{Moves, median};

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::controller::{Controller, ControllerHandle, ShutdownReport, World};
use attach_detach::core::{NodeFacts, VolumeSpec};
use attach_detach::memory::{MemoryBackend, MemoryStore};
use attach_detach::traits::AttachBackend;
use criterion::{BenchmarkId, Criterion, Throughput};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

type D = Ids<u32, u32, u32, ()>;

const VOLUMES_PER_NODE: u32 = 30;
/// Goal: attach-or-detach operations per second, end to end, on a 2-core machine.
const MIN_OPS_PER_SEC: f64 = 150_000.0;
/// Goal: a batch through the controller takes at most this many times the floor's.
const MAX_FLOOR_RATIO: f64 = 2.0;
/// Tasks sending the moves.
const SENDERS: usize = 16;

fn node_facts() -> NodeFacts<u32> {
    // The node agents report nothing mounted, so a detach need not wait for an unmount.
    NodeFacts {
        healthy: true,
        fenced: false,
        in_use: Some(Vec::new()),
        attach_limit: None,
        driver_limits: Vec::new(),
    }
}

/// A running controller over `size` single-node volumes, 30 per node, one workload each, all
/// attached and reported.
struct Cluster {
    rt: Runtime,
    handle: ControllerHandle<D>,
    task: Option<JoinHandle<ShutdownReport<D>>>,
    backend: MemoryBackend<D>,
    size: u32,
    nodes: u32,
    moves: Moves,
    /// The floor's backend: the same attachments as the controller's, moved the same way.
    floor_backend: Arc<dyn AttachBackend<D>>,
    /// The floor's moves: the same sequence as the controller's.
    floor_moves: Moves,
}

impl Cluster {
    fn start(size: u32, workers: usize) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .expect("a tokio runtime");
        let nodes = size.div_ceil(VOLUMES_PER_NODE);
        let backend = MemoryBackend::<D>::new();
        let store = MemoryStore::<D>::new();
        let mut world = World::new();
        for n in 0..nodes {
            store.add_node(n);
            world = world.node(n, node_facts());
        }
        let mut placed = Vec::with_capacity(size as usize);
        for v in 0..size {
            let node = v / VOLUMES_PER_NODE;
            world = world
                .volume(v, VolumeSpec::single_node(()))
                .workload(v, node, [v]);
            placed.push(node);
        }
        let controller = Controller::new(
            Config::default(),
            Arc::new(backend.clone()),
            Arc::new(store.clone()),
            world,
        )
        .expect("a valid world");
        let (handle, task) = rt.block_on(async { controller.spawn() });
        // The floor's backend gets its attachments through the trait too, so that its call
        // counters hold what the controller's do.
        let floor = MemoryBackend::<D>::new();
        rt.block_on(async {
            for (v, &node) in placed.iter().enumerate() {
                floor
                    .attach(&(v as u32), &node, &())
                    .await
                    .expect("attached");
            }
        });
        let cluster = Cluster {
            rt,
            handle,
            task: Some(task),
            backend,
            size,
            nodes,
            moves: Moves::new(placed.clone(), nodes),
            floor_backend: Arc::new(floor),
            floor_moves: Moves::new(placed, nodes),
        };
        cluster.wait_for(size as u64, 0);
        cluster
    }

    /// The floor for a batch of `moves`: the same detaches and attaches (the next `moves` of
    /// the same sequence the controller follows), each a spawned task calling the backend and
    /// sending its result to one collecting loop. Returns the time until every result is back.
    fn floor_batch(&mut self, moves: u32) -> Duration {
        let plan: Vec<(u32, u32, u32)> = (0..moves).map(|_| self.floor_moves.next_from()).collect();
        let backend = self.floor_backend.clone();
        let start = Instant::now();
        self.rt.block_on(async move {
            let (tx, mut rx) = mpsc::unbounded_channel::<bool>();
            for (w, from, to) in plan {
                let (b, t) = (backend.clone(), tx.clone());
                tokio::spawn(async move {
                    let _ = t.send(b.detach(&w, &from, &()).await.is_ok());
                });
                let (b, t) = (backend.clone(), tx.clone());
                tokio::spawn(async move {
                    let _ = t.send(b.attach(&w, &to, &()).await.is_ok());
                });
            }
            drop(tx);
            let mut done = 0;
            while let Some(ok) = rx.recv().await {
                assert!(ok, "the memory backend refused a call");
                done += 1;
            }
            assert_eq!(done, 2 * moves);
        });
        start.elapsed()
    }

    /// Attaches and detaches that succeeded so far.
    fn done(&self) -> (u64, u64) {
        let m = self.handle.metrics();
        (m.attach.succeeded, m.detach.succeeded)
    }

    /// Waits until `attaches` and `detaches` succeeded in all.
    fn wait_for(&self, attaches: u64, detaches: u64) {
        self.rt.block_on(async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            loop {
                let (a, d) = self.done();
                if a >= attaches && d >= detaches {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the controller stalled at {a} attaches and {d} detaches \
                     (waiting for {attaches} and {detaches})"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
    }

    /// Moves `moves` distinct workloads to other nodes at once and waits until every one is
    /// detached from its old node and attached to its new one. Returns the time taken.
    fn batch(&mut self, moves: u32) -> Duration {
        assert!(moves <= self.size);
        let (a0, d0) = self.done();
        let mut plan = Vec::with_capacity(moves as usize);
        for _ in 0..moves {
            plan.push(self.moves.next());
        }
        let start = Instant::now();
        let handle = self.handle.clone();
        // Several senders, as an orchestrator's watches would be: each waits for its own
        // inputs to be taken in, none waits for the others'.
        self.rt.block_on(async move {
            let chunk = plan.len().div_ceil(SENDERS).max(1);
            let mut senders = tokio::task::JoinSet::new();
            for part in plan.chunks(chunk) {
                let (handle, part) = (handle.clone(), part.to_vec());
                senders.spawn(async move {
                    for (w, to) in part {
                        handle.workload_removed(w).await.expect("running");
                        handle
                            .workload_scheduled(w, to, vec![w])
                            .await
                            .expect("running");
                    }
                });
            }
            while let Some(sent) = senders.join_next().await {
                sent.expect("a sender");
            }
        });
        self.wait_for(a0 + moves as u64, d0 + moves as u64);
        start.elapsed()
    }

    fn stop(mut self) {
        let report = self
            .rt
            .block_on(self.handle.shutdown(Duration::from_secs(5)))
            .expect("running");
        assert!(report.abandoned.is_empty());
        if let Some(task) = self.task.take() {
            black_box(self.rt.block_on(task).expect("the controller task"));
        }
        assert_eq!(self.backend.attachments().len(), self.size as usize);
    }
}

/// Prints a goal line; a miss panics only with `ATTACH_DETACH_ENFORCE_THROUGHPUT` set.
fn goal(met: bool, what: String) {
    common::goal(met, what, "ATTACH_DETACH_ENFORCE_THROUGHPUT");
}

/// Operations per second from batches timed by hand, outside criterion, the controller's and
/// the floor's in turn (5 of each), against the goals.
fn check_throughput(cl: &mut Cluster, moves: u32) {
    let ops = 2.0 * moves as f64;
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        ours.push(cl.batch(moves).as_secs_f64());
        floor.push(cl.floor_batch(moves).as_secs_f64());
    }
    let (ours, floor) = (median(ours), median(floor));
    let (rate, floor_rate, ratio) = (ops / ours, ops / floor, ours / floor);
    println!(
        "throughput check at {}: batches of {moves} moves, medians of 5: controller {rate:.0} \
         attach-or-detach operations per second ({:.1} ms a batch), floor {floor_rate:.0} \
         ({:.1} ms), controller/floor {ratio:.2}x",
        cl.size,
        ours * 1e3,
        floor * 1e3
    );
    goal(
        rate >= MIN_OPS_PER_SEC,
        format!(
            "the controller ran {rate:.0} attach-or-detach operations per second end to end at \
             {} attachments (goal >= {MIN_OPS_PER_SEC})",
            cl.size
        ),
    );
    goal(
        ratio <= MAX_FLOOR_RATIO,
        format!(
            "a batch through the controller took {ratio:.2}x the floor's (the same backend \
             calls from a bare tokio loop: {floor_rate:.0} per second) (goal <= \
             {MAX_FLOOR_RATIO}x)"
        ),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // As criterion decides: `cargo bench` passes --bench; `-- --test` or `cargo test` is a test.
    let test_mode = has("--test") || !has("--bench");
    let mut c = Criterion::default().configure_from_args();
    let (size, moves) = if test_mode {
        (3_000, 300)
    } else {
        (150_000, 60_000)
    };

    let t = Instant::now();
    let mut cl = Cluster::start(size, 2);
    let took = t.elapsed();
    println!(
        "controller started and attached {size} volumes on {} nodes in {took:.2?} \
         ({:.0} attaches per second, status writes included)",
        cl.nodes,
        size as f64 / took.as_secs_f64()
    );
    let mut group = c.benchmark_group("controller_moves");
    group.sample_size(10);
    group.throughput(Throughput::Elements(2 * moves as u64));
    group.bench_function(BenchmarkId::new("batch", moves), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cl.batch(moves)).sum())
    });
    group.bench_function(BenchmarkId::new("floor", moves), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cl.floor_batch(moves)).sum())
    });
    group.finish();
    if !test_mode {
        check_throughput(&mut cl, moves);
    }
    cl.stop();
    c.final_summary();
}
