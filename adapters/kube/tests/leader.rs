//! Leader election over the fake API server on 127.0.0.1 (server-side apply with field
//! ownership, as kube-lease-manager relies on): two candidates with the default
//! configuration, as two replicas where `HOSTNAME` is not exported would start, never lead at
//! once, and the second takes over when the first steps down.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use attach_detach::config::Config;
use attach_detach::controller::{Controller, World};
use attach_detach::memory::{MemoryBackend, MemoryStore};
use attach_detach_kube::{Kube, LeaderConfig, Term, lead};
use tokio::sync::oneshot;

use common::apiserver::ApiServer;

/// A term that only counts how many terms run at once, and the most ever.
fn term(running: Arc<AtomicUsize>, most: Arc<AtomicUsize>) -> Result<Term, String> {
    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    let controller = Controller::<Kube>::new(
        Config::default(),
        Arc::new(MemoryBackend::new()),
        Arc::new(MemoryStore::default()),
        World::new(),
    )
    .map_err(|e| e.to_string())?;
    let (handle, task) = controller.spawn();
    // Counts the term down when it ends, however it ends.
    let done = tokio::spawn(async move {
        struct Down(Arc<AtomicUsize>);
        impl Drop for Down {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _down = Down(running);
        std::future::pending::<()>().await;
    });
    Ok(Term {
        handle,
        task,
        helpers: vec![done],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_default_candidates_never_lead_at_once() {
    let server = ApiServer::start().await;
    let token = server.token("system:serviceaccount:kube-system:attach-detach-controller");
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(AtomicUsize::new(0));
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    let mut identities = Vec::new();
    for _ in 0..2 {
        let config = LeaderConfig {
            duration_seconds: 3,
            grace_seconds: 1,
            ..LeaderConfig::default()
        };
        identities.push(config.identity.clone());
        let client = server.client(&token).await;
        let (stop, stopped) = oneshot::channel::<()>();
        stops.push(stop);
        let (running, most, terms) = (running.clone(), most.clone(), terms.clone());
        tasks.push(tokio::spawn(lead(
            client,
            config,
            move || {
                terms.fetch_add(1, Ordering::SeqCst);
                let started = term(running.clone(), most.clone());
                async move { started }
            },
            async move {
                let _ = stopped.await;
            },
        )));
    }
    // Long enough for both to campaign, and for a second leader to show.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        (terms.load(Ordering::SeqCst), most.load(Ordering::SeqCst)),
        (1, 1),
        "one term, of one replica ({identities:?})"
    );
    assert_eq!(running.load(Ordering::SeqCst), 1);
    // The leader stops (it releases the lease); the other takes over.
    let leader = server
        .get(
            common::apiserver::LEASES,
            "kube-system",
            "attach-detach-controller",
        )
        .expect("the lease")["spec"]["holderIdentity"]
        .as_str()
        .expect("a holder")
        .to_owned();
    let first = identities
        .iter()
        .position(|i| *i == leader)
        .expect("a candidate leads");
    stops.remove(first).send(()).expect("the leader runs");
    tasks
        .remove(first)
        .await
        .expect("no panic")
        .expect("a clean stop");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(terms.load(Ordering::SeqCst), 2, "the other took over");
    assert_eq!(running.load(Ordering::SeqCst), 1);
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two leaders at once");
    let holder = server
        .get(
            common::apiserver::LEASES,
            "kube-system",
            "attach-detach-controller",
        )
        .expect("the lease")["spec"]["holderIdentity"]
        .clone();
    assert_eq!(holder, identities[1 - first].as_str());
    let denied: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.code >= 400)
        .collect();
    assert!(
        denied.iter().all(|r| r.code == 409 || r.code == 404),
        "only lost races and the lease's first read fail: {denied:#?}"
    );
}
