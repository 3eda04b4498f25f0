//! Where workloads run: placing a workload whose node and volumes are all known (its volumes
//! become wanted on its node), moving or removing it, and undoing a placement, which takes its
//! volumes off their wanted lists.

use super::DesiredState;
use super::error::{DesiredError, Missing};
use super::few::Few;
#[cfg(any(test, feature = "sim"))]
use super::sort_dedup;
use super::volumes::{VolumeEntry, WantedOn};
use crate::core::tables::dense_table::{self, DenseTable, Keyed};
use crate::core::tables::slot_table::Slot;
use crate::domain::Domain;

/// Where one workload runs and what it uses: a waiting workload's, or a placed one's on its
/// way in or out.
#[derive(Clone, Debug)]
pub(super) struct Placement<D: Domain> {
    pub(super) node: D::Node,
    /// Sorted, no duplicates.
    pub(super) volumes: Few<D::Volume>,
}

/// A placed workload: its [`Placement`], with its node found once, as the position of the
/// node's entry. Placing and unplacing then reach the node's list without a lookup by node id
/// (with text ids a hash of the text and a compare with the entry's copy), and a placed
/// workload holds no copy of its node's id (with `String` ids the copy and its text came to
/// 47 bytes an attachment at a million).
#[derive(Debug)]
pub(super) struct Placed<D: Domain> {
    /// The workload itself: the key of [`DesiredState::workloads`].
    pub(super) workload: D::Workload,
    /// The position of its node's entry in [`DesiredState::nodes`], renumbered when a node's
    /// removal moves that entry.
    pub(super) node: u32,
    /// Sorted, no duplicates.
    pub(super) volumes: Few<D::Volume>,
}

impl<D: Domain> Keyed for Placed<D> {
    type Key = D::Workload;
    fn key(&self) -> &D::Workload {
        &self.workload
    }
}

impl<D: Domain> DesiredState<D> {
    /// Places `workload` on `node` using `volumes`, replacing any earlier placement of it; if
    /// the node or a volume is not known, the workload waits for it instead (and any earlier
    /// placement is undone).
    ///
    /// All or nothing: on error nothing changes. Returns the volumes whose desired nodes changed
    /// (old and new), sorted, so the caller can look at just those.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn add_workload(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
    ) -> Result<Vec<D::Volume>, DesiredError<D>> {
        let mut changed = Vec::new();
        self.add_workload_into(workload, node, volumes, &mut changed)?;
        Ok(sort_dedup(changed))
    }

    /// [`add_workload`](Self::add_workload), appending the volumes whose desired nodes changed
    /// to `changed` in no order, possibly twice: the core marks them, and marks are sorted and
    /// counted once when taken. Why not a list of its own: three lists a move (the placement's
    /// volumes, the old and the new nodes' changes) were three allocations of a `u32` move's
    /// sixteen.
    pub(crate) fn add_workload_into(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
        changed: &mut Vec<D::Volume>,
    ) -> Result<(), DesiredError<D>> {
        let wanted = Few::sorted_from(volumes);
        if let Some(old) = self.workloads.get(&workload) {
            if *self.node_of(old) == node && *old.volumes == *wanted {
                return Ok(());
            }
        }
        let ready = self.is_ready(&node, &wanted);
        let episode = self.pending.get(&workload).map(|p| p.episode);
        if !ready && episode.is_none() && self.pending.len() >= self.max_pending {
            return Err(DesiredError::TooManyPending {
                missing: self.missing(&node, &wanted),
                workload,
                limit: self.max_pending,
            });
        }
        if let Some(p) = self.pending.get(&workload) {
            if !ready && p.placement.node == node && *p.placement.volumes == *wanted {
                return Ok(());
            }
        }
        if let Some(at) = self.workloads.vacate(&workload) {
            self.unplace(at, changed);
        }
        self.unpend(&workload);
        let placement = Placement {
            node,
            volumes: wanted,
        };
        if ready {
            self.place(workload, placement, changed);
        } else {
            // Still the same wait if it waited already: a workload updated over and over while
            // it waits is reported all the same.
            self.pend(workload, placement, episode);
        }
        Ok(())
    }

    /// Removes `workload`, placed or waiting (a no-op for one not known); volumes it alone
    /// needed on its node stop being desired there. Returns the volumes whose desired nodes
    /// changed.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn remove_workload(&mut self, workload: &D::Workload) -> Vec<D::Volume> {
        let mut changed = Vec::new();
        self.remove_workload_into(workload, &mut changed);
        changed
    }

    /// [`remove_workload`](Self::remove_workload), appending the volumes whose desired nodes
    /// changed to `changed`.
    pub(crate) fn remove_workload_into(
        &mut self,
        workload: &D::Workload,
        changed: &mut Vec<D::Volume>,
    ) {
        match self.workloads.vacate(workload) {
            Some(at) => self.unplace(at, changed),
            None => {
                self.unpend(workload);
            }
        }
    }

    /// Every workload known, placed or waiting, in no particular order.
    pub fn workloads(&self) -> impl Iterator<Item = &D::Workload> {
        self.workloads
            .iter()
            .map(|p| &p.workload)
            .chain(self.pending.keys())
    }

    /// Where `workload` runs and which volumes it uses, if it is placed (not waiting).
    pub fn placement(&self, workload: &D::Workload) -> Option<(&D::Node, &[D::Volume])> {
        self.workloads
            .get(workload)
            .map(|p| (self.node_of(p), &*p.volumes))
    }

    /// The volumes the workloads placed on `node` use, a volume once per workload.
    pub(crate) fn volumes_placed_on(&self, node: &D::Node) -> impl Iterator<Item = &D::Volume> {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|entry| &entry.placed)
            .flat_map(|&slot| self.workloads.at(slot).volumes.iter())
    }

    /// Whether `node` is managed and every one of `volumes` registered.
    pub(super) fn is_ready(&self, node: &D::Node, volumes: &[D::Volume]) -> bool {
        self.nodes.contains_key(node) && volumes.iter().all(|v| self.is_registered(v))
    }

    /// What of `node` and `volumes` is not known.
    pub(super) fn missing(&self, node: &D::Node, volumes: &[D::Volume]) -> Vec<Missing<D>> {
        let node = (!self.nodes.contains_key(node)).then(|| Missing::Node(node.clone()));
        node.into_iter()
            .chain(
                volumes
                    .iter()
                    .filter(|v| !self.is_registered(v))
                    .map(|v| Missing::Volume(v.clone())),
            )
            .collect()
    }

    /// Adds a placement whose node and volumes are all known.
    pub(super) fn place(
        &mut self,
        workload: D::Workload,
        placement: Placement<D>,
        changed: &mut Vec<D::Volume>,
    ) {
        let node = self.nodes.position(&placement.node).expect("managed");
        changed.reserve(placement.volumes.len());
        for volume in placement.volumes.iter() {
            let entry = self.volumes.get_mut(volume).expect("registered");
            match entry
                .wanted_mut()
                .iter_mut()
                .find(|w| w.node == placement.node)
            {
                Some(on) => {
                    if let Err(at) = on.workloads.binary_search(&workload) {
                        on.workloads.insert(at, workload.clone());
                        // A workload joining a node that waits behind Multi-Attach is told
                        // too: the episode's event is raised again, naming every waiting one.
                        on.multi_attach_reported = false;
                    }
                }
                None => {
                    let on = WantedOn {
                        node: placement.node.clone(),
                        workloads: Few::One(workload.clone()),
                        multi_attach_reported: false,
                    };
                    match &mut entry.wanted {
                        None => entry.wanted = Some(Few::One(on)),
                        Some(list) => list.insert(list.len(), on),
                    }
                    self.pairs += 1;
                }
            }
            changed.push(volume.clone());
        }
        let (slot, _) = self.workloads.insert(Placed {
            workload,
            node: dense_table::slot(node),
            volumes: placement.volumes,
        });
        self.nodes.at_mut(node).expect("managed").placed.push(slot);
    }

    /// Undoes the placement [vacated][SlotTable::vacated] from `slot` of `workloads`: takes
    /// it off its node's list, and its volumes, which go to `changed`.
    ///
    /// [SlotTable::vacated]: crate::core::tables::slot_table::SlotTable::vacated
    pub(super) fn unplace(&mut self, slot: Slot, changed: &mut Vec<D::Volume>) {
        let placed = self.workloads.vacated(slot);
        let entry = self
            .nodes
            .at_mut(placed.node as usize)
            .expect("a placed workload's node is managed");
        if let Some(i) = entry.placed.iter().position(|&w| w == slot) {
            entry.placed.swap_remove(i);
        }
        unwant(
            &mut self.volumes,
            &mut self.pairs,
            placed,
            &entry.node,
            changed,
        );
    }

    /// The node `placed` runs on.
    pub(super) fn node_of(&self, placed: &Placed<D>) -> &D::Node {
        &self
            .nodes
            .at(placed.node as usize)
            .expect("a placed workload's node is managed")
            .node
    }

    /// The placement [vacated][SlotTable::vacated] from `slot`, on `node`, to wait.
    ///
    /// [SlotTable::vacated]: crate::core::tables::slot_table::SlotTable::vacated
    pub(super) fn placement_of_vacated(&self, slot: Slot, node: D::Node) -> Placement<D> {
        let placed = self.workloads.vacated(slot);
        Placement {
            node,
            volumes: placed.volumes.clone(),
        }
    }
}

/// Takes `placed` off the wanted lists of its volumes on `node`; the volumes go to `changed`,
/// and `pairs` loses each (volume, node) left without a workload. Over the fields it needs,
/// so that `placed` can be read where it sits (a vacated slot) while they change.
pub(super) fn unwant<D: Domain>(
    volumes: &mut DenseTable<VolumeEntry<D>>,
    pairs: &mut usize,
    placed: &Placed<D>,
    node: &D::Node,
    changed: &mut Vec<D::Volume>,
) {
    let workload = &placed.workload;
    changed.reserve(placed.volumes.len());
    for volume in placed.volumes.iter() {
        let Some(entry) = volumes.get_mut(volume) else {
            continue;
        };
        if let Some(i) = entry.wanted().iter().position(|w| w.node == *node) {
            let on = &mut entry.wanted_mut()[i];
            match on.workloads.binary_search(workload) {
                Ok(_) if on.workloads.len() == 1 => {
                    // Its last workload: the volume is no longer desired on the node.
                    match &mut entry.wanted {
                        Some(list) if list.len() > 1 => {
                            list.remove(i);
                        }
                        _ => entry.wanted = None,
                    }
                    *pairs -= 1;
                }
                Ok(at) => {
                    on.workloads.remove(at);
                }
                Err(_) => {}
            }
        }
        changed.push(volume.clone());
    }
}
