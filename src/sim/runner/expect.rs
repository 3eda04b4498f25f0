//! The scenario's expectations, checked against the world at their times.

use std::collections::BTreeSet;

use super::Sim;
use crate::sim::scenario::{Expectation, PodState};
use crate::sim::world::{Phase, Violation, join};

impl Sim {
    pub(super) fn expect(&self, line: usize, expectation: &Expectation) {
        let seen: Result<(), String> = {
            let w = self.world.lock();
            match expectation {
                Expectation::Pod { pod, state } => {
                    let phase = w.pods.get(pod).map_or(Phase::Gone, |p| p.phase);
                    let now = match phase {
                        Phase::Running => PodState::Running,
                        Phase::Pending | Phase::Terminating => PodState::Pending,
                        Phase::Gone => PodState::Gone,
                    };
                    if now == *state {
                        Ok(())
                    } else {
                        Err(format!("pod {pod} is {phase:?}"))
                    }
                }
                Expectation::Attached { volume, node } | Expectation::Detached { volume, node } => {
                    let want = matches!(expectation, Expectation::Attached { .. });
                    if w.is_attached(volume, node) == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "{volume} is {} {node}",
                            if want {
                                "not attached to"
                            } else {
                                "attached to"
                            }
                        ))
                    }
                }
                Expectation::Reported { node, volumes } => {
                    let want: BTreeSet<String> = volumes.iter().cloned().collect();
                    let seen = w.listed.get(node).cloned().unwrap_or_default();
                    if seen == want {
                        Ok(())
                    } else {
                        Err(format!("{node} reports [{}]", join(&seen)))
                    }
                }
                Expectation::Event { pod } | Expectation::NoEvent { pod } => {
                    let want = matches!(expectation, Expectation::Event { .. });
                    let seen = self.multi_attach.lock().contains(pod);
                    if seen == want {
                        Ok(())
                    } else if seen {
                        Err(format!("a Multi-Attach event named {pod}"))
                    } else {
                        Err(format!("no Multi-Attach event named {pod}"))
                    }
                }
                Expectation::NodeFullEvent { pod } => {
                    if self.node_full.lock().contains(pod) {
                        Ok(())
                    } else {
                        Err(format!("no node-full event named {pod}"))
                    }
                }
                Expectation::Calls {
                    op,
                    volume,
                    node,
                    cmp,
                    count,
                } => {
                    let seen = w
                        .calls
                        .get(&(*op, volume.clone(), node.clone()))
                        .copied()
                        .unwrap_or(0);
                    if cmp.holds(seen, *count) {
                        Ok(())
                    } else {
                        Err(format!("{seen} {op} calls"))
                    }
                }
                Expectation::Writes { node, cmp, count } => {
                    let seen = self.store.writes(node);
                    if cmp.holds(seen, *count) {
                        Ok(())
                    } else {
                        Err(format!("{seen} status writes"))
                    }
                }
            }
        };
        let mut w = self.world.lock();
        match seen {
            Ok(()) => w.log(format!("ok: expect {expectation}")),
            Err(seen) => {
                let message = format!("expected {expectation}, seen: {seen}");
                w.log(format!("FAILED (line {line}) {message}"));
                let at = w.now;
                w.violations.push(Violation {
                    at,
                    line: Some(line),
                    message,
                });
            }
        }
    }
}
