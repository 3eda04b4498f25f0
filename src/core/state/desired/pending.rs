//! The workloads that wait for a node or a volume the core does not know yet: making one wait,
//! waking those whose wait is over, and stamping and reporting waits that last.

use std::cmp::Reverse;
use std::time::Duration;

use super::DesiredState;
use super::error::Missing;
use super::placement::Placement;
use crate::domain::Domain;

/// A workload that waits: where it is scheduled, what it needs, and what of that the core does
/// not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWorkload<D: Domain> {
    /// The workload.
    pub workload: D::Workload,
    /// The node it is scheduled on.
    pub node: D::Node,
    /// Every volume it needs, sorted.
    pub volumes: Vec<D::Volume>,
    /// What it waits for: the node first if missing, then the missing volumes, sorted. Never
    /// empty.
    pub missing: Vec<Missing<D>>,
    /// When the core first saw it wait: the time of the first [`poll`](crate::core::Reconciler::poll)
    /// after it began to (the core has no clock of its own); `None` before that poll.
    pub since: Option<Duration>,
}

/// One wait of a workload, from the moment it could not be placed until it is placed or
/// removed; a change of what it waits for does not start a new one.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Episode {
    /// Stamped by the first poll after the wait began.
    pub(super) since: Option<Duration>,
    /// The wait was reported in an event.
    pub(super) warned: bool,
}

/// A workload that cannot be placed yet.
#[derive(Clone, Debug)]
pub(super) struct Pending<D: Domain> {
    pub(super) placement: Placement<D>,
    pub(super) episode: Episode,
}

impl<D: Domain> DesiredState<D> {
    /// Makes `workload` wait; `episode` carries on an earlier wait, `None` starts one (stamped
    /// by the next poll).
    pub(super) fn pend(
        &mut self,
        workload: D::Workload,
        placement: Placement<D>,
        episode: Option<Episode>,
    ) {
        self.pending_on_node
            .entry(placement.node.clone())
            .or_default()
            .insert(workload.clone());
        for volume in placement.volumes.iter() {
            self.pending_on_volume
                .entry(volume.clone())
                .or_default()
                .insert(workload.clone());
        }
        let episode = episode.unwrap_or_else(|| {
            self.unstamped.push(workload.clone());
            Episode::default()
        });
        self.pending
            .insert(workload, Pending { placement, episode });
    }

    /// Ends the wait of `workload`, if it waits.
    pub(super) fn unpend(&mut self, workload: &D::Workload) -> Option<Pending<D>> {
        if self.pending.is_empty() {
            // Every placement asks; most find nothing waits, without hashing the id.
            return None;
        }
        let pending = self.pending.remove(workload)?;
        let placement = &pending.placement;
        if let Some(set) = self.pending_on_node.get_mut(&placement.node) {
            set.remove(workload);
            if set.is_empty() {
                self.pending_on_node.remove(&placement.node);
            }
        }
        for volume in placement.volumes.iter() {
            if let Some(set) = self.pending_on_volume.get_mut(volume) {
                set.remove(workload);
                if set.is_empty() {
                    self.pending_on_volume.remove(volume);
                }
            }
        }
        Some(pending)
    }

    /// Places those of `candidates` (sorted) that no longer wait for anything.
    pub(super) fn wake(&mut self, candidates: Vec<D::Workload>) -> Vec<D::Volume> {
        let mut changed = Vec::new();
        for workload in candidates {
            let ready = self
                .pending
                .get(&workload)
                .is_some_and(|p| self.is_ready(&p.placement.node, &p.placement.volumes));
            if ready {
                let pending = self.unpend(&workload).expect("waits");
                self.place(workload, pending.placement, &mut changed);
            }
        }
        changed
    }

    /// Number of workloads that wait.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Room for waiting workloads; for tests of trimming.
    #[cfg(test)]
    pub(crate) fn pending_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// What `workload` waits for, if it waits.
    pub fn pending(&self, workload: &D::Workload) -> Option<PendingWorkload<D>> {
        self.pending
            .get(workload)
            .map(|p| self.describe(workload, p))
    }

    /// Every workload that waits, with what it waits for, in no particular order.
    pub fn pending_workloads(&self) -> impl Iterator<Item = PendingWorkload<D>> + '_ {
        self.pending.iter().map(|(w, p)| self.describe(w, p))
    }

    /// Each node the core does not know that a waiting workload is placed on, with the volumes
    /// the workload uses: after a restart, a node whose object is gone may still run it.
    pub(crate) fn placed_on_absent_nodes(&self) -> impl Iterator<Item = (&D::Node, &[D::Volume])> {
        self.pending
            .values()
            .map(|p| &p.placement)
            .filter(|placement| !self.nodes.contains_key(&placement.node))
            .map(|placement| (&placement.node, &placement.volumes[..]))
    }

    fn describe(&self, workload: &D::Workload, pending: &Pending<D>) -> PendingWorkload<D> {
        let Placement { node, volumes, .. } = &pending.placement;
        PendingWorkload {
            workload: workload.clone(),
            node: node.clone(),
            volumes: volumes.to_vec(),
            missing: self.missing(node, volumes),
            since: pending.episode.since,
        }
    }

    /// When [`poll_pending`](Self::poll_pending) next has work: at once while a wait is not
    /// stamped yet, else the earliest warning.
    pub(crate) fn next_pending_wake(&self) -> Option<Duration> {
        if !self.unstamped.is_empty() {
            return Some(Duration::ZERO);
        }
        self.warnings.peek().map(|Reverse((at, _))| *at)
    }

    /// Stamps the waits that began since the last call with `now`, and returns the waits to
    /// report: those that began [`Config::pending_workload_warning`] ago or more, once each.
    ///
    /// [`Config::pending_workload_warning`]: crate::config::Config::pending_workload_warning
    pub(crate) fn poll_pending(&mut self, now: Duration) -> Vec<PendingWorkload<D>> {
        for workload in std::mem::take(&mut self.unstamped) {
            if let Some(p) = self.pending.get_mut(&workload) {
                if p.episode.since.is_none() {
                    p.episode.since = Some(now);
                    let at = now.saturating_add(self.warn_after);
                    self.warnings.push(Reverse((at, workload)));
                }
            }
        }
        let mut due = Vec::new();
        while let Some(Reverse((at, _))) = self.warnings.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, workload)) = self.warnings.pop().expect("peeked");
            let warn_after = self.warn_after;
            let Some(p) = self.pending.get_mut(&workload) else {
                continue;
            };
            // A timer of an earlier wait of the same workload is stale.
            if p.episode.warned || p.episode.since.map(|s| s.saturating_add(warn_after)) != Some(at)
            {
                continue;
            }
            p.episode.warned = true;
            let p = &self.pending[&workload];
            due.push(self.describe(&workload, p));
        }
        due
    }
}
