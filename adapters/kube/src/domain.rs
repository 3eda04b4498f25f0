//! The Kubernetes vocabulary: nodes by name, volumes by their unique CSI name, pods by
//! `namespace/name`, and the CSI facts a VolumeAttachment needs.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use attach_detach::Ids;
use attach_detach::core::DriverId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The [`Domain`](attach_detach::Domain) of this adapter:
/// - a node is its `metadata.name`;
/// - a volume is its unique name as kubelet and the Node status spell it,
///   `kubernetes.io/csi/{driver}^{volumeHandle}` (see [`unique_name`]);
/// - a workload is a pod, `namespace/name`;
/// - the payload is the [`CsiVolume`] behind the unique name.
pub type Kube = Ids<String, String, String, CsiVolume>;

/// What a VolumeAttachment needs to know of a CSI volume: its driver and handle, and where
/// the driver's external-attacher reads the rest from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CsiVolume {
    /// The attachment's `spec.source`.
    pub source: AttachSource,
    /// The CSI driver (`spec.csi.driver` of the PV, translated for an in-tree volume; the
    /// attachment's `spec.attacher`).
    pub driver: String,
    /// The volume handle (`spec.csi.volumeHandle` of the PV, translated for an in-tree
    /// volume).
    pub handle: String,
}

/// Where a VolumeAttachment's `spec.source` points the external-attacher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AttachSource {
    /// `persistentVolumeName`: a PersistentVolume, CSI or in-tree (whose driver's attacher
    /// translates it again, as upstream's does).
    PersistentVolume(String),
    /// `inlineVolumeSpec`: an in-tree volume written inline in a pod, translated to a CSI
    /// PersistentVolume's spec (see [`translate_inline_volume`](crate::translate_inline_volume)).
    Inline(Box<k8s_openapi::api::core::v1::PersistentVolumeSpec>),
}

impl CsiVolume {
    /// The volume of PersistentVolume `pv`, of `driver` with `handle`.
    ///
    /// ```
    /// use attach_detach_kube::CsiVolume;
    /// let volume = CsiVolume::persistent("pv-1", "ebs.csi.aws.com", "vol-1");
    /// assert_eq!(volume.pv(), Some("pv-1"));
    /// assert_eq!(volume.unique_name(), "kubernetes.io/csi/ebs.csi.aws.com^vol-1");
    /// ```
    pub fn persistent(
        pv: impl Into<String>,
        driver: impl Into<String>,
        handle: impl Into<String>,
    ) -> Self {
        CsiVolume {
            source: AttachSource::PersistentVolume(pv.into()),
            driver: driver.into(),
            handle: handle.into(),
        }
    }

    /// The PersistentVolume's name; `None` for an inline volume.
    pub fn pv(&self) -> Option<&str> {
        match &self.source {
            AttachSource::PersistentVolume(pv) => Some(pv),
            AttachSource::Inline(_) => None,
        }
    }

    /// The unique volume name of this volume: what [`Kube`]'s volumes are called.
    pub fn unique_name(&self) -> String {
        unique_name(&self.driver, &self.handle)
    }
}

/// Kubelet's and the Node status's name of a CSI volume: `kubernetes.io/csi/{driver}^{handle}`
/// (upstream's `csiPlugin.GetVolumeName`, prefixed with the plugin name).
///
/// ```
/// use attach_detach_kube::unique_name;
/// assert_eq!(unique_name("ebs.csi.aws.com", "vol-0abc"), "kubernetes.io/csi/ebs.csi.aws.com^vol-0abc");
/// ```
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// The driver and handle of a unique CSI volume name, or `None` for another plugin's volume.
///
/// ```
/// use attach_detach_kube::split_unique_name;
/// assert_eq!(split_unique_name("kubernetes.io/csi/d^h^x"), Some(("d", "h^x")));
/// assert_eq!(split_unique_name("kubernetes.io/aws-ebs/vol-1"), None);
/// ```
pub fn split_unique_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix("kubernetes.io/csi/")?.split_once('^')
}

/// The name of the VolumeAttachment of `handle` of `driver` on `node`, as upstream's CSI
/// attacher computes it: `csi-` and the hex SHA-256 of handle, driver and node concatenated.
///
/// ```
/// use attach_detach_kube::attachment_name;
/// let name = attachment_name("vol-1", "ebs.csi.aws.com", "node-a");
/// assert!(name.starts_with("csi-") && name.len() == 4 + 64);
/// ```
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = Sha256::digest(format!("{handle}{driver}{node}").as_bytes());
    let mut name = String::with_capacity(4 + 64);
    name.push_str("csi-");
    for byte in digest {
        name.push_str(&format!("{byte:02x}"));
    }
    name
}

/// The core's number for the CSI driver `name`, the same for every caller in this process: a
/// volume's [`VolumeSpec::driver`](attach_detach::core::VolumeSpec::driver) and a node's
/// [`NodeFacts::driver_limits`](attach_detach::core::NodeFacts::driver_limits) (from its
/// CSINode) meet on it. Numbers are handed out from 1 in the order names are first seen; past
/// 255 distinct drivers (a cluster has a handful) every further name shares the last number:
/// their limits then count together, holding back more than needed, never less.
pub fn driver_id(name: &str) -> DriverId {
    static IDS: OnceLock<Mutex<HashMap<String, DriverId>>> = OnceLock::new();
    let mut ids = IDS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(id) = ids.get(name) {
        return *id;
    }
    let next = u8::try_from(ids.len() + 1).unwrap_or(u8::MAX);
    let id = DriverId::new(next).unwrap_or(DriverId::MAX);
    ids.insert(name.to_owned(), id);
    id
}

/// The taint that says a node is fenced: "out of service", put by an operator or a fencing
/// agent once the machine is known powered off or isolated (Kubernetes' non-graceful node
/// shutdown). Any effect counts, as upstream's reconciler checks it.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// A node's facts from its parts, the one rule the status store's reads and the Node
/// informer share: healthy when its `Ready` condition is `"True"`; fenced when it carries
/// [`OUT_OF_SERVICE_TAINT`]; its in-use list is `volumesInUse`, unknown (`None`) while it has
/// no `Ready` condition at all (its kubelet never reported).
pub(crate) fn facts_of<'a>(
    mut conditions: impl Iterator<Item = (&'a str, &'a str)>,
    mut taints: impl Iterator<Item = &'a str>,
    in_use: Option<&[String]>,
) -> attach_detach::core::NodeFacts<String> {
    let ready = conditions
        .find(|(kind, _)| *kind == "Ready")
        .map(|(_, status)| status);
    attach_detach::core::NodeFacts {
        healthy: ready == Some("True"),
        fenced: taints.any(|key| key == OUT_OF_SERVICE_TAINT),
        in_use: ready.map(|_| in_use.map(<[String]>::to_vec).unwrap_or_default()),
        attach_limit: None,
        driver_limits: Vec::new(),
    }
}

/// The `namespace/name` a pod is known by.
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attachment_name_is_upstreams() {
        // sha256("vol-1" + "ebs.csi.aws.com" + "node-a"), computed independently with
        // `printf %s vol-1ebs.csi.aws.comnode-a | sha256sum`.
        assert_eq!(
            attachment_name("vol-1", "ebs.csi.aws.com", "node-a"),
            "csi-7ba6b8ed285c3c863d675c3b4567d68ede4307ae1a37202e02bf2c4b9f42f28b"
        );
    }
}
