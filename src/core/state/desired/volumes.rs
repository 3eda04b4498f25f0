//! The volumes with a known spec, each with the nodes it is wanted on: registering and
//! unregistering a volume, keeping a spec only to detach it, and reading what is desired.

use super::few::Few;
use super::{DesiredState, sort_dedup, sorted};
use crate::core::calls::volume::VolumeSpec;
use crate::core::tables::dense_table::Keyed;
use crate::domain::Domain;

/// One node on which a volume is desired.
#[derive(Clone, Debug)]
pub(crate) struct WantedOn<D: Domain> {
    pub(crate) node: D::Node,
    /// Sorted, never empty: the entry goes with its last workload.
    pub(crate) workloads: Few<D::Workload>,
    /// The Multi-Attach event of this episode was already emitted.
    pub(crate) multi_attach_reported: bool,
}

/// A volume's spec and the nodes it is desired on, read together.
pub(crate) type SpecAndWanted<'a, D> = (&'a VolumeSpec<<D as Domain>::Payload>, &'a [WantedOn<D>]);

/// A volume with a known spec, and the nodes it is desired on (often none, usually one).
#[derive(Debug)]
pub(super) struct VolumeEntry<D: Domain> {
    /// The volume itself: the key of [`DesiredState::volumes`].
    pub(super) volume: D::Volume,
    pub(super) spec: VolumeSpec<D::Payload>,
    /// The orchestrator registered it, so workloads may use it. Otherwise the spec is kept
    /// only to detach the volume (removed, or known only from the backend), and it is desired
    /// nowhere.
    pub(super) registered: bool,
    pub(super) wanted: Option<Few<WantedOn<D>>>,
}

impl<D: Domain> Keyed for VolumeEntry<D> {
    type Key = D::Volume;
    fn key(&self) -> &D::Volume {
        &self.volume
    }
}

impl<D: Domain> VolumeEntry<D> {
    pub(super) fn wanted(&self) -> &[WantedOn<D>] {
        self.wanted.as_deref().unwrap_or(&[])
    }

    pub(super) fn wanted_mut(&mut self) -> &mut [WantedOn<D>] {
        self.wanted.as_deref_mut().unwrap_or(&mut [])
    }
}

impl<D: Domain> DesiredState<D> {
    /// Registers or updates a volume's spec. Workloads that waited for it, and for nothing
    /// else, are placed. Returns the volumes whose desired nodes changed, and `volume` itself
    /// if its spec or registration changed.
    pub(crate) fn set_volume(
        &mut self,
        volume: D::Volume,
        spec: VolumeSpec<D::Payload>,
    ) -> Vec<D::Volume> {
        match self.volumes.get_mut(&volume) {
            Some(entry) if entry.registered => {
                if entry.spec == spec {
                    return Vec::new();
                }
                entry.spec = spec;
                return vec![volume];
            }
            Some(entry) => {
                entry.spec = spec;
                entry.registered = true;
            }
            None => {
                self.volumes.insert(VolumeEntry {
                    volume: volume.clone(),
                    spec,
                    registered: true,
                    wanted: None,
                });
            }
        }
        let waiting = sorted(self.pending_on_volume.get(&volume));
        let mut changed = self.wake(waiting);
        changed.push(volume);
        sort_dedup(changed)
    }

    /// Keeps `spec` for a volume the orchestrator has not registered, so that it can be
    /// detached; workloads cannot use it. Returns whether it was taken (false when a spec is
    /// known already).
    pub(crate) fn keep_spec(&mut self, volume: D::Volume, spec: VolumeSpec<D::Payload>) -> bool {
        if self.volumes.contains_key(&volume) {
            return false;
        }
        self.volumes.insert(VolumeEntry {
            volume,
            spec,
            registered: false,
            wanted: None,
        });
        true
    }

    /// Unregisters `volume` (a no-op unless registered): its spec is kept for the detach, and
    /// workloads using it wait for it again. Returns the volumes whose desired nodes changed,
    /// `volume` included.
    pub(crate) fn unregister_volume(&mut self, volume: &D::Volume) -> Vec<D::Volume> {
        let Some(entry) = self.volumes.get_mut(volume) else {
            return Vec::new();
        };
        if !entry.registered {
            return Vec::new();
        }
        entry.registered = false;
        let mut users: Vec<D::Workload> = entry
            .wanted()
            .iter()
            .flat_map(|on| on.workloads.iter().cloned())
            .collect();
        users.sort();
        users.dedup();
        let mut changed = vec![volume.clone()];
        for workload in users {
            if let Some(slot) = self.workloads.vacate(&workload) {
                let node = self.node_of(self.workloads.vacated(slot)).clone();
                self.unplace(slot, &mut changed);
                let placement = self.placement_of_vacated(slot, node);
                self.pend(workload, placement, None);
            }
        }
        sort_dedup(changed)
    }

    /// Drops the spec of an unregistered volume.
    pub(crate) fn forget_volume(&mut self, volume: &D::Volume) {
        if self.volumes.get(volume).is_some_and(|e| !e.registered) {
            self.volumes.remove(volume);
        }
    }

    /// A volume's spec, if known (registered, or kept to detach it).
    pub fn spec(&self, volume: &D::Volume) -> Option<&VolumeSpec<D::Payload>> {
        self.volumes.get(volume).map(|entry| &entry.spec)
    }

    /// Whether the orchestrator registered `volume` (and has not removed it since), so that
    /// workloads may use it.
    pub fn is_registered(&self, volume: &D::Volume) -> bool {
        self.volumes.get(volume).is_some_and(|e| e.registered)
    }

    /// Every registered volume, in no particular order.
    pub fn registered_volumes(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes
            .iter()
            .filter(|e| e.registered)
            .map(|e| &e.volume)
    }

    /// Whether `volume` must be attached to `node`.
    pub fn is_desired(&self, volume: &D::Volume, node: &D::Node) -> bool {
        self.volumes
            .get(volume)
            .is_some_and(|e| e.wanted().iter().any(|w| w.node == *node))
    }

    /// The nodes `volume` must be attached to, with the workloads needing it on each.
    pub fn wanted(&self, volume: &D::Volume) -> impl Iterator<Item = (&D::Node, &[D::Workload])> {
        self.volumes
            .get(volume)
            .into_iter()
            .flat_map(|e| e.wanted())
            .map(|w| (&w.node, &*w.workloads))
    }

    /// A volume's spec, if known, and the nodes it is wanted on: one lookup for both; with
    /// where its entry sits, for [`spec_at`](Self::spec_at).
    pub(crate) fn spec_and_wanted(
        &self,
        volume: &D::Volume,
    ) -> Option<(usize, SpecAndWanted<'_, D>)> {
        self.volumes
            .get_with_position(volume)
            .map(|(at, e)| (at, (&e.spec, e.wanted())))
    }

    /// `volume`'s spec, found first at position `at` ([`spec_and_wanted`](Self::spec_and_wanted)):
    /// a look that plans a call takes the payload from there, with no second lookup. Looked up
    /// if the entry there is another volume's (entries move when one is removed).
    pub(crate) fn spec_at(&self, at: usize, volume: &D::Volume) -> Option<&VolumeSpec<D::Payload>> {
        match self.volumes.at(at) {
            Some(e) if e.volume == *volume => Some(&e.spec),
            _ => self.spec(volume),
        }
    }

    /// The position of `volume`'s entry in the volume table, and, if the orchestrator
    /// registered it, its spec and the nodes it is wanted on: what a restart reads to tell
    /// whether the volume is settled ([`SettledVolumes`](crate::core::plan::recovery::SettledVolumes)).
    pub(crate) fn registered_with_position(
        &self,
        volume: &D::Volume,
    ) -> Option<(usize, Option<SpecAndWanted<'_, D>>)> {
        self.volumes
            .get_with_position(volume)
            .map(|(at, e)| (at, e.registered.then(|| (&e.spec, e.wanted()))))
    }

    /// Entries in the volume table: positions run from 0 to this.
    pub(crate) fn volume_positions(&self) -> usize {
        self.volumes.len()
    }

    /// Every volume with an entry (registered or with a spec kept), in the order of their
    /// positions.
    pub(crate) fn volumes_by_position(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes.iter().map(|e| &e.volume)
    }

    pub(crate) fn wanted_on(&self, volume: &D::Volume) -> &[WantedOn<D>] {
        self.volumes.get(volume).map_or(&[], |e| e.wanted())
    }

    /// Remembers whether the Multi-Attach event for (`volume`, `node`) was emitted in this
    /// episode; the episode ends when the volume stops being desired there.
    pub(crate) fn set_multi_attach_reported(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        value: bool,
    ) {
        if let Some(entry) = self
            .volumes
            .get_mut(volume)
            .and_then(|e| e.wanted_mut().iter_mut().find(|w| w.node == *node))
        {
            entry.multi_attach_reported = value;
        }
    }

    /// Every (volume, node) that must be attached, in no particular order.
    pub fn volumes_to_attach(&self) -> impl Iterator<Item = (&D::Volume, &D::Node)> {
        self.volumes
            .iter()
            .flat_map(|e| e.wanted().iter().map(move |w| (&e.volume, &w.node)))
    }
}
