//! The CSI attach path as an [`AttachBackend`]: attaching a volume is creating its
//! `storage.k8s.io/v1` VolumeAttachment and waiting for the driver's external-attacher to set
//! `status.attached`; detaching is deleting it and waiting until it is gone. This is what
//! upstream's CSI attacher (`pkg/volume/csi/csi_attacher.go`) does for kube-controller-manager's
//! attach/detach controller, so the external-attachers already deployed answer it unchanged.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeSpec};
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde::de::DeserializeOwned;
use tokio::time::{Instant, timeout_at};
use tracing::{debug, warn};

use crate::attachments::{AttachmentCache, Known};
use crate::domain::{AttachSource, CsiVolume, Kube, attachment_name, driver_id, unique_name};
use crate::drivers::CsiDrivers;
use crate::nodes::{ManagedNodes, controller_managed};
use crate::translate::translate_persistent_volume;

/// The errors of this backend: its nodes are node names.
type Error = BackendError<String>;

/// How many GETs a verify sends at once, for the objects the cache cannot vouch for.
const VERIFY_READS: usize = 8;

/// Which VolumeAttachments [`VolumeAttachmentBackend::list`](AttachBackend::list) reports as
/// this controller's.
///
/// Only the listing needs it: attach, detach and verify are asked about given volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManagedDrivers {
    /// Every driver that needs attach by the [`CsiDrivers`] registry, drivers without a
    /// CSIDriver object included. The default, and the safe choice when this controller is the
    /// cluster's only attach/detach controller (kube-controller-manager's is disabled): it
    /// creates VolumeAttachments for unknown drivers too, so the listing must report them, or
    /// an attach a previous run started and lost would land unknown to the next one.
    AttachRequired,
    /// Only these drivers (CSIDriver names, the attachments' `spec.attacher`), among those
    /// that need attach: for a controller that shares the cluster with another one handling
    /// the other drivers.
    Only(BTreeSet<String>),
}

/// How a [`VolumeAttachmentBackend`] behaves.
///
/// ```
/// use std::time::Duration;
/// use attach_detach_kube::{KubeBackendConfig, ManagedDrivers};
/// let config = KubeBackendConfig {
///     timeout: Duration::from_secs(300),
///     drivers: ManagedDrivers::Only(["ebs.csi.aws.com".to_owned()].into()),
///     ..KubeBackendConfig::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeBackendConfig {
    /// How long an attach waits for `status.attached`, and a detach for the object to be
    /// gone, counted from the call's start (the create or delete included): then the call
    /// fails as [`BackendError::Uncertain`], since the external-attacher may still finish it.
    /// Two minutes by default, upstream's `csiTimeout`. Reads (verify, list) are bounded by it
    /// too.
    pub timeout: Duration,
    /// Which attachments the listing reports as this controller's.
    pub drivers: ManagedDrivers,
    /// How many objects each page of a LIST asks for (`limit`), so that a cluster with many
    /// attachments or volumes is read in bounded answers. 500 by default, as client-go's
    /// informers page.
    pub page_size: u32,
}

impl Default for KubeBackendConfig {
    fn default() -> Self {
        KubeBackendConfig {
            timeout: Duration::from_secs(120),
            drivers: ManagedDrivers::AttachRequired,
            page_size: 500,
        }
    }
}

/// The [`AttachBackend`] of the [`Kube`] domain over `storage.k8s.io/v1` VolumeAttachments, as
/// upstream's CSI attacher drives them; the driver's external-attacher does the real work
/// (ControllerPublish, ControllerUnpublish).
///
/// - **attach** creates the VolumeAttachment named by [`attachment_name`] (`spec.attacher` the
///   driver, `spec.nodeName` the node, `spec.source` the payload's
///   [`AttachSource`](crate::AttachSource): `persistentVolumeName`, or for an inline in-tree
///   volume its translated spec in `inlineVolumeSpec`, as upstream's attacher), an existing
///   one counting as created (then read by a GET), and waits until `status.attached` is true.
///   It answers `device: None`: a CSI node plugin finds its volume from the publish context,
///   not from a device path the controller hands over. It fails as
///   [`BackendError::Transient`] if the object is being deleted (a detach of the pair is
///   under way: the contract forbids reporting success before it ends) or disappears, and as
///   [`BackendError::Uncertain`] on `status.attachError` (the external-attacher retries on
///   its own, so the volume may still attach) or when the timeout passes.
/// - **detach** deletes the object (already gone counts as done) and waits until it is gone,
///   which the external-attacher allows (by removing its finalizer) only after
///   ControllerUnpublish succeeded; `status.detachError` or the timeout fail it as
///   [`BackendError::Uncertain`].
/// - **verify** costs what it asks, not the cluster: an object the shared watch holds counts
///   without a request, any other is read by a GET, so that "not attached" is never a stale
///   answer (see [`verify`](AttachBackend::verify)).
/// - **list** reads the VolumeAttachments and the PersistentVolumes once each (paged).
///
/// The waits read one watch of every VolumeAttachment, shared by all calls and kept by the
/// backend (a LIST, then a WATCH from its resourceVersion; a new LIST after 410 Gone; a
/// broken watch opened again after a backoff), started by the first attach, detach or verify
/// and stopped when the last clone of the backend is dropped. A wait judges the object only
/// once the watch has caught up with the revision of the create's or delete's answer (or of
/// the read of an existing object), and only that incarnation of the name (its `uid`), so an
/// object not delivered yet is not taken for gone, nor an older one of the name for it. A
/// wait whose watch is down ends by the timeout, as uncertain, saying why the watch is down.
///
/// Volumes of a driver that needs no attach ([`CsiDrivers::attach_required`] is false) are
/// attached by nothing: attach succeeds without an API call, and verify counts them as
/// attached (the informers do not hand such volumes to the core; a call for one comes from a
/// CSIDriver that changed under it). A detach deletes the object all the same, as upstream's
/// does: the driver may have needed attach when the volume was attached.
///
/// A failed call keeps kube's error as its [`source`](std::error::Error::source). A request
/// the API server refused (4xx: bad request, forbidden, invalid, too many requests) did
/// nothing and is [`Transient`](BackendError::Transient); a create or a delete without a clear
/// refusal (5xx, no answer, a broken connection) may have landed and is
/// [`Uncertain`](BackendError::Uncertain); a failed read is transient. Once the create or
/// delete is done, anything that ends the wait early is uncertain.
///
/// ```no_run
/// use attach_detach_kube::{CsiDrivers, VolumeAttachmentBackend};
/// # async fn run() -> Result<(), kube::Error> {
/// let client = kube::Client::try_default().await?;
/// let drivers = CsiDrivers::new(); // fed by an informer of CSIDriver objects
/// let backend = VolumeAttachmentBackend::new(client, drivers);
/// # let _ = backend;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct VolumeAttachmentBackend {
    attachments: Api<VolumeAttachment>,
    volumes: Api<PersistentVolume>,
    nodes: Api<Node>,
    drivers: CsiDrivers,
    managed: ManagedNodes,
    config: KubeBackendConfig,
    /// The shared watch of every VolumeAttachment, shared by the backend's clones.
    cache: Arc<AttachmentCache>,
}

impl VolumeAttachmentBackend {
    /// A backend with the default [`KubeBackendConfig`], asking `drivers` which drivers need
    /// attach.
    pub fn new(client: Client, drivers: CsiDrivers) -> Self {
        Self::with_config(client, drivers, KubeBackendConfig::default())
    }

    /// A backend configured by `config`.
    pub fn with_config(client: Client, drivers: CsiDrivers, config: KubeBackendConfig) -> Self {
        let attachments = Api::all(client.clone());
        VolumeAttachmentBackend {
            cache: Arc::new(AttachmentCache::new(attachments.clone(), config.page_size)),
            attachments,
            volumes: Api::all(client.clone()),
            nodes: Api::all(client),
            drivers,
            managed: ManagedNodes::new(),
            config,
        }
    }

    /// The same backend, asking `nodes` (the informers':
    /// [`InformerState::managed_nodes`](crate::InformerState::managed_nodes)) which nodes this
    /// controller manages, so that its listing reads no Node. Without it, the listing reads
    /// the metadata of each node it finds an attachment on, every time.
    pub fn with_managed_nodes(mut self, nodes: ManagedNodes) -> Self {
        self.managed = nodes;
        self
    }

    /// The registry the backend asks which drivers need attach: feed it from CSIDriver
    /// objects.
    pub fn drivers(&self) -> &CsiDrivers {
        &self.drivers
    }

    /// The backend's configuration.
    pub fn config(&self) -> &KubeBackendConfig {
        &self.config
    }

    /// Whether the listing reports the attachments of `driver`.
    fn manages(&self, driver: &str) -> bool {
        self.drivers.attach_required(driver)
            && match &self.config.drivers {
                ManagedDrivers::AttachRequired => true,
                ManagedDrivers::Only(drivers) => drivers.contains(driver),
            }
    }

    /// Waits, by `deadline`, until `judge` decides on the VolumeAttachment `name` as the
    /// shared cache holds it once caught up with revision `since` (see
    /// [`AttachmentCache::wait`]). `what` names the call in the timeout's error, which says
    /// why the cache does not follow the server if it does not.
    async fn wait(
        &self,
        name: &str,
        what: &str,
        since: Option<u64>,
        deadline: Instant,
        judge: impl FnMut(Option<&Known>) -> Option<Result<(), Error>>,
    ) -> Result<(), Error> {
        match timeout_at(deadline, self.cache.wait(name, since, judge)).await {
            Ok(done) => done,
            Err(elapsed) => {
                let mut message = format!(
                    "{what}: not done within {:?}; the external-attacher may still finish it",
                    self.config.timeout
                );
                if let Some(trouble) = self.cache.trouble() {
                    message.push_str(&format!(" (and {trouble})"));
                }
                Err(BackendError::uncertain(message).with_source(elapsed))
            }
        }
    }

    /// Which of `nodes` this controller manages, by [`ManagedNodes`], or, for a node it does
    /// not know, by a read of the node's metadata: a node kubelet manages (no
    /// [`CONTROLLER_MANAGED_ANNOTATION`](crate::CONTROLLER_MANAGED_ANNOTATION)) is not, a
    /// node that is gone is (an attachment left on a deleted node is still the core's to
    /// keep track of).
    async fn managed_of(&self, nodes: BTreeSet<&str>) -> Result<HashSet<String>, Error> {
        let mut managed = HashSet::new();
        for node in nodes {
            let known = match self.managed.get(node) {
                Some(known) => known,
                None => self
                    .read(
                        || format!("list: read node {node}"),
                        self.nodes.get_metadata_opt(node),
                    )
                    .await?
                    .is_none_or(|object| controller_managed(&object.metadata)),
            };
            if known {
                managed.insert(node.to_owned());
            }
        }
        Ok(managed)
    }

    /// Runs a read within the configured timeout; a failure or a timeout is transient.
    async fn read<T>(
        &self,
        what: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Error> {
        let deadline = Instant::now() + self.config.timeout;
        match timeout_at(deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(BackendError::transient(what()).with_source(error)),
            Err(elapsed) => Err(BackendError::transient(what()).with_source(elapsed)),
        }
    }
}

/// The VolumeAttachment upstream's CSI attacher creates for `volume` on `node`.
fn desired(name: &str, volume: &CsiVolume, node: &str) -> VolumeAttachment {
    VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: volume.driver.clone(),
            node_name: node.to_owned(),
            source: match &volume.source {
                AttachSource::PersistentVolume(pv) => VolumeAttachmentSource {
                    persistent_volume_name: Some(pv.clone()),
                    inline_volume_spec: None,
                },
                AttachSource::Inline(spec) => VolumeAttachmentSource {
                    persistent_volume_name: None,
                    inline_volume_spec: Some(PersistentVolumeSpec::clone(spec)),
                },
            },
        },
        status: None,
    }
}

/// Where an attach of the object `uid` stands, given the state of its name (`None`: no
/// object), in upstream's order (`verifyAttachmentStatus`): gone (or replaced by another
/// object of the name) or being deleted fails, attached succeeds, an attach error fails,
/// anything else waits.
fn attach_progress(what: &str, uid: Option<&str>, va: Option<&Known>) -> Option<Result<(), Error>> {
    let Some(va) = va.filter(|va| va.uid.as_deref() == uid) else {
        return Some(Err(BackendError::transient(format!(
            "{what}: the VolumeAttachment was deleted before the volume was attached"
        ))));
    };
    if va.deleting {
        return Some(Err(BackendError::transient(format!(
            "{what}: the VolumeAttachment is being deleted (a detach is under way); \
             attach again once it is gone"
        ))));
    }
    if va.attached {
        return Some(Ok(()));
    }
    let error = va.attach_error.as_ref()?;
    Some(Err(BackendError::uncertain(format!(
        "{what}: the external-attacher failed (it keeps trying): {error}"
    ))))
}

/// Where a detach of the object `uid` stands, given the state of its name (`None`: no
/// object): gone succeeds, a detach error fails, an object no longer being deleted or
/// another object of the name (created again by an attach since) fails, anything else waits.
fn detach_progress(what: &str, uid: Option<&str>, va: Option<&Known>) -> Option<Result<(), Error>> {
    let Some(va) = va else {
        return Some(Ok(()));
    };
    if let Some(error) = va
        .detach_error
        .as_ref()
        .filter(|_| va.uid.as_deref() == uid)
    {
        return Some(Err(BackendError::uncertain(format!(
            "{what}: the external-attacher failed (it keeps trying): {error}"
        ))));
    }
    if !va.deleting || va.uid.as_deref() != uid {
        return Some(Err(BackendError::uncertain(format!(
            "{what}: the VolumeAttachment was created again (an attach is under way)"
        ))));
    }
    None
}

#[async_trait]
impl AttachBackend<Kube> for VolumeAttachmentBackend {
    /// Creates the VolumeAttachment and waits for `status.attached`; see
    /// [`VolumeAttachmentBackend`]. `volume` is not read: `payload` names everything.
    async fn attach(
        &self,
        volume: &String,
        node: &String,
        payload: &CsiVolume,
    ) -> Result<AttachInfo, Error> {
        if !self.drivers.attach_required(&payload.driver) {
            debug!(
                volume,
                node,
                driver = payload.driver,
                "driver needs no attach"
            );
            return Ok(AttachInfo::default());
        }
        let deadline = Instant::now() + self.config.timeout;
        let name = attachment_name(&payload.handle, &payload.driver, node);
        let what = format!("attach of {volume} to {node} (VolumeAttachment {name})");
        let (params, object) = (PostParams::default(), desired(&name, payload, node));
        let create = self.attachments.create(&params, &object);
        let current = match timeout_at(deadline, create).await {
            Ok(Ok(created)) => Some(created),
            // AlreadyExists: ours from an earlier call, or one a detach is deleting; which
            // one, the object says, read now (the cache may not have it yet, or not as it is
            // now). Nothing was written, so a failed read is transient.
            Ok(Err(error)) if status_code(&error) == Some(409) => {
                debug!(name, "VolumeAttachment already exists");
                match timeout_at(deadline, self.attachments.get_opt(&name)).await {
                    Ok(Ok(read)) => read,
                    Ok(Err(error)) => {
                        return Err(BackendError::transient(format!(
                            "{what}: it exists, but reading it failed"
                        ))
                        .with_source(error));
                    }
                    Err(elapsed) => {
                        return Err(BackendError::transient(format!(
                            "{what}: it exists, but reading it took too long"
                        ))
                        .with_source(elapsed));
                    }
                }
            }
            Ok(Err(error)) => return Err(write_failure(error, format!("{what}: create"))),
            Err(elapsed) => {
                return Err(
                    BackendError::uncertain(format!("{what}: no answer to the create"))
                        .with_source(elapsed),
                );
            }
        };
        // Gone already: no incarnation to wait on.
        let Some(current) = current else {
            return Err(BackendError::transient(format!(
                "{what}: the VolumeAttachment was deleted before the volume was attached"
            )));
        };
        // The object as the create or the read left it, then as the cache holds it once it
        // has caught up with that revision: an absent object is then really gone.
        let known = Known::of(&current);
        let uid = known.uid.clone();
        if let Some(done) = attach_progress(&what, uid.as_deref(), Some(&known)) {
            done?;
        } else {
            self.wait(&name, &what, known.version, deadline, |va| {
                attach_progress(&what, uid.as_deref(), va)
            })
            .await?;
        }
        // CSI needs no device path: the node plugin learns where the volume is from the
        // publish context the external-attacher stores in `status.attachmentMetadata`.
        Ok(AttachInfo { device: None })
    }

    /// Deletes the VolumeAttachment and waits until it is gone; see
    /// [`VolumeAttachmentBackend`].
    async fn detach(
        &self,
        volume: &String,
        node: &String,
        payload: &CsiVolume,
    ) -> Result<(), Error> {
        // No shortcut for a driver that needs no attach, as upstream's detacher takes none: it
        // may have needed attach when the volume was attached (its CSIDriver changed since),
        // and a VolumeAttachment left behind would keep the volume published. Without one,
        // the delete answers 404 at once.
        let deadline = Instant::now() + self.config.timeout;
        let name = attachment_name(&payload.handle, &payload.driver, node);
        let what = format!("detach of {volume} from {node} (VolumeAttachment {name})");
        let params = DeleteParams::default();
        let delete = self.attachments.delete(&name, &params);
        let answer = match timeout_at(deadline, delete).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) if status_code(&error) == Some(404) => return Ok(()),
            Ok(Err(error)) => return Err(write_failure(error, format!("{what}: delete"))),
            Err(elapsed) => {
                return Err(
                    BackendError::uncertain(format!("{what}: no answer to the delete"))
                        .with_source(elapsed),
                );
            }
        };
        // The server answers the object, or a Status once it is gone. An object without
        // finalizers is removed at once (VolumeAttachments have no graceful deletion); one
        // with the external-attacher's finalizer stays, marked deleted, until it detached.
        let Some(current) = answer.left().filter(|va| {
            va.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
        }) else {
            return Ok(());
        };
        // Then as the cache holds it once caught up with the delete's revision: an absent
        // object is then really gone.
        let known = Known::of(&current);
        let uid = known.uid.clone();
        if let Some(done) = detach_progress(&what, uid.as_deref(), Some(&known)) {
            return done;
        }
        self.wait(&name, &what, known.version, deadline, |va| {
            detach_progress(&what, uid.as_deref(), va)
        })
        .await
    }

    /// Which asked volumes have their object for `node`, read at the cost of what is asked,
    /// not of the cluster: an object the shared cache holds (while it follows the server)
    /// counts without a request; each other one is read by a GET of its name (names are
    /// deterministic), a few at a time.
    ///
    /// Why not the cache alone: a volume left out makes the core forget an attachment, which
    /// is irreversible, so "not attached" must be at least as fresh as the call. A cache is
    /// behind the server by however long its events take, so its absence decides nothing;
    /// its presence may: an object it holds existed a moment ago, and reporting it a little
    /// longer only delays the core noticing that it vanished. A GET is read from etcd at the
    /// time of the call, so its 404 is fresh. In steady state every asked volume's object is
    /// in the cache and a verify sends nothing; one that vanished costs one GET.
    ///
    /// An asked volume counts as attached to `node` while its object exists, whether its
    /// attach is still under way (as the contract asks) or its detach is (the volume is
    /// attached until the external-attacher removed its finalizer, so settling an uncertain
    /// detach as done before would let the core attach a single-node volume elsewhere while
    /// it is still here). Volumes of a driver needing no attach count as attached, without a
    /// request.
    async fn verify(
        &self,
        node: &String,
        volumes: &[(String, CsiVolume)],
    ) -> Result<Vec<String>, Error> {
        let asked: Vec<(&String, Option<String>)> = volumes
            .iter()
            .map(|(volume, payload)| {
                let name = self
                    .drivers
                    .attach_required(&payload.driver)
                    .then(|| attachment_name(&payload.handle, &payload.driver, node));
                (volume, name)
            })
            .collect();
        let names: Vec<&str> = asked.iter().filter_map(|(_, n)| n.as_deref()).collect();
        if names.is_empty() {
            return Ok(asked.into_iter().map(|(v, _)| v.clone()).collect());
        }
        let cached = self.cache.present(names.iter().copied());
        let (mut present, mut unsure) = (HashSet::new(), Vec::new());
        for (i, name) in names.iter().enumerate() {
            if cached.as_ref().is_some_and(|held| held[i]) {
                present.insert(name.to_string());
            } else {
                unsure.push(name.to_string());
            }
        }
        let api = &self.attachments;
        let reads = futures::stream::iter(unsure)
            .map(|name: String| async move {
                let read = api.get_opt(&name).await;
                (name, read)
            })
            .buffer_unordered(VERIFY_READS)
            .collect::<Vec<_>>();
        let reads = self
            .read(
                || format!("verify of {node}: read VolumeAttachments"),
                async { Ok(reads.await) },
            )
            .await?;
        for (name, read) in reads {
            match read {
                Ok(Some(va)) if va.spec.node_name == *node => {
                    present.insert(name);
                }
                Ok(_) => {}
                Err(error) => {
                    return Err(BackendError::transient(format!(
                        "verify of {node}: read VolumeAttachment {name}"
                    ))
                    .with_source(error));
                }
            }
        }
        Ok(asked
            .into_iter()
            .filter(|(_, name)| name.as_ref().is_none_or(|name| present.contains(name)))
            .map(|(volume, _)| volume.clone())
            .collect())
    }

    /// One LIST of the VolumeAttachments of the managed drivers (see [`ManagedDrivers`]) on
    /// the nodes this controller manages (see
    /// [`with_managed_nodes`](VolumeAttachmentBackend::with_managed_nodes)), joined with one
    /// LIST of the PersistentVolumes (if an object names one) for each volume's unique name,
    /// access mode and payload: a PV of an in-tree plugin is translated as CSI migration
    /// translates it; an inline volume's object carries its spec (`inlineVolumeSpec`), which
    /// becomes its payload.
    ///
    /// Objects whose attach is under way count, as the contract asks, and so do objects being
    /// deleted: until the external-attacher removed its finalizer the volume may still be
    /// attached, and a restarted core must know it (it detaches it again if nothing needs it,
    /// which waits for the deletion to end). Skipped, with a warning: an object whose
    /// PersistentVolume is gone, neither CSI nor of a migrated plugin, or does not translate,
    /// an inline one without a CSI source, and one whose name is not the one this backend
    /// would give it (its PersistentVolume was replaced by another of the same name): its
    /// volume cannot be named, and a detach computed from the current PersistentVolume would
    /// not delete it.
    async fn list(&self) -> Result<Vec<BackendAttachment<Kube>>, Error> {
        let attachments: Vec<VolumeAttachment> = self
            .read(
                || "list VolumeAttachments".to_owned(),
                list_all(&self.attachments, self.config.page_size),
            )
            .await?
            .into_iter()
            .filter(|va| self.manages(&va.spec.attacher))
            .collect();
        let nodes = attachments.iter().map(|va| va.spec.node_name.as_str());
        let managed = self.managed_of(nodes.collect()).await?;
        let attachments: Vec<VolumeAttachment> = attachments
            .into_iter()
            .filter(|va| {
                let ours = managed.contains(&va.spec.node_name);
                if !ours {
                    debug!(
                        attachment = va.metadata.name.as_deref().unwrap_or_default(),
                        node = va.spec.node_name,
                        "skipping a VolumeAttachment of a node kubelet manages"
                    );
                }
                ours
            })
            .collect();
        if attachments.is_empty() {
            return Ok(Vec::new());
        }
        // An inline volume's object carries its spec: PersistentVolumes are read only if an
        // object names one.
        let named = attachments
            .iter()
            .any(|va| va.spec.source.persistent_volume_name.is_some());
        let volumes: BTreeMap<String, PersistentVolume> = if named {
            self.read(
                || "list PersistentVolumes".to_owned(),
                list_all(&self.volumes, self.config.page_size),
            )
            .await?
            .into_iter()
            .filter_map(|pv| Some((pv.metadata.name.clone()?, pv)))
            .collect()
        } else {
            BTreeMap::new()
        };
        Ok(attachments
            .iter()
            .filter_map(|va| match attachment_of(va, &volumes) {
                Ok(attachment) => Some(attachment),
                Err(why) => {
                    let name = va.metadata.name.as_deref().unwrap_or_default();
                    warn!(attachment = name, why, "skipping a VolumeAttachment");
                    None
                }
            })
            .collect())
    }
}

/// The attachment `va` stands for, with its volume from `volumes`, or why it cannot be told.
///
/// A PersistentVolume's is named from the PV as CSI migration translates it (an in-tree PV's
/// driver and handle are its CSI driver's, as upstream's recovery translates it); an inline
/// volume's, from the spec the object carries (upstream's recovery skips those, and would
/// leave them attached for ever).
fn attachment_of(
    va: &VolumeAttachment,
    volumes: &BTreeMap<String, PersistentVolume>,
) -> Result<BackendAttachment<Kube>, String> {
    let source = &va.spec.source;
    let (csi, modes, payload_source, what) = match (
        source.persistent_volume_name.as_deref(),
        source.inline_volume_spec.as_ref(),
    ) {
        (Some(pv), _) => {
            let Some(volume) = volumes.get(pv) else {
                return Err(format!("its PersistentVolume {pv} is gone"));
            };
            let csi = match translate_persistent_volume(volume) {
                Ok(Some(csi)) => csi.spec(),
                Ok(None) => {
                    return Err(format!(
                        "its PersistentVolume {pv} is neither CSI nor of a plugin CSI migration serves"
                    ));
                }
                Err(error) => {
                    return Err(format!(
                        "its PersistentVolume {pv} does not translate to CSI: {error}"
                    ));
                }
            };
            let source = AttachSource::PersistentVolume(pv.to_owned());
            let what = format!("its PersistentVolume {pv}");
            (csi.csi, csi.access_modes, source, what)
        }
        (None, Some(spec)) => {
            let source = AttachSource::Inline(Box::new(spec.clone()));
            let what = "its inline volume".to_owned();
            (spec.csi.clone(), spec.access_modes.clone(), source, what)
        }
        (None, None) => return Err("it has no source".to_owned()),
    };
    let Some(csi) = csi else {
        return Err(format!("{what} has no CSI source"));
    };
    let node = &va.spec.node_name;
    let expected = attachment_name(&csi.volume_handle, &csi.driver, node);
    if va.metadata.name.as_deref() != Some(expected.as_str()) {
        return Err(format!(
            "{what} (handle {}) would be attached as {expected}",
            csi.volume_handle
        ));
    }
    let driver = Some(driver_id(&csi.driver));
    Ok(BackendAttachment {
        volume: unique_name(&csi.driver, &csi.volume_handle),
        node: node.clone(),
        spec: VolumeSpec {
            access: access(modes.as_deref().unwrap_or_default()),
            payload: CsiVolume {
                source: payload_source,
                driver: csi.driver,
                handle: csi.volume_handle,
            },
            attach_required: true,
            driver,
        },
    })
}

/// A volume's access by its (translated) access modes, as upstream's attach/detach
/// controller judges it (`isMultiAttachAllowed`): multi-node if any is `ReadWriteMany` or
/// `ReadOnlyMany`, or if none is given ("we don't know for sure; let the attacher fail");
/// single-node otherwise (`ReadWriteOnce`, `ReadWriteOncePod`).
fn access(modes: &[String]) -> Access {
    if modes.is_empty()
        || modes
            .iter()
            .any(|mode| mode == "ReadWriteMany" || mode == "ReadOnlyMany")
    {
        Access::MultiNode
    } else {
        Access::SingleNode
    }
}

/// Every object of `api`, read `page_size` at a time.
async fn list_all<K>(api: &Api<K>, page_size: u32) -> Result<Vec<K>, kube::Error>
where
    K: Clone + Debug + DeserializeOwned,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(page_size);
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => return Ok(items),
        }
    }
}

/// The HTTP status the API server answered a failed call with, if it answered.
fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Sorts the failure of a write (create, delete). A 4xx answer other than 408 is a refusal
/// before anything was written (400 bad request, 403 forbidden, 422 invalid, 429 too many
/// requests): transient. Anything else (a 5xx, which an API server also answers when etcd
/// timed out after the write; a 408; no answer; an answer that cannot be read) may hide a
/// write that landed: uncertain.
fn write_failure(error: kube::Error, what: String) -> Error {
    match status_code(&error) {
        Some(code) if (400..500).contains(&code) && code != 408 => BackendError::transient(what),
        _ => BackendError::uncertain(what),
    }
    .with_source(error)
}
