//! kube-runtime's six watchers, merged and mapped through an [`InformerState`]: the initial
//! sync and the forwarding of every later change to a running controller.

use std::fmt::Debug;
use std::pin::Pin;

use attach_detach::controller::{ControllerError, ControllerHandle, World};
use attach_detach::core::Input;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client, Resource};
use tracing::{debug, info, warn};

use super::InformerState;
use super::index::ObjectIndex;
use crate::domain::Kube;
use crate::drivers::CsiDrivers;
use crate::nodes::ManagedNodes;
use crate::translate::CsiMigration;

/// One event of any of the six watchers. Variants differ in size; one lives at a time, so
/// boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Update {
    Pod(Event<Pod>),
    Claim(Event<PersistentVolumeClaim>),
    Volume(Event<PersistentVolume>),
    Node(Event<Node>),
    Driver(Event<CSIDriver>),
    CsiNode(Event<CSINode>),
}

type Updates = Pin<Box<dyn Stream<Item = Result<Update, watcher::Error>> + Send>>;

fn stream<K>(api: Api<K>, wrap: fn(Event<K>) -> Update) -> Updates
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    watch::watcher(api, watch::Config::default())
        .default_backoff()
        .map(move |event| event.map(wrap))
        .boxed()
}

/// kube-runtime's watchers on Pods, PVCs, PVs, Nodes, CSIDrivers and CSINodes (all namespaces), merged
/// and mapped through an [`InformerState`].
///
/// Each watcher has kube-runtime's default configuration and default backoff: a failed list or
/// watch is retried, and a watch that cannot resume lists again (a relist, see
/// [`InformerState`]). Errors are logged, never fatal.
///
/// ```no_run
/// # async fn demo(client: kube::Client, handle: attach_detach::controller::ControllerHandle<attach_detach_kube::Kube>) {
/// use attach_detach_kube::Informers;
/// let mut informers = Informers::new(client.clone());
/// // Hand the backend the registries the informers keep.
/// let backend = attach_detach_kube::VolumeAttachmentBackend::new(client.clone(), informers.csi_drivers())
///     .with_managed_nodes(informers.managed_nodes());
/// # let _ = backend;
/// let world = informers.initial_sync().await; // every watcher has listed once
/// # let _ = world;
/// // … build and spawn a controller from `world`, then:
/// informers.run(handle).await;
/// # }
/// ```
pub struct Informers {
    state: InformerState,
    updates: Updates,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// The six watchers on `client`'s cluster, with upstream's default CSI migration
    /// ([`CsiMigration::default`]); nothing is listed until polled.
    pub fn new(client: Client) -> Self {
        Self::with_csi_migration(client, CsiMigration::default())
    }

    /// The same, with CSI migration as `migration` says (say, every plugin's complete, when
    /// kube-controller-manager runs with `InTreePluginPortworxUnregister`).
    pub fn with_csi_migration(client: Client, migration: CsiMigration) -> Self {
        let updates = futures::stream::select_all([
            stream(Api::<Pod>::all(client.clone()), Update::Pod),
            stream(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                Update::Claim,
            ),
            stream(Api::<PersistentVolume>::all(client.clone()), Update::Volume),
            stream(Api::<Node>::all(client.clone()), Update::Node),
            stream(Api::<CSIDriver>::all(client.clone()), Update::Driver),
            stream(Api::<CSINode>::all(client), Update::CsiNode),
        ])
        .boxed();
        Informers {
            state: InformerState::with_csi_migration(migration),
            updates,
        }
    }

    /// The view the event recorder reads.
    pub fn index(&self) -> ObjectIndex {
        self.state.index()
    }

    /// Which nodes this controller manages, as the Node watcher shows them: hand it to the
    /// backend ([`VolumeAttachmentBackend::with_managed_nodes`](crate::VolumeAttachmentBackend::with_managed_nodes)).
    pub fn managed_nodes(&self) -> ManagedNodes {
        self.state.managed_nodes()
    }

    /// Which drivers need attach, as the CSIDriver watcher shows them: hand it to the
    /// backend ([`VolumeAttachmentBackend::new`](crate::VolumeAttachmentBackend::new)).
    pub fn csi_drivers(&self) -> CsiDrivers {
        self.state.csi_drivers()
    }

    /// The inputs of the next watch event; `None` when the streams ended (they do not, in
    /// practice).
    async fn next(&mut self) -> Option<Vec<Input<Kube>>> {
        loop {
            match self.updates.next().await? {
                Ok(Update::Pod(e)) => return Some(self.state.pods(e)),
                Ok(Update::Claim(e)) => return Some(self.state.claims(e)),
                Ok(Update::Volume(e)) => return Some(self.state.volumes(e)),
                Ok(Update::Node(e)) => return Some(self.state.nodes(e)),
                Ok(Update::Driver(e)) => return Some(self.state.drivers(e)),
                Ok(Update::CsiNode(e)) => return Some(self.state.csi_nodes(e)),
                Err(error) => warn!(%error, "watch failed; kube-runtime retries with backoff"),
            }
        }
    }

    /// Consumes watch events until every watcher has listed once, and returns the cluster as
    /// a controller's start-up [`World`] ([`InformerState::world`]).
    ///
    /// Starting a controller from the whole picture matters: a controller fed pods before
    /// their claims would see their volumes as not needed for a moment.
    pub async fn initial_sync(&mut self) -> World<Kube> {
        while !self.state.synced() {
            if self.next().await.is_none() {
                break;
            }
        }
        info!("informers synced");
        self.state.world()
    }

    /// Forwards every change to `handle`, one `send_all` batch per watch event, until the
    /// controller stops (or the watch streams end). Inputs the core refuses are logged.
    pub async fn run(mut self, handle: ControllerHandle<Kube>) {
        while let Some(inputs) = self.next().await {
            if inputs.is_empty() {
                continue;
            }
            debug!(count = inputs.len(), "informer inputs");
            match handle.send_all(inputs.clone()).await {
                Ok(refused) => {
                    for rejection in refused {
                        warn!(input = ?inputs.get(rejection.index), error = %rejection.error, "the controller refused an input");
                    }
                }
                Err(ControllerError::Stopped) => return,
                Err(error) => {
                    warn!(%error, "the controller is gone; informers stop");
                    return;
                }
            }
        }
    }
}
