//! One operation per key at a time: the keys, and the questions the reconciler asks the
//! gate about a volume (its access mode, whether an operation runs on it, whether one may
//! start).

use super::*;

/// What must not run twice at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum GateKey<D: Domain> {
    /// Any attach or detach of a single-node volume.
    Volume(D::Volume),
    /// An attach or detach of a multi-node volume on one node.
    Attachment(D::Volume, D::Node),
    /// A status write of a node.
    Status(D::Node),
    /// A verify of a node.
    Verify(D::Node),
    /// The listing of every attachment.
    List,
    /// The listing of every node's status, at recovery.
    StoreList,
    /// Attaches to a node the backend said is full: never running, only backing off.
    NodeCapacity(D::Node),
}

/// A gate key, borrowed: what a look asks the gate, and what an operation's end frees. An
/// owned key cloned its ids on every look, whether or not an operation was planned (a cold
/// reference count per volume with `Name` ids, and a restart's first pass looks at a
/// million; an allocation each with `String` ids), and again at every operation's end.
pub(super) enum GateKeyRef<'a, D: Domain> {
    Volume(&'a D::Volume),
    Attachment(&'a D::Volume, &'a D::Node),
    Status(&'a D::Node),
    Verify(&'a D::Node),
    List,
    StoreList,
    NodeCapacity(&'a D::Node),
}

pub(super) fn gate_key_ref<'a, D: Domain>(
    access: Access,
    volume: &'a D::Volume,
    node: &'a D::Node,
) -> GateKeyRef<'a, D> {
    match access {
        Access::SingleNode => GateKeyRef::Volume(volume),
        Access::MultiNode => GateKeyRef::Attachment(volume, node),
    }
}

impl<D: Domain> GateKeyRef<'_, D> {
    pub(super) fn to_owned(&self) -> GateKey<D> {
        match *self {
            GateKeyRef::Volume(volume) => GateKey::Volume(volume.clone()),
            GateKeyRef::Attachment(volume, node) => {
                GateKey::Attachment(volume.clone(), node.clone())
            }
            GateKeyRef::Status(node) => GateKey::Status(node.clone()),
            GateKeyRef::Verify(node) => GateKey::Verify(node.clone()),
            GateKeyRef::List => GateKey::List,
            GateKeyRef::StoreList => GateKey::StoreList,
            GateKeyRef::NodeCapacity(node) => GateKey::NodeCapacity(node.clone()),
        }
    }
}

impl<D: Domain> GateKey<D> {
    #[inline]
    pub(super) fn as_ref(&self) -> GateKeyRef<'_, D> {
        match self {
            GateKey::Volume(volume) => GateKeyRef::Volume(volume),
            GateKey::Attachment(volume, node) => GateKeyRef::Attachment(volume, node),
            GateKey::Status(node) => GateKeyRef::Status(node),
            GateKey::Verify(node) => GateKeyRef::Verify(node),
            GateKey::List => GateKeyRef::List,
            GateKey::StoreList => GateKeyRef::StoreList,
            GateKey::NodeCapacity(node) => GateKeyRef::NodeCapacity(node),
        }
    }
}

/// A borrowed key must hash as its owned key does, so both hash through here: a tag per
/// variant, then the ids.
impl<D: Domain> Hash for GateKeyRef<'_, D> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            GateKeyRef::Volume(volume) => {
                state.write_u8(0);
                volume.hash(state);
            }
            GateKeyRef::Attachment(volume, node) => {
                state.write_u8(1);
                volume.hash(state);
                node.hash(state);
            }
            GateKeyRef::Status(node) => {
                state.write_u8(2);
                node.hash(state);
            }
            GateKeyRef::Verify(node) => {
                state.write_u8(3);
                node.hash(state);
            }
            GateKeyRef::List => state.write_u8(4),
            GateKeyRef::StoreList => state.write_u8(5),
            GateKeyRef::NodeCapacity(node) => {
                state.write_u8(6);
                node.hash(state);
            }
        }
    }
}

impl<D: Domain> Hash for GateKey<D> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

impl<D: Domain> Equivalent<GateKey<D>> for GateKeyRef<'_, D> {
    #[inline]
    fn equivalent(&self, key: &GateKey<D>) -> bool {
        match (self, key) {
            (GateKeyRef::Volume(v), GateKey::Volume(w)) => *v == w,
            (GateKeyRef::Attachment(v, n), GateKey::Attachment(w, m)) => *v == w && *n == m,
            (GateKeyRef::Status(n), GateKey::Status(m))
            | (GateKeyRef::Verify(n), GateKey::Verify(m))
            | (GateKeyRef::NodeCapacity(n), GateKey::NodeCapacity(m)) => *n == m,
            (GateKeyRef::List, GateKey::List) | (GateKeyRef::StoreList, GateKey::StoreList) => true,
            _ => false,
        }
    }
}

impl<D: Domain> Reconciler<D> {
    /// The upstream bugs switched back in: the configuration's with the `upstream-bugs`
    /// feature, else none, as a constant every bug branch folds away on.
    #[inline]
    pub(super) fn bugs(&self) -> UpstreamBugs {
        #[cfg(feature = "upstream-bugs")]
        {
            self.config.upstream_bugs
        }
        #[cfg(not(feature = "upstream-bugs"))]
        {
            UpstreamBugs::NONE
        }
    }

    pub(super) fn access(&self, volume: &D::Volume) -> Access {
        // A volume of unknown spec is treated as single-node: the stricter rule.
        self.desired
            .spec(volume)
            .map_or(Access::SingleNode, |s| s.access)
    }

    /// Whether an attach or detach of `volume` that concerns `node` is running, whichever
    /// access mode it was planned under.
    ///
    /// The running-operations table counts attaches and detaches per volume, and the gate
    /// holds a volume's keys only while one of them runs: one lookup by reference answers the
    /// usual case (nothing runs on the volume) where the gate's keys are owned, three clones
    /// per ask. A verify asks this of every attachment it checked: with `String` ids that was
    /// a million clones per round at a million attachments.
    pub(super) fn busy(&self, volume: &D::Volume, node: &D::Node) -> bool {
        let attachment = || {
            self.calls
                .gate
                .is_running(&GateKeyRef::<D>::Attachment(volume, node))
        };
        if !self.calls.in_flight.runs_on(volume) {
            debug_assert!(
                !attachment(),
                "the gate holds an attachment's key only while its operation runs"
            );
            return false;
        }
        self.calls.in_flight.holds_volume(volume) || attachment()
    }

    /// Whether a multi-node look at `volume` (asking the gate under `key`) must wait for an
    /// attach or detach planned while the volume was single-node, which holds the volume's
    /// key instead. A volume made multi-node while its detach ran was otherwise listed in the
    /// node's status again under that detach, and could be detached twice. (The other way,
    /// narrowing, is refused while any of its operations runs.)
    pub(super) fn runs_as_single_node(&self, key: &GateKeyRef<'_, D>, volume: &D::Volume) -> bool {
        matches!(key, GateKeyRef::Attachment(..)) && self.calls.in_flight.holds_volume(volume)
    }

    /// [`OperationGate::may_start`] for `key`.
    pub(super) fn may_start(
        &self,
        key: &GateKeyRef<'_, D>,
        kind: OpKind,
        now: Duration,
    ) -> Result<(), Option<Duration>> {
        match key {
            GateKeyRef::Volume(volume) if self.calls.in_flight.holds_volume(volume) => Err(None),
            GateKeyRef::Volume(_) => self.calls.gate.backed_off(key, kind, now),
            _ => self.calls.gate.may_start(key, kind, now),
        }
    }

    /// Takes `key` for the attach or detach about to be recorded as running: a single-node
    /// volume's key is taken by that record.
    pub(super) fn take_key(&mut self, key: &GateKeyRef<'_, D>) {
        if !matches!(key, GateKeyRef::Volume(_)) {
            self.calls.gate.start(key.to_owned());
        }
    }

    /// [`OperationGate::succeeded`] for `key`, whose operation's record is already gone.
    pub(super) fn key_succeeded(&mut self, key: &GateKeyRef<'_, D>, kind: OpKind) {
        match key {
            GateKeyRef::Volume(_) => self.calls.gate.cleared(key, kind),
            _ => self.calls.gate.succeeded(key, kind),
        }
    }
}
