//! One controller replica against etcd, with a simulated cloud: start two and watch one take
//! over when the other goes.
//!
//! The cloud is [`SimulatedCloud`], a stand-in whose attachment record lives in etcd under
//! `{prefix}/cloud/`, so every replica sees the same one; it takes `--latency-ms` (jittered)
//! per attach or detach and fails `--failure-rate` of them. Pair it with the `cluster`
//! example, which seeds nodes, volumes and workloads, plays the node agents and moves
//! workloads around.
//!
//! ```text
//! etcd &                                                  # 127.0.0.1:2379
//! cargo run -p attach-detach-etcd --example cluster -- --prefix /demo &
//! cargo run -p attach-detach-etcd --example replica -- --prefix /demo --name a &
//! cargo run -p attach-detach-etcd --example replica -- --prefix /demo --name b &
//! kill -9 %3     # a said "leading"; b says "leading" within the TTL
//! ```
//!
//! To see a leader lose its leadership rather than die, pause it past its TTL and let it go
//! on: `kill -STOP <pid>`, wait, `kill -CONT <pid>`. The other replica leads meanwhile; the
//! paused one's writes are refused by etcd, and it says "lost leadership" and "standing by".
//!
//! Options (all optional):
//!
//! | option | default | what |
//! | --- | --- | --- |
//! | `--endpoints` | `127.0.0.1:2379` | etcd's client endpoints, comma-separated |
//! | `--prefix` | `/attach-detach` | the key layout's prefix |
//! | `--name` | `replica-<pid>` | this replica's name (the election key's value) |
//! | `--ttl` | `5` | the leader lease's TTL, in seconds |
//! | `--latency-ms` | `200` | the simulated cloud's average latency per call |
//! | `--failure-rate` | `0.05` | the share of cloud calls that fail (half of them after doing their work) |
//!
//! It prints one line when it starts leading, when it stands by, and when it loses the
//! leadership (with why), and exits cleanly on Ctrl-C: a leader then shuts its controller
//! down and resigns, so a standby takes over at once.

use std::sync::Arc;
use std::time::Duration;

use attach_detach::Ids;
use attach_detach::traits::AttachBackend;
use attach_detach_etcd::{
    CandidateConfig, CloudConfig, KeyLayout, Replica, ReplicaConfig, Role, SimulatedCloud,
};

type D = Ids<String, String, String, ()>;

struct Args {
    endpoints: Vec<String>,
    prefix: String,
    name: String,
    ttl: u64,
    latency_ms: u64,
    failure_rate: f64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        endpoints: vec!["127.0.0.1:2379".into()],
        prefix: "/attach-detach".into(),
        name: format!("replica-{}", std::process::id()),
        ttl: 5,
        latency_ms: 200,
        failure_rate: 0.05,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoints" => args.endpoints = value()?.split(',').map(str::to_owned).collect(),
            "--prefix" => args.prefix = value()?,
            "--name" => args.name = value()?,
            "--ttl" => args.ttl = value()?.parse().map_err(|e| format!("--ttl: {e}"))?,
            "--latency-ms" => {
                args.latency_ms = value()?.parse().map_err(|e| format!("--latency-ms: {e}"))?;
            }
            "--failure-rate" => {
                args.failure_rate = value()?
                    .parse()
                    .map_err(|e| format!("--failure-rate: {e}"))?;
            }
            "-h" | "--help" => {
                return Err("options: --endpoints --prefix --name --ttl --latency-ms --failure-rate (see the source's doc comment)".into());
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
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
    // Keep-alive and require-leader for the watch; no request timeout, which would cut a
    // standby's campaign short (every call of the replica has its own deadline).
    let options = attach_detach_etcd::client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
        .with_require_leader(true);
    let client = attach_detach_etcd::client::Client::connect(&args.endpoints, Some(options))?;
    let layout = KeyLayout::new(args.prefix.clone());
    let seed = u64::from(std::process::id());
    let cloud = SimulatedCloud::<D>::new(
        client.clone(),
        layout.clone(),
        CloudConfig {
            latency: Duration::from_millis(args.latency_ms),
            failure_rate: args.failure_rate,
            seed,
        },
    );
    let config = ReplicaConfig {
        candidate: CandidateConfig {
            ttl: Duration::from_secs(args.ttl),
            ..CandidateConfig::default()
        },
        ..ReplicaConfig::default()
    };
    let replica = Replica::<D>::new(
        client,
        layout,
        args.name.clone(),
        config,
        Arc::new(move |fence| Arc::new(cloud.clone().fenced(fence)) as Arc<dyn AttachBackend<D>>),
    )?;
    println!(
        "{}: campaigning under {} (ttl {} s)",
        args.name, args.prefix, args.ttl
    );
    let handle = replica.handle();
    let name = args.name.clone();
    tokio::spawn(async move {
        let mut roles = handle.roles();
        let mut was_leading = false;
        loop {
            let role = *roles.borrow_and_update();
            if was_leading
                && !matches!(role, Role::Leading { .. })
                && let Some(m) = handle.metrics()
            {
                println!(
                    "{name}: that term's controller: {} attaches, {} detaches, {} status writes, {} refused by the fence",
                    m.attach.succeeded,
                    m.detach.succeeded,
                    m.store_writes,
                    handle.refused_by_fence()
                );
            }
            match role {
                Role::Leading { term } => {
                    println!("{name}: leading (term {term})");
                    was_leading = true;
                }
                Role::StandingBy => {
                    if was_leading {
                        let why = handle
                            .last_loss()
                            .map_or("stepped down".to_string(), |loss| loss.to_string());
                        println!("{name}: lost leadership: {why}");
                        was_leading = false;
                    }
                    println!("{name}: standing by");
                }
                Role::Stopped => {
                    println!("{name}: stopped");
                    return;
                }
            }
            if roles.changed().await.is_err() {
                return;
            }
        }
    });
    replica
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // Let the role printer have its last word.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}
