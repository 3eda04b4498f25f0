//! Mass fail-over against a real etcd: `FAILED` nodes are fenced at once and each of their
//! `VOLUMES` single-node volumes moves to a healthy node, through a backend whose every call
//! takes 100 ms. Measured: time until the backend and the store agree on the new placement,
//! store writes and bytes written.
//!
//! Three runs, each printed as one line:
//! - `ours`: the controller as shipped, with the etcd store;
//! - `ours-20qps`: the same under upstream's default client rate (QPS 20, burst 30);
//! - `per-change-20qps`: the baseline, one status write per node per change (what upstream's
//!   updater amounts to when every attach and detach marks the node), under the same rate.
//!
//! `cargo bench -p attach-detach-etcd --bench failover` runs the full scale (500 nodes, 15,000
//! volumes; the baseline, rate-bound at 30,000 writes / 20 per second, would take 25 minutes,
//! so it runs at a tenth of that scale, next to ours at the same tenth). `-- --test` (CI) runs a
//! small scale. `FAILOVER_NODES`, `FAILOVER_VOLUMES`, `FAILOVER_RUNS=ours,ours-20qps,...` override.
//!
//! A harness of its own, not criterion's: one run is many seconds of wall time against a real
//! server, and criterion's ten-sample minimum would make it minutes per figure. Each run asserts
//! what it measures: convergence, no volume attached on a fenced node, the write count bound.

#[path = "../tests/common/etcd.rs"]
mod etcd;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::controller::{Controller, World};
use attach_detach::core::{Input, NodeFacts, VolumeSpec};
use attach_detach::memory::MemoryBackend;
use attach_detach::traits::{
    NodeStatus, NodeStatusStore, ReportedVolume, ReportedVolumes, Revision, StoreError,
};
use attach_detach_etcd::{ClusterWriter, EtcdStatusStore, KeyLayout};
use tokio::sync::Mutex;

type D = Ids<String, String, String, ()>;

/// Upstream kube-controller-manager's default client rate.
const QPS: f64 = 20.0;
const BURST: f64 = 30.0;
const LATENCY: Duration = Duration::from_millis(100);

/// A token bucket: `QPS` tokens a second, at most `BURST` banked.
struct RateLimit {
    state: Mutex<(f64, tokio::time::Instant)>,
}

impl RateLimit {
    fn new() -> Self {
        RateLimit {
            state: Mutex::new((BURST, tokio::time::Instant::now())),
        }
    }

    async fn acquire(&self) {
        let mut state = self.state.lock().await;
        let now = tokio::time::Instant::now();
        state.0 = (state.0 + now.duration_since(state.1).as_secs_f64() * QPS).min(BURST);
        state.1 = now;
        if state.0 < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - state.0) / QPS);
            tokio::time::sleep(wait).await;
            state.0 = 1.0;
            state.1 = tokio::time::Instant::now();
        }
        state.0 -= 1.0;
    }
}

/// How a run writes statuses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Ours,
    OursLimited,
    PerChangeLimited,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Ours => "ours",
            Mode::OursLimited => "ours-20qps",
            Mode::PerChangeLimited => "per-change-20qps",
        }
    }
}

/// The store a run's controller sees: the etcd store, maybe rate-limited, maybe splitting
/// every write into one write per changed volume.
struct BenchStore {
    inner: EtcdStatusStore<D>,
    mode: Mode,
    limit: RateLimit,
    /// Per node, the list the store holds as far as this wrapper wrote or read it.
    known: Mutex<BTreeMap<String, Vec<ReportedVolume<D>>>>,
}

impl BenchStore {
    async fn put(
        &self,
        node: &String,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        if self.mode != Mode::Ours {
            self.limit.acquire().await;
        }
        self.inner.write(node, attached, expected).await
    }
}

#[async_trait]
impl NodeStatusStore<D> for BenchStore {
    async fn read(&self, node: &String) -> Result<NodeStatus<D>, StoreError> {
        if self.mode != Mode::Ours {
            self.limit.acquire().await;
        }
        let status = self.inner.read(node).await?;
        self.known
            .lock()
            .await
            .insert(node.clone(), status.attached.clone());
        Ok(status)
    }

    async fn write(
        &self,
        node: &String,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        if self.mode != Mode::PerChangeLimited {
            return self.put(node, attached, expected).await;
        }
        let attached = attached.to_vec();
        // Upstream's shape: every attach and every detach is its own write of the node.
        let before = self
            .known
            .lock()
            .await
            .get(node)
            .cloned()
            .unwrap_or_default();
        let wanted: BTreeSet<&String> = attached.iter().map(|r| &r.volume).collect();
        let mut current: Vec<ReportedVolume<D>> = before
            .iter()
            .filter(|r| wanted.contains(&r.volume))
            .cloned()
            .collect();
        let mut revision = expected;
        let mut steps: Vec<Vec<ReportedVolume<D>>> = Vec::new();
        let mut shrinking = before.clone();
        for gone in before.iter().filter(|r| !wanted.contains(&r.volume)) {
            shrinking.retain(|r| r.volume != gone.volume);
            steps.push(shrinking.clone());
        }
        let had: BTreeSet<&String> = before.iter().map(|r| &r.volume).collect();
        for new in attached.iter().filter(|r| !had.contains(&r.volume)) {
            current.push(new.clone());
            steps.push(current.clone());
        }
        if steps.is_empty() {
            steps.push(attached.to_vec());
        }
        for step in steps {
            revision = self.put(node, &step.clone().into(), revision).await?;
            self.known.lock().await.insert(node.clone(), step);
        }
        Ok(revision)
    }

    async fn list(&self) -> Result<Vec<(String, NodeStatus<D>)>, StoreError> {
        let listed = self.inner.list().await?;
        let mut known = self.known.lock().await;
        for (node, status) in &listed {
            known.insert(node.clone(), status.attached.clone());
        }
        Ok(listed)
    }
}

struct Scale {
    failed: usize,
    volumes: usize,
}

struct Figures {
    converge: Duration,
    writes: u64,
    bytes: u64,
    detaches: u64,
    attaches: u64,
}

fn old(i: usize) -> String {
    format!("old-{i:04}")
}

fn new(i: usize) -> String {
    format!("new-{i:04}")
}

fn vol(j: usize) -> String {
    format!("vol-{j:05}")
}

async fn run(etcd: &etcd::Etcd, mode: Mode, scale: &Scale, tag: usize) -> Figures {
    let layout = KeyLayout::new(format!("/bench-{tag}-{}", mode.name()));
    let client = etcd.client().await;
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let store = EtcdStatusStore::<D>::new(client, layout);
    let backend = MemoryBackend::<D>::new();
    let mut world = World::new();
    let on = |i: usize| (0..scale.volumes).filter(move |j| j % scale.failed == i);

    // Before: every volume attached to its old node, mounted there, and reported.
    for i in 0..scale.failed {
        for node in [old(i), new(i)] {
            cluster.add_node(&node).await.unwrap();
            cluster.set_alive(&node, None).await.unwrap();
        }
        let mounted: Vec<String> = on(i).map(vol).collect();
        cluster.set_in_use(&old(i), &mounted).await.unwrap();
        cluster.set_in_use(&new(i), &[]).await.unwrap();
        let reported: Vec<ReportedVolume<D>> = mounted
            .iter()
            .map(|v| ReportedVolume {
                volume: v.clone(),
                device: Some(Arc::from(MemoryBackend::<D>::device_path(v))),
            })
            .collect();
        store
            .write(&old(i), &reported.into(), Revision::from(0))
            .await
            .unwrap();
        world = world
            .node(
                old(i),
                NodeFacts {
                    healthy: true,
                    fenced: false,
                    in_use: Some(mounted.clone()),
                    attach_limit: None,
                    driver_limits: Vec::new(),
                },
            )
            .node(
                new(i),
                NodeFacts {
                    healthy: true,
                    fenced: false,
                    in_use: Some(Vec::new()),
                    attach_limit: None,
                    driver_limits: Vec::new(),
                },
            );
    }
    for j in 0..scale.volumes {
        backend.insert(vol(j), old(j % scale.failed), VolumeSpec::single_node(()));
        world = world.volume(vol(j), VolumeSpec::single_node(())).workload(
            format!("w-{j:05}"),
            old(j % scale.failed),
            [vol(j)],
        );
    }
    let backend = backend.with_latency(LATENCY);
    let bench_store = Arc::new(BenchStore {
        inner: store.clone(),
        mode,
        limit: RateLimit::new(),
        known: Mutex::default(),
    });
    let (handle, task) = Controller::new(
        Config::default(),
        Arc::new(backend.clone()),
        bench_store,
        world,
    )
    .expect("a valid controller")
    .spawn();
    // Recovered: both listings answered.
    let deadline = Instant::now() + Duration::from_secs(60);
    while handle.metrics().list.succeeded == 0 || handle.metrics().list_statuses.succeeded == 0 {
        assert!(Instant::now() < deadline, "the controller did not recover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (writes0, bytes0) = (store.stats().writes(), store.stats().bytes());

    // The fail-over: the fencing agent fences every old node, and the scheduler moves every
    // workload to a healthy node.
    let start = Instant::now();
    for i in 0..scale.failed {
        cluster.fence(&old(i), "powered off").await.unwrap();
        cluster.set_dead(&old(i)).await.unwrap();
    }
    let mut inputs = Vec::new();
    for i in 0..scale.failed {
        inputs.push(Input::NodeUpdated {
            node: old(i),
            facts: NodeFacts {
                healthy: false,
                fenced: true,
                in_use: Some(on(i).map(vol).collect()),
                attach_limit: None,
                driver_limits: Vec::new(),
            },
        });
    }
    for j in 0..scale.volumes {
        inputs.push(Input::WorkloadScheduled {
            workload: format!("w-{j:05}"),
            node: new(j % scale.failed),
            volumes: vec![vol(j)],
        });
    }
    let refused = handle.send_all(inputs).await.unwrap();
    assert!(refused.is_empty(), "{refused:?}");

    // Converged: the backend has every volume on its new node only, and the store lists
    // exactly that.
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let placed = backend.attachments();
        let moved = placed.len() == scale.volumes
            && placed.iter().all(|(v, n)| {
                let j: usize = v[4..].parse().unwrap();
                *n == new(j % scale.failed)
            });
        if moved {
            let listed = store.list().await.unwrap();
            let old_empty = listed
                .iter()
                .all(|(node, s)| !node.starts_with("old-") || s.attached.is_empty());
            let reported: usize = listed.iter().map(|(_, s)| s.attached.len()).sum();
            if old_empty && reported == scale.volumes {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: no convergence within an hour",
            mode.name()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converge = start.elapsed();
    let metrics = handle.metrics();
    handle.shutdown(Duration::from_secs(5)).await.unwrap();
    task.await.unwrap();
    Figures {
        converge,
        writes: store.stats().writes() - writes0,
        bytes: store.stats().bytes() - bytes0,
        detaches: metrics.detach.succeeded,
        attaches: metrics.attach.succeeded,
    }
}

fn report(mode: Mode, scale: &Scale, f: &Figures) {
    println!(
        "{:<17} {:>5} nodes fenced {:>6} volumes  converged in {:>8.2} s  {:>6} store writes  {:>9} bytes  ({} detaches, {} attaches)",
        mode.name(),
        scale.failed,
        scale.volumes,
        f.converge.as_secs_f64(),
        f.writes,
        f.bytes,
        f.detaches,
        f.attaches
    );
}

fn env(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    let Some(etcd) = etcd::Etcd::start("failover bench") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let full = Scale {
        failed: env("FAILOVER_NODES").unwrap_or(if test_mode { 10 } else { 500 }),
        volumes: env("FAILOVER_VOLUMES").unwrap_or(if test_mode { 100 } else { 15_000 }),
    };
    let tenth = Scale {
        failed: (full.failed / 10).max(1),
        volumes: (full.volumes / 10).max(1),
    };
    let wanted = std::env::var("FAILOVER_RUNS").ok();
    let selected = |mode: Mode| {
        wanted
            .as_deref()
            .is_none_or(|w| w.split(',').any(|m| m == mode.name()))
    };
    // The baseline is rate-bound (two writes per moved volume at 20 a second): at full scale it
    // runs at a tenth, beside ours at the same tenth.
    let mut plan: Vec<(Mode, &Scale)> = Vec::new();
    if test_mode {
        plan.extend([
            (Mode::Ours, &full),
            (Mode::OursLimited, &full),
            (Mode::PerChangeLimited, &full),
        ]);
    } else {
        plan.extend([
            (Mode::Ours, &full),
            (Mode::OursLimited, &full),
            (Mode::Ours, &tenth),
            (Mode::OursLimited, &tenth),
            (Mode::PerChangeLimited, &tenth),
        ]);
    }
    println!(
        "mass fail-over against etcd at {} (backend latency {} ms)",
        etcd.endpoint(),
        LATENCY.as_millis()
    );
    for (tag, (mode, scale)) in plan.into_iter().enumerate() {
        if !selected(mode) {
            continue;
        }
        let figures = runtime.block_on(run(&etcd, mode, scale, tag));
        report(mode, scale, &figures);
        // What the run asserts beyond convergence: every move is one detach and one attach,
        // and ours writes each node a bounded number of times, not once per volume.
        assert_eq!(
            figures.detaches as usize,
            scale.volumes,
            "{}: detaches",
            mode.name()
        );
        assert_eq!(
            figures.attaches as usize,
            scale.volumes,
            "{}: attaches",
            mode.name()
        );
        match mode {
            Mode::Ours | Mode::OursLimited => assert!(
                figures.writes as usize <= 8 * 2 * scale.failed,
                "{}: {} writes for {} nodes",
                mode.name(),
                figures.writes,
                2 * scale.failed
            ),
            Mode::PerChangeLimited => assert!(figures.writes as usize >= 2 * scale.volumes),
        }
    }
}
