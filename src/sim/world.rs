//! The simulated cluster: nodes with their agents, pods, the real attachments, injected faults,
//! and the invariants checked as things happen.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use super::scenario::CallOp;
use crate::volume::Access;

/// Whether a node runs, has crashed (agent stopped, disks still mounted), or is fenced
/// (out-of-service: powered off, nothing mounted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Power {
    Up,
    Crashed,
    Fenced,
}

#[derive(Clone, Debug)]
pub(crate) struct SimNode {
    pub(crate) power: Power,
    pub(crate) mounted: BTreeSet<String>,
    /// What the agent last reported in use.
    pub(crate) in_use: BTreeSet<String>,
}

/// A pod's life as the node agent and the API see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Placed, waiting for its volumes.
    Pending,
    /// All volumes mounted.
    Running,
    /// Deleted gracefully: the agent unmounts, then the pod is gone.
    Terminating,
    /// Gone from the API.
    Gone,
}

#[derive(Clone, Debug)]
pub(crate) struct SimPod {
    pub(crate) node: String,
    pub(crate) volumes: Vec<String>,
    pub(crate) phase: Phase,
}

/// A fault waiting for the call it matches.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) op: CallOp,
    pub(crate) volume: String,
    pub(crate) node: String,
    pub(crate) times: u32,
    pub(crate) uncertain: bool,
}

/// An invariant or expectation that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Virtual time it was seen.
    pub at: Duration,
    /// The scenario line of the expectation, if it is one.
    pub line: Option<usize>,
    /// What was expected and what was seen.
    pub message: String,
}

/// Everything the simulation knows that the controller does not.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) now: Duration,
    pub(crate) nodes: BTreeMap<String, SimNode>,
    pub(crate) volumes: BTreeMap<String, Access>,
    pub(crate) pods: BTreeMap<String, SimPod>,
    /// The truth: volume -> nodes it is attached to.
    pub(crate) attached: BTreeMap<String, BTreeSet<String>>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) calls: BTreeMap<(CallOp, String, String), u64>,
    pub(crate) violations: Vec<Violation>,
    pub(crate) trace: Vec<String>,
    pub(crate) last_change: Duration,
    pub(crate) force_detach_on_timeout: bool,
    /// Stores' lists per node, refreshed by the runner before agents read them.
    pub(crate) listed: BTreeMap<String, BTreeSet<String>>,
}

pub(crate) fn fmt_time(d: Duration) -> String {
    let ms = d.as_millis();
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

impl World {
    pub(crate) fn log(&mut self, line: impl AsRef<str>) {
        let mut s = String::new();
        let _ = write!(s, "{:>10}  {}", fmt_time(self.now), line.as_ref());
        self.trace.push(s);
    }

    pub(crate) fn changed(&mut self) {
        self.last_change = self.now;
    }

    pub(crate) fn violation(&mut self, message: String) {
        self.log(format!("VIOLATION {message}"));
        self.violations.push(Violation {
            at: self.now,
            line: None,
            message,
        });
    }

    pub(crate) fn is_attached(&self, volume: &str, node: &str) -> bool {
        self.attached.get(volume).is_some_and(|n| n.contains(node))
    }

    /// Takes the fault matching this call, if any: `Some(uncertain)`.
    pub(crate) fn take_fault(&mut self, op: CallOp, volume: &str, node: &str) -> Option<bool> {
        let i = self
            .faults
            .iter()
            .position(|f| f.op == op && f.volume == volume && f.node == node)?;
        let fault = &mut self.faults[i];
        let uncertain = fault.uncertain;
        fault.times -= 1;
        if fault.times == 0 {
            self.faults.remove(i);
        }
        Some(uncertain)
    }

    /// An attach takes effect at the backend. I1: a single-node volume on two nodes at once.
    pub(crate) fn attach_effect(&mut self, volume: &str, node: &str) {
        let single = self.volumes.get(volume) != Some(&Access::MultiNode);
        let others: Vec<String> = self
            .attached
            .get(volume)
            .into_iter()
            .flatten()
            .filter(|n| *n != node)
            .cloned()
            .collect();
        if single && !others.is_empty() {
            self.violation(format!(
                "I1: single-node volume {volume} attached to {node} while attached to {}",
                others.join(",")
            ));
        }
        if self
            .attached
            .entry(volume.to_string())
            .or_default()
            .insert(node.to_string())
        {
            self.log(format!("backend: {volume} attached to {node}"));
            self.changed();
        }
    }

    /// A detach takes effect. I2: never while mounted on a node that is neither fenced nor
    /// allowed by configuration; I4: never while the node's status still lists it for a live
    /// agent, which could start mounting it.
    pub(crate) fn detach_effect(&mut self, volume: &str, node: &str, listed: bool) {
        let (power, mounted) = self.nodes.get(node).map_or((Power::Fenced, false), |n| {
            (n.power, n.mounted.contains(volume))
        });
        let forced_ok = self.force_detach_on_timeout && power != Power::Up;
        if mounted && power != Power::Fenced && !forced_ok {
            self.violation(format!(
                "I2: {volume} detached from {node} while mounted there ({power:?}, not fenced)"
            ));
        }
        if power == Power::Up && listed {
            self.violation(format!(
                "I4: {volume} detached from {node} while its status still lists it"
            ));
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.mounted.remove(volume);
        }
        let removed = self
            .attached
            .get_mut(volume)
            .is_some_and(|n| n.remove(node));
        if self.attached.get(volume).is_some_and(|n| n.is_empty()) {
            self.attached.remove(volume);
        }
        if removed {
            self.log(format!("backend: {volume} detached from {node}"));
            self.changed();
        }
    }

    pub(crate) fn count_call(&mut self, op: CallOp, volume: &str, node: &str) {
        *self
            .calls
            .entry((op, volume.to_string(), node.to_string()))
            .or_default() += 1;
    }

    pub(crate) fn total_calls(&self, op: CallOp) -> u64 {
        self.calls
            .iter()
            .filter(|((o, _, _), _)| *o == op)
            .map(|(_, c)| c)
            .sum()
    }

    /// Volumes the pods placed on `node` need (pending or running).
    pub(crate) fn needs(&self, node: &str) -> BTreeSet<String> {
        self.pods
            .values()
            .filter(|p| p.node == node && matches!(p.phase, Phase::Pending | Phase::Running))
            .flat_map(|p| p.volumes.iter().cloned())
            .collect()
    }

    /// One pass of `node`'s agent. Returns the new in-use list when it changed.
    pub(crate) fn agent(&mut self, node: &str) -> Option<Vec<String>> {
        let n = self.nodes.get(node)?;
        if n.power != Power::Up {
            return None;
        }
        let needs = self.needs(node);
        let listed = self.listed.get(node).cloned().unwrap_or_default();
        let mut log = Vec::new();
        let n = self.nodes.get_mut(node)?;
        let stale: Vec<String> = n.mounted.difference(&needs).cloned().collect();
        for v in stale {
            n.mounted.remove(&v);
            log.push(format!("{node}: unmounted {v}"));
        }
        // Report in use before mounting, as kubelet does.
        let in_use: BTreeSet<String> = needs.union(&n.mounted).cloned().collect();
        let report = (in_use != n.in_use).then(|| in_use.iter().cloned().collect());
        n.in_use = in_use;
        let mut mounts = Vec::new();
        for v in &needs {
            if !n.mounted.contains(v) && listed.contains(v) {
                mounts.push(v.clone());
            }
        }
        for v in mounts {
            if self.is_attached(&v, node) {
                self.nodes.get_mut(node)?.mounted.insert(v.clone());
                log.push(format!("{node}: mounted {v}"));
            }
        }
        let mounted = self.nodes.get(node)?.mounted.clone();
        for (name, pod) in self.pods.iter_mut() {
            if pod.node != node {
                continue;
            }
            match pod.phase {
                Phase::Pending if pod.volumes.iter().all(|v| mounted.contains(v)) => {
                    pod.phase = Phase::Running;
                    log.push(format!("pod {name} running on {node}"));
                }
                // Its volumes were unmounted above, unless another pod here still uses them.
                Phase::Terminating => {
                    pod.phase = Phase::Gone;
                    log.push(format!("pod {name} gone"));
                }
                _ => {}
            }
        }
        if !log.is_empty() {
            self.changed();
        }
        for line in log {
            self.log(line);
        }
        report
    }

    /// I3 at the end of a run: reports match reality on live nodes, every pod on a live node
    /// runs, and no attachment is left that nothing needs. A pod may wait only for a single-node
    /// volume another node rightly holds (a pod there uses it, or the node crashed unfenced:
    /// seed 004's safe outcome), and then only with a Multi-Attach event naming it.
    pub(crate) fn check_final(&mut self, multi_attach_pods: &BTreeSet<String>) {
        let mut problems = Vec::new();
        // Single-node volumes another node rightly keeps: a pod there still uses it, or the
        // node crashed unfenced and may still be writing (seed 004's safe outcome).
        let rightly_held = |volume: &str, waiting_on: &str| {
            self.volumes.get(volume) != Some(&Access::MultiNode)
                && self.attached.get(volume).into_iter().flatten().any(|n| {
                    n != waiting_on
                        && (self.nodes.get(n).is_some_and(|n| n.power == Power::Crashed)
                            || self.pods.values().any(|p| {
                                p.node == *n
                                    && p.phase != Phase::Gone
                                    && p.volumes.iter().any(|v| v == volume)
                            }))
                })
        };
        for (name, node) in &self.nodes {
            if node.power != Power::Up {
                continue;
            }
            let real: BTreeSet<String> = self
                .attached
                .iter()
                .filter(|(_, nodes)| nodes.contains(name))
                .map(|(v, _)| v.clone())
                .collect();
            let listed = self.listed.get(name).cloned().unwrap_or_default();
            if real != listed {
                problems.push(format!(
                    "I3: {name} reports [{}] but has [{}] attached",
                    join(&listed),
                    join(&real)
                ));
            }
        }
        for (name, pod) in &self.pods {
            let alive = self
                .nodes
                .get(&pod.node)
                .is_some_and(|n| n.power == Power::Up);
            if !alive || matches!(pod.phase, Phase::Running | Phase::Gone) {
                continue;
            }
            let waits = pod.volumes.iter().any(|v| rightly_held(v, &pod.node));
            if waits && multi_attach_pods.contains(name) {
                continue;
            }
            problems.push(format!(
                "I3: pod {name} on live node {} is {:?}{}",
                pod.node,
                pod.phase,
                if waits {
                    " without a Multi-Attach event"
                } else {
                    ""
                }
            ));
        }
        for (volume, nodes) in &self.attached {
            for node in nodes {
                let power = self.nodes.get(node).map(|n| n.power);
                if power == Some(Power::Crashed) {
                    continue;
                }
                let needed = self.pods.values().any(|p| {
                    p.node == *node && p.phase != Phase::Gone && p.volumes.contains(volume)
                });
                if !needed {
                    problems.push(format!(
                        "I3: {volume} left attached to {node}, nothing needs it"
                    ));
                }
            }
        }
        for p in problems {
            self.violation(p);
        }
    }
}

pub(crate) fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}
