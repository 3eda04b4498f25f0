//! The node agents' pass checked against a reference: the pass as it was first written, over
//! every pod and volume of the node at each pass, which the pass that looks only at what
//! changed must match exactly (what it mounts, reports, starts and lets go, and every trace
//! line, record and violation). Run at every pass in the crate's tests, and under the fuzzers
//! (`cfg(fuzzing)`) when `SIM_CHECK_AGENTS` is set in the environment:
//! `SIM_CHECK_AGENTS=1 cargo fuzz run --sanitizer none world`. The check makes a fuzzed run
//! about twice as long, which the fuzzers' usual search for the core's faults should not pay.

use std::collections::BTreeSet;

use super::timeline::{Happening, PodPhase};
use super::world::{AgentPass, Phase, Power, SimNode, World};
use crate::core::calls::volume::Access;

/// Whether the fuzzers are asked to check every agent pass (`SIM_CHECK_AGENTS` is set).
#[cfg(fuzzing)]
pub(crate) fn wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("SIM_CHECK_AGENTS").is_some())
}

impl World {
    /// [`World::agent`], checked against [`agent_reference`](World::agent_reference) on a copy
    /// of what the reference reads: a difference panics, which fails the run with both sides.
    pub(crate) fn agent_checked(&mut self, node: &str) -> AgentPass {
        // A crashed or cut-off agent (or an unknown node) does nothing either way.
        if !self
            .nodes
            .get(node)
            .is_some_and(|n| n.power == Power::Up && n.reporting)
        {
            return self.agent(node);
        }
        // The reference reads this node, its pods and their volumes, and of the other nodes
        // only their power and mounts (to flag a claim mounted twice): only those are copied,
        // since the fuzzers run this at every pass.
        let mut scratch = World {
            now: self.now,
            claim_only: self.claim_only.clone(),
            force_detach_on_timeout: self.force_detach_on_timeout,
            invisible_claims: self.invisible_claims.clone(),
            last_change: self.last_change,
            tracing: self.tracing,
            timelining: self.timelining,
            ..World::default()
        };
        for (name, n) in &self.nodes {
            let mut copy = SimNode::new();
            copy.power = n.power;
            copy.mounted = n.mounted.clone();
            if name == node {
                copy.in_use = n.in_use.clone();
                copy.object = n.object;
                copy.reporting = n.reporting;
                copy.hung = n.hung.clone();
                copy.resync = n.resync;
            }
            scratch.nodes.insert(name.clone(), copy);
        }
        if let Some(here) = self.pods_on.get(node) {
            scratch.pods_on.insert(node.to_string(), here.clone());
            for p in here.iter().filter_map(|pod| self.pods.get_key_value(pod)) {
                scratch.pods.insert(p.0.clone(), p.1.clone());
                for v in &p.1.volumes {
                    if let Some(on) = self.attached.get(v) {
                        scratch.attached.insert(v.clone(), on.clone());
                    }
                    if let Some(access) = self.volumes.get(v) {
                        scratch.volumes.insert(v.clone(), *access);
                    }
                }
            }
        }
        if let Some(listed) = self.listed.get(node) {
            scratch.listed.insert(node.to_string(), listed.clone());
        }
        let (trace, timeline, violations) =
            (self.trace.len(), self.timeline.len(), self.violations.len());
        let expected = scratch.agent_reference(node);
        let pass = self.agent(node);
        // Compared first, described only if they differ: the check runs at every pass of
        // every fuzzed world.
        let mut differences = Vec::new();
        let mut compare =
            |what: &str, same: bool, got: &dyn Fn() -> String, want: &dyn Fn() -> String| {
                if !same {
                    differences.push(format!(
                        "in its {what}: {} where the reference has {}",
                        got(),
                        want()
                    ));
                }
            };
        compare(
            "report",
            pass.report == expected.report,
            &|| format!("{:?}", pass.report),
            &|| format!("{:?}", expected.report),
        );
        compare(
            "gone",
            pass.gone == expected.gone,
            &|| format!("{:?}", pass.gone),
            &|| format!("{:?}", expected.gone),
        );
        compare(
            "trace",
            self.trace[trace..] == scratch.trace,
            &|| format!("{:?}", &self.trace[trace..]),
            &|| format!("{:?}", scratch.trace),
        );
        compare(
            "timeline",
            self.timeline[timeline..] == scratch.timeline,
            &|| format!("{:?}", &self.timeline[timeline..]),
            &|| format!("{:?}", scratch.timeline),
        );
        compare(
            "violations",
            self.violations[violations..] == scratch.violations,
            &|| format!("{:?}", &self.violations[violations..]),
            &|| format!("{:?}", scratch.violations),
        );
        compare(
            "last change",
            self.last_change == scratch.last_change,
            &|| format!("{:?}", self.last_change),
            &|| format!("{:?}", scratch.last_change),
        );
        let node_now = self.nodes.get(node).map(state);
        let node_expected = scratch.nodes.get(node).map(state);
        compare(
            "node",
            node_now == node_expected,
            &|| format!("{node_now:?}"),
            &|| format!("{node_expected:?}"),
        );
        let (pods_now, pods_expected) = (phases(self, &scratch), phases(&scratch, &scratch));
        compare(
            "pods",
            pods_now == pods_expected,
            &|| format!("{pods_now:?}"),
            &|| format!("{pods_expected:?}"),
        );
        compare(
            "pods placed",
            self.pods_on.get(node) == scratch.pods_on.get(node),
            &|| format!("{:?}", self.pods_on.get(node)),
            &|| format!("{:?}", scratch.pods_on.get(node)),
        );
        assert!(
            differences.is_empty(),
            "the agent's pass over {node} at {:?} differs from the reference {}",
            self.now,
            differences.join("; ")
        );
        pass
    }

    /// The agent's pass as it was written before it looked only at what changed: over every
    /// pod and volume on the node, from scratch. Kept as the reference the pass is checked
    /// against.
    fn agent_reference(&mut self, node: &str) -> AgentPass {
        let mut pass = AgentPass::default();
        let Some(n) = self.nodes.get_mut(node) else {
            return pass;
        };
        // A crashed agent does nothing; so does one cut off from the API (`stop-reporting`): it
        // neither reports nor hears of changes, and its pods run on with their mounts.
        if n.power != Power::Up || !n.reporting {
            return pass;
        }
        let no_pods = BTreeSet::new();
        let here = self.pods_on.get(node).unwrap_or(&no_pods);
        let needs: BTreeSet<&str> = here
            .iter()
            .filter_map(|pod| self.pods.get(pod))
            .filter(|pod| matches!(pod.phase, Phase::Pending | Phase::Running))
            .flat_map(|pod| pod.volumes.iter().map(String::as_str))
            .collect();
        let mut log = Vec::new();
        let hung = &n.hung;
        n.mounted.retain(|v| {
            let keep = needs.contains(v.as_str()) || hung.contains(v);
            if !keep {
                log.push(format!("{node}: unmounted {v}"));
            }
            keep
        });
        // What is still mounted is needed or hangs, so in use is exactly what the pods need
        // and what cannot be unmounted.
        let in_use: BTreeSet<&str> = needs
            .iter()
            .copied()
            .chain(n.mounted.iter().map(String::as_str))
            .collect();
        // An agent whose node object is gone has nowhere to report (the store keeps nothing
        // for it); it mounts nothing new, since it cannot confirm its status.
        let reports = n.object;
        let changed = !n
            .in_use
            .iter()
            .map(String::as_str)
            .eq(in_use.iter().copied());
        if reports && (changed || n.resync) {
            n.resync = false;
            n.in_use = in_use.iter().map(|v| (*v).to_string()).collect();
            pass.report = Some(n.in_use.iter().cloned().collect());
        }
        let no_volumes = BTreeSet::new();
        let listed = self.listed.get(node).unwrap_or(&no_volumes);
        let mut claimed_twice = Vec::new();
        for v in needs.iter().filter(|_| reports) {
            let claim = self.claim_only.contains(*v);
            let attached = claim || self.attached.get(*v).is_some_and(|on| on.contains(node));
            if attached && listed.contains(*v) && !n.mounted.contains(*v) {
                n.mounted.insert((*v).to_string());
                log.push(format!("{node}: mounted {v}"));
                if claim && self.volumes.get(*v) != Some(&Access::MultiNode) {
                    claimed_twice.push((*v).to_string());
                }
            }
        }
        // Mounted only because their unmount hangs: the pods that used them cannot finish.
        let held: BTreeSet<String> = n
            .mounted
            .iter()
            .filter(|v| n.hung.contains(*v) && !needs.contains(v.as_str()))
            .cloned()
            .collect();
        let mut phases = Vec::new();
        for name in here {
            let Some(pod) = self.pods.get_mut(name) else {
                continue;
            };
            match pod.phase {
                Phase::Pending if pod.volumes.iter().all(|v| n.mounted.contains(v)) => {
                    pod.phase = Phase::Running;
                    log.push(format!("pod {name} running on {node}"));
                    phases.push((name.clone(), PodPhase::Running));
                }
                // Its volumes were unmounted above, unless another pod here still uses them
                // or their unmount hangs: then it stays terminating, as kubelet keeps a pod
                // whose volumes it cannot tear down.
                Phase::Terminating if !pod.volumes.iter().any(|v| held.contains(v)) => {
                    pod.phase = Phase::Gone;
                    log.push(format!("pod {name} gone"));
                    pass.gone.push(name.clone());
                    phases.push((name.clone(), PodPhase::Gone));
                }
                _ => {}
            }
        }
        for (pod, phase) in phases {
            self.record(Happening::Pod {
                pod,
                node: node.to_string(),
                phase,
            });
        }
        for pod in &pass.gone {
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

/// What the reference keeps of a node: its mounts, its in-use report, and whether its next
/// report must go out.
fn state(n: &SimNode) -> (&BTreeSet<String>, &BTreeSet<String>, bool) {
    (&n.mounted, &n.in_use, n.resync)
}

/// The phases in `world` of the pods `of` knows.
fn phases<'a>(world: &'a World, of: &'a World) -> Vec<(&'a String, Option<Phase>)> {
    of.pods
        .keys()
        .map(|pod| (pod, world.pods.get(pod).map(|p| p.phase)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use crate::sim::library::LIBRARY;
    use crate::sim::run;
    use crate::sim::scenario::parse;
    use crate::sim::seeds::with_seed;

    /// A run's violation from a pass that differed from the reference, if any.
    fn difference(text: &str, seed: u64) -> Option<String> {
        let scenario = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        run(&with_seed(&scenario, seed))
            .violations
            .into_iter()
            .map(|v| v.message)
            .find(|m| m.contains("differs from the reference") || m.contains("panicked"))
    }

    /// Every bundled incident, on its exact timeline and under two jitter seeds.
    #[test]
    fn the_library_passes_as_the_reference_does() {
        for (name, text) in LIBRARY {
            for seed in [0, 1, 2] {
                if let Some(difference) = difference(text, seed) {
                    panic!("{name}, seed {seed}: {difference}");
                }
            }
        }
    }

    /// xorshift64: a small deterministic generator.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
            words[self.below(words.len())]
        }
    }

    /// A random history on three nodes and five volumes: pods come, go and move, nodes crash,
    /// fence, lose their object, their agent or their backend, unmounts hang, calls fail, the
    /// controller restarts and the operator steps in, all crowded into a few seconds.
    fn random_scenario(rng: &mut Rng) -> String {
        let mut text = String::new();
        if rng.below(3) == 0 {
            text.push_str("set force-detach-on-timeout on\nset max-wait-for-unmount 20s\n");
        }
        if rng.below(3) == 0 {
            text.push_str("set max-attaches 1\n");
        }
        let _ = writeln!(text, "set cache-lag {}ms", 100 * rng.below(4));
        let _ = writeln!(text, "set attach-latency {}ms", 100 + 100 * rng.below(4));
        for n in 0..3 {
            match rng.below(4) {
                0 => {
                    let _ = writeln!(text, "node n{n} attach-limit {}", 1 + rng.below(2));
                }
                _ => {
                    let _ = writeln!(text, "node n{n}");
                }
            }
        }
        for v in 0..5 {
            let access = rng.pick(&["single-node", "single-node", "multi-node"]);
            let claim = if rng.below(4) == 0 { " claim-only" } else { "" };
            let _ = writeln!(text, "volume v{v} {access}{claim}");
        }
        let mut at = 0;
        for _ in 0..10 + rng.below(40) {
            at += rng
                .pick(&["0", "50", "100", "300", "1000", "4000"])
                .parse::<u64>()
                .unwrap_or(0);
            let (n, v, p) = (rng.below(3), rng.below(5), rng.below(6));
            let action = match rng.below(14) {
                0..=3 => {
                    let mut uses: Vec<usize> =
                        (0..1 + rng.below(3)).map(|_| rng.below(5)).collect();
                    uses.sort_unstable();
                    uses.dedup();
                    let uses: Vec<String> = uses.iter().map(|v| format!("v{v}")).collect();
                    format!("pod p{p} on n{n} uses {}", uses.join(","))
                }
                4 => format!("delete pod p{p}"),
                5 => format!("force-delete pod p{p}"),
                6..=8 => {
                    let change = rng.pick(&[
                        "crash",
                        "recover",
                        "fence",
                        "unfence",
                        "delete",
                        "create",
                        "stop-reporting",
                        "resume-reporting",
                        "power-off",
                        "power-on",
                    ]);
                    format!("node n{n} {change}")
                }
                9 => format!("{} unmount v{v} on n{n}", rng.pick(&["hang", "release"])),
                10 => format!("{} backend n{n}", rng.pick(&["partition", "heal"])),
                11 => format!(
                    "fail {} v{v} on n{n}{}",
                    rng.pick(&["attach", "detach"]),
                    rng.pick(&["", " uncertain", " times 2"])
                ),
                12 => rng
                    .pick(&["restart controller", "fail status n0", "fail status n1"])
                    .to_string(),
                _ => format!(
                    "{} v{v} from n{n}",
                    rng.pick(&["release", "operator-detach"])
                ),
            };
            let _ = writeln!(text, "at {at}ms {action}");
        }
        text
    }

    /// Random histories crowded with changes: every pass over every node matches the
    /// reference.
    #[test]
    fn random_histories_pass_as_the_reference_does() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let text = random_scenario(&mut rng);
            let seed = rng.below(3) as u64;
            if let Some(difference) = difference(&text, seed) {
                panic!("seed {seed}: {difference}\n{text}");
            }
        }
    }
}
