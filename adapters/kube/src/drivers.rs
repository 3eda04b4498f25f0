//! Which CSI drivers need a VolumeAttachment: the `attachRequired` of their CSIDriver objects.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::storage::v1::CSIDriver;

/// What the cluster's CSIDriver objects say about attaching: for each driver, whether its
/// volumes must be attached (`spec.attachRequired`) before a node may use them.
///
/// The [`VolumeAttachmentBackend`](crate::VolumeAttachmentBackend) asks it before every call,
/// because a driver without a controller-side attach (NFS, most node-local drivers) has no
/// external-attacher: a VolumeAttachment created for it would never be answered. Feed it from
/// an informer (or a watcher) of `storage.k8s.io/v1` CSIDriver objects with
/// [`apply`](CsiDrivers::apply) and [`remove`](CsiDrivers::remove), and let it sync before the
/// controller starts: until then every driver counts as needing attach, so the first attaches
/// of an attach-free driver would wait for an attacher that never comes (and time out as
/// uncertain) rather than be skipped.
///
/// A clone shares the registry (an `Arc` inside), so the informer and the backend can each
/// hold one.
///
/// ```
/// use attach_detach_kube::CsiDrivers;
/// use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
/// use kube::api::ObjectMeta;
///
/// let drivers = CsiDrivers::new();
/// let nfs = CSIDriver {
///     metadata: ObjectMeta { name: Some("nfs.csi.k8s.io".into()), ..Default::default() },
///     spec: CSIDriverSpec { attach_required: Some(false), ..Default::default() },
/// };
/// drivers.apply(&nfs);
/// assert!(!drivers.attach_required("nfs.csi.k8s.io"));
/// // A driver without a CSIDriver object needs attach, as upstream assumes.
/// assert!(drivers.attach_required("ebs.csi.aws.com"));
/// drivers.remove("nfs.csi.k8s.io");
/// assert!(drivers.attach_required("nfs.csi.k8s.io"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CsiDrivers {
    inner: Arc<RwLock<BTreeMap<String, bool>>>,
}

impl CsiDrivers {
    /// An empty registry: every driver needs attach until its CSIDriver object says otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in a CSIDriver object, added or changed: its `metadata.name` is the driver, its
    /// `spec.attachRequired` (absent means `true`, as the API defaults it) whether the driver
    /// needs attach. An object without a name is ignored.
    pub fn apply(&self, driver: &CSIDriver) {
        let Some(name) = driver.metadata.name.as_deref() else {
            return;
        };
        self.set(name, driver.spec.attach_required.unwrap_or(true));
    }

    /// Records by hand whether `driver` needs attach, for callers without CSIDriver objects
    /// (tests, a cluster whose drivers are known in advance).
    pub fn set(&self, driver: &str, attach_required: bool) {
        self.write().insert(driver.to_owned(), attach_required);
    }

    /// Forgets the CSIDriver object of `driver` (deleted): the driver needs attach again.
    pub fn remove(&self, driver: &str) {
        self.write().remove(driver);
    }

    /// Whether volumes of `driver` need a VolumeAttachment. `true` for a driver without a
    /// CSIDriver object, as upstream's CSI plugin treats a missing one (older drivers did not
    /// ship one and all needed attach).
    pub fn attach_required(&self, driver: &str) -> bool {
        self.read().get(driver).copied().unwrap_or(true)
    }

    /// The drivers that have a CSIDriver object, with whether each needs attach, by name.
    pub fn known(&self) -> Vec<(String, bool)> {
        self.read().iter().map(|(d, r)| (d.clone(), *r)).collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, bool>> {
        // A panic while holding the lock cannot leave the map half-written: every write is
        // one insert or remove.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, bool>> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::storage::v1::CSIDriverSpec;
    use kube::api::ObjectMeta;

    fn driver(name: Option<&str>, attach_required: Option<bool>) -> CSIDriver {
        CSIDriver {
            metadata: ObjectMeta {
                name: name.map(str::to_owned),
                ..Default::default()
            },
            spec: CSIDriverSpec {
                attach_required,
                ..Default::default()
            },
        }
    }

    #[test]
    fn attach_required_defaults_to_true() {
        let drivers = CsiDrivers::new();
        let shared = drivers.clone();
        drivers.apply(&driver(Some("a"), None));
        drivers.apply(&driver(Some("b"), Some(false)));
        drivers.apply(&driver(None, Some(false)));
        assert!(shared.attach_required("a"));
        assert!(!shared.attach_required("b"));
        assert!(shared.attach_required("unknown"));
        assert_eq!(
            shared.known(),
            [("a".to_owned(), true), ("b".to_owned(), false)]
        );
        // Changed, then deleted.
        drivers.apply(&driver(Some("a"), Some(false)));
        assert!(!shared.attach_required("a"));
        drivers.remove("a");
        assert!(shared.attach_required("a"));
    }
}
