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
//! `kube-system`; identity `$HOSTNAME`): the informers list the cluster, a controller starts
//! from that world with the Node status store and the VolumeAttachment backend, events go to
//! the pods and nodes, and the informers feed the controller until the lease is lost or the
//! process is told to stop (Ctrl-C, SIGTERM).
//!
//! Logs go to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (default `info`).

use std::error::Error;
use std::sync::Arc;

use attach_detach::config::Config;
use attach_detach::controller::Controller;
use attach_detach_kube::{
    Informers, KubeEventRecorder, LeaderConfig, REPORTING_CONTROLLER, Term, lead,
};
use kube::Client;

type BoxError = Box<dyn Error + Send + Sync>;

/// Starts one term: informers synced, controller spawned, informers and events running.
async fn start_term(client: Client) -> Result<Term, BoxError> {
    let mut informers = Informers::new(client.clone());
    let parts = wiring::parts(client.clone(), &informers)?;
    // Upstream's WaitForCacheSync: the controller starts from the whole cluster.
    let world = informers.initial_sync().await;
    let (recorder, publisher) =
        KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), informers.index(), 1024);
    let controller = Controller::new(Config::default(), parts.backend, parts.store, world)?
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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let client = Client::try_default().await?;
    let leader = LeaderConfig {
        namespace: std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kube-system".into()),
        ..LeaderConfig::default()
    };
    eprintln!(
        "attach-detach: campaigning for Lease {}/{} as {}",
        leader.namespace, leader.lease, leader.identity
    );
    lead(
        client.clone(),
        leader,
        || start_term(client.clone()),
        stopped(),
    )
    .await?;
    eprintln!("attach-detach: stopped");
    Ok(())
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
