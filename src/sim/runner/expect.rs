//! The scenario's expectations, checked against the world at their times.

use std::collections::BTreeSet;

use super::Sim;
use crate::core::explain::{PairExplanation, Placement, Wait, WaitKind};
use crate::sim::SimIds;
use crate::sim::scenario::{Expectation, ExpectedWait, PodState};
use crate::sim::world::{Phase, Violation, join};

/// What the running controller said of a pod or a volume: its one-line answer and its pairs'
/// waits (a pod's: those that hold it back), or why there is no answer.
struct Told {
    text: String,
    missing: bool,
    /// The core's recovery listings are not in yet.
    recovering: bool,
    waits: Vec<PairExplanation<SimIds>>,
}

impl Sim {
    /// The running controller's explanation of `subject`: a declared volume's, else a pod's.
    async fn explain(&self, subject: &str) -> Result<Told, String> {
        let handle = self.slot.lock().clone();
        let Some(handle) = handle else {
            return Err("no controller runs to explain it".to_string());
        };
        let is_volume = self.world.lock().volumes.contains_key(subject);
        let told = if is_volume {
            let explained = handle.explain_volume(subject.to_string()).await;
            explained.map(|v| Told {
                text: v.to_string(),
                missing: false,
                recovering: v.recovering,
                waits: v.pairs,
            })
        } else {
            let explained = handle.explain_workload(subject.to_string()).await;
            explained.map(|w| Told {
                text: w.to_string(),
                missing: matches!(w.placement, Placement::Pending { .. }),
                recovering: w.recovering(),
                waits: w.waits().cloned().collect(),
            })
        };
        told.map_err(|e| format!("no explanation: {e}"))
    }

    /// Whether `told` has a pair waiting as `wait`, on `node` (or, held elsewhere, by it).
    fn waits_as(told: &Told, wait: ExpectedWait, node: Option<&str>) -> bool {
        let kind = match wait {
            ExpectedWait::Missing => return told.missing,
            ExpectedWait::Kind(kind) => kind,
        };
        if kind == WaitKind::Settled && node.is_none() {
            return !told.missing
                && !told.recovering
                && told.waits.iter().all(|p| p.wait == Wait::Settled);
        }
        // Before its listings a new core may know nothing of the subject yet.
        if kind == WaitKind::Recovery && node.is_none() && told.recovering {
            return true;
        }
        told.waits.iter().any(|p| {
            p.wait.kind() == kind
                && node.is_none_or(|n| match &p.wait {
                    Wait::HeldElsewhere { holders } => holders.iter().any(|h| h == n),
                    // The call's node: a single-node volume's detach elsewhere holds it.
                    Wait::Call { node: on, .. } => on == n,
                    _ => p.node == n,
                })
        })
    }

    pub(super) async fn expect(&self, line: usize, expectation: &Expectation) {
        // The only expectation that asks the controller: asked before the world is locked.
        let told = match expectation {
            Expectation::Wait { subject, .. } => Some(self.explain(subject).await),
            _ => None,
        };
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
                Expectation::Wait { wait, node, .. } => match told {
                    Some(Ok(told)) if Self::waits_as(&told, *wait, node.as_deref()) => Ok(()),
                    // One line: a trace and a violation are a line each.
                    Some(Ok(told)) => Err(told.text.replace("\n ", " |")),
                    Some(Err(why)) => Err(why),
                    None => Err("not asked".to_string()),
                },
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
