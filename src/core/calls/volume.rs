//! What the core must know about a volume: who may attach it at once, and the backend's payload.

use std::num::NonZeroU8;

/// How many nodes may have a volume attached at the same time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// ReadWriteOnce block storage: attached to one node at a time, never two.
    SingleNode,
    /// ReadWriteMany / ReadOnlyMany: any number of nodes at once.
    MultiNode,
}

/// The driver (Kubernetes: the CSI driver, a migrated in-tree volume's included) whose
/// per-node limit a volume counts against ([`NodeFacts::driver_limits`](crate::core::NodeFacts::driver_limits)):
/// a number from 1 to 255 the embedder hands out, one per driver name (a cluster has a handful
/// of drivers). One byte, and `Option<DriverId>` too: a volume's spec sits in what was padding
/// of its desired-state entry, which a million volumes would otherwise pay 8 bytes each for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DriverId(NonZeroU8);

impl DriverId {
    /// Driver number `n`; `None` for 0.
    pub const fn new(n: u8) -> Option<Self> {
        match NonZeroU8::new(n) {
            Some(n) => Some(DriverId(n)),
            None => None,
        }
    }

    /// The last number.
    pub const MAX: DriverId = DriverId(NonZeroU8::MAX);

    /// The number.
    pub const fn get(self) -> u8 {
        self.0.get()
    }
}

/// A volume's facts: its access mode, the payload the backend needs for it, and whether it
/// needs the backend at all.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeSpec<P> {
    /// Single- or multi-node.
    pub access: Access,
    /// Handed to the backend untouched on attach, detach and verify.
    pub payload: P,
    /// Whether a node may use the volume only after the backend attached it there (block
    /// storage: true, the default). False for volumes a node reaches by itself, with no
    /// attach call: a CSI driver with `attachRequired: false` (NFS, many file and local
    /// drivers), a local volume. Such a volume is *claimed* instead: the core makes no backend
    /// call for it, but grants it to one node at a time all the same (for a single-node
    /// volume), through the same protocol as an attach and a detach: a node lists it in its
    /// status only once it holds the claim, and the claim moves only after the old node's
    /// agent stopped using it (or the node is fenced) and a fresh read of the node confirmed
    /// it. Upstream enforces neither for such volumes in its controller (kubernetes 111799,
    /// 103305). It does not count against a node's attach limit. Its grant and release raise
    /// [`Event::ClaimGranted`](crate::core::Event::ClaimGranted) and
    /// [`Event::ClaimReleased`](crate::core::Event::ClaimReleased), never an attach or detach
    /// event: nothing was attached.
    pub attach_required: bool,
    /// The driver whose per-node limit the volume counts against, if any: an attach that
    /// would take a node past [`NodeFacts::driver_limits`](crate::core::NodeFacts::driver_limits)
    /// for this driver waits, as for the node's own limit. `None` counts against the node's
    /// limit only.
    pub driver: Option<DriverId>,
}

impl<P> VolumeSpec<P> {
    /// A single-node (RWO) volume.
    pub fn single_node(payload: P) -> Self {
        VolumeSpec {
            access: Access::SingleNode,
            payload,
            attach_required: true,
            driver: None,
        }
    }

    /// A multi-node (RWX/ROX) volume.
    pub fn multi_node(payload: P) -> Self {
        VolumeSpec {
            access: Access::MultiNode,
            payload,
            attach_required: true,
            driver: None,
        }
    }

    /// The same volume, claimed rather than attached: no backend call is made for it (see
    /// [`attach_required`](Self::attach_required)).
    ///
    /// ```
    /// use attach_detach::core::VolumeSpec;
    /// // An NFS share, one node at a time.
    /// let share = VolumeSpec::single_node("nfs://filer/export/a").without_attach();
    /// assert!(!share.attach_required);
    /// ```
    #[must_use]
    pub fn without_attach(mut self) -> Self {
        self.attach_required = false;
        self
    }

    /// The same volume, counted against `driver`'s per-node limit.
    ///
    /// ```
    /// use attach_detach::core::{DriverId, VolumeSpec};
    /// let ebs = DriverId::new(1).unwrap();
    /// let disk = VolumeSpec::single_node("vol-1").with_driver(ebs);
    /// assert_eq!(disk.driver, Some(ebs));
    /// ```
    #[must_use]
    pub fn with_driver(mut self, driver: DriverId) -> Self {
        self.driver = Some(driver);
        self
    }
}
