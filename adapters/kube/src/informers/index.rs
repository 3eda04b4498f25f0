//! The view the event recorder reads ([`ObjectIndex`]): which PersistentVolume a unique volume
//! name stands for, which pods use a volume on a node, the uids of pods and nodes.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, RwLock};

// Only the index's docs name it.
#[cfg(doc)]
use super::InformerState;

/// A pod as events name it: enough for an `ObjectReference` that `kubectl describe` matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (empty if the object had none).
    pub uid: String,
}

/// What the informers know that the event recorder needs and the core does not carry: which
/// PersistentVolume a unique volume name stands for, which pods use a volume on a node, the
/// uids of pods and nodes.
///
/// A cheap cloneable view onto state an [`InformerState`] keeps up to date as it emits inputs;
/// reads take a short lock and never wait for the API server.
#[derive(Clone, Debug, Default)]
pub struct ObjectIndex {
    inner: Arc<RwLock<IndexInner>>,
}

#[derive(Debug, Default)]
pub(super) struct IndexInner {
    /// Unique volume name → the PVs that have it (normally one).
    pub(super) pvs: HashMap<String, BTreeSet<String>>,
    /// Unique volume name of an inline volume → the name upstream's translation gives it.
    pub(super) inline: HashMap<String, String>,
    /// (node, unique volume) → pods placed there that need it.
    pub(super) users: HashMap<(String, String), BTreeSet<String>>,
    /// Pod key → its reference.
    pub(super) pods: HashMap<String, PodRef>,
    /// Node name → uid.
    pub(super) nodes: HashMap<String, String>,
}

impl ObjectIndex {
    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, IndexInner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, IndexInner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The PersistentVolume a unique volume name stands for (the first by name if several PVs
    /// share a driver and handle), as upstream's event messages name volumes; for an inline
    /// in-tree volume, the name upstream's translation gives it (`ebs.csi.aws.com-vol-1`...).
    pub fn pv_name(&self, volume: &str) -> Option<String> {
        let inner = self.read();
        match inner.pvs.get(volume).and_then(|pvs| pvs.first()) {
            Some(pv) => Some(pv.clone()),
            None => inner.inline.get(volume).cloned(),
        }
    }

    /// The pods placed on `node` that need `volume` there, by key.
    pub fn pods_using(&self, volume: &str, node: &str) -> Vec<PodRef> {
        let inner = self.read();
        let Some(keys) = inner.users.get(&(node.to_owned(), volume.to_owned())) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|key| inner.pods.get(key).cloned())
            .collect()
    }

    /// The reference of the pod `namespace/name`, if it is placed (or was, until removed).
    pub fn pod(&self, key: &str) -> Option<PodRef> {
        self.read().pods.get(key).cloned()
    }

    /// The uid of a node the informers know.
    pub fn node_uid(&self, node: &str) -> Option<String> {
        self.read().nodes.get(node).cloned()
    }
}

/// Takes `member` out of the set at `key`, dropping the set once empty.
pub(super) fn unlink(sets: &mut HashMap<String, BTreeSet<String>>, key: &str, member: &str) {
    if let Some(set) = sets.get_mut(key) {
        set.remove(member);
        if set.is_empty() {
            sets.remove(key);
        }
    }
}

pub(super) fn unlink_user(index: &mut IndexInner, node: &str, volume: &str, pod: &str) {
    let at = (node.to_owned(), volume.to_owned());
    if let Some(pods) = index.users.get_mut(&at) {
        pods.remove(pod);
        if pods.is_empty() {
            index.users.remove(&at);
        }
    }
}
