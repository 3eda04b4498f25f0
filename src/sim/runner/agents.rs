//! The node agents' passes: each dirty node's agent mounts, unmounts and reports what it uses,
//! reading the store's lists, which are refreshed by walking only what changed.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::Sim;
use crate::core::input::Input;
use crate::core::state::actual::NodeFacts;
use crate::sim::world::{Power, SimNode};

impl Sim {
    /// Refreshes the stores' lists the agents and expectations read, for the nodes written to
    /// since the last refresh.
    ///
    /// The store's list is read in place and walked beside the old one, both in volume order:
    /// only the volumes that came onto the list or went off it are copied, and a node's agent
    /// looks at those.
    pub(super) fn refresh_listed(&self) {
        let mut w = self.world.lock();
        for node in std::mem::take(&mut w.stale_listed) {
            let mut listed = w.listed.remove(&node).unwrap_or_default();
            let (came, gone) = self
                .store
                .with_listed(&node, |now| list_changes(&listed, now))
                .unwrap_or_else(|| {
                    self.store
                        .with_listed(&node, |now| set_changes(&listed, now))
                });
            for v in &gone {
                listed.remove(v);
                w.touch(&node, v);
            }
            for v in came {
                w.touch(&node, &v);
                listed.insert(v);
            }
            w.listed.insert(node, listed);
        }
    }

    /// One agent pass over every dirty node, in name order.
    pub(super) fn agents(&self) {
        let dirty = std::mem::take(&mut self.world.lock().dirty);
        for node in dirty {
            let pass = {
                let mut w = self.world.lock();
                w.now = self.now();
                // The crate's tests check every pass against the reference, and so do the
                // fuzzers when asked (it takes them about twice as long a run).
                #[cfg(test)]
                let pass = w.agent_checked(&node);
                #[cfg(all(fuzzing, not(test)))]
                let pass = if crate::sim::agent_check::wanted() {
                    w.agent_checked(&node)
                } else {
                    w.agent(&node)
                };
                #[cfg(not(any(test, fuzzing)))]
                let pass = w.agent(&node);
                pass
            };
            for pod in pass.gone {
                self.tell(Input::WorkloadRemoved { workload: pod });
            }
            if let Some(in_use) = pass.report {
                // The agent's own status update: fresh in the store, lagging in the cache.
                self.store.set_in_use(&node, in_use);
                let facts = self.world.lock().nodes.get(&node).map(facts_of);
                if let Some(facts) = facts {
                    self.tell(Input::NodeUpdated { node, facts });
                }
            }
        }
    }
}

/// The volumes on `now` and not on `before` (came), and on `before` and not on `now` (gone),
/// found walking the two side by side in volume order, each name compared once, only the
/// changes copied. `None` if `now` is out of order (no store of this crate writes such a list):
/// [`set_changes`] compares it as a set.
pub(super) fn list_changes(
    before: &BTreeSet<String>,
    now: &mut dyn Iterator<Item = &String>,
) -> Option<(Vec<String>, Vec<String>)> {
    let (mut came, mut gone) = (Vec::new(), Vec::new());
    let mut old = before.iter().peekable();
    let mut last: Option<&String> = None;
    for v in now {
        if last.is_some_and(|last| last >= v) {
            return None;
        }
        last = Some(v);
        loop {
            match old.peek().map(|o| o.as_str().cmp(v)) {
                Some(Ordering::Less) => gone.extend(old.next().cloned()),
                Some(Ordering::Equal) => {
                    old.next();
                    break;
                }
                Some(Ordering::Greater) | None => {
                    came.push(v.clone());
                    break;
                }
            }
        }
    }
    gone.extend(old.cloned());
    Some((came, gone))
}

/// [`list_changes`] for a list in any order.
pub(super) fn set_changes(
    before: &BTreeSet<String>,
    now: &mut dyn Iterator<Item = &String>,
) -> (Vec<String>, Vec<String>) {
    let now: BTreeSet<&String> = now.collect();
    let came = now
        .iter()
        .filter(|v| !before.contains(**v))
        .map(|v| (*v).clone())
        .collect();
    let gone = before
        .iter()
        .filter(|v| !now.contains(v))
        .cloned()
        .collect();
    (came, gone)
}

pub(super) fn facts_of(node: &SimNode) -> NodeFacts<String> {
    NodeFacts {
        healthy: node.power == Power::Up,
        fenced: node.power == Power::Fenced,
        in_use: Some(node.in_use.iter().cloned().collect()),
        attach_limit: node.attach_limit.filter(|l| l.reported).map(|l| l.limit),
        driver_limits: Vec::new(),
    }
}
