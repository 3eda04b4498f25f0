//! High availability against a real etcd: a leader paused past its lease is replaced and its
//! writes are refused by etcd itself; a leader killed (SIGKILL) in the middle of volume moves,
//! twenty times in a row, leaks nothing and breaks no invariant.
//!
//! The cloud is [`SimulatedCloud`], whose record lives in etcd, so every replica (task or
//! process) and the test see the same one; it checks I1 (a single-node volume is never
//! attached to two nodes) and I2 (a volume is never detached from a node whose agent has it in
//! use, unless the node is fenced) in the transaction of each call. The test plays the
//! scheduler and, with [`SimulatedAgents`], the node agents.
//!
//! `ha_replica_child` is not a test of its own: the kill test starts this test binary again
//! with `ATTACH_DETACH_HA_CHILD` set, and that function then runs one replica process.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use attach_detach::Ids;
use attach_detach::config::{BackoffConfig, CallTimeouts, Config};
use attach_detach::core::VolumeSpec;
use attach_detach::traits::{AttachBackend, NodeStatusStore, StoreError};
use attach_detach_etcd::client::Client;
use attach_detach_etcd::{
    CandidateConfig, CloudConfig, CloudState, ClusterWriter, Deposed, EtcdStatusStore, KeyLayout,
    Replica, ReplicaConfig, Role, SimulatedAgents, SimulatedCloud, current_leader,
};
use tokio::sync::Mutex;

type D = Ids<String, String, String, ()>;

/// The two tests each start an etcd and several replicas: run them one at a time, so that
/// neither starves the other of the machine's cores and their timings mean something.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The environment variable that turns `ha_replica_child` into a replica process.
const CHILD: &str = "ATTACH_DETACH_HA_CHILD";

fn controller_config() -> Config {
    Config {
        sync_period: Duration::from_secs(10),
        resync_period: Some(Duration::from_secs(10)),
        unmount_recheck: Duration::from_millis(500),
        backoff: BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        },
        call_timeouts: CallTimeouts {
            attach: Duration::from_secs(10),
            detach: Duration::from_secs(10),
            verify: Duration::from_secs(5),
            status_write: Duration::from_secs(5),
            status_read: Duration::from_secs(5),
            list: Duration::from_secs(10),
            machine_state: Duration::from_secs(5),
        },
        ..Config::default()
    }
}

fn replica_config(ttl: Duration) -> ReplicaConfig {
    ReplicaConfig {
        candidate: CandidateConfig {
            ttl,
            call_timeout: Duration::from_secs(1),
            campaign_timeout: Duration::from_secs(10),
        },
        controller: controller_config(),
        loss_grace: Duration::from_millis(500),
        shutdown_grace: Duration::from_secs(2),
        retry: Duration::from_millis(200),
    }
}

/// A replica's client: keep-alive and require-leader for its watch (see `InputWatcher`), and
/// no request timeout, which would also cut a standby's campaign short (every call of the
/// replica has its own deadline).
async fn connect(endpoint: &str) -> Client {
    let options = attach_detach_etcd::client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_require_leader(true);
    Client::connect([endpoint], Some(options)).expect("connect to the test etcd")
}

/// xorshift64*, for the scheduler's fixed-seed moves.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The cluster as the scheduler placed it.
struct Cluster {
    writer: ClusterWriter<D>,
    nodes: Vec<String>,
    multi: BTreeSet<String>,
    workloads: BTreeMap<String, (String, Vec<String>)>,
}

impl Cluster {
    /// `nodes` nodes, alive and reporting nothing in use; one single-node volume per workload
    /// and two spare ones; one multi-node volume shared by the first two workloads.
    async fn seed(client: Client, layout: KeyLayout, nodes: usize, workloads: usize) -> Self {
        let writer = ClusterWriter::<D>::new(client, layout);
        let nodes: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
        for node in &nodes {
            writer.add_node(node).await.unwrap();
            writer.set_alive(node, None).await.unwrap();
            writer.set_in_use(node, &[]).await.unwrap();
        }
        for i in 1..=workloads + 2 {
            writer
                .set_volume(&format!("v{i}"), &VolumeSpec::single_node(()))
                .await
                .unwrap();
        }
        writer
            .set_volume(&"shared".to_string(), &VolumeSpec::multi_node(()))
            .await
            .unwrap();
        let mut cluster = Cluster {
            writer,
            multi: BTreeSet::from(["shared".to_string()]),
            workloads: BTreeMap::new(),
            nodes,
        };
        for i in 1..=workloads {
            let mut volumes = vec![format!("v{i}")];
            if i <= 2 {
                volumes.push("shared".to_string());
            }
            let node = cluster.nodes[(i - 1) % cluster.nodes.len()].clone();
            cluster.place(&format!("w{i}"), node, volumes).await;
        }
        cluster
    }

    async fn place(&mut self, workload: &str, node: String, volumes: Vec<String>) {
        self.writer
            .schedule(&workload.to_string(), &node, &volumes)
            .await
            .unwrap();
        self.workloads.insert(workload.to_string(), (node, volumes));
    }

    /// Moves `count` workloads, each to another node.
    async fn move_some(&mut self, rng: &mut Rng, count: usize) -> Vec<String> {
        let names: Vec<String> = self.workloads.keys().cloned().collect();
        let mut moved = Vec::new();
        for _ in 0..count {
            let workload = names[rng.below(names.len())].clone();
            let (from, volumes) = self.workloads[&workload].clone();
            let others: Vec<&String> = self.nodes.iter().filter(|n| **n != from).collect();
            let to = others[rng.below(others.len())].clone();
            moved.push(format!("{workload} {from}->{to}"));
            self.place(&workload, to, volumes).await;
        }
        moved
    }

    /// Every (volume, node) the workloads need.
    fn desired(&self) -> BTreeSet<(String, String)> {
        self.workloads
            .values()
            .flat_map(|(node, volumes)| volumes.iter().map(move |v| (v.clone(), node.clone())))
            .collect()
    }
}

/// What etcd holds: the cloud's record, every node's status, the cloud's violations.
struct Observed {
    cloud: Vec<(String, String, CloudState)>,
    attached: BTreeMap<String, BTreeSet<String>>,
    in_use: BTreeMap<String, BTreeSet<String>>,
    violations: Vec<String>,
}

async fn observe(client: &Client, layout: &KeyLayout) -> Observed {
    let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), CloudConfig::default());
    let store = EtcdStatusStore::<D>::new(client.clone(), layout.clone());
    // Statuses first: a volume a node has in use was attached in the cloud before the agent
    // mounted it, and detaching it (after an unmount, through a cloud call that takes time)
    // cannot finish between these two reads.
    let statuses = store.list().await.unwrap();
    let record = cloud.record().await.unwrap();
    Observed {
        cloud: record
            .into_iter()
            .map(|a| (a.volume, a.node, a.state))
            .collect(),
        attached: statuses
            .iter()
            .map(|(node, s)| {
                (
                    node.clone(),
                    s.attached.iter().map(|r| r.volume.clone()).collect(),
                )
            })
            .collect(),
        in_use: statuses
            .iter()
            .map(|(node, s)| (node.clone(), s.in_use.iter().flatten().cloned().collect()))
            .collect(),
        violations: cloud.violations().await.unwrap(),
    }
}

/// The invariants that must hold at every moment, checked against the store and the cloud's
/// record: none recorded by the cloud; no single-node volume in two nodes' record or status;
/// nothing a node's agent has in use missing from the cloud's record for that node.
fn invariants(cluster: &Cluster, seen: &Observed) -> Result<(), String> {
    if !seen.violations.is_empty() {
        return Err(format!(
            "the cloud recorded violations: {:?}",
            seen.violations
        ));
    }
    // The cloud's record and the statuses are two reads, not one snapshot: each is checked on
    // its own (a move between the two reads would otherwise look like a volume on two nodes).
    let mut in_record: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (volume, node, _) in &seen.cloud {
        in_record.entry(volume).or_default().insert(node);
    }
    let mut in_status: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (node, volumes) in &seen.attached {
        for volume in volumes {
            in_status.entry(volume).or_default().insert(node);
        }
    }
    for (source, holders) in [("cloud", in_record), ("status", in_status)] {
        for (volume, nodes) in holders {
            if !cluster.multi.contains(volume) && nodes.len() > 1 {
                return Err(format!("I1: single-node {volume} on {nodes:?} ({source})"));
            }
        }
    }
    let in_cloud: BTreeSet<(&str, &str)> = seen
        .cloud
        .iter()
        .map(|(v, n, _)| (v.as_str(), n.as_str()))
        .collect();
    for (node, volumes) in &seen.in_use {
        for volume in volumes {
            if !in_cloud.contains(&(volume.as_str(), node.as_str())) {
                return Err(format!(
                    "I2: {volume} in use on {node} but not attached there in the cloud"
                ));
            }
        }
    }
    Ok(())
}

/// Converged: the cloud's record is exactly what the workloads need, with no call under way,
/// and every node's `attached/{node}` lists exactly the cloud's record for that node.
fn converged(cluster: &Cluster, seen: &Observed) -> Result<(), String> {
    let desired = cluster.desired();
    let cloud: BTreeSet<(String, String)> = seen
        .cloud
        .iter()
        .map(|(v, n, _)| (v.clone(), n.clone()))
        .collect();
    if let Some(busy) = seen
        .cloud
        .iter()
        .find(|(_, _, s)| *s != CloudState::Attached)
    {
        return Err(format!("a call is under way: {busy:?}"));
    }
    if cloud != desired {
        return Err(format!(
            "the cloud differs from what the workloads need: leaked {:?}, missing {:?}",
            cloud.difference(&desired).collect::<Vec<_>>(),
            desired.difference(&cloud).collect::<Vec<_>>()
        ));
    }
    for node in &cluster.nodes {
        let reported = seen.attached.get(node).cloned().unwrap_or_default();
        let attached: BTreeSet<String> = cloud
            .iter()
            .filter(|(_, n)| n == node)
            .map(|(v, _)| v.clone())
            .collect();
        if reported != attached {
            return Err(format!(
                "{node} reports {reported:?} but the cloud has {attached:?} attached there"
            ));
        }
    }
    Ok(())
}

/// Waits until the cluster converges, checking the invariants at every look.
async fn wait_converged(
    client: &Client,
    layout: &KeyLayout,
    cluster: &Cluster,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let seen = observe(client, layout).await;
        if let Err(broken) = invariants(cluster, &seen) {
            panic!("invariant broken: {broken}");
        }
        match converged(cluster, &seen) {
            Ok(()) => return start.elapsed(),
            Err(why) if start.elapsed() > within => {
                panic!("not converged within {within:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Plays every node's agent every 50 ms until dropped.
struct Agents {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Agents {
    fn start(client: Client, layout: KeyLayout) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let agents = SimulatedAgents::<D>::new(client, layout);
        let task = tokio::spawn({
            let stop = Arc::clone(&stop);
            async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = agents.pass().await {
                        eprintln!("agents: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        Agents { stop, task }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

async fn wait_role(
    handle: &attach_detach_etcd::ReplicaHandle<D>,
    within: Duration,
    what: &str,
    want: impl Fn(Role) -> bool,
) {
    let mut roles = handle.roles();
    tokio::time::timeout(within, roles.wait_for(|r| want(*r)))
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {within:?} (role {})", handle.role()))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_is_replaced_and_its_writes_are_refused_by_etcd() {
    let _serial = SERIAL.lock().await;
    let etcd = etcd_or_skip!(
        "a_leader_paused_past_its_lease_is_replaced_and_its_writes_are_refused_by_etcd"
    );
    let start = Instant::now();
    let layout = KeyLayout::new("/ha-pause");
    let client = etcd.client().await;
    let mut cluster = Cluster::seed(client.clone(), layout.clone(), 3, 4).await;
    let _agents = Agents::start(client.clone(), layout.clone());
    let ttl = Duration::from_secs(2);
    let cloud_config = CloudConfig {
        latency: Duration::from_millis(100),
        failure_rate: 0.0,
        seed: 7,
    };

    // Two replicas, each with its own client (as two processes would have) and its own view
    // of the shared cloud.
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let client = connect(&etcd.endpoint()).await;
        let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), cloud_config.clone());
        let factory_cloud = cloud.clone();
        let replica = Replica::<D>::new(
            client,
            layout.clone(),
            name,
            replica_config(ttl),
            Arc::new(move |fence| {
                Arc::new(factory_cloud.clone().fenced(fence)) as Arc<dyn AttachBackend<D>>
            }),
        )
        .unwrap();
        let handle = replica.handle();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(replica.run(async {
            let _ = stopped.await;
        }));
        if name == "a" {
            wait_role(&handle, Duration::from_secs(10), "a elected", |r| {
                matches!(r, Role::Leading { .. })
            })
            .await;
        }
        replicas.push((handle, cloud, stop, task));
    }
    let (a, b) = (replicas[0].0.clone(), replicas[1].0.clone());
    let (cloud_a, cloud_b) = (replicas[0].1.clone(), replicas[1].1.clone());
    let first = wait_converged(&client, &layout, &cluster, Duration::from_secs(20)).await;
    assert!(a.is_leading() && !b.is_leading());
    assert_eq!(
        current_leader(&client, &layout, Duration::from_secs(2))
            .await
            .unwrap()
            .as_deref(),
        Some("a")
    );
    let old_fence = a.fence().expect("a leads with a fence");

    // a stops keeping its lease alive, as a process paused (SIGSTOP, a long GC, a frozen VM)
    // would; its controller goes on, unaware. The lease expires and b is elected.
    let paused = Instant::now();
    a.stall_keep_alive(true);
    wait_role(&b, ttl * 4, "b takes over", |r| {
        matches!(r, Role::Leading { .. })
    })
    .await;
    let failover = paused.elapsed();
    assert!(
        a.is_leading(),
        "a noticed nothing yet: its keep-alive is stalled"
    );

    // Volumes move while both controllers run: a's controller plans writes too, and etcd
    // refuses every one of them; the first refusal ends a's term.
    let moves = [("w1", "n2"), ("w2", "n3"), ("w3", "n1")];
    for (workload, node) in moves {
        let volumes = cluster.workloads[workload].1.clone();
        cluster.place(workload, node.to_string(), volumes).await;
    }
    wait_role(
        &a,
        Duration::from_secs(10),
        "a deposed by a refused write",
        |r| !matches!(r, Role::Leading { .. }),
    )
    .await;
    let refused = a.refused_by_fence() + cloud_a.refused_by_fence();
    assert!(
        a.refused_by_fence() > 0,
        "a's status writes were not refused (cloud refusals: {})",
        cloud_a.refused_by_fence()
    );
    assert!(old_fence.is_deposed());

    // And a direct write with a's old fence fails too, in etcd.
    let stale = EtcdStatusStore::<D>::new(client.clone(), layout.clone()).fenced(old_fence.clone());
    let node = "n1".to_string();
    let current = stale.read(&node).await.unwrap();
    let marker = vec![attach_detach::traits::ReportedVolume {
        volume: "written-by-a-deposed-leader".to_string(),
        device: None,
    }];
    let refused_write = stale
        .write(&node, &marker.clone().into(), current.revision)
        .await
        .unwrap_err();
    assert!(
        matches!(refused_write, StoreError::Transient { .. }),
        "{refused_write:?}"
    );
    let source = std::error::Error::source(&refused_write).expect("the refusal's cause");
    assert!(source.downcast_ref::<Deposed>().is_some(), "{source}");
    assert!(stale.read(&node).await.unwrap().attached != marker);

    // a resumes: it finds its lease gone and stands by behind b.
    a.stall_keep_alive(false);
    let settled = wait_converged(&client, &layout, &cluster, Duration::from_secs(30)).await;
    wait_role(&a, Duration::from_secs(20), "a stands by", |r| {
        r == Role::StandingBy
    })
    .await;
    assert!(b.is_leading());
    assert_eq!((a.terms(), b.terms()), (1, 1));
    assert_eq!(cloud_b.refused_by_fence(), 0);
    assert_eq!(b.refused_by_fence(), 0);
    let b_metrics = b.metrics().expect("b ran a controller");
    let seen = observe(&client, &layout).await;
    invariants(&cluster, &seen).unwrap();
    converged(&cluster, &seen).unwrap();

    for (_, _, stop, task) in replicas {
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("a replica did not stop within 10 s")
            .unwrap()
            .unwrap();
    }
    assert!(
        current_leader(&client, &layout, Duration::from_secs(2))
            .await
            .unwrap()
            .is_none(),
        "both resigned"
    );
    eprintln!(
        "paused leader: first convergence {first:?}, fail-over {failover:?} after the pause, \
         {refused} of a's writes refused by etcd ({} status, {} cloud), converged {settled:?} \
         after a resumed; b: {} attaches, {} detaches, {} status writes; total {:?}",
        a.refused_by_fence(),
        cloud_a.refused_by_fence(),
        b_metrics.attach.succeeded,
        b_metrics.detach.succeeded,
        b_metrics.store_writes,
        start.elapsed()
    );
}

/// The replica processes of the kill test; every one is killed when this is dropped, even
/// when the test panics.
struct Children {
    exe: std::path::PathBuf,
    endpoint: String,
    prefix: String,
    logs: tempfile::TempDir,
    running: Vec<(String, Child)>,
    started: usize,
}

impl Children {
    fn new(endpoint: String, prefix: &str) -> Self {
        Children {
            exe: std::env::current_exe().expect("the test binary"),
            endpoint,
            prefix: prefix.to_string(),
            logs: tempfile::Builder::new()
                .prefix("attach-detach-ha-")
                .tempdir()
                .unwrap(),
            running: Vec::new(),
            started: 0,
        }
    }

    /// Starts replica `r{n}`.
    fn spawn(&mut self) -> String {
        let name = format!("r{}", self.started);
        self.started += 1;
        let log = std::fs::File::create(self.logs.path().join(format!("{name}.log"))).unwrap();
        let child = Command::new(&self.exe)
            .args([
                "ha_replica_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("HA_ENDPOINT", &self.endpoint)
            .env("HA_PREFIX", &self.prefix)
            .env("HA_NAME", &name)
            .env("HA_SEED", self.started.to_string())
            // The child exits when this pipe closes: no replica outlives the test.
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a replica process");
        self.running.push((name.clone(), child));
        name
    }

    /// SIGKILL: no resignation, no clean shutdown.
    fn kill(&mut self, name: &str) {
        let index = self
            .running
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no running replica {name}"));
        let (_, mut child) = self.running.remove(index);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.logs.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn leader(client: &Client, layout: &KeyLayout) -> Option<String> {
    current_leader(client, layout, Duration::from_secs(2))
        .await
        .unwrap()
}

async fn wait_leader(client: &Client, layout: &KeyLayout, within: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Some(name) = leader(client, layout).await {
            return name;
        }
        assert!(start.elapsed() < within, "nobody elected within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_in_the_middle_of_moves_twenty_times_leaks_nothing_and_breaks_nothing() {
    let _serial = SERIAL.lock().await;
    let etcd = etcd_or_skip!(
        "a_leader_killed_in_the_middle_of_moves_twenty_times_leaks_nothing_and_breaks_nothing"
    );
    let start = Instant::now();
    let prefix = "/ha-kill";
    let layout = KeyLayout::new(prefix);
    let client = etcd.client().await;
    let mut cluster = Cluster::seed(client.clone(), layout.clone(), 4, 6).await;
    let _agents = Agents::start(client.clone(), layout.clone());
    let mut children = Children::new(etcd.endpoint(), prefix);

    let first = children.spawn();
    assert_eq!(
        wait_leader(&client, &layout, Duration::from_secs(20)).await,
        first
    );
    children.spawn();
    wait_converged(&client, &layout, &cluster, Duration::from_secs(30)).await;

    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut in_flight = 0;
    let mut rounds = Vec::new();
    for round in 0..20 {
        let round_start = Instant::now();
        let count = 1 + rng.below(3);
        let moved = cluster.move_some(&mut rng, count).await;
        tokio::time::sleep(Duration::from_millis(100 + rng.below(400) as u64)).await;
        let victim = leader(&client, &layout)
            .await
            .unwrap_or_else(|| panic!("round {round}: nobody leads"));
        let seen = observe(&client, &layout).await;
        invariants(&cluster, &seen).unwrap_or_else(|e| panic!("round {round}: {e}"));
        if converged(&cluster, &seen).is_err() {
            in_flight += 1;
        }
        children.kill(&victim);
        let killed = Instant::now();
        let replacement = children.spawn();
        // The killed leader's key lives until its lease expires: wait for the next leader
        // before judging convergence, so that it is the new leader's recovery that is judged
        // (the killed one may have made its last write already, the cloud landing the rest).
        let now = loop {
            match leader(&client, &layout).await {
                Some(name) if name != victim => break name,
                _ if killed.elapsed() > Duration::from_secs(15) => {
                    panic!("round {round}: no new leader 15 s after killing {victim}")
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let failover = killed.elapsed();
        let converge = Duration::from_secs(30);
        tokio::time::timeout(
            converge + Duration::from_secs(5),
            wait_converged(&client, &layout, &cluster, converge),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the check itself hung"));
        eprintln!(
            "round {round:2}: moved {moved:?}, killed {victim}, {now} leads after {failover:?}, started {replacement}, converged {:?} after the kill",
            killed.elapsed()
        );
        rounds.push(round_start.elapsed());
    }
    let seen = observe(&client, &layout).await;
    invariants(&cluster, &seen).unwrap();
    converged(&cluster, &seen).unwrap();
    let names: Vec<String> = children.running.iter().map(|(n, _)| n.clone()).collect();
    let slowest = rounds.iter().max().copied().unwrap_or_default();
    eprintln!(
        "killed 20 leaders: {in_flight}/20 with moves still in flight at the kill; slowest \
         round {slowest:?}; total {:?}; replicas left {names:?}",
        start.elapsed()
    );
    assert!(
        in_flight >= 10,
        "only {in_flight} of 20 kills hit moves in flight: the test did not test that"
    );
    if let Some(name) = names.first() {
        assert!(
            children.log(name).contains("standing by"),
            "{}",
            children.log(name)
        );
    }
}

/// One replica process for the kill test (does nothing unless `ATTACH_DETACH_HA_CHILD` is
/// set): a [`Replica`] with a TTL of 2 s over the shared [`SimulatedCloud`] (100 ms latency,
/// 5 % failures), until SIGKILL or until its parent closes its stdin.
#[test]
fn ha_replica_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let (endpoint, prefix, name) = (env("HA_ENDPOINT"), env("HA_PREFIX"), env("HA_NAME"));
    let seed: u64 = env("HA_SEED").parse().unwrap();
    // The parent holds our stdin: when it goes (even killed), so do we.
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = connect(&endpoint).await;
        let layout = KeyLayout::new(prefix);
        let cloud = SimulatedCloud::<D>::new(
            client.clone(),
            layout.clone(),
            CloudConfig {
                latency: Duration::from_millis(100),
                failure_rate: 0.05,
                seed,
            },
        );
        let replica = Replica::<D>::new(
            client,
            layout,
            name.clone(),
            replica_config(Duration::from_secs(2)),
            Arc::new(move |fence| {
                Arc::new(cloud.clone().fenced(fence)) as Arc<dyn AttachBackend<D>>
            }),
        )
        .unwrap();
        let handle = replica.handle();
        tokio::spawn(async move {
            let mut roles = handle.roles();
            loop {
                let role = *roles.borrow_and_update();
                eprintln!("{name}: {role}");
                if roles.changed().await.is_err() {
                    return;
                }
            }
        });
        // Runs until killed; ten minutes at most.
        replica
            .run(tokio::time::sleep(Duration::from_secs(600)))
            .await
            .unwrap();
    });
}
