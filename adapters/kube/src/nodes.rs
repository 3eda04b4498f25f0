//! Which nodes this controller manages: those whose kubelet leaves attach and detach to the
//! attach/detach controller, as it says with an annotation on its Node.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::ObjectMeta;

/// The annotation kubelet puts on its Node when it leaves attach and detach to the controller
/// (`--enable-controller-attach-detach`, its default), and removes when it attaches and
/// detaches by itself. Upstream's controller manages a node only once it carries it (any
/// value); so does this one.
pub const CONTROLLER_MANAGED_ANNOTATION: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// Whether a Node's metadata carries [`CONTROLLER_MANAGED_ANNOTATION`].
///
/// ```
/// use attach_detach_kube::{CONTROLLER_MANAGED_ANNOTATION, controller_managed};
/// use kube::api::ObjectMeta;
/// let mut meta = ObjectMeta::default();
/// assert!(!controller_managed(&meta));
/// meta.annotations = Some([(CONTROLLER_MANAGED_ANNOTATION.to_owned(), "true".to_owned())].into());
/// assert!(controller_managed(&meta));
/// ```
pub fn controller_managed(metadata: &ObjectMeta) -> bool {
    metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(CONTROLLER_MANAGED_ANNOTATION))
}

/// The nodes the informers have seen, and whether this controller manages each: a node whose
/// kubelet attaches and detaches by itself is kubelet's, and the
/// [`VolumeAttachmentBackend`](crate::VolumeAttachmentBackend)'s listing must not hand the
/// core the VolumeAttachments such a kubelet made (the core would adopt them, and detach what
/// no pod it knows needs).
///
/// The [`InformerState`](crate::InformerState) keeps it (see its rules for nodes); hand a
/// clone to the backend with
/// [`with_managed_nodes`](crate::VolumeAttachmentBackend::with_managed_nodes). A clone shares
/// the registry.
///
/// ```
/// use attach_detach_kube::ManagedNodes;
/// let nodes = ManagedNodes::new();
/// nodes.set("node-a", true);
/// nodes.set("node-b", false);
/// assert_eq!(nodes.get("node-a"), Some(true));
/// assert_eq!(nodes.get("node-b"), Some(false));
/// assert_eq!(nodes.get("node-c"), None); // not seen (yet, or any more)
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManagedNodes {
    inner: Arc<RwLock<HashMap<String, bool>>>,
}

impl ManagedNodes {
    /// An empty registry: every node unknown.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records whether this controller manages `node`.
    pub fn set(&self, node: &str, managed: bool) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        inner.insert(node.to_owned(), managed);
    }

    /// Forgets `node` (deleted).
    pub fn remove(&self, node: &str) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        inner.remove(node);
    }

    /// Whether this controller manages `node`: `Some(false)` for a node whose kubelet attaches
    /// by itself, `None` for a node not seen.
    pub fn get(&self, node: &str) -> Option<bool> {
        // A panic while holding the lock cannot leave the map half-written: every write is
        // one insert or remove.
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.get(node).copied()
    }
}
