//! The simulated cluster: nodes with their agents, pods, the real attachments, injected faults,
//! and the invariants checked as things happen.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::scenario::{AttachLimit, CallOp};
use super::timeline::{Happening, PodPhase, Record};
use crate::core::calls::volume::Access;
use crate::memory::fault::Faults;

/// Whether a node runs, has crashed (agent stopped, disks still mounted), is fenced
/// (out-of-service: powered off, nothing mounted), or is powered off at the provider without
/// a taint (`power-off`: nothing mounted, no agent; only the backend's machine state says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Power {
    Up,
    Crashed,
    Fenced,
    Off,
}

#[derive(Clone, Debug)]
pub(crate) struct SimNode {
    pub(crate) power: Power,
    pub(crate) mounted: BTreeSet<String>,
    /// What the agent last reported in use.
    pub(crate) in_use: BTreeSet<String>,
    /// The node object exists in the API (`node <n> delete` removes it, `create` brings it
    /// back); the machine runs either way.
    pub(crate) object: bool,
    /// The agent reaches the API (`stop-reporting` cuts it off: it neither reports nor hears
    /// of changes, and its pods run on).
    pub(crate) reporting: bool,
    /// Volumes whose unmount hangs here (`hang unmount`): mounted, they stay mounted.
    pub(crate) hung: BTreeSet<String>,
    /// The agent's next pass reports its in-use list even if unchanged: it has just reached
    /// the API again, and the store may hold a report older than what [`in_use`](Self::in_use)
    /// says (a fence cleared it while the agent was cut off).
    pub(crate) resync: bool,
    /// How many volumes the machine holds at most (`attach-limit`), if capped.
    pub(crate) attach_limit: Option<AttachLimit>,
    /// Volume -> how many pods placed here, pending or running, use it: what the agent keeps
    /// mounted and reports in use.
    pub(crate) needed: BTreeMap<String, u32>,
    /// Volume -> the pods placed here, not gone, that use it: the pods whose counts a mount,
    /// an unmount or a hold moves.
    pub(crate) users: BTreeMap<String, BTreeSet<String>>,
    /// What the agent's last pass found held: mounted, needed by no pod here, its unmount hung.
    pub(crate) held: BTreeSet<String>,
    /// What changed since the agent's last pass, for its next one to look at.
    pub(crate) touched: Touched,
}

/// What a node agent's next pass must look at: what changed since its last pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct Touched {
    /// Volumes whose need, mount, hang, attachment or listing on the node changed.
    pub(crate) volumes: BTreeSet<String>,
    /// Pods placed on the node, or deleted there.
    pub(crate) pods: BTreeSet<String>,
    /// Everything on the node: its power, its reporting or its object changed, or the last
    /// pass could not report.
    pub(crate) all: bool,
}

impl SimNode {
    /// A node as declared: up, nothing mounted, its object present, its agent reporting.
    pub(crate) fn new() -> Self {
        SimNode {
            power: Power::Up,
            mounted: BTreeSet::new(),
            in_use: BTreeSet::new(),
            object: true,
            reporting: true,
            hung: BTreeSet::new(),
            resync: false,
            attach_limit: None,
            needed: BTreeMap::new(),
            users: BTreeMap::new(),
            held: BTreeSet::new(),
            touched: Touched::default(),
        }
    }

    /// Whether the agent's reports reach the API: it runs, it reports, and its object exists.
    pub(crate) fn reports(&self) -> bool {
        self.power == Power::Up && self.reporting && self.object
    }

    /// Whether `volume` is mounted here and its unmount hangs.
    pub(crate) fn holds_hung(&self, volume: &str) -> bool {
        self.hung.contains(volume) && self.mounted.contains(volume)
    }
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
    /// How many of its volumes (each counted once) are not mounted on its node: it starts
    /// when none is missing.
    pub(crate) missing: usize,
    /// Terminating, once its node's agent has looked: how many of its volumes the node holds
    /// (see [`SimNode::held`]). It is gone when none is.
    pub(crate) held: Option<usize>,
}

/// What an agent pass did that the controller must hear of.
#[derive(Debug, Default)]
pub(crate) struct AgentPass {
    /// The new in-use list, when it changed.
    pub(crate) report: Option<Vec<String>>,
    /// Pods that finished terminating, in name order: gone from the API now.
    pub(crate) gone: Vec<String>,
}

/// An invariant or expectation that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// Virtual time it was seen.
    pub at: Duration,
    /// The scenario line of the expectation, if it is one.
    pub line: Option<usize>,
    /// What was expected and what was seen.
    pub message: String,
}

/// How long past [`World::max_wait_for_unmount`] a still world gives the controller's forced
/// detach from an unhealthy node (its fresh read, rechecks and a failed call's backoff)
/// before the final check stops excusing the wait for it.
const FORCE_MARGIN: Duration = Duration::from_secs(5 * 60);

/// Everything the simulation knows that the controller does not.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) now: Duration,
    pub(crate) nodes: BTreeMap<String, SimNode>,
    pub(crate) volumes: BTreeMap<String, Access>,
    pub(crate) pods: BTreeMap<String, SimPod>,
    /// Node -> the pods placed there that are not gone, in name order: what the node's agent
    /// looks at when it looks at everything, and what a fence deletes.
    pub(crate) pods_on: BTreeMap<String, BTreeSet<String>>,
    /// Nodes whose agent must look again: something it reads changed since its last pass (its
    /// pods, its power, its attachments, its status in the store). An agent pass over anything
    /// else would change nothing, so the runner skips it, and sleeps while this is empty.
    pub(crate) dirty: BTreeSet<String>,
    /// Nodes whose list in the store changed since [`listed`](World::listed) was refreshed.
    pub(crate) stale_listed: BTreeSet<String>,
    /// Wakes the runner when a node turns dirty while it sleeps.
    pub(crate) wake: Arc<Notify>,
    /// The truth: volume -> nodes it is attached to.
    pub(crate) attached: BTreeMap<String, BTreeSet<String>>,
    /// Attach calls the backend has started and not finished, per (volume, node): a cloud
    /// lists a volume that is still attaching, and so does this backend (see
    /// [`AttachBackend::list`](crate::traits::AttachBackend::list)).
    pub(crate) attaching: BTreeMap<(String, String), u32>,
    /// Detach calls under way, likewise: an attach of the same pair is refused meanwhile.
    pub(crate) detaching: BTreeMap<(String, String), u32>,
    /// The scenario's `fail attach|detach` lines, each for a (call, volume, node): whether the
    /// failed call is uncertain (the backend did it anyway).
    pub(crate) faults: Faults<(CallOp, String, String), bool>,
    pub(crate) calls: BTreeMap<(CallOp, String, String), u64>,
    pub(crate) violations: Vec<Violation>,
    pub(crate) trace: Vec<String>,
    pub(crate) last_change: Duration,
    pub(crate) force_detach_on_timeout: bool,
    /// `set max-wait-for-unmount`: with [`force_detach_on_timeout`](Self::force_detach_on_timeout),
    /// how long an unhealthy node may keep a volume no pod there uses.
    pub(crate) max_wait_for_unmount: Duration,
    /// `set machine-fencing on`: a powered-off node's volumes must move (I3), and only a
    /// machine that is really off may have a mounted volume detached (I2).
    pub(crate) machine_fencing: bool,
    /// Stores' lists per node, refreshed by the runner before agents read them.
    pub(crate) listed: BTreeMap<String, BTreeSet<String>>,
    /// The scenario's seed as a xorshift state; 0 means no jitter at all.
    pub(crate) rng: u64,
    /// Nodes the backend cannot reach (`partition backend`): calls about them hang.
    pub(crate) partitioned: BTreeSet<String>,
    /// Woken when a partition heals, so hung calls look again.
    pub(crate) healed: Arc<Notify>,
    /// What happened, structured, for the timeline picture.
    pub(crate) timeline: Vec<Record>,
    /// The controller restarted during the run: attaches it lost may land unknown to its
    /// successor, which can then rightly plan past a node's limit (the backend refuses).
    pub(crate) restarted: bool,
    /// Volumes nodes reach without an attach (`claim-only`): mounted once listed.
    pub(crate) claim_only: BTreeSet<String>,
    /// (volume, node): attachments an operator detached by hand while the backend could not
    /// reach the node. The controller can learn of it only from the backend (a verify, a
    /// detach call), so until the partition heals the volume is still attached there as far
    /// as it can know, and I3 lets a pod wait for it as for a volume the node holds.
    pub(crate) detached_by_hand: BTreeSet<(String, String)>,
    /// Volume -> the nodes a controller named in a `ClaimInDoubt` event: after a restart,
    /// several nodes reported it in use and no status listed it, so none was granted it.
    pub(crate) claims_in_doubt: BTreeMap<String, BTreeSet<String>>,
    /// (node, volume): mounted claims some controller could not know of when it started. The
    /// node's object was gone (so its status, the claim's only record, too), and no pod placed
    /// there used the volume, yet the machine had it mounted: the gap docs/design.md names under
    /// "Claims" ("What is not covered"). A claim granted elsewhere meanwhile is excused from I1.
    ///
    /// The excuse rests on that start, not on the controller running now: it is kept across
    /// restarts for as long as the mount it is about lasts (a pod placed on the node later, say,
    /// mounts nothing on a node without an object, and is no evidence the next controller may
    /// weigh against another node's recorded grant; see `Reconciler`'s claim recovery), and
    /// dropped once the node no longer has the volume mounted, so that a later mount there is
    /// held to I1 again.
    pub(crate) invisible_claims: BTreeSet<(String, String)>,
    /// What the node agents' passes looked at: each volume and pod considered, each count a
    /// mount or a release moved (see [`Report::agent_work`](super::Report::agent_work)).
    pub(crate) agent_work: u64,
    /// Whether [`log`](World::log) keeps the trace: a status write's line lists the node's
    /// volumes, so a run that nobody reads the trace of skips them.
    pub(crate) tracing: bool,
    /// Whether [`record`](World::record) keeps the timeline, likewise.
    pub(crate) timelining: bool,
}

pub(crate) fn fmt_time(d: Duration) -> String {
    let ms = d.as_millis();
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

impl World {
    pub(crate) fn log(&mut self, line: impl AsRef<str>) {
        if !self.tracing {
            return;
        }
        let mut s = String::new();
        let _ = write!(s, "{:>10}  {}", fmt_time(self.now), line.as_ref());
        self.trace.push(s);
    }

    /// `base` varied to between half and one and a half of it, from the seed; `base` itself
    /// when the seed is 0, so hand-written timelines stay exact.
    pub(crate) fn jitter(&mut self, base: Duration) -> Duration {
        if self.rng == 0 {
            return base;
        }
        // xorshift64*: small, good enough, and the same on every machine.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        let permille = u32::try_from(500 + r % 1001).unwrap_or(1000);
        // Scenarios keep latencies far below where this could overflow; saturate all the same.
        base.checked_mul(permille)
            .map_or(Duration::MAX, |stretched| stretched / 1000)
    }

    /// Notes `what` in the timeline, now.
    pub(crate) fn record(&mut self, what: Happening) {
        if !self.timelining {
            return;
        }
        self.timeline.push(Record { at: self.now, what });
    }

    /// Whether `node` ends the run able to converge: its machine and agent run, its object
    /// exists, its reports reach the API and the backend reaches it. Only such nodes are held
    /// to I3's "reports match reality, pods run, nothing left over".
    fn settles(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(SimNode::reports) && !self.partitioned.contains(node)
    }

    pub(crate) fn changed(&mut self) {
        self.last_change = self.now;
    }

    /// `node`'s agent must look again at its next pass.
    pub(crate) fn mark(&mut self, node: &str) {
        if !self.dirty.contains(node) {
            self.dirty.insert(node.to_string());
        }
        self.wake.notify_one();
    }

    /// `node`'s list in the store changed: refresh it, and let its agent look.
    pub(crate) fn stored_changed(&mut self, node: &str) {
        if !self.stale_listed.contains(node) {
            self.stale_listed.insert(node.to_string());
        }
        self.mark(node);
    }

    /// `volume` on `node` changed in a way its agent reads (attached, detached, listed, its
    /// unmount hung or released): its next pass looks at it.
    pub(crate) fn touch(&mut self, node: &str, volume: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            if !n.touched.volumes.contains(volume) {
                n.touched.volumes.insert(volume.to_string());
            }
        }
    }

    /// Something of `node` as a whole changed (its power, reporting or object): its agent's
    /// next pass looks at everything there, and each pod's count of missing volumes is taken
    /// again from what is mounted now.
    pub(crate) fn touch_all(&mut self, node: &str) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        n.touched.all = true;
        for name in self.pods_on.get(node).into_iter().flatten() {
            if let Some(pod) = self.pods.get_mut(name) {
                let distinct: BTreeSet<&String> = pod.volumes.iter().collect();
                self.agent_work += distinct.len() as u64;
                pod.missing = distinct
                    .into_iter()
                    .filter(|v| !n.mounted.contains(*v))
                    .count();
            }
        }
    }

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
    fn unindex(&mut self, pod: &str, node: &str, live: bool) {
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
    fn unmounted(&mut self, node: &str, volume: &str) {
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

    /// Attached, or an attach call is under way: what the backend's verify and list report.
    pub(crate) fn may_be_attached(&self, volume: &str, node: &str) -> bool {
        self.is_attached(volume, node) || self.attaching(volume, node)
    }

    /// A call of `op` on `volume` and `node` started (`true`) or finished (`false`).
    pub(crate) fn under_way(&mut self, op: CallOp, volume: &str, node: &str, started: bool) {
        let calls = match op {
            CallOp::Attach => &mut self.attaching,
            CallOp::Detach => &mut self.detaching,
        };
        let key = (volume.to_string(), node.to_string());
        if started {
            *calls.entry(key).or_default() += 1;
        } else if let Some(count) = calls.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&key);
            }
        }
    }

    /// Whether an attach of `volume` to `node` is under way.
    pub(crate) fn attaching(&self, volume: &str, node: &str) -> bool {
        self.attaching
            .contains_key(&(volume.to_string(), node.to_string()))
    }

    /// How many volumes `node` holds or is being given, other than `volume`: what counts
    /// against its attach limit.
    pub(crate) fn holds_besides(&self, node: &str, volume: &str) -> u32 {
        let attached = self
            .attached
            .iter()
            .filter(|(v, nodes)| v.as_str() != volume && nodes.contains(node));
        let attaching = self
            .attaching
            .keys()
            .filter(|(v, n)| v != volume && n == node && !self.is_attached(v, n));
        u32::try_from(attached.count() + attaching.count()).unwrap_or(u32::MAX)
    }

    /// I5, and the machine's cap: an attach of `volume` to a node at its `attach-limit` is
    /// refused (`Some(limit)`), and one the controller planned although the node reported the
    /// limit (and the controller knew of everything on it: it never restarted) is a violation.
    pub(crate) fn over_limit(&mut self, volume: &str, node: &str) -> Option<u32> {
        let limit = self.nodes.get(node)?.attach_limit?;
        if self.is_attached(volume, node) || self.holds_besides(node, volume) < limit.limit {
            return None;
        }
        if limit.reported && !self.restarted {
            self.violation(format!(
                "I5: an attach of {volume} to {node} was planned past the node's reported limit \
                 of {}",
                limit.limit
            ));
        }
        Some(limit.limit)
    }

    /// Whether a detach of `volume` from `node` is under way.
    pub(crate) fn detaching(&self, volume: &str, node: &str) -> bool {
        self.detaching
            .contains_key(&(volume.to_string(), node.to_string()))
    }

    /// Takes the fault matching this call, if any: `Some(uncertain)`.
    pub(crate) fn take_fault(&mut self, op: CallOp, volume: &str, node: &str) -> Option<bool> {
        self.faults
            .take(|(o, v, n)| *o == op && v == volume && n == node)
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
            self.touch(node, volume);
            self.mark(node);
        }
    }

    /// An operator detached `volume` from `node` behind the controller's back: no invariant
    /// is the controller's to keep here. While the backend cannot reach the node, nothing can
    /// tell the controller (see [`detached_by_hand`](World::detached_by_hand)).
    pub(crate) fn operator_detach(&mut self, volume: &str, node: &str) {
        if self.partitioned.contains(node) && self.is_attached(volume, node) {
            self.detached_by_hand
                .insert((volume.to_string(), node.to_string()));
        }
        self.unmounted(node, volume);
        let removed = self
            .attached
            .get_mut(volume)
            .is_some_and(|nodes| nodes.remove(node));
        if self.attached.get(volume).is_some_and(BTreeSet::is_empty) {
            self.attached.remove(volume);
        }
        if removed {
            self.log(format!("operator: {volume} detached from {node}"));
            self.changed();
            self.touch(node, volume);
        }
        self.mark(node);
    }

    /// A detach takes effect. I2: never while mounted on a node that is neither fenced nor
    /// allowed by configuration (a powered-off machine has nothing mounted, so a detach forced
    /// because the backend said `Off` is a violation exactly when the machine in fact runs);
    /// I4: never while the node's status still lists it for a live agent, which could start
    /// mounting it.
    ///
    /// `crashed_at_call`: the node was down when the controller made the call.
    pub(crate) fn detach_effect(
        &mut self,
        volume: &str,
        node: &str,
        listed: bool,
        crashed_at_call: bool,
    ) {
        let (power, mounted) = self.nodes.get(node).map_or((Power::Fenced, false), |n| {
            (n.power, n.mounted.contains(volume))
        });
        let forced_ok =
            self.force_detach_on_timeout && (power == Power::Crashed || crashed_at_call);
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
        self.unmounted(node, volume);
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
            self.touch(node, volume);
        }
        self.mark(node);
    }

    /// A controller forgot the attachment of `volume` to `node` on an operator's release. It
    /// may do so only once a verify started after the release found the volume gone: if the
    /// backend still holds it (or is still attaching it), the core forgot an attachment the
    /// backend has, which leaks it and lets the volume go to a second node.
    pub(crate) fn note_release(&mut self, volume: &str, node: &str) {
        if self.may_be_attached(volume, node) {
            self.violation(format!(
                "I1: the controller forgot {volume} on {node} on a release while the backend \
                 still holds it"
            ));
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

pub(crate) fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}
