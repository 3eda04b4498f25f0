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
//! | `--prefix` | `/attach-detach` | the key layout's prefix (everything under it is deleted first) |
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

use std::collections::BTreeMap;
use std::time::Duration;

use attach_detach::Ids;
use attach_detach::core::VolumeSpec;
use attach_detach_etcd::client::DeleteOptions;
use attach_detach_etcd::{
    CloudConfig, CloudState, ClusterWriter, KeyLayout, SimulatedAgents, SimulatedCloud,
};

type D = Ids<String, String, String, ()>;

struct Args {
    endpoints: Vec<String>,
    prefix: String,
    nodes: usize,
    workloads: usize,
    move_every: u64,
    seed: u64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        endpoints: vec!["127.0.0.1:2379".into()],
        prefix: "/attach-detach".into(),
        nodes: 3,
        workloads: 4,
        move_every: 5,
        seed: 1,
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
            "-h" | "--help" => {
                return Err("options: --endpoints --prefix --nodes --workloads --move-every --seed (see the source's doc comment)".into());
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let client = attach_detach_etcd::client::Client::connect(&args.endpoints, None)?;
    let layout = KeyLayout::new(args.prefix.clone());
    client
        .kv_client()
        .delete(
            layout.prefix().as_bytes(),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await?;

    // The scheduler: nodes (alive, nothing in use yet), one volume per workload, placements.
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
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

    let agents = SimulatedAgents::<D>::new(client.clone(), layout.clone());
    let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), CloudConfig::default());
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut agents_tick = tokio::time::interval(Duration::from_millis(100));
    let mut print_tick = tokio::time::interval(Duration::from_secs(1));
    let mut move_tick = tokio::time::interval(Duration::from_secs(args.move_every.max(1)));
    move_tick.tick().await;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = agents_tick.tick() => {
                if let Err(e) = agents.pass().await {
                    eprintln!("agents: {e}");
                }
            }
            _ = move_tick.tick(), if args.move_every > 0 => {
                let workloads: Vec<String> = placed.keys().cloned().collect();
                let workload = workloads[rng.below(workloads.len())].clone();
                let (from, volume) = placed[&workload].clone();
                let others: Vec<&String> = nodes.iter().filter(|n| **n != from).collect();
                let to = others[rng.below(others.len())].clone();
                cluster.schedule(&workload, &to, std::slice::from_ref(&volume)).await?;
                println!("moved {workload} ({volume}) from {from} to {to}");
                placed.insert(workload, (to, volume));
            }
            _ = print_tick.tick() => {
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
            }
        }
    }
}
