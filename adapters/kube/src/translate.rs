//! CSI migration: in-tree volumes as the CSI driver that took over their plugin sees them.
//!
//! Kubernetes serves the volumes of seven in-tree plugins through CSI drivers (CSI
//! migration): kubelet and the attach/detach controller translate an in-tree
//! PersistentVolume, or an in-tree volume written inline in a pod, into a CSI
//! PersistentVolume with upstream's `csi-translation-lib`, and from then on treat it as that
//! driver's volume. Kubelet waits for the translated volume's unique name
//! (`kubernetes.io/csi/{driver}^{handle}`) in `Node.status.volumesAttached`, and reads the
//! VolumeAttachment named from the translated driver and handle: a controller that
//! translates differently leaves the pod waiting for ever. This module translates as that
//! library does, for what attaching needs: the driver, the volume handle, the access modes,
//! and, for an inline volume, the whole spec a VolumeAttachment's `inlineVolumeSpec` carries.
//! (A PersistentVolume's topology is not translated: attaching does not read it.)
//!
//! Whether a node's kubelet translates is [`CsiMigration`]'s business: upstream's
//! `isCSIMigrationSupportedOnNode`.

use std::collections::{BTreeMap, BTreeSet};

use attach_detach::core::Access;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec, SecretReference, Volume,
};
use k8s_openapi::api::storage::v1::CSINode;

use crate::domain::unique_name;

/// The annotation kubelet puts on its node's CSINode object: the in-tree plugins (by name,
/// comma-separated) whose volumes it hands to their CSI drivers.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// An in-tree volume plugin whose volumes a CSI driver serves through CSI migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InTreePlugin {
    /// `awsElasticBlockStore`, served by `ebs.csi.aws.com`.
    AwsEbs,
    /// `gcePersistentDisk`, served by `pd.csi.storage.gke.io`.
    GcePd,
    /// `azureDisk`, served by `disk.csi.azure.com`.
    AzureDisk,
    /// `azureFile`, served by `file.csi.azure.com` (whose CSIDriver needs no attach).
    AzureFile,
    /// `cinder`, served by `cinder.csi.openstack.org`.
    Cinder,
    /// `vsphereVolume`, served by `csi.vsphere.vmware.com`.
    VSphere,
    /// `portworxVolume`, served by `pxd.portworx.com`.
    Portworx,
}

impl InTreePlugin {
    /// Every plugin with a translation.
    pub const ALL: [InTreePlugin; 7] = [
        InTreePlugin::AwsEbs,
        InTreePlugin::GcePd,
        InTreePlugin::AzureDisk,
        InTreePlugin::AzureFile,
        InTreePlugin::Cinder,
        InTreePlugin::VSphere,
        InTreePlugin::Portworx,
    ];

    /// The plugin's name, as the migrated-plugins annotation lists it.
    pub fn name(self) -> &'static str {
        match self {
            InTreePlugin::AwsEbs => "kubernetes.io/aws-ebs",
            InTreePlugin::GcePd => "kubernetes.io/gce-pd",
            InTreePlugin::AzureDisk => "kubernetes.io/azure-disk",
            InTreePlugin::AzureFile => "kubernetes.io/azure-file",
            InTreePlugin::Cinder => "kubernetes.io/cinder",
            InTreePlugin::VSphere => "kubernetes.io/vsphere-volume",
            InTreePlugin::Portworx => "kubernetes.io/portworx-volume",
        }
    }

    /// The CSI driver that took the plugin over.
    pub fn driver(self) -> &'static str {
        match self {
            InTreePlugin::AwsEbs => "ebs.csi.aws.com",
            InTreePlugin::GcePd => "pd.csi.storage.gke.io",
            InTreePlugin::AzureDisk => "disk.csi.azure.com",
            InTreePlugin::AzureFile => "file.csi.azure.com",
            InTreePlugin::Cinder => "cinder.csi.openstack.org",
            InTreePlugin::VSphere => "csi.vsphere.vmware.com",
            InTreePlugin::Portworx => "pxd.portworx.com",
        }
    }
}

/// A volume as its CSI driver sees it: a CSI PersistentVolume as it is, or an in-tree one (or
/// an inline in-tree volume) translated.
#[derive(Clone, Debug, PartialEq)]
pub struct CsiSpec {
    plugin: Option<InTreePlugin>,
    name: String,
    /// The translated spec, but for its CSI source, which is `csi`.
    spec: PersistentVolumeSpec,
    csi: CSIPersistentVolumeSource,
}

impl CsiSpec {
    fn new(
        plugin: Option<InTreePlugin>,
        name: String,
        mut spec: PersistentVolumeSpec,
        csi: CSIPersistentVolumeSource,
    ) -> Self {
        spec.csi = None;
        CsiSpec {
            plugin,
            name,
            spec,
            csi,
        }
    }

    /// The in-tree plugin it was translated from; `None` for a CSI PersistentVolume.
    pub fn plugin(&self) -> Option<InTreePlugin> {
        self.plugin
    }

    /// The name of the PersistentVolume; for an inline volume, the name upstream's
    /// translation gives the PersistentVolume it makes (what upstream's events call it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PersistentVolume's spec with its source in `csi`. For an inline volume, exactly
    /// what upstream's attacher puts in a VolumeAttachment's `spec.source.inlineVolumeSpec`.
    pub fn spec(&self) -> PersistentVolumeSpec {
        PersistentVolumeSpec {
            csi: Some(self.csi.clone()),
            ..self.spec.clone()
        }
    }

    /// The CSI driver (`spec.csi.driver`), the VolumeAttachment's `spec.attacher`.
    pub fn driver(&self) -> &str {
        &self.csi.driver
    }

    /// The volume handle (`spec.csi.volumeHandle`).
    pub fn handle(&self) -> &str {
        &self.csi.volume_handle
    }

    /// The unique volume name kubelet and `Node.status` use:
    /// `kubernetes.io/csi/{driver}^{handle}`.
    pub fn unique_name(&self) -> String {
        unique_name(self.driver(), self.handle())
    }

    /// How many nodes may have it attached, by its (translated) access modes: several if any
    /// is `ReadWriteMany` or `ReadOnlyMany`, one otherwise, and one when none is given (where
    /// upstream lets the attacher decide, this takes the safe side).
    pub fn access(&self) -> Access {
        let multi = self
            .spec
            .access_modes
            .iter()
            .flatten()
            .any(|mode| mode == "ReadWriteMany" || mode == "ReadOnlyMany");
        if multi {
            Access::MultiNode
        } else {
            Access::SingleNode
        }
    }
}

/// Why an in-tree volume could not be translated. Upstream skips such a volume (its pod's
/// other volumes are still attached), and so do the informers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranslationError {
    /// An `awsElasticBlockStore` volume ID that names no EBS volume.
    #[error(
        "invalid AWS EBS volume ID {0:?}: expected vol-..., aws:///vol-... or aws://{{zone}}/vol-..."
    )]
    EbsVolumeId(String),
    /// A GCE PD whose zone labels do not make one region.
    #[error("GCE PD zones {0:?} do not name one region ({{locale}}-{{region}}-{{zone}} each)")]
    GceZones(String),
    /// An `azureDisk` that is not a managed disk: CSI migration serves managed disks only.
    #[error("azureDisk kind {0:?} is not supported by CSI migration (only Managed is)")]
    AzureDiskKind(String),
    /// An `azureFile` PersistentVolume without a namespace for its secret.
    #[error(
        "azureFile PersistentVolume {0:?} has no secret namespace (neither secretNamespace nor claimRef.namespace)"
    )]
    AzureFileNamespace(String),
}

/// The volume `pv` stands for as its CSI driver sees it: `None` for a PersistentVolume that is
/// neither CSI nor of a plugin CSI migration serves (this controller's business either way).
///
/// ```
/// use attach_detach_kube::{InTreePlugin, translate_persistent_volume};
/// use k8s_openapi::api::core::v1::{AWSElasticBlockStoreVolumeSource, PersistentVolume, PersistentVolumeSpec};
/// use kube::api::ObjectMeta;
/// let pv = PersistentVolume {
///     metadata: ObjectMeta { name: Some("pv-1".into()), ..Default::default() },
///     spec: Some(PersistentVolumeSpec {
///         aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
///             volume_id: "aws://us-west-2a/vol-02399794d890f9375".into(),
///             ..Default::default()
///         }),
///         ..Default::default()
///     }),
///     status: None,
/// };
/// let csi = translate_persistent_volume(&pv).unwrap().unwrap();
/// assert_eq!(csi.plugin(), Some(InTreePlugin::AwsEbs));
/// assert_eq!(csi.unique_name(), "kubernetes.io/csi/ebs.csi.aws.com^vol-02399794d890f9375");
/// ```
pub fn translate_persistent_volume(
    pv: &PersistentVolume,
) -> Result<Option<CsiSpec>, TranslationError> {
    let Some(spec) = pv.spec.as_ref() else {
        return Ok(None);
    };
    let name = pv.metadata.name.clone().unwrap_or_default();
    if let Some(csi) = &spec.csi {
        return Ok(Some(CsiSpec::new(None, name, spec.clone(), csi.clone())));
    }
    let mut translated = spec.clone();
    let (plugin, csi) = if let Some(ebs) = spec.aws_elastic_block_store.as_ref() {
        translated.aws_elastic_block_store = None;
        let handle = ebs_volume_id(&ebs.volume_id)?;
        (InTreePlugin::AwsEbs, ebs_source(handle, ebs))
    } else if let Some(pd) = spec.gce_persistent_disk.as_ref() {
        translated.gce_persistent_disk = None;
        translated.access_modes = spec.access_modes.as_deref().map(gce_access_modes);
        let labels = pv.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty());
        // The beta label first: a PV provisioned before the GA one keeps it.
        let zones = label(BETA_ZONE_LABEL).or_else(|| label(ZONE_LABEL));
        (
            InTreePlugin::GcePd,
            gce_source(gce_pd_handle(zones, pd)?, pd),
        )
    } else if let Some(disk) = spec.azure_disk.as_ref() {
        translated.azure_disk = None;
        azure_disk_kind(disk.kind.as_deref())?;
        let mut attributes = BTreeMap::from([(KIND.to_owned(), MANAGED.to_owned())]);
        if let Some(caching) = &disk.caching_mode {
            attributes.insert("cachingmode".to_owned(), caching.clone());
        }
        if let Some(fs_type) = &disk.fs_type {
            attributes.insert("fstype".to_owned(), fs_type.clone());
        }
        let source = CSIPersistentVolumeSource {
            driver: InTreePlugin::AzureDisk.driver().to_owned(),
            volume_handle: disk.disk_uri.clone(),
            fs_type: text(&disk.fs_type),
            read_only: flag(disk.read_only),
            volume_attributes: Some(attributes),
            ..CSIPersistentVolumeSource::default()
        };
        (InTreePlugin::AzureDisk, source)
    } else if let Some(file) = spec.azure_file.as_ref() {
        translated.azure_file = None;
        // The secret's namespace: the source's, else the claim's (a PV is cluster-scoped).
        let namespace = match &file.secret_namespace {
            Some(namespace) => namespace.clone(),
            None => spec
                .claim_ref
                .as_ref()
                .and_then(|r| r.namespace.clone())
                .unwrap_or_default(),
        };
        if namespace.is_empty() {
            return Err(TranslationError::AzureFileNamespace(name));
        }
        let group = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(AZURE_FILE_RESOURCE_GROUP))
            .map_or("", String::as_str);
        let handle = azure_file_handle(
            group,
            &file.secret_name,
            &file.share_name,
            &name,
            &namespace,
        );
        let source = azure_file_source(handle, file.read_only, file, &namespace);
        (InTreePlugin::AzureFile, source)
    } else if let Some(cinder) = spec.cinder.as_ref() {
        translated.cinder = None;
        let source = cinder_source(&cinder.volume_id, cinder.read_only, &cinder.fs_type);
        (InTreePlugin::Cinder, source)
    } else if let Some(vsphere) = spec.vsphere_volume.as_ref() {
        translated.vsphere_volume = None;
        (InTreePlugin::VSphere, vsphere_source(vsphere))
    } else if let Some(portworx) = spec.portworx_volume.as_ref() {
        translated.portworx_volume = None;
        // The auth secret, when both annotations name it, goes to every secret reference.
        let annotations = pv.metadata.annotations.as_ref();
        let secret = annotations.and_then(|a| {
            Some(SecretReference {
                name: Some(a.get(PORTWORX_SECRET_NAME)?.clone()),
                namespace: Some(a.get(PORTWORX_SECRET_NAMESPACE)?.clone()),
            })
        });
        let source = CSIPersistentVolumeSource {
            controller_publish_secret_ref: secret.clone(),
            node_stage_secret_ref: secret.clone(),
            node_publish_secret_ref: secret.clone(),
            controller_expand_secret_ref: secret.clone(),
            node_expand_secret_ref: secret,
            ..portworx_source(portworx)
        };
        (InTreePlugin::Portworx, source)
    } else {
        return Ok(None);
    };
    Ok(Some(CsiSpec::new(Some(plugin), name, translated, csi)))
}

/// The in-tree volume `volume`, written inline in a pod of `pod_namespace`, as its CSI driver
/// sees it: `None` for any other volume (a claim, a CSI ephemeral volume, a config map...).
///
/// ```
/// use attach_detach_kube::translate_inline_volume;
/// use k8s_openapi::api::core::v1::{GCEPersistentDiskVolumeSource, Volume};
/// let volume = Volume {
///     name: "data".into(),
///     gce_persistent_disk: Some(GCEPersistentDiskVolumeSource { pd_name: "disk-1".into(), ..Default::default() }),
///     ..Default::default()
/// };
/// let csi = translate_inline_volume(&volume, "ns").unwrap().unwrap();
/// assert_eq!(csi.handle(), "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1");
/// assert_eq!(csi.spec().volume_mode.as_deref(), Some("Filesystem"));
/// ```
pub fn translate_inline_volume(
    volume: &Volume,
    pod_namespace: &str,
) -> Result<Option<CsiSpec>, TranslationError> {
    let single = || Some(vec!["ReadWriteOnce".to_owned()]);
    let (plugin, name, source, access_modes) = if let Some(ebs) = &volume.aws_elastic_block_store {
        let handle = ebs_volume_id(&ebs.volume_id)?;
        let name = format!("{}-{handle}", InTreePlugin::AwsEbs.driver());
        (
            InTreePlugin::AwsEbs,
            name,
            ebs_source(handle, ebs),
            single(),
        )
    } else if let Some(pd) = &volume.gce_persistent_disk {
        let handle = gce_pd_handle(None, pd)?;
        let name = format!("{}-{}", InTreePlugin::GcePd.driver(), pd.pd_name);
        // A read-only disk may be attached to many nodes at once.
        let mode = if pd.read_only == Some(true) {
            "ReadOnlyMany"
        } else {
            "ReadWriteOnce"
        };
        let source = gce_source(handle, pd);
        (
            InTreePlugin::GcePd,
            name,
            source,
            Some(vec![mode.to_owned()]),
        )
    } else if let Some(disk) = &volume.azure_disk {
        azure_disk_kind(disk.kind.as_deref())?;
        let mut attributes = BTreeMap::from([(KIND.to_owned(), MANAGED.to_owned())]);
        // Unlike a PersistentVolume's, an empty caching mode is left out.
        if let Some(caching) = disk.caching_mode.as_ref().filter(|c| !c.is_empty()) {
            attributes.insert("cachingmode".to_owned(), caching.clone());
        }
        if let Some(fs_type) = &disk.fs_type {
            attributes.insert("fstype".to_owned(), fs_type.clone());
        }
        let source = CSIPersistentVolumeSource {
            driver: InTreePlugin::AzureDisk.driver().to_owned(),
            volume_handle: disk.disk_uri.clone(),
            fs_type: text(&disk.fs_type),
            read_only: flag(disk.read_only),
            volume_attributes: Some(attributes),
            ..CSIPersistentVolumeSource::default()
        };
        let name = disk.disk_uri.clone();
        (InTreePlugin::AzureDisk, name, source, single())
    } else if let Some(file) = &volume.azure_file {
        let namespace = if pod_namespace.is_empty() {
            "default"
        } else {
            pod_namespace
        };
        let handle = azure_file_handle(
            "",
            &file.secret_name,
            &file.share_name,
            &volume.name,
            namespace,
        );
        let name = handle.clone();
        let source = CSIPersistentVolumeSource {
            driver: InTreePlugin::AzureFile.driver().to_owned(),
            volume_handle: handle,
            read_only: file.read_only.filter(|r| *r),
            volume_attributes: Some(BTreeMap::from([(
                "sharename".to_owned(),
                file.share_name.clone(),
            )])),
            node_stage_secret_ref: Some(SecretReference {
                name: Some(file.secret_name.clone()),
                namespace: Some(namespace.to_owned()),
            }),
            ..CSIPersistentVolumeSource::default()
        };
        let many = Some(vec!["ReadWriteMany".to_owned()]);
        (InTreePlugin::AzureFile, name, source, many)
    } else if let Some(cinder) = &volume.cinder {
        let source = cinder_source(&cinder.volume_id, cinder.read_only, &cinder.fs_type);
        let name = format!("{}-{}", InTreePlugin::Cinder.driver(), cinder.volume_id);
        (InTreePlugin::Cinder, name, source, single())
    } else if let Some(vsphere) = &volume.vsphere_volume {
        let name = format!("{}-{}", InTreePlugin::VSphere.driver(), vsphere.volume_path);
        (
            InTreePlugin::VSphere,
            name,
            vsphere_source(vsphere),
            single(),
        )
    } else if let Some(portworx) = &volume.portworx_volume {
        let name = format!("{}-{}", InTreePlugin::Portworx.driver(), portworx.volume_id);
        let mode = if portworx.read_only == Some(true) {
            "ReadOnlyMany"
        } else {
            "ReadWriteOnce"
        };
        let source = portworx_source(portworx);
        (
            InTreePlugin::Portworx,
            name,
            source,
            Some(vec![mode.to_owned()]),
        )
    } else {
        return Ok(None);
    };
    let spec = PersistentVolumeSpec {
        access_modes,
        // Inline volumes are filesystems; upstream's translation says so when the plugin's
        // does not.
        volume_mode: Some("Filesystem".to_owned()),
        ..PersistentVolumeSpec::default()
    };
    Ok(Some(CsiSpec::new(Some(plugin), name, spec, source)))
}

/// Which in-tree plugins' volumes kubelet hands to their CSI drivers, node by node: upstream's
/// `isCSIMigrationSupportedOnNode`.
///
/// A plugin whose migration is *complete* is translated on every node. Another one is
/// translated on a node only if the node's CSINode lists it in its
/// [`MIGRATED_PLUGINS_ANNOTATION`] and has the plugin's driver installed (`spec.drivers`); a
/// node without a CSINode (yet), or one whose annotation lists the plugin without its driver,
/// has no answer: upstream skips the volume there until it has one, and so do the informers.
///
/// The default is upstream's since Kubernetes 1.31: migration complete for every plugin but
/// Portworx, whose completion waits for kube-controller-manager's alpha gate
/// `InTreePluginPortworxUnregister` (give [`complete`](CsiMigration::complete) all seven
/// plugins when it is on).
///
/// ```
/// use attach_detach_kube::{CsiMigration, InTreePlugin};
/// let migration = CsiMigration::default();
/// assert!(migration.is_complete(InTreePlugin::AwsEbs));
/// assert!(!migration.is_complete(InTreePlugin::Portworx));
/// // No CSINode needed for a complete plugin; one is for Portworx.
/// assert_eq!(migration.on_node(InTreePlugin::AwsEbs, None), Ok(true));
/// assert!(migration.on_node(InTreePlugin::Portworx, None).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiMigration {
    complete: BTreeSet<InTreePlugin>,
}

impl Default for CsiMigration {
    fn default() -> Self {
        CsiMigration::complete(
            InTreePlugin::ALL
                .into_iter()
                .filter(|plugin| *plugin != InTreePlugin::Portworx),
        )
    }
}

/// What a node's CSINode says of CSI migration: the plugins its kubelet migrated
/// ([`MIGRATED_PLUGINS_ANNOTATION`]) and the CSI drivers installed there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigratedNode {
    /// The plugin names the annotation lists.
    pub plugins: BTreeSet<String>,
    /// The drivers `spec.drivers` names.
    pub drivers: BTreeSet<String>,
}

impl MigratedNode {
    /// Reads a CSINode.
    pub fn of(csi_node: &CSINode) -> Self {
        let annotation = csi_node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION));
        MigratedNode {
            // Upstream splits on commas and compares the pieces as they are.
            plugins: annotation
                .map(|list| list.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            drivers: csi_node
                .spec
                .drivers
                .iter()
                .map(|d| d.name.clone())
                .collect(),
        }
    }
}

/// Why a node cannot say whether it migrated a plugin: its volumes wait there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeMigrationError {
    /// The node has no CSINode object (kubelet creates it when it starts).
    #[error("no CSINode object for the node, to tell whether its kubelet migrated {plugin}")]
    NoCsiNode {
        /// The plugin's name.
        plugin: &'static str,
    },
    /// The node's kubelet migrated the plugin, but its driver is not installed there (yet).
    #[error("in-tree plugin {plugin} is migrated on the node but driver {driver} is not installed")]
    DriverMissing {
        /// The plugin's name.
        plugin: &'static str,
        /// The driver's name.
        driver: &'static str,
    },
}

impl CsiMigration {
    /// Migration complete for `plugins` (and only those).
    pub fn complete(plugins: impl IntoIterator<Item = InTreePlugin>) -> Self {
        CsiMigration {
            complete: plugins.into_iter().collect(),
        }
    }

    /// Whether `plugin`'s migration is complete: its volumes are translated on every node.
    pub fn is_complete(&self, plugin: InTreePlugin) -> bool {
        self.complete.contains(&plugin)
    }

    /// Whether the kubelet of a node whose CSINode says `node` (`None`: it has none) hands
    /// `plugin`'s volumes to the plugin's CSI driver; an error when it cannot be told.
    pub fn on_node(
        &self,
        plugin: InTreePlugin,
        node: Option<&MigratedNode>,
    ) -> Result<bool, NodeMigrationError> {
        if self.is_complete(plugin) {
            return Ok(true);
        }
        let Some(node) = node else {
            return Err(NodeMigrationError::NoCsiNode {
                plugin: plugin.name(),
            });
        };
        if !node.plugins.contains(plugin.name()) {
            return Ok(false);
        }
        if !node.drivers.contains(plugin.driver()) {
            return Err(NodeMigrationError::DriverMissing {
                plugin: plugin.name(),
                driver: plugin.driver(),
            });
        }
        Ok(true)
    }
}

const BETA_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// How a PV label lists several zones.
const ZONE_SEPARATOR: &str = "__";
const UNSPECIFIED: &str = "UNSPECIFIED";
const KIND: &str = "kind";
const MANAGED: &str = "Managed";
const AZURE_FILE_RESOURCE_GROUP: &str = "kubernetes.io/azure-file-resource-group";
const PORTWORX_SECRET_NAME: &str = "openstorage.io/auth-secret-name";
const PORTWORX_SECRET_NAMESPACE: &str = "openstorage.io/auth-secret-namespace";

/// Go's `omitempty`: an empty string is absent.
fn text(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

/// Go's `omitempty`: `false` is absent.
fn flag(value: Option<bool>) -> Option<bool> {
    value.filter(|v| *v)
}

/// The EBS volume ID of an `awsElasticBlockStore` volume ID: `vol-...` as it is, or the path
/// of `aws://{zone}/vol-...` and `aws:///vol-...`.
fn ebs_volume_id(id: &str) -> Result<String, TranslationError> {
    let Some(rest) = id.strip_prefix("aws://") else {
        // A bare ID, taken as it is.
        return Ok(id.to_owned());
    };
    let invalid = || TranslationError::EbsVolumeId(id.to_owned());
    // The URL's path: after the host, before any query or fragment.
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let path = rest.find('/').map_or("", |at| &rest[at..]);
    let volume = path.trim_matches('/');
    if volume.starts_with("vol-") && !volume.contains('/') {
        Ok(volume.to_owned())
    } else {
        Err(invalid())
    }
}

fn ebs_source(
    handle: String,
    ebs: &k8s_openapi::api::core::v1::AWSElasticBlockStoreVolumeSource,
) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: InTreePlugin::AwsEbs.driver().to_owned(),
        volume_handle: handle,
        read_only: flag(ebs.read_only),
        fs_type: text(&ebs.fs_type),
        volume_attributes: Some(BTreeMap::from([(
            "partition".to_owned(),
            ebs.partition.unwrap_or(0).to_string(),
        )])),
        ..CSIPersistentVolumeSource::default()
    }
}

/// A GCE PD's handle: zonal in the one zone `zones` names, regional when it names several
/// (zones of one region), zone unspecified when it names none.
fn gce_pd_handle(
    zones: Option<&String>,
    pd: &k8s_openapi::api::core::v1::GCEPersistentDiskVolumeSource,
) -> Result<String, TranslationError> {
    let zones: Vec<&str> = zones.map_or(vec![""], |z| z.split(ZONE_SEPARATOR).collect());
    let disk = &pd.pd_name;
    match zones.as_slice() {
        [zone] if !zone.is_empty() => {
            Ok(format!("projects/{UNSPECIFIED}/zones/{zone}/disks/{disk}"))
        }
        [_, _, ..] => {
            let region = gce_region(&zones)
                .ok_or_else(|| TranslationError::GceZones(zones.join(ZONE_SEPARATOR)))?;
            Ok(format!(
                "projects/{UNSPECIFIED}/regions/{region}/disks/{disk}"
            ))
        }
        _ => Ok(format!(
            "projects/{UNSPECIFIED}/zones/{UNSPECIFIED}/disks/{disk}"
        )),
    }
}

/// The one region of GCE zones `{locale}-{region}-{zone}`, or `None`.
fn gce_region(zones: &[&str]) -> Option<String> {
    let mut regions = BTreeSet::new();
    for zone in zones {
        let parts: Vec<&str> = zone.split('-').collect();
        let [locale, region, _] = parts.as_slice() else {
            return None;
        };
        regions.insert(format!("{locale}-{region}"));
    }
    let mut regions = regions.into_iter();
    match (regions.next(), regions.next()) {
        (Some(region), None) => Some(region),
        _ => None,
    }
}

/// The access modes of a translated GCE PD: the in-tree plugin accepted `ReadWriteMany` and
/// `ReadWriteOnce` with `ReadOnlyMany` but attached such disks read-write to one node, which
/// is what the CSI driver is told.
fn gce_access_modes(modes: &[String]) -> Vec<String> {
    let has = |mode: &str| modes.iter().any(|m| m == mode);
    let read_only = has("ReadOnlyMany");
    let read_write = has("ReadWriteOnce") || has("ReadWriteMany");
    let mode = if read_only && !read_write {
        "ReadOnlyMany"
    } else {
        "ReadWriteOnce"
    };
    vec![mode.to_owned()]
}

fn gce_source(
    handle: String,
    pd: &k8s_openapi::api::core::v1::GCEPersistentDiskVolumeSource,
) -> CSIPersistentVolumeSource {
    let partition = pd
        .partition
        .filter(|p| *p != 0)
        .map(|p| p.to_string())
        .unwrap_or_default();
    CSIPersistentVolumeSource {
        driver: InTreePlugin::GcePd.driver().to_owned(),
        volume_handle: handle,
        read_only: flag(pd.read_only),
        fs_type: text(&pd.fs_type),
        volume_attributes: Some(BTreeMap::from([("partition".to_owned(), partition)])),
        ..CSIPersistentVolumeSource::default()
    }
}

fn azure_disk_kind(kind: Option<&str>) -> Result<(), TranslationError> {
    match kind {
        Some(kind) if !kind.eq_ignore_ascii_case(MANAGED) => {
            Err(TranslationError::AzureDiskKind(kind.to_owned()))
        }
        _ => Ok(()),
    }
}

/// An Azure file share's handle: `{resource group}#{account}#{share}#{volume}#{namespace}`,
/// the account read from a secret named `azure-storage-account-{account}-secret` (else the
/// secret's name itself).
fn azure_file_handle(
    group: &str,
    secret: &str,
    share: &str,
    volume: &str,
    namespace: &str,
) -> String {
    let account = azure_storage_account(secret).unwrap_or(secret);
    format!("{group}#{account}#{share}#{volume}#{namespace}")
}

/// The account of `azure-storage-account-{account}-secret`, found anywhere in `secret`, as
/// upstream's unanchored, greedy pattern finds it: from the first `azure-storage-account-`
/// to the last `-secret` after at least one character.
fn azure_storage_account(secret: &str) -> Option<&str> {
    const PREFIX: &str = "azure-storage-account-";
    const SUFFIX: &str = "-secret";
    let start = secret.find(PREFIX)? + PREFIX.len();
    let rest = &secret[start..];
    let end = rest.get(1..)?.rfind(SUFFIX)? + 1;
    Some(&rest[..end])
}

fn azure_file_source(
    handle: String,
    read_only: Option<bool>,
    file: &k8s_openapi::api::core::v1::AzureFilePersistentVolumeSource,
    namespace: &str,
) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: InTreePlugin::AzureFile.driver().to_owned(),
        volume_handle: handle,
        read_only: flag(read_only),
        volume_attributes: Some(BTreeMap::from([(
            "sharename".to_owned(),
            file.share_name.clone(),
        )])),
        node_stage_secret_ref: Some(SecretReference {
            name: Some(file.secret_name.clone()),
            namespace: Some(namespace.to_owned()),
        }),
        ..CSIPersistentVolumeSource::default()
    }
}

fn cinder_source(
    volume_id: &str,
    read_only: Option<bool>,
    fs_type: &Option<String>,
) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: InTreePlugin::Cinder.driver().to_owned(),
        volume_handle: volume_id.to_owned(),
        read_only: flag(read_only),
        fs_type: text(fs_type),
        ..CSIPersistentVolumeSource::default()
    }
}

fn vsphere_source(
    vsphere: &k8s_openapi::api::core::v1::VsphereVirtualDiskVolumeSource,
) -> CSIPersistentVolumeSource {
    // Upstream's inline translation reads the storage policy from the PV it builds (which has
    // none, and would crash on one); the volume's own is the one meant.
    let attributes: BTreeMap<String, String> = text(&vsphere.storage_policy_name)
        .map(|policy| ("storagepolicyname".to_owned(), policy))
        .into_iter()
        .collect();
    CSIPersistentVolumeSource {
        driver: InTreePlugin::VSphere.driver().to_owned(),
        volume_handle: vsphere.volume_path.clone(),
        fs_type: text(&vsphere.fs_type),
        volume_attributes: (!attributes.is_empty()).then_some(attributes),
        ..CSIPersistentVolumeSource::default()
    }
}

fn portworx_source(
    portworx: &k8s_openapi::api::core::v1::PortworxVolumeSource,
) -> CSIPersistentVolumeSource {
    // Upstream carries neither the read-only flag nor any attribute over.
    CSIPersistentVolumeSource {
        driver: InTreePlugin::Portworx.driver().to_owned(),
        volume_handle: portworx.volume_id.clone(),
        fs_type: text(&portworx.fs_type),
        ..CSIPersistentVolumeSource::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ebs_volume_ids_as_upstream_reads_them() {
        // csi-translation-lib plugins/aws_ebs_test.go, TestKubernetesVolumeIDToEBSVolumeID.
        let id = "vol-02399794d890f9375";
        assert_eq!(ebs_volume_id(id).unwrap(), id);
        assert_eq!(ebs_volume_id("aws:///vol-02399794d890f9375").unwrap(), id);
        assert_eq!(
            ebs_volume_id("aws://us-west-2a/vol-02399794d890f9375").unwrap(),
            id
        );
        assert!(ebs_volume_id("aws://us-west-2a/02399794d890f9375").is_err());
        // And the corners of the URL form: no path, a nested path.
        assert!(ebs_volume_id("aws://us-west-2a").is_err());
        assert!(ebs_volume_id("aws://us-west-2a/a/vol-1").is_err());
    }

    #[test]
    fn gce_regions_from_zones() {
        // csi-translation-lib plugins/gce_pd.go's gceGetRegionFromZones.
        assert_eq!(
            gce_region(&["us-central1-a", "us-central1-c"]).as_deref(),
            Some("us-central1")
        );
        assert_eq!(gce_region(&["us-central1-a", "europe-west1-b"]), None);
        assert_eq!(gce_region(&["us-central1"]), None);
    }

    #[test]
    fn gce_access_modes_as_upstream_makes_them_compatible() {
        // csi-translation-lib plugins/gce_pd_test.go, TestBackwardCompatibleAccessModes.
        for (modes, expected) in [
            (&["ReadOnlyMany"][..], "ReadOnlyMany"),
            (&["ReadWriteOnce"][..], "ReadWriteOnce"),
            (&["ReadWriteMany"][..], "ReadWriteOnce"),
            (&["ReadOnlyMany", "ReadWriteOnce"][..], "ReadWriteOnce"),
            (&["ReadWriteOnce", "ReadWriteMany"][..], "ReadWriteOnce"),
            (&["ReadWriteMany", "ReadOnlyMany"][..], "ReadWriteOnce"),
            (
                &["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"][..],
                "ReadWriteOnce",
            ),
            // Anything else (ReadWriteOncePod, none at all) is read-write, one node.
            (&[][..], "ReadWriteOnce"),
        ] {
            let modes: Vec<String> = modes.iter().map(|m| (*m).to_owned()).collect();
            assert_eq!(gce_access_modes(&modes), [expected], "{modes:?}");
        }
    }

    #[test]
    fn storage_accounts_from_secret_names() {
        // csi-translation-lib plugins/azure_file_test.go, TestGetStorageAccount.
        assert_eq!(
            azure_storage_account("azure-storage-account-accountname-secret"),
            Some("accountname")
        );
        assert_eq!(
            azure_storage_account("azure-storage-account-accountname-dup-secret"),
            Some("accountname-dup")
        );
        assert_eq!(azure_storage_account("invalid"), None);
        // The pattern is unanchored and greedy.
        assert_eq!(
            azure_storage_account("x-azure-storage-account-a-secret-secret"),
            Some("a-secret")
        );
        assert_eq!(azure_storage_account("azure-storage-account--secret"), None);
    }
}
