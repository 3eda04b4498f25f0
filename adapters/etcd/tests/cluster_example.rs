//! The `cluster` example run as an operator's drill runs it, as a child process against a real
//! etcd: etcd killed and restarted under it (it reports the failure once, carries on, and its
//! agents still mount), then the example itself restarted (it resumes the placements instead
//! of wiping them), then started with `--wipe` (it starts afresh).
//!
//! The example's binary is the one `cargo test` builds beside the tests
//! (`target/<profile>/examples/cluster`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use attach_detach::Ids;
use attach_detach_etcd::client::Client;
use attach_detach_etcd::{ClusterWriter, KeyKind, KeyLayout, Placement};

type D = Ids<String, String, String, ()>;

/// The example's binary, built by `cargo test` beside this test's own.
fn example_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/cluster_example-<hash> → target/<profile>/examples/cluster
    let binary = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .join("examples")
        .join(format!("cluster{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test` builds the examples (or run `cargo build -p attach-detach-etcd --example cluster`)",
        binary.display()
    );
    // A binary older than the sources would test the example as it was.
    let built = modified(&binary);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![root.join("examples/cluster.rs")];
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the adapter's sources") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                sources.push(path);
            }
        }
    }
    for source in sources {
        assert!(
            modified(&source) <= built,
            "{} is older than {}: rebuild it (`cargo build -p attach-detach-etcd --example cluster`; `cargo test` does)",
            binary.display(),
            source.display()
        );
    }
    binary
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example running, its stdout collected line by line; killed when dropped.
struct Example {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Example {
    fn start(endpoint: &str, prefix: &str, extra: &[&str]) -> Example {
        let mut child = Command::new(example_binary())
            .args(["--endpoints", endpoint, "--prefix", prefix])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the cluster example");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Example { child, lines }
    }

    /// The index of the first line from `from` on that satisfies `wanted`, waiting up to
    /// `within`; panics with everything printed so far if none comes, or if the example
    /// exited.
    fn wait_for(&mut self, from: usize, within: Duration, wanted: impl Fn(&str) -> bool) -> usize {
        let deadline = Instant::now() + within;
        loop {
            {
                let lines = self.lines.lock().unwrap();
                let from = from.min(lines.len());
                if let Some(i) = lines[from..].iter().position(|l| wanted(l)) {
                    return from + i;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the example exited ({status}); it printed:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the awaited line did not come within {within:?}; the example printed:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The volumes in `in-use/{node}`.
async fn in_use(client: &Client, layout: &KeyLayout, node: &str) -> Vec<String> {
    let response = client
        .kv_client()
        .get(layout.key(KeyKind::InUse, node), None)
        .await
        .expect("read in-use");
    response
        .kvs()
        .first()
        .map(|kv| serde_json::from_slice(kv.value()).expect("an in-use list"))
        .unwrap_or_default()
}

/// Plays the controller once: lists `app-1`'s volume in `attached/{node}` of the node the
/// scheduler has it on, and waits for that node's agent to mount it. Retried, since the
/// example may move the workload meanwhile.
async fn agent_mounts(client: &Client, cluster: &ClusterWriter<D>) -> bool {
    let layout = cluster.layout();
    for _ in 0..10 {
        let placements = cluster.read().await.expect("read the placements");
        let Placement { node, volumes } = placements.workloads["app-1"].clone();
        let attached = format!(r#"[{{"volume":"{}"}}]"#, volumes[0]);
        client
            .kv_client()
            .put(layout.key(KeyKind::Attached, &node), attached, None)
            .await
            .expect("write attached");
        for _ in 0..10 {
            if in_use(client, layout, &node).await.contains(&volumes[0]) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_example_rides_out_an_etcd_restart_and_resumes_its_own() {
    let mut etcd =
        etcd_or_skip!("the_cluster_example_rides_out_an_etcd_restart_and_resumes_its_own");
    let client = etcd.client().await;
    let layout = KeyLayout::new("/drill");
    let cluster = ClusterWriter::<D>::new(client.clone(), layout.clone());
    let long = Duration::from_secs(20);

    let moving = ["--nodes", "3", "--workloads", "2", "--move-every", "1"];
    let mut example = Example::start(&etcd.endpoint(), "/drill", &moving);
    example.wait_for(0, long, |l| l.starts_with("seeded 3 nodes and 2 workloads"));
    example.wait_for(0, long, |l| l.starts_with("moved "));

    // etcd killed: the example reports it once and keeps running.
    etcd.kill();
    let failed = example.wait_for(0, long, |l| {
        l.starts_with("etcd: ") && l.ends_with("retrying")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        example.running(),
        "the example died with etcd:\n{}",
        example.output()
    );
    let failures = example.lines.lock().unwrap()[failed..]
        .iter()
        .filter(|l| l.ends_with("retrying"))
        .count();
    assert_eq!(failures, 1, "one report per outage:\n{}", example.output());

    // etcd back on the same data: the example says so, moves again, and its agents mount.
    etcd.restart();
    let back = example.wait_for(failed, long, |l| l == "etcd: back");
    example.wait_for(back, long, |l| l.starts_with("moved "));
    assert!(
        agent_mounts(&client, &cluster).await,
        "the agents did not mount after etcd's restart:\n{}",
        example.output()
    );

    // The example killed and started again: it resumes what etcd holds, attachments included.
    drop(example);
    let before = cluster.read().await.expect("read the placements");
    let mut example = Example::start(&etcd.endpoint(), "/drill", &["--move-every", "0"]);
    example.wait_for(0, long, |l| {
        l.starts_with("resumed 3 nodes and 2 workloads")
    });
    let after = cluster.read().await.expect("read the placements");
    assert_eq!(
        after.workloads, before.workloads,
        "the placements were reseeded"
    );
    assert!(
        agent_mounts(&client, &cluster).await,
        "the resumed example's agents did not mount:\n{}",
        example.output()
    );
    drop(example);

    // `--wipe` starts afresh: the controller's keys are gone, the seed is the first one.
    let mut example = Example::start(
        &etcd.endpoint(),
        "/drill",
        &[
            "--wipe",
            "--nodes",
            "3",
            "--workloads",
            "2",
            "--move-every",
            "0",
        ],
    );
    example.wait_for(0, long, |l| l.starts_with("seeded 3 nodes and 2 workloads"));
    let attached = client
        .kv_client()
        .get(
            layout.key(KeyKind::Attached, ""),
            Some(attach_detach_etcd::client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("read attached");
    assert!(
        attached.kvs().is_empty(),
        "--wipe left the controller's keys"
    );
    let seeded = cluster.read().await.expect("read the placements");
    assert_eq!(seeded.workloads["app-1"].node, "node-1");
    assert_eq!(seeded.workloads["app-2"].node, "node-2");
}
