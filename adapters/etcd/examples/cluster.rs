//! The rest of the orchestrator for the `replica` example: seeds nodes, volumes and
//! workloads under a prefix, plays every node's agent, moves a workload now and then, and
//! prints where the simulated cloud has each volume, so you can watch volumes move while
//! replicas come and go.
//!
//! ```text
//! etcd &                                                  # 127.0.0.1:2379
//! cargo run -p attach-detach-etcd --example cluster -- --prefix /demo &
//! cargo run -p attach-detach-etcd --example replica -- --prefix /demo --name a &
//! cargo run -p attach-detach-etcd --example replica -- --prefix /demo --name b &
//! ```
//!
//! Options (all optional):
//!
//! | option | default | what |
//! | --- | --- | --- |
//! | `--endpoints` | `127.0.0.1:2379` | etcd's client endpoints, comma-separated |
//! | `--prefix` | `/attach-detach` | the key layout's prefix |
//! | `--wipe` | off | delete everything under the prefix first, and seed anew |
//! | `--nodes` | `3` | how many nodes |
//! | `--workloads` | `4` | how many workloads, each with a single-node volume of its own |
//! | `--move-every` | `5` | seconds between two moves of a random workload (0: never) |
//! | `--seed` | `1` | the seed of the moves |
//!
//! The agents mount a volume only once the controller's `attached/{node}` lists it, and
//! unmount it when its workload leaves the node. Every second it prints one line: each
//! volume where the workload wants it, and where the cloud has it (`*` while a call is under
//! way), and the count of invariant violations the cloud recorded (always 0, or the
//! controller has a bug). Ctrl-C stops it and leaves the keys in place.
//!
//! It rides out etcd's absence: a failed call (etcd stopped, restarting, without a leader) is
//! reported once ("etcd: ... retrying") and tried again at the next tick, and "etcd: back" is
//! printed when calls succeed again; the agents and the moves carry on from what etcd holds.
//! Started on a prefix that already holds workloads, it resumes them (`--nodes` and
//! `--workloads` are then ignored) instead of seeding: an operator's drill survives a restart
//! of this process too. `--wipe` starts afresh.

use std::collections::BTreeMap;
use std::time::Duration;

use attach_detach::Ids;
use attach_detach::core::VolumeSpec;
use attach_detach_etcd::client::{Client, ConnectOptions, DeleteOptions};
use attach_detach_etcd::{
    CloudConfig, CloudState, ClusterWriter, EtcdError, KeyLayout, Placement, SimulatedAgents,
    SimulatedCloud,
};

type D = Ids<String, String, String, ()>;

struct Args {
    endpoints: Vec<String>,
    prefix: String,
    nodes: usize,
    workloads: usize,
    move_every: u64,
    seed: u64,
    wipe: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        endpoints: vec!["127.0.0.1:2379".into()],
        prefix: "/attach-detach".into(),
        nodes: 3,
        workloads: 4,
        move_every: 5,
        seed: 1,
        wipe: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |text: String| text.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--endpoints" => args.endpoints = value()?.split(',').map(str::to_owned).collect(),
            "--prefix" => args.prefix = value()?,
            "--nodes" => args.nodes = number(value()?)?.max(2) as usize,
            "--workloads" => args.workloads = number(value()?)?.max(1) as usize,
            "--move-every" => args.move_every = number(value()?)?,
            "--seed" => args.seed = number(value()?)?,
            "--wipe" => args.wipe = true,
            "-h" | "--help" => {
                return Err("options: --endpoints --prefix --wipe --nodes --workloads --move-every --seed (see the source's doc comment)".into());
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// xorshift64*, for the moves.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// Whether etcd answered the last call: a failure is reported once, and so is the recovery,
/// rather than once a tick while etcd is away.
#[derive(Default)]
struct Etcd {
    down: bool,
}

impl Etcd {
    fn ok(&mut self) {
        if std::mem::take(&mut self.down) {
            println!("etcd: back");
        }
    }

    fn failed(&mut self, what: &str, error: &EtcdError) {
        if !std::mem::replace(&mut self.down, true) {
            // "etcd call failed while X" does not say why; the root of its causes does
            // ("connection refused", "etcdserver: no leader").
            let mut cause: &dyn std::error::Error = error;
            while let Some(source) = cause.source() {
                cause = source;
            }
            println!("etcd: {what}: {error} ({cause}); retrying");
        }
    }
}

/// The scheduler's nodes and workloads under the prefix, seeding them first when there are
/// no workloads yet (or `--wipe` said to start afresh). Seeding is a series of puts, so a
/// seed interrupted by a failure is simply redone.
async fn seed_or_resume(
    args: &Args,
    client: &Client,
    cluster: &ClusterWriter<D>,
) -> Result<(Vec<String>, BTreeMap<String, (String, String)>), EtcdError> {
    if args.wipe {
        let prefix = cluster.layout().prefix().as_bytes();
        client
            .kv_client()
            .delete(prefix, Some(DeleteOptions::new().with_prefix()))
            .await
            .map_err(|e| EtcdError::Client {
                context: "wiping the prefix".into(),
                source: e,
            })?;
        println!("wiped everything under {}", args.prefix);
    }
    let found = cluster.read().await?;
    if !found.workloads.is_empty() {
        let placed = placements(found.workloads);
        println!(
            "resumed {} nodes and {} workloads under {} (--wipe starts afresh)",
            found.nodes.len(),
            placed.len(),
            args.prefix
        );
        return Ok((found.nodes, placed));
    }
    // The scheduler: nodes (alive, nothing in use yet), one volume per workload, placements.
    let nodes: Vec<String> = (1..=args.nodes).map(|i| format!("node-{i}")).collect();
    for node in &nodes {
        cluster.add_node(node).await?;
        cluster.set_alive(node, None).await?;
        cluster.set_in_use(node, &[]).await?;
    }
    let mut placed: BTreeMap<String, (String, String)> = BTreeMap::new();
    for i in 1..=args.workloads {
        let (workload, volume) = (format!("app-{i}"), format!("disk-{i}"));
        let node = nodes[(i - 1) % nodes.len()].clone();
        cluster
            .set_volume(&volume, &VolumeSpec::single_node(()))
            .await?;
        cluster
            .schedule(&workload, &node, std::slice::from_ref(&volume))
            .await?;
        placed.insert(workload, (node, volume));
    }
    println!(
        "seeded {} nodes and {} workloads under {}; start replicas with --prefix {}",
        nodes.len(),
        placed.len(),
        args.prefix,
        args.prefix
    );
    Ok((nodes, placed))
}

/// Each workload's node and (first) volume.
fn placements(workloads: BTreeMap<String, Placement<D>>) -> BTreeMap<String, (String, String)> {
    workloads
        .into_iter()
        .filter_map(|(workload, Placement { node, volumes })| {
            let volume = volumes.into_iter().next()?;
            Some((workload, (node, volume)))
        })
        .collect()
}

/// Moves a random workload to another node, from the placements etcd holds now (a move whose
/// answer was lost may have landed).
async fn move_one(
    cluster: &ClusterWriter<D>,
    nodes: &mut Vec<String>,
    placed: &mut BTreeMap<String, (String, String)>,
    rng: &mut Rng,
) -> Result<(), EtcdError> {
    let found = cluster.read().await?;
    *nodes = found.nodes;
    *placed = placements(found.workloads);
    if placed.is_empty() || nodes.len() < 2 {
        return Ok(());
    }
    let workloads: Vec<String> = placed.keys().cloned().collect();
    let workload = workloads[rng.below(workloads.len())].clone();
    let (from, volume) = placed[&workload].clone();
    let others: Vec<&String> = nodes.iter().filter(|n| **n != from).collect();
    let to = others[rng.below(others.len())].clone();
    cluster
        .schedule(&workload, &to, std::slice::from_ref(&volume))
        .await?;
    println!("moved {workload} ({volume}) from {from} to {to}");
    placed.insert(workload, (to, volume));
    Ok(())
}

/// One line: where each volume is wanted and where the cloud has it, and the violations.
async fn report(
    cloud: &SimulatedCloud<D>,
    placed: &BTreeMap<String, (String, String)>,
) -> Result<(), EtcdError> {
    let record = cloud.record().await?;
    let violations = cloud.violations().await?;
    let line: Vec<String> = placed
        .values()
        .map(|(node, volume)| {
            let at: Vec<String> = record
                .iter()
                .filter(|a| &a.volume == volume)
                .map(|a| match a.state {
                    CloudState::Attached => a.node.clone(),
                    _ => format!("{}*", a.node),
                })
                .collect();
            format!("{volume}: wants {node}, at [{}]", at.join(","))
        })
        .collect();
    println!("{} | violations: {}", line.join("; "), violations.len());
    for violation in violations {
        println!("  VIOLATION {violation}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // Every call of this process is short: a request timeout bounds each, so a tick never
    // hangs on an etcd that went away; keep-alive notices a dead connection, and a member
    // without a leader refuses calls instead of serving stale reads.
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
        .with_require_leader(true);
    let client = Client::connect(&args.endpoints, Some(options))?;
    let layout = KeyLayout::new(args.prefix.clone());
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let mut etcd = Etcd::default();

    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let (mut nodes, mut placed) = loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            started = seed_or_resume(&args, &client, &cluster) => match started {
                Ok(started) => break started,
                Err(e) => etcd.failed("starting", &e),
            },
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    etcd.ok();

    let agents = SimulatedAgents::<D>::new(client.clone(), layout.clone());
    let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), CloudConfig::default());
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut agents_tick = tokio::time::interval(Duration::from_millis(100));
    let mut print_tick = tokio::time::interval(Duration::from_secs(1));
    let mut move_tick = tokio::time::interval(Duration::from_secs(args.move_every.max(1)));
    // A tick that waited on a failing etcd is not made up for in a burst.
    for tick in [&mut agents_tick, &mut print_tick, &mut move_tick] {
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    move_tick.tick().await;
    loop {
        let (what, outcome) = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = agents_tick.tick() => ("the agents' pass", agents.pass().await.map(drop)),
            _ = move_tick.tick(), if args.move_every > 0 => {
                ("moving a workload", move_one(&cluster, &mut nodes, &mut placed, &mut rng).await)
            }
            _ = print_tick.tick() => ("reading the cloud's record", report(&cloud, &placed).await),
        };
        match outcome {
            Ok(()) => etcd.ok(),
            Err(e) => etcd.failed(what, &e),
        }
    }
}
