//! The simulated cluster: nodes with their agents, pods, the real attachments, injected faults,
//! and the invariants checked as things happen.
//!
//! Here: the world's pieces and the bookkeeping of what changed (the log, the timeline, the dirty
//! nodes and the volumes an agent must look at again). Beside: [`pods`] places and removes pods,
//! [`calls`] is what the backend's calls do to the real attachments, [`agent`] a node agent's
//! pass, [`invariants`] the claim checks and the final one.

mod agent;
mod calls;
mod invariants;
mod pods;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::scenario::{AttachLimit, CallOp};
use super::timeline::{Happening, Record};
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

    pub(crate) fn violation(&mut self, message: String) {
        self.log(format!("VIOLATION {message}"));
        self.violations.push(Violation {
            at: self.now,
            line: None,
            message,
        });
    }
}

pub(crate) fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}
