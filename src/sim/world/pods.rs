//! Pods in the world: placed on a node, terminated gracefully or force-deleted, and what a
//! node stops needing when one goes.

use std::collections::BTreeSet;

use super::{Phase, SimPod, World};

impl World {
    /// `pod` is scheduled to `node` now with `volumes`, pending: placed again if it was placed
    /// before, here or elsewhere.
    pub(crate) fn schedule(&mut self, pod: &str, node: &str, volumes: Vec<String>) {
        if let Some((old, phase)) = self.pods.get(pod).map(|p| (p.node.clone(), p.phase)) {
            if phase != Phase::Gone {
                self.unindex(pod, &old, matches!(phase, Phase::Pending | Phase::Running));
            }
            self.unplace(pod, &old);
        }
        let distinct: BTreeSet<&String> = volumes.iter().collect();
        self.agent_work += distinct.len() as u64;
        let missing = match self.nodes.get_mut(node) {
            Some(n) => {
                for v in &distinct {
                    *n.needed.entry((*v).clone()).or_default() += 1;
                    n.users
                        .entry((*v).clone())
                        .or_default()
                        .insert(pod.to_string());
                    n.touched.volumes.insert((*v).clone());
                }
                n.touched.pods.insert(pod.to_string());
                distinct.iter().filter(|v| !n.mounted.contains(**v)).count()
            }
            None => distinct.len(),
        };
        self.pods_on
            .entry(node.to_string())
            .or_default()
            .insert(pod.to_string());
        self.mark(node);
        self.pods.insert(
            pod.to_string(),
            SimPod {
                node: node.to_string(),
                volumes,
                phase: Phase::Pending,
                missing,
                held: None,
            },
        );
    }

    /// `pod` is deleted gracefully: terminating, no longer counted in what its node needs.
    /// Returns its node, unless it is gone or unknown.
    pub(crate) fn terminate(&mut self, pod: &str) -> Option<String> {
        let (node, phase) = match self.pods.get(pod) {
            Some(p) if p.phase != Phase::Gone => (p.node.clone(), p.phase),
            _ => return None,
        };
        if phase != Phase::Terminating {
            self.unneed(pod, &node);
        }
        if let Some(p) = self.pods.get_mut(pod) {
            p.phase = Phase::Terminating;
            p.held = None;
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            n.touched.pods.insert(pod.to_string());
        }
        self.mark(&node);
        Some(node)
    }

    /// `pod` is gone from the API at once. Returns its node, unless it was gone or unknown.
    pub(crate) fn force_delete(&mut self, pod: &str) -> Option<String> {
        let (node, phase) = match self.pods.get(pod) {
            Some(p) if p.phase != Phase::Gone => (p.node.clone(), p.phase),
            _ => return None,
        };
        self.unindex(pod, &node, matches!(phase, Phase::Pending | Phase::Running));
        if let Some(p) = self.pods.get_mut(pod) {
            p.phase = Phase::Gone;
        }
        self.unplace(pod, &node);
        Some(node)
    }

    /// Takes `pod`'s volumes out of `node`'s count of what it needs.
    fn unneed(&mut self, pod: &str, node: &str) {
        let (Some(p), Some(n)) = (self.pods.get(pod), self.nodes.get_mut(node)) else {
            return;
        };
        let distinct: BTreeSet<&String> = p.volumes.iter().collect();
        self.agent_work += distinct.len() as u64;
        for v in distinct {
            if let Some(count) = n.needed.get_mut(v) {
                *count -= 1;
                if *count == 0 {
                    n.needed.remove(v);
                }
            }
            n.touched.volumes.insert(v.clone());
        }
    }

    /// Takes `pod` out of `node`'s indexes: out of what it needs if it was `live` (pending or
    /// running), out of who uses what.
    pub(super) fn unindex(&mut self, pod: &str, node: &str, live: bool) {
        if live {
            self.unneed(pod, node);
        }
        let (Some(p), Some(n)) = (self.pods.get(pod), self.nodes.get_mut(node)) else {
            return;
        };
        self.agent_work += p.volumes.len() as u64;
        for v in &p.volumes {
            if let Some(users) = n.users.get_mut(v) {
                users.remove(pod);
                if users.is_empty() {
                    n.users.remove(v);
                }
            }
        }
    }

    /// `pod` left `node` (moved or gone).
    fn unplace(&mut self, pod: &str, node: &str) {
        if let Some(pods) = self.pods_on.get_mut(node) {
            pods.remove(pod);
            if pods.is_empty() {
                self.pods_on.remove(node);
            }
        }
        self.mark(node);
    }

    /// `volume` is no longer mounted on `node`, whatever its agent did (detached under it,
    /// or by an operator): the pods there that use it count it missing, and the agent looks.
    pub(super) fn unmounted(&mut self, node: &str, volume: &str) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if !n.mounted.remove(volume) {
            return;
        }
        n.touched.volumes.insert(volume.to_string());
        for name in n.users.get(volume).into_iter().flatten() {
            self.agent_work += 1;
            if let Some(pod) = self.pods.get_mut(name) {
                pod.missing += 1;
            }
        }
    }
}
