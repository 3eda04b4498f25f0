//! What the core must know about a volume: who may attach it at once, and the backend's payload.

/// How many nodes may have a volume attached at the same time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// ReadWriteOnce block storage: attached to one node at a time, never two.
    SingleNode,
    /// ReadWriteMany / ReadOnlyMany: any number of nodes at once.
    MultiNode,
}

/// A volume's facts: its access mode and the payload the backend needs for it.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeSpec<P> {
    /// Single- or multi-node.
    pub access: Access,
    /// Handed to the backend untouched on attach, detach and verify.
    pub payload: P,
}

impl<P> VolumeSpec<P> {
    /// A single-node (RWO) volume.
    pub fn single_node(payload: P) -> Self {
        VolumeSpec {
            access: Access::SingleNode,
            payload,
        }
    }

    /// A multi-node (RWX/ROX) volume.
    pub fn multi_node(payload: P) -> Self {
        VolumeSpec {
            access: Access::MultiNode,
            payload,
        }
    }
}
