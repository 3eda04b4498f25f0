//! A node agent's pass, as kubelet's volume manager makes it: unmount, report in use, mount
//! what is listed and attached, start and stop pods.

use std::collections::BTreeSet;

use super::{AgentPass, Phase, Power, SimNode, World};
use crate::core::calls::volume::Access;
use crate::sim::timeline::{Happening, PodPhase};

impl World {
    /// One pass of `node`'s agent, as kubelet's volume manager makes every 100 ms: unmount what
    /// no pod here needs, report in use what the pods need (before mounting, as kubelet does),
    /// mount what is both listed in the node's status and really attached, start the pods whose
    /// volumes are all mounted, and let terminating pods go.
    ///
    /// It looks only at what changed since its last pass ([`SimNode::touched`]): the volumes
    /// whose need, mount, hang, attachment or listing moved, and the pods placed or deleted
    /// there; a pod learns that its last volume was mounted, or that its node no longer holds
    /// any of its volumes, from counts kept as mounts come and go. What it did not look at
    /// would not have changed, so a pass does what a pass over everything on the node would
    /// do (`World::agent_checked` compares the two in the crate's tests, and under the fuzzers
    /// when `SIM_CHECK_AGENTS` is set), and a pass with nothing changed does nothing, which is
    /// what lets the runner pass over nodes that are not [`dirty`](World::dirty).
    pub(crate) fn agent(&mut self, node: &str) -> AgentPass {
        let mut pass = AgentPass::default();
        let World {
            nodes,
            pods,
            pods_on,
            listed,
            attached,
            claim_only,
            volumes: access,
            agent_work,
            ..
        } = self;
        let Some(n) = nodes.get_mut(node) else {
            return pass;
        };
        // A crashed agent does nothing; so does one cut off from the API (`stop-reporting`): it
        // neither reports nor hears of changes, and its pods run on with their mounts. What
        // changed meanwhile waits for its next pass.
        if n.power != Power::Up || !n.reporting {
            return pass;
        }
        let touched = std::mem::take(&mut n.touched);
        let (volumes, mut candidates) = if touched.all {
            let mut volumes = touched.volumes;
            volumes.extend(n.mounted.iter().cloned());
            volumes.extend(n.needed.keys().cloned());
            volumes.extend(n.in_use.iter().cloned());
            volumes.extend(n.held.iter().cloned());
            let mut here = touched.pods;
            here.extend(pods_on.get(node).into_iter().flatten().cloned());
            (volumes, here)
        } else {
            (touched.volumes, touched.pods)
        };
        let mut work = volumes.len() + candidates.len();
        let needed = |n: &SimNode, v: &String| n.needed.contains_key(v);
        let mut log = Vec::new();
        // What no pod here needs any more is unmounted, unless its unmount hangs.
        let mut unmounted = Vec::new();
        for v in &volumes {
            if n.mounted.contains(v) && !needed(n, v) && !n.hung.contains(v) {
                n.mounted.remove(v);
                log.push(format!("{node}: unmounted {v}"));
                unmounted.push(v);
            }
        }
        // What is still mounted is needed or hangs, so in use is exactly what the pods need
        // and what cannot be unmounted.
        let in_use = |n: &SimNode, v: &String| needed(n, v) || n.mounted.contains(v);
        // An agent whose node object is gone has nowhere to report (the store keeps nothing
        // for it); it mounts nothing new, since it cannot confirm its status. Its next pass
        // looks at everything, since this one left its report and mounts behind.
        let reports = n.object;
        let changed = volumes.iter().any(|v| n.in_use.contains(v) != in_use(n, v));
        if reports && (changed || n.resync) {
            n.resync = false;
            for v in &volumes {
                if in_use(n, v) {
                    if !n.in_use.contains(v) {
                        n.in_use.insert(v.clone());
                    }
                } else {
                    n.in_use.remove(v);
                }
            }
            pass.report = Some(n.in_use.iter().cloned().collect());
        }
        let no_volumes = BTreeSet::new();
        let listed = listed.get(node).unwrap_or(&no_volumes);
        let mut claimed_twice = Vec::new();
        let mut mounted = Vec::new();
        for v in &volumes {
            if !reports || !needed(n, v) {
                continue;
            }
            let claim = claim_only.contains(v);
            let is_attached = claim || attached.get(v).is_some_and(|on| on.contains(node));
            if is_attached && listed.contains(v) && !n.mounted.contains(v) {
                n.mounted.insert(v.clone());
                log.push(format!("{node}: mounted {v}"));
                mounted.push(v);
                if claim && access.get(v) != Some(&Access::MultiNode) {
                    claimed_twice.push(v.clone());
                }
            }
        }
        if !reports {
            n.touched.all = true;
        }
        // Mounted only because their unmount hangs: the pods that used them cannot finish.
        let mut held = Vec::new();
        for v in &volumes {
            let holds = n.mounted.contains(v) && n.hung.contains(v) && !needed(n, v);
            if holds != n.held.contains(v) {
                if holds {
                    n.held.insert(v.clone());
                } else {
                    n.held.remove(v);
                }
                held.push((v, holds));
            }
        }
        // The pods whose counts these moved: a pending pod whose last volume was mounted, a
        // terminating pod whose node no longer holds any of its volumes.
        let no_pods = BTreeSet::new();
        let users = |v: &String| n.users.get(v).unwrap_or(&no_pods);
        for (v, step) in unmounted
            .into_iter()
            .map(|v| (v, 1))
            .chain(mounted.into_iter().map(|v| (v, -1)))
        {
            for name in users(v) {
                work += 1;
                if let Some(pod) = pods.get_mut(name) {
                    pod.missing = pod.missing.saturating_add_signed(step);
                    if pod.missing == 0 {
                        candidates.insert(name.clone());
                    }
                }
            }
        }
        for (v, holds) in held {
            for name in users(v) {
                work += 1;
                let Some(count) = pods.get_mut(name).and_then(|pod| pod.held.as_mut()) else {
                    continue;
                };
                if holds {
                    *count += 1;
                } else {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        candidates.insert(name.clone());
                    }
                }
            }
        }
        let no_pods = BTreeSet::new();
        let here = pods_on.get(node).unwrap_or(&no_pods);
        let mut phases = Vec::new();
        for name in candidates.iter().filter(|name| here.contains(*name)) {
            let Some(pod) = pods.get_mut(name) else {
                continue;
            };
            match pod.phase {
                Phase::Pending if pod.missing == 0 => {
                    pod.phase = Phase::Running;
                    log.push(format!("pod {name} running on {node}"));
                    phases.push((name.clone(), PodPhase::Running));
                }
                // Its volumes were unmounted above, unless another pod here still uses them
                // or their unmount hangs: then it stays terminating, as kubelet keeps a pod
                // whose volumes it cannot tear down.
                Phase::Terminating => {
                    let count = *pod.held.get_or_insert_with(|| {
                        let distinct: BTreeSet<&String> = pod.volumes.iter().collect();
                        work += distinct.len();
                        distinct.into_iter().filter(|v| n.held.contains(*v)).count()
                    });
                    if count == 0 {
                        pod.phase = Phase::Gone;
                        log.push(format!("pod {name} gone"));
                        pass.gone.push(name.clone());
                        phases.push((name.clone(), PodPhase::Gone));
                    }
                }
                _ => {}
            }
        }
        *agent_work += work as u64;
        for (pod, phase) in phases {
            self.record(Happening::Pod {
                pod,
                node: node.to_string(),
                phase,
            });
        }
        for pod in &pass.gone {
            self.unindex(pod, node, false);
            if let Some(pods) = self.pods_on.get_mut(node) {
                pods.remove(pod);
            }
        }
        if !log.is_empty() {
            self.changed();
        }
        for line in log {
            self.log(line);
        }
        self.check_claims_mounted_once(node, claimed_twice);
        pass
    }
}
