//! The invariants about claims checked as things happen, the claims a restarted controller
//! could not see, and the check at the end of a run (I3).

use std::collections::{BTreeMap, BTreeSet};

use super::{FORCE_MARGIN, Phase, Power, SimNode, World, join};
use crate::core::calls::volume::Access;

impl World {
    /// I1 for volumes claimed, not attached: a single-node one is mounted on one node at a
    /// time (the backend cannot refuse, so only the controller's grant keeps it so).
    pub(crate) fn check_claims_mounted_once(
        &mut self,
        node: &str,
        claimed_twice: impl IntoIterator<Item = String>,
    ) {
        for v in claimed_twice {
            // As I2 excuses a detach forced on timeout (opt-in, unsafe by design) from a node
            // that is not up, a claim it moved from such a node is excused here.
            let excused = |name: &String, n: &SimNode| {
                (self.force_detach_on_timeout && n.power != Power::Up)
                    || self.invisible_claims.contains(&(name.clone(), v.clone()))
            };
            let others: Vec<&String> = self
                .nodes
                .iter()
                .filter(|(name, n)| {
                    name.as_str() != node && n.mounted.contains(&v) && !excused(name, n)
                })
                .map(|(name, _)| name)
                .collect();
            if !others.is_empty() {
                let others = others.into_iter().cloned().collect::<Vec<_>>().join(",");
                self.violation(format!(
                    "I1: claim-only single-node volume {v} mounted on {node} while mounted on \
                     {others}"
                ));
            }
        }
    }

    /// Notes, as a controller starts, the claims it cannot know of (see
    /// [`invisible_claims`](World::invisible_claims)), beside those noted at earlier starts
    /// whose mounts last.
    pub(crate) fn note_invisible_claims(&mut self) {
        self.forget_ended_invisible_claims();
        let mut invisible = BTreeSet::new();
        for (name, n) in self.nodes.iter().filter(|(_, n)| !n.object) {
            let used: BTreeSet<&str> = self
                .pods_on
                .get(name)
                .into_iter()
                .flatten()
                .filter_map(|pod| self.pods.get(pod))
                // What the orchestrator lists, as the controller's start-up world does.
                .filter(|pod| matches!(pod.phase, Phase::Pending | Phase::Running))
                .flat_map(|pod| pod.volumes.iter().map(String::as_str))
                .collect();
            for v in n.mounted.iter().filter(|v| self.claim_only.contains(*v)) {
                if !used.contains(v.as_str()) {
                    invisible.insert((name.clone(), v.clone()));
                }
            }
        }
        self.invisible_claims.extend(invisible);
    }

    /// Drops the invisible claims whose mount has ended (an unmount, a fence, a power-off):
    /// called between agent passes, so that no remount can follow an unmount unseen.
    pub(crate) fn forget_ended_invisible_claims(&mut self) {
        if self.invisible_claims.is_empty() {
            return;
        }
        let nodes = &self.nodes;
        self.invisible_claims
            .retain(|(node, v)| nodes.get(node).is_some_and(|n| n.mounted.contains(v)));
    }

    /// I3 at the end of a run: reports match reality on live nodes, every pod on a live node
    /// runs, and no attachment is left that nothing needs. A pod may wait only for a single-node
    /// volume another node rightly holds (a pod there uses it, or the node crashed unfenced:
    /// seed 004's safe outcome), and then only with a Multi-Attach event naming it, or for room on
    /// a node at its attach limit, named in a node-full event. `in_use` is what the store holds
    /// of each node's in-use report.
    pub(crate) fn check_final(
        &mut self,
        multi_attach_pods: &BTreeSet<String>,
        node_full_pods: &BTreeSet<String>,
        in_use: &BTreeMap<String, BTreeSet<String>>,
    ) {
        let mut problems = Vec::new();
        // Single-node volumes another node rightly keeps: a pod there still uses it, or the
        // node crashed unfenced and may still be writing (seed 004's safe outcome).
        // (node, volume) for each volume a pod there that is not gone uses.
        let used: BTreeSet<(&str, &str)> = self
            .pods_on
            .iter()
            .flat_map(|(node, pods)| pods.iter().map(move |pod| (node.as_str(), pod)))
            .filter_map(|(node, pod)| self.pods.get(pod).map(|pod| (node, pod)))
            .flat_map(|(node, pod)| pod.volumes.iter().map(move |v| (node, v.as_str())))
            .collect();
        let used_on = |node: &str, volume: &str| used.contains(&(node, volume));
        // With force_detach_on_timeout, an unhealthy node's hold ends with the unmount wait:
        // the controller then detaches forced (the user took that risk). Once the world has
        // been still for that wait and a margin for retries and backoff, a crashed or
        // powered-off node no longer rightly keeps a volume no pod there uses.
        let forced_by_now = self.force_detach_on_timeout
            && self.now.saturating_sub(self.last_change)
                >= self.max_wait_for_unmount.saturating_add(FORCE_MARGIN);
        // A node that does not settle (crashed, deleted, silent, cut off from the backend)
        // or whose unmount of the volume hangs keeps what it has: nothing may be detached on
        // a guess.
        // (A fenced node keeps nothing: its volumes may and must be detached.)
        let keeps = |node: &str, volume: &str| {
            if self.partitioned.contains(node) || used_on(node, volume) {
                return true;
            }
            self.nodes.get(node).is_some_and(|n| {
                // Powered off without a taint: only machine fencing can tell.
                let unhealthy =
                    n.power == Power::Crashed || (n.power == Power::Off && !self.machine_fencing);
                (unhealthy && !forced_by_now)
                    || !n.object
                    || (n.power == Power::Up && !n.reporting)
                    || n.holds_hung(volume)
            })
        };
        // Where each claim-only volume is held: a claim has no backend record, so the agents'
        // mounts and the store's lists (the grant, which a node that never mounted it, say
        // one powered off first, still holds) are its truth.
        let mut claims: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (name, n) in &self.nodes {
            for v in n.mounted.iter().filter(|v| self.claim_only.contains(*v)) {
                claims.entry(v.as_str()).or_default().insert(name.as_str());
            }
        }
        // And a claim the store still says a node's agent has in use: a crashed agent never
        // withdraws its last report, and nothing else tells the controller that the machine,
        // booted clean, no longer mounts it.
        let mut granted: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (name, volumes) in self.listed.iter().chain(in_use) {
            for v in volumes.iter().filter(|v| self.claim_only.contains(*v)) {
                granted.entry(v.as_str()).or_default().insert(name.as_str());
            }
        }
        let rightly_held = |volume: &str, waiting_on: &str| {
            let mut holders: Vec<&str> = self
                .attached
                .get(volume)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            holders.extend(claims.get(volume).into_iter().flatten());
            holders.extend(granted.get(volume).into_iter().flatten());
            // Detached by hand where the backend cannot reach: the controller cannot know.
            holders.extend(
                self.detached_by_hand
                    .iter()
                    .filter(|(v, n)| v == volume && self.partitioned.contains(n))
                    .map(|(_, n)| n.as_str()),
            );
            self.volumes.get(volume) != Some(&Access::MultiNode)
                && holders
                    .into_iter()
                    .any(|n| n != waiting_on && keeps(n, volume))
        };
        // A claim in doubt (see `Event::ClaimInDoubt`) on `node` while another node named with
        // it still has a pod that uses the volume: the controller cannot tell which of them has
        // it mounted, so it grants it to none, lists it on none, and their pods wait for it.
        let in_doubt = |volume: &str, node: &str| {
            self.claims_in_doubt.get(volume).is_some_and(|nodes| {
                nodes.contains(node)
                    && nodes
                        .iter()
                        .any(|other| other != node && used_on(other, volume))
            })
        };
        let mut real: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (volume, nodes) in &self.attached {
            for node in nodes {
                real.entry(node).or_default().insert(volume.clone());
            }
        }
        // A node should list the claims it uses, as it lists what is attached to it.
        for (volume, nodes) in &claims {
            for node in nodes {
                real.entry(node).or_default().insert((*volume).to_string());
            }
        }
        let nothing = BTreeSet::new();
        for name in self.nodes.keys() {
            if !self.settles(name) {
                continue;
            }
            let real = real.get(name.as_str()).unwrap_or(&nothing);
            let listed = self.listed.get(name).unwrap_or(&nothing);
            let unlisted_in_doubt = |v: &&String| !listed.contains(*v) && in_doubt(v, name);
            // A claim the node mounted while a controller could not see it stays unlisted
            // while another node holds the grant: the gap, not a report out of date.
            let unlisted_invisible = |v: &&String| {
                !listed.contains(*v)
                    && self
                        .invisible_claims
                        .contains(&(name.clone(), (*v).clone()))
            };
            if !real
                .iter()
                .filter(|v| !unlisted_in_doubt(v) && !unlisted_invisible(v))
                .eq(listed.iter())
            {
                problems.push(format!(
                    "I3: {name} reports [{}] but has [{}] attached",
                    join(listed),
                    join(real)
                ));
            }
        }
        for (name, pod) in &self.pods {
            if !self.settles(&pod.node) || matches!(pod.phase, Phase::Running | Phase::Gone) {
                continue;
            }
            let node = self.nodes.get(&pod.node);
            let hangs = |v: &String| node.is_some_and(|n| n.holds_hung(v));
            if pod.phase == Phase::Terminating && pod.volumes.iter().any(hangs) {
                continue;
            }
            let waits = pod
                .volumes
                .iter()
                .any(|v| rightly_held(v, &pod.node) || in_doubt(v, &pod.node));
            if waits && multi_attach_pods.contains(name) {
                continue;
            }
            // A pod whose volume waits for room on a node at its attach limit waits rightly,
            // once a node-full event named it.
            let full = |v: &String| {
                node.and_then(|n| n.attach_limit).is_some_and(|l| {
                    !self.is_attached(v, &pod.node) && self.holds_besides(&pod.node, v) >= l.limit
                })
            };
            if pod.volumes.iter().any(full) && node_full_pods.contains(name) {
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
                if !keeps(node, volume) {
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
