//! A real etcd for tests: started on free 127.0.0.1 ports with a temporary data directory, and
//! always stopped (on drop, even when the test panics).
//!
//! Without an `etcd` binary (`$ETCD_BIN`, else `etcd` on `PATH`, else `/usr/bin/etcd`) a test
//! is skipped loudly, unless `ATTACH_DETACH_REQUIRE_ETCD=1` (CI sets it), which fails it.
//! Install it with `apt-get install etcd-server` (Debian, Ubuntu).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One etcd process, owned by the test.
pub struct Etcd {
    binary: PathBuf,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// The etcd binary, if there is one.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let usr = PathBuf::from("/usr/bin/etcd");
        usr.is_file().then_some(usr)
    })
}

/// How many times a first start may take new ports after finding one taken.
const START_ATTEMPTS: u32 = 5;

/// A port free on 127.0.0.1 now, and never handed to another etcd of this process: the
/// kernel may give a port just released to the next asker, and the tests start their etcds
/// in parallel.
fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port on 127.0.0.1");
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}

impl Etcd {
    /// Starts an etcd, or returns `None` (having said so on stderr) when there is no binary
    /// and CI did not require one.
    pub fn start(test: &str) -> Option<Etcd> {
        let Some(binary) = binary() else {
            if std::env::var("ATTACH_DETACH_REQUIRE_ETCD").as_deref() == Ok("1") {
                panic!(
                    "{test}: ATTACH_DETACH_REQUIRE_ETCD=1 but no etcd binary was found (apt-get install etcd-server, or set ETCD_BIN)"
                );
            }
            // Straight to stderr: the test harness captures `eprintln!` of a passing test,
            // and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED {test}: no etcd binary (install it with `apt-get install etcd-server`, \
                 or set ETCD_BIN); this test did NOT run ***\n"
            );
            return None;
        };
        let mut etcd = Etcd {
            binary,
            dir: tempfile::Builder::new()
                .prefix("attach-detach-etcd-")
                .tempdir()
                .expect("a temporary directory"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
        };
        // A free port is only free when asked: between that and etcd's bind another test's
        // etcd (tests run in parallel) or any outgoing connection may take it, and etcd then
        // exits with "address already in use" (seen once in CI). A first start has no data
        // yet, so it may simply take other ports.
        for attempt in 1.. {
            match etcd.try_spawn() {
                Ok(()) => break,
                Err(log) if attempt < START_ATTEMPTS && log.contains("address already in use") => {
                    let _ = std::fs::remove_dir_all(etcd.dir.path().join("data"));
                    let _ = std::fs::remove_file(etcd.dir.path().join("etcd.log"));
                    etcd.client_port = free_port();
                    etcd.peer_port = free_port();
                }
                Err(log) => panic!("{test}: etcd exited at start: {log}"),
            }
        }
        Some(etcd)
    }

    /// The client endpoint, `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// A connected client.
    pub async fn client(&self) -> attach_detach_etcd::client::Client {
        let options = attach_detach_etcd::client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        attach_detach_etcd::client::Client::connect([self.endpoint()], Some(options))
            .expect("connect to the test etcd")
    }

    /// Starts etcd and waits until it serves; `Err` with its log if it exited meanwhile.
    fn try_spawn(&mut self) -> Result<(), String> {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd's log file");
        let child = Command::new(&self.binary)
            .arg("--name=test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.child = Some(child);
        self.wait_ready()
    }

    /// Waits until etcd says it is healthy (`/health` on the client port: it has a leader and
    /// can serve); `Err` with its log if it exited first. The client port takes connections
    /// before that (etcd binds it early), so an open port once let a test's first request
    /// wait on the leader's election inside its own timeout.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!("({status}) {}", self.log()));
            }
            if self.healthy() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "etcd did not report itself healthy within 20 s: {}",
            self.log()
        );
    }

    /// Whether `GET /health` on the client port answers `"health":"true"`.
    fn healthy(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.client_port)) else {
            return false;
        };
        let timeout = Some(Duration::from_secs(2));
        let request = b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        let mut answer = String::new();
        stream.set_read_timeout(timeout).is_ok()
            && stream.set_write_timeout(timeout).is_ok()
            && stream.write_all(request).is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.contains("\"health\":\"true\"")
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Kills etcd at once (SIGKILL: no clean shutdown), keeping its data.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(log) = self.try_spawn() {
            panic!("etcd exited at restart: {log}");
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts an etcd for the calling test, or returns from it (skipped) when there is none.
#[macro_export]
macro_rules! etcd_or_skip {
    ($name:expr) => {
        match $crate::common::etcd::Etcd::start($name) {
            Some(etcd) => etcd,
            None => return,
        }
    };
}
