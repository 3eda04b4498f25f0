//! The simulated truth the planner check runs against: node statuses in a store with revisions,
//! node agents that report and mount, and the core started from what it lists.

use std::collections::{BTreeMap, BTreeSet};

use super::{NODES, T, VOLUMES};
use crate::config::Config;
use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::{NodeStatus, Revision};
use crate::core::calls::volume::VolumeSpec;
use crate::core::input::Input;
use crate::core::reconciler::Reconciler;
use crate::core::state::actual::NodeFacts;
use crate::testkit::listed;

/// The simulated truth the planner harness runs operations against.
#[derive(Default)]
pub(super) struct Truth {
    pub(super) attached: BTreeSet<(u8, u8)>,
    pub(super) stored: BTreeMap<u8, BTreeSet<u8>>,
    pub(super) mounted: BTreeSet<(u8, u8)>,
    pub(super) fenced: BTreeSet<u8>,
    pub(super) down: BTreeSet<u8>,
    pub(super) in_use_on: BTreeMap<u8, bool>,
    last_in_use: BTreeMap<u8, Vec<u8>>,
    /// Each node's status revision in the store; a node never written is at 0.
    revisions: BTreeMap<u8, u64>,
}

impl Truth {
    /// What a fresh read of node `n` finds in the store: its list, its agent's last in-use
    /// report, its fence and health.
    pub(super) fn status(&self, n: u8) -> NodeStatus<T> {
        NodeStatus {
            attached: listed(self.stored.get(&n).into_iter().flatten().copied()),
            in_use: self.last_in_use.get(&n).cloned(),
            fenced: Some(self.fenced.contains(&n)),
            healthy: Some(!self.down.contains(&n)),
            revision: Revision::from(self.revisions.get(&n).copied().unwrap_or(0)),
        }
    }

    /// Stores `list` for node `n` at a new revision.
    pub(super) fn store(&mut self, n: u8, list: &ReportedVolumes<T>) -> Revision {
        self.stored
            .insert(n, list.volumes().iter().copied().collect());
        let revision = self.revisions.entry(n).or_default();
        *revision += 1;
        Revision::from(*revision)
    }

    /// Node agents: report in use what their pods need (or everything mounted), mount what is
    /// attached and listed, unmount what no pod needs. A crashed or fenced agent changes
    /// nothing and reports nothing new.
    pub(super) fn agents(&mut self, core: &mut Reconciler<T>) {
        for n in 0..NODES {
            if self.fenced.contains(&n) || self.down.contains(&n) {
                let facts = NodeFacts {
                    healthy: false,
                    fenced: self.fenced.contains(&n),
                    in_use: self.last_in_use.get(&n).cloned(),
                    attach_limit: None,
                    driver_limits: Vec::new(),
                };
                update(core, n, facts);
                continue;
            }
            let needs: BTreeSet<u8> = (0..8u8)
                .filter_map(|w| core.desired().placement(&w))
                .filter(|(pn, _)| **pn == n)
                .flat_map(|(_, vs)| vs.iter().copied())
                .collect();
            self.mounted.retain(|(v, mn)| *mn != n || needs.contains(v));
            let listed = self.stored.get(&n).cloned().unwrap_or_default();
            for v in &needs {
                if self.attached.contains(&(*v, n)) && listed.contains(v) {
                    self.mounted.insert((*v, n));
                }
            }
            let report = self.in_use_on.get(&n).copied().unwrap_or(true);
            let mounted_here = self
                .mounted
                .iter()
                .filter(|(_, mn)| *mn == n)
                .map(|(v, _)| *v);
            let in_use: Vec<u8> = if report {
                needs.iter().copied().chain(mounted_here).collect()
            } else {
                // Stale or partial report: only what is mounted.
                mounted_here.collect()
            };
            self.last_in_use.insert(n, in_use.clone());
            let facts = NodeFacts {
                healthy: true,
                fenced: false,
                in_use: Some(in_use),
                attach_limit: None,
                driver_limits: Vec::new(),
            };
            update(core, n, facts);
        }
    }
}

/// A node update, which the core never refuses.
fn update(core: &mut Reconciler<T>, node: u8, facts: NodeFacts<u8>) {
    let taken = core.handle(Input::NodeUpdated { node, facts });
    debug_assert!(taken.is_ok(), "{taken:?}");
}

pub(super) fn spec_of(v: u8) -> VolumeSpec<()> {
    if v < 3 {
        VolumeSpec::single_node(())
    } else {
        VolumeSpec::multi_node(())
    }
}

/// Every workload's placement in `core`: (workload, node, volumes).
pub(super) fn placements(core: &Reconciler<T>) -> Vec<(u8, u8, Vec<u8>)> {
    (0..8u8)
        .filter_map(|w| {
            core.desired()
                .placement(&w)
                .map(|(n, vs)| (w, *n, vs.to_vec()))
        })
        .collect()
}

/// A core as a controller starts it: every volume, every node (not heard from yet), and the
/// workloads in `placements`.
pub(super) fn start(
    config: &Config,
    placements: &[(u8, u8, Vec<u8>)],
) -> Result<Reconciler<T>, String> {
    let mut core: Reconciler<T> = Reconciler::new(config.clone());
    for v in 0..VOLUMES {
        core.handle(Input::SetVolume {
            volume: v,
            spec: spec_of(v),
        })
        .map_err(|e| e.to_string())?;
    }
    for n in 0..NODES {
        update(&mut core, n, NodeFacts::default());
    }
    for (w, n, vs) in placements {
        core.handle(Input::WorkloadScheduled {
            workload: *w,
            node: *n,
            volumes: vs.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(core)
}
