//! The attach/detach controller for CSI volumes against the cluster in `KUBECONFIG` (or the
//! in-cluster service account): a drop-in for kube-controller-manager's
//! `persistentvolume-attach-detach-controller`, which must be turned off
//! (`--controllers=*,-persistentvolume-attach-detach-controller`).
//!
//! ```text
//! cargo run -p attach-detach-kube --example controller
//! ```
//!
//! Each term of leadership (Lease `attach-detach-controller` in `$POD_NAMESPACE`, default
//! `kube-system`; identity the hostname, `_` and a random UUID): the informers list the
//! cluster, a controller starts from that world with the Node status store and the
//! VolumeAttachment backend, events go to the pods and nodes, and the informers feed the
//! controller until the lease is lost or the process is told to stop (Ctrl-C, SIGTERM).
//!
//! Every request goes through a client-side token bucket, as client-go's: `KUBE_API_QPS`
//! (default 20) a second, bursts of `KUBE_API_BURST` (default 30), kube-controller-manager's
//! `--kube-api-qps` and `--kube-api-burst`. The core's attach and detach calls are paced to a
//! share of it (`ClientRateLimit::backend_load`), so that none waits in the bucket past its
//! deadline when a zone fails.
//!
//! The operator's endpoints (`attach-detach-endpoints`) listen on `ENDPOINTS_ADDRESS`, default
//! `127.0.0.1:9808` (loopback: set `0.0.0.0:9808` in a pod for the kubelet's probes and
//! Prometheus): `/metrics` (the running term's controller metrics and `attach_detach_leader`),
//! `/healthz` (fails when the controller died or the lease went unrenewed past its deadline),
//! `/readyz` (a standby, or a leader whose informers synced and whose controller recovered),
//! `/explain?volume=kubernetes.io/csi/DRIVER^HANDLE` and `/explain?pod=NAMESPACE/NAME` (the
//! leader's controller says why it waits; JSON with `Accept: application/json`).
//!
//! A pod whose volumes are still not attached `EXPLAIN_WAITS_AFTER_SECONDS` (default 120; 0
//! turns it off) after it was placed gets one `WaitExplained` event saying why, which
//! `kubectl describe pod` shows.
//!
//! What stops it says so in one plain line on stderr: no cluster configured (exit 2), a
//! setting that cannot work or an endpoints address that cannot be bound (exit 2), credentials
//! refused or a request forbidden (exit 3). An API server it cannot reach is retried with
//! backoff (1 s doubling to 1 min), one line each. Logs go to stderr through
//! `tracing-subscriber`, filtered by `RUST_LOG` (default `info`).

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use attach_detach::config::{BackendLoad, Config};
use attach_detach::controller::Controller;
use attach_detach_endpoints::prometheus_client::registry::Registry;
use attach_detach_endpoints::{DEFAULT_ADDR, Endpoints};
use attach_detach_kube::{
    ClientRateLimit, Informers, KubeEventRecorder, KubeExplainer, LeaderConfig, LeaderError,
    LeaderStatus, REPORTING_CONTROLLER, Term, lead_with_status,
};
use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::watch;

type BoxError = Box<dyn Error + Send + Sync>;

/// Starts one term: informers synced, controller spawned, informers and events running. It
/// returns only once the informers synced, so that `/readyz` waits for them.
async fn start_term(
    client: Client,
    identity: String,
    backend_load: BackendLoad,
    explain_waits_after: Option<Duration>,
) -> Result<Term, BoxError> {
    let mut informers = Informers::new(client.clone());
    let parts = wiring::parts(client.clone(), &informers)?;
    // Upstream's WaitForCacheSync: the controller starts from the whole cluster.
    let world = informers.initial_sync().await;
    let reporter = Reporter {
        controller: REPORTING_CONTROLLER.into(),
        instance: Some(identity),
    };
    let (recorder, publisher) = KubeEventRecorder::spawn(client, reporter, informers.index(), 1024);
    // The core's calls paced to the client's bucket, so none waits in it past its deadline.
    let config = Config {
        backend_load,
        explain_waits_after,
        ..Config::default()
    };
    let controller = Controller::new(config, parts.backend, parts.store, world)?
        .with_recorder(Arc::new(recorder));
    let (handle, task) = controller.spawn();
    let feeder = tokio::spawn(informers.run(handle.clone()));
    Ok(Term {
        handle,
        task,
        helpers: vec![feeder, publisher],
    })
}

/// Ctrl-C or SIGTERM (what the kubelet sends a pod being stopped).
async fn stopped() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// A setting from the environment, `default` if unset.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{name}={text:?} is not a valid value")),
    }
}

/// Why the campaign could not go on, as one line for the operator.
enum Stop {
    /// Worth another try later: the API server could not be reached, or failed.
    Retry(String),
    /// Nothing changes by trying again: the credentials or the permissions are wrong.
    Refused(String),
    /// The configuration cannot work.
    Invalid(String),
}

fn judge(error: &LeaderError, url: &str) -> Stop {
    if let LeaderError::Config(_) = error {
        return Stop::Invalid(error.to_string());
    }
    let LeaderError::Lease(kube_lease_manager::LeaseManagerError::KubeError(error)) = error else {
        return Stop::Retry(format!("the Lease could not be taken: {error}"));
    };
    match error {
        kube::Error::Api(status) if status.code == 401 => Stop::Refused(format!(
            "the API server at {url} refused the credentials (401 Unauthorized): check the kubeconfig's user or the service account token"
        )),
        kube::Error::Api(status) if status.code == 403 => Stop::Refused(format!(
            "the API server at {url} forbids the controller: {} (apply deploy/rbac.yaml and run as its service account)",
            status.message
        )),
        kube::Error::Api(status) => Stop::Retry(format!(
            "the API server at {url} answered {}: {}",
            status.code, status.message
        )),
        other => {
            // The innermost cause says it plainly ("Connection refused", a DNS failure).
            let mut cause: &dyn Error = other;
            while let Some(source) = cause.source() {
                cause = source;
            }
            Stop::Retry(format!("cannot reach the API server at {url}: {cause}"))
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = match kube::Config::infer().await {
        Ok(config) => config,
        Err(error) => {
            eprintln!(
                "attach-detach: no cluster to talk to: set KUBECONFIG to a kubeconfig, or run in a pod with a service account ({error})"
            );
            return ExitCode::from(2);
        }
    };
    let url = config.cluster_url.to_string();
    let limit = match (setting("KUBE_API_QPS", 20.0), setting("KUBE_API_BURST", 30)) {
        (Ok(qps), Ok(burst)) => match ClientRateLimit::new(qps, burst) {
            Some(limit) => limit,
            None => {
                eprintln!(
                    "attach-detach: KUBE_API_QPS and KUBE_API_BURST must be positive (got {qps} and {burst})"
                );
                return ExitCode::from(2);
            }
        },
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("attach-detach: {error}");
            return ExitCode::from(2);
        }
    };
    let client = match kube::client::ClientBuilder::try_from(config) {
        Ok(builder) => builder.with_layer(&limit).build(),
        Err(error) => {
            eprintln!("attach-detach: the kubeconfig cannot be used: {error}");
            return ExitCode::from(2);
        }
    };
    let leader = LeaderConfig {
        namespace: std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kube-system".into()),
        ..LeaderConfig::default()
    };
    let explain_waits_after = match setting("EXPLAIN_WAITS_AFTER_SECONDS", 120u64) {
        Ok(0) => None,
        Ok(seconds) if seconds <= 24 * 3600 => Some(Duration::from_secs(seconds)),
        Ok(seconds) => {
            eprintln!("attach-detach: EXPLAIN_WAITS_AFTER_SECONDS={seconds} is over a day");
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("attach-detach: {error}");
            return ExitCode::from(2);
        }
    };
    let address = match setting("ENDPOINTS_ADDRESS", DEFAULT_ADDR) {
        Ok(address) => address,
        Err(error) => {
            eprintln!("attach-detach: {error}");
            return ExitCode::from(2);
        }
    };
    // The lead loop tells `status` where leadership stands; the endpoints read it.
    let status = LeaderStatus::new();
    let mut registry = Registry::default();
    status.register(&mut registry);
    let endpoints = match Endpoints::builder()
        .listen(address)
        .registry(registry)
        .probes(status.clone())
        .explainer(KubeExplainer::new(status.clone()))
        .bind()
        .await
    {
        Ok(endpoints) => endpoints,
        Err(error) => {
            eprintln!("attach-detach: {error} (set ENDPOINTS_ADDRESS to a free address)");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "attach-detach: endpoints on http://{} (/metrics, /healthz, /readyz, /explain)",
        endpoints.local_addr()
    );
    eprintln!(
        "attach-detach: campaigning for Lease {}/{} as {} at {url} ({} requests/s, bursts of {})",
        leader.namespace,
        leader.lease,
        leader.identity,
        limit.qps(),
        limit.burst()
    );
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        stopped().await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut stopping: watch::Receiver<bool>| async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    let mut backoff = Duration::from_secs(1);
    loop {
        let identity = leader.identity.clone();
        let result = lead_with_status(
            client.clone(),
            leader.clone(),
            status.clone(),
            || {
                start_term(
                    client.clone(),
                    identity.clone(),
                    limit.backend_load(),
                    explain_waits_after,
                )
            },
            until_stopped(stopping.clone()),
        )
        .await;
        let Err(error) = result else { break };
        match judge(&error, &url) {
            Stop::Refused(line) => {
                eprintln!("attach-detach: {line}");
                return ExitCode::from(3);
            }
            Stop::Invalid(line) => {
                eprintln!("attach-detach: {line}");
                return ExitCode::from(2);
            }
            Stop::Retry(line) => {
                eprintln!("attach-detach: {line}; retrying in {}s", backoff.as_secs());
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = until_stopped(stopping.clone()) => break,
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
    if let Err(error) = endpoints.shutdown().await {
        eprintln!("attach-detach: {error}");
    }
    eprintln!("attach-detach: stopped");
    ExitCode::SUCCESS
}

/// The status store and the backend (`KubeStatusStore`, `VolumeAttachmentBackend`), the
/// backend reading the informers' registries of drivers and nodes.
mod wiring {
    use std::sync::Arc;

    use attach_detach::traits::{AttachBackend, NodeStatusStore};
    use attach_detach_kube::{Informers, Kube};
    use kube::Client;

    use super::BoxError;

    /// What a term needs besides the informers.
    pub struct Parts {
        pub store: Arc<dyn NodeStatusStore<Kube>>,
        pub backend: Arc<dyn AttachBackend<Kube>>,
    }

    /// The store and the backend of a term. The backend asks the informers which drivers
    /// need an attach (CSIDrivers) and which nodes are the controller's, so that its
    /// recovery listing skips the attachments of nodes kubelet manages.
    pub fn parts(client: Client, informers: &Informers) -> Result<Parts, BoxError> {
        use attach_detach_kube::{KubeStatusStore, VolumeAttachmentBackend};
        let store = KubeStatusStore::new(client.clone());
        let backend = VolumeAttachmentBackend::new(client, informers.csi_drivers())
            .with_managed_nodes(informers.managed_nodes());
        Ok(Parts {
            store: Arc::new(store),
            backend: Arc::new(backend),
        })
    }
}
