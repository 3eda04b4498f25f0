//! Exhaustive model check of the core (issue #14): every interleaving of a small cluster,
//! explored with [stateright] over the REAL [`Reconciler`], not a re-implementation.
//!
//! Run: `cargo test --features sim --test model_check -- --nocapture` (the figures are printed).
//! The heavier worlds are `#[ignore]`d so that `cargo test --all-features` stays quick; run them
//! with `--ignored`.
//!
//! # The world
//!
//! Nodes `0..nodes`, volume 0 single-node, volume 1 multi-node, and workloads with fixed volume
//! needs (workloads 0 and 1 need volume 0, workload 2 volume 1). The environment is a simulated
//! truth, after the `core_model` fuzz target's harness (`src/sim/model.rs`): the backend's real
//! attachments, the store's per-node lists and revisions (compare-and-set), node agents that
//! report in use what their workloads need *before* mounting and mount only what is attached
//! and listed in their node's stored status, crashed agents that freeze, fenced nodes that are
//! powered off. What the core is told about a node lags: a node's new facts reach it only by a
//! [`Action::Deliver`] step, so its view may be older than the store's (the fresh read before a
//! detach is what must cover that).
//!
//! The backend keeps the contract of `AttachBackend`: `list` and `verify` count an attach still
//! under way (a call whose answer was lost) as attached, and it runs a volume's calls in order,
//! so a hanging call lands before the volume's next call lands, or never. Without the last two
//! a lost attach could land after a later detach of the same pair, which no core can see.
//!
//! Every step is one action: an orchestrator input (schedule, move, delete, force-delete a
//! workload), a node fault (crash, fence, unfence, recover), a controller restart, a driver pass
//! ([`Action::Poll`]: time jumps to the core's `next_deadline()`, the only way time moves, and
//! the planned operations start), the end of one running operation with an outcome (ok, failed,
//! timed out with the effect landed, never landed, or landing later; a status write may also
//! lose a compare-and-set race), or the late landing of a call whose answer was lost
//! (timed out, or lost in a restart). Faults and inputs come from bounded budgets
//! ([`Bounds`]), so the state space is finite and small.
//!
//! # Why states are (environment, trace) with a fingerprint of a canonical snapshot
//!
//! stateright needs `State: Clone + Hash + PartialEq`; [`Reconciler`] is neither `Clone` nor
//! `Hash`, and this check does not touch `src/` to make it so. A state therefore keeps the
//! environment plus the trace of every call made into the current core since it started (its
//! inputs, its polls with their times, the results handed back); the core is rebuilt by
//! replaying that trace, which is exact because the core is deterministic (no clock, no
//! randomness; its hash maps use a fixed hasher). A restart starts a new trace, so traces stay
//! short.
//!
//! Hashing the trace would make every path a new state (ids and times only grow), so `Hash` and
//! `PartialEq` look only at a canonical snapshot: the environment (with operation ids left out
//! and revisions as they are) and the core's public state after the step (`desired()`,
//! `actual()` per pair including the time since a detach was requested, `status()` per node,
//! `is_recovering()`, the number in flight) with every time made relative to now. Two paths
//! whose snapshots agree are merged. That is an abstraction: hidden bookkeeping (a backoff's
//! exponent, a timer later than the next deadline, the events already raised) is not compared,
//! so the check may miss a behaviour that only such hidden state leads to. A relative time is
//! capped (the next deadline at [`FAR`], the time since a detach was requested just past the
//! unmount wait), and the periodic verify and listing run hourly (see [`World::config`]): their
//! phase would otherwise tell apart states reached at different times. A world may also stop
//! expanding states past a virtual-time horizon. It never reports a
//! false one: every state's successors are computed by replaying a real trace, and every
//! counterexample is a real execution of the real core, printed step by step.
//!
//! # Properties
//!
//! - **I1** (always): no attach of a single-node volume is planned while the backend has it
//!   attached to another node, and the backend never holds it on two nodes.
//! - **I2** (always): no detach is planned, nor lands, while the volume is mounted on an
//!   unfenced node.
//!
//! Each is checked on the plan, as the fuzz harness does, because the core answers for what it
//! decides to do. A violation ends its path; stopping at the first, single-threaded, the
//! breadth-first search prints a shortest counterexample, one action a line.
//!
//! # Figures (release, 2 threads)
//!
//! | world | unique states | depth | time |
//! | --- | --- | --- | --- |
//! | smallest, 2 inputs, no fault (every `cargo test`) | 52k | 34 | 1.6 s |
//! | smallest, 3 inputs, 1 failure (ignored) | 1.44M | 54 | 67 s |
//! | C2 world, bug: found (1 thread) | 6.5k | 10 | 0.1 s |
//! | C2 world, corrected (ignored) | 274k | 43 | 11 s |
//! | C3 world, bug: found (1 thread) | 60k | 19 | 1.7 s |
//! | C3 world to 2 min, corrected (ignored) | 610k | 564 | 53 s |

#![cfg(feature = "sim")]

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use attach_detach::Ids;
use attach_detach::config::{Config, UpstreamBugs};
use attach_detach::core::{AttachState, Input, NodeFacts, OpId, Operation, Reconciler, VolumeSpec};
use attach_detach::traits::{
    AttachInfo, BackendAttachment, BackendError, NodeStatus, ReportedVolume, Revision, StoreError,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

type T = Ids<u8, u8, u8, ()>;

/// The single-node volume.
const SINGLE: u8 = 0;
/// The multi-node volume.
const MULTI: u8 = 1;

/// The volumes a workload needs.
fn needs(w: u8) -> &'static [u8] {
    match w {
        0 | 1 => &[SINGLE],
        _ => &[MULTI],
    }
}

fn spec_of(v: u8) -> VolumeSpec<()> {
    if v == SINGLE {
        VolumeSpec::single_node(())
    } else {
        VolumeSpec::multi_node(())
    }
}

/// What each kind of fault may do, and how many of each a path may have.
#[derive(Clone, Debug)]
struct Bounds {
    /// Orchestrator inputs (schedule, move, delete, force-delete) on one path.
    inputs: u8,
    /// Operation outcomes other than success on one path.
    faults: u8,
    /// Outcomes offered besides success and a plain failure.
    timeouts: bool,
    /// Status writes may lose a compare-and-set race to another writer.
    conflicts: bool,
    /// Node crashes on one path (each may then be fenced, unfenced, recovered).
    crashes: u8,
    /// Controller restarts on one path.
    restarts: u8,
}

/// The world to check: its size, its bounds, the core's configuration.
#[derive(Clone, Debug)]
struct World {
    nodes: u8,
    volumes: Vec<u8>,
    workloads: u8,
    bounds: Bounds,
    config: Config,
    /// States later than this are not expanded (`within_boundary`).
    horizon: Option<Duration>,
}

impl World {
    /// Timings shrunk so that the unmount wait is reached in a few passes, and the periodic
    /// verify and backend listing pushed to an hour: their absolute timers would otherwise put
    /// their phase (the time to the next one, in 100 ms passes) into every snapshot and
    /// multiply the states by thousands. They only find attachments the core does not know of,
    /// and the backend here runs a volume's calls in order (a hanging call lands before the
    /// volume's next one or never), so within the hour no path needs them.
    fn config(bugs: UpstreamBugs) -> Config {
        Config {
            sync_period: Duration::from_secs(3600),
            resync_period: Some(Duration::from_secs(3600)),
            max_wait_for_unmount: Duration::from_secs(10),
            unmount_recheck: Duration::from_secs(5),
            upstream_bugs: bugs,
            ..Config::default()
        }
    }
}

/// How a running operation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Outcome {
    /// Success.
    Ok,
    /// Failed, certainly did nothing.
    Fail,
    /// Timed out (an uncertain error); the effect landed before the answer was lost.
    TimeoutLanded,
    /// Timed out; the call never took effect.
    TimeoutNever,
    /// Timed out; the call hangs on and lands later (a backend call only).
    TimeoutLater,
    /// A status write lost a compare-and-set race to another writer.
    Conflict,
}

/// One step of the world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Schedule {
        w: u8,
        n: u8,
    },
    Move {
        w: u8,
        n: u8,
    },
    Delete {
        w: u8,
    },
    ForceDelete {
        w: u8,
    },
    /// A driver pass at the core's next deadline.
    Poll,
    /// Node `n`'s current facts reach the core.
    Deliver {
        n: u8,
    },
    /// The `i`-th running operation ends.
    Finish {
        i: usize,
        outcome: Outcome,
    },
    /// The `i`-th call whose answer was lost lands in the backend.
    Land {
        i: usize,
    },
    Crash {
        n: u8,
    },
    Fence {
        n: u8,
    },
    Unfence {
        n: u8,
    },
    Recover {
        n: u8,
    },
    Restart,
}

/// A planned operation, without its id (which is only a name in the current trace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Attach {
        v: u8,
        n: u8,
    },
    Detach {
        v: u8,
        n: u8,
        forced: bool,
    },
    Verify {
        n: u8,
        vs: Vec<u8>,
    },
    List,
    Write {
        n: u8,
        list: Vec<u8>,
        expected: String,
    },
    Read {
        n: u8,
    },
    ListStatuses,
}

impl Op {
    fn of(op: &Operation<T>) -> Op {
        match op {
            Operation::Attach { volume, node, .. } => Op::Attach {
                v: *volume,
                n: *node,
            },
            Operation::Detach {
                volume,
                node,
                force,
                ..
            } => Op::Detach {
                v: *volume,
                n: *node,
                forced: force.is_some(),
            },
            Operation::Verify { node, volumes, .. } => Op::Verify {
                n: *node,
                vs: volumes.iter().map(|(v, _)| *v).collect(),
            },
            Operation::ListAttachments { .. } => Op::List,
            Operation::WriteStatus {
                node,
                attached,
                expected,
                ..
            } => Op::Write {
                n: *node,
                list: attached.iter().map(|r| r.volume).collect(),
                expected: expected.text().into_owned(),
            },
            Operation::ReadStatus { node, .. } => Op::Read { n: *node },
            Operation::ListStatuses { .. } => Op::ListStatuses,
        }
    }

    fn outcomes(&self, bounds: &Bounds, faults_left: bool) -> Vec<Outcome> {
        let mut out = vec![Outcome::Ok];
        if !faults_left {
            return out;
        }
        out.push(Outcome::Fail);
        match self {
            Op::Attach { .. } | Op::Detach { .. } if bounds.timeouts => out.extend([
                Outcome::TimeoutLanded,
                Outcome::TimeoutNever,
                Outcome::TimeoutLater,
            ]),
            Op::Write { .. } => {
                if bounds.timeouts {
                    out.extend([Outcome::TimeoutLanded, Outcome::TimeoutNever]);
                }
                if bounds.conflicts {
                    out.push(Outcome::Conflict);
                }
            }
            _ => {}
        }
        out
    }
}

/// A running operation: what it is, and its id in the current core.
#[derive(Clone, Debug)]
struct Running {
    op: Op,
    id: OpId,
}

impl PartialEq for Running {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op
    }
}
impl Eq for Running {}
impl Hash for Running {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.op.hash(state);
    }
}

/// The result of an operation, as handed back to the core (kept in the trace).
#[derive(Clone, Debug)]
enum Answer {
    Attach(Result<(), bool>),
    Detach(Result<(), bool>),
    Verify(Option<Vec<u8>>),
    List(Option<Vec<(u8, u8)>>),
    /// Ok(new revision); Err(None) failed, Err(Some(true)) uncertain; conflict at a revision.
    Write(Result<u64, Option<bool>>),
    WriteConflict(u64),
    Read(Option<Status>),
    ListStatuses(Option<Vec<(u8, Status)>>),
}

/// A node's record in the store, as read.
#[derive(Clone, Debug)]
struct Status {
    attached: Vec<u8>,
    in_use: Option<Vec<u8>>,
    fenced: bool,
    healthy: bool,
    revision: u64,
}

impl Status {
    fn real(&self) -> NodeStatus<T> {
        NodeStatus {
            attached: self
                .attached
                .iter()
                .map(|v| ReportedVolume {
                    volume: *v,
                    device: None,
                })
                .collect(),
            in_use: self.in_use.clone(),
            fenced: Some(self.fenced),
            healthy: Some(self.healthy),
            revision: Revision::from(self.revision),
        }
    }
}

/// One call into the core.
#[derive(Clone, Debug)]
enum Call {
    Handle(Input<T>),
    Poll(Duration),
    Finish(Duration, OpId, Answer),
}

fn backend_error(may_have: bool) -> BackendError<u8> {
    if may_have {
        BackendError::uncertain("model: timed out")
    } else {
        BackendError::transient("model: failed")
    }
}

/// Makes `call` on `core`; returns the operations a poll planned.
fn apply(core: &mut Reconciler<T>, call: &Call) -> Vec<Operation<T>> {
    let fed = match call.clone() {
        Call::Handle(input) => core.handle(input),
        Call::Poll(now) => return core.poll(now),
        Call::Finish(now, id, answer) => match answer {
            Answer::Attach(r) => core.attach_finished(
                now,
                id,
                r.map(|()| AttachInfo::default()).map_err(backend_error),
            ),
            Answer::Detach(r) => core.detach_finished(now, id, r.map_err(backend_error)),
            Answer::Verify(r) => {
                core.verify_finished(now, id, r.ok_or_else(|| backend_error(false)))
            }
            Answer::List(r) => core.list_finished(
                now,
                id,
                r.map(|l| {
                    l.into_iter()
                        .map(|(v, n)| BackendAttachment {
                            volume: v,
                            node: n,
                            spec: spec_of(v),
                        })
                        .collect()
                })
                .ok_or_else(|| backend_error(false)),
            ),
            Answer::Write(r) => core.status_written(
                now,
                id,
                r.map(Revision::from).map_err(|e| match e {
                    Some(true) => StoreError::uncertain("model: timed out"),
                    _ => StoreError::transient("model: failed"),
                }),
            ),
            Answer::WriteConflict(rev) => {
                core.status_written(now, id, Err(StoreError::conflict(Revision::from(rev))))
            }
            Answer::Read(r) => core.status_read(
                now,
                id,
                r.map(|s| s.real())
                    .ok_or_else(|| StoreError::transient("model: failed")),
            ),
            Answer::ListStatuses(r) => core.statuses_listed(
                now,
                id,
                r.map(|l| l.into_iter().map(|(n, s)| (n, s.real())).collect())
                    .ok_or_else(|| StoreError::transient("model: failed")),
            ),
        },
    };
    if let Err(e) = fed {
        panic!("the core refused {call:?}: {e}");
    }
    Vec::new()
}

/// The truth about one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct NodeTruth {
    down: bool,
    fenced: bool,
    /// The agent's last in-use report (in the store); `None` before its first.
    in_use: Option<Vec<u8>>,
    /// The store's record: listed volumes and revision (0: never written).
    stored: Vec<u8>,
    revision: u64,
    /// What the core was last told about the node: healthy, fenced, in use.
    seen: (bool, bool, Option<Vec<u8>>),
}

/// `NodeFacts` as a hashable tuple.
fn facts_key(f: &NodeFacts<u8>) -> (bool, bool, Option<Vec<u8>>) {
    (f.healthy, f.fenced, f.in_use.clone())
}

impl NodeTruth {
    fn facts(&self) -> NodeFacts<u8> {
        NodeFacts {
            healthy: !self.down,
            fenced: self.fenced,
            in_use: self.in_use.clone(),
        }
    }

    fn status(&self) -> Status {
        Status {
            attached: self.stored.clone(),
            in_use: self.in_use.clone(),
            fenced: self.fenced,
            healthy: !self.down,
            revision: self.revision,
        }
    }
}

/// Every relative time at least this far is the same in a snapshot.
const FAR: Duration = Duration::from_secs(60);

/// The core's public state, times relative to now: what the fingerprint compares of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct CoreView {
    recovering: bool,
    in_flight: usize,
    next_deadline: Option<Duration>,
    /// Per (volume, node): state, reported, desired, time since a detach was requested (capped).
    pairs: Vec<(AttachState, bool, bool, Option<Duration>)>,
    /// Per node: revision known, stored list known, writing.
    status: Vec<(Option<String>, Option<Vec<u8>>, bool)>,
}

/// The environment: everything but the core, which the trace rebuilds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Env {
    /// (volume, node) attached in the backend.
    attached: BTreeSet<(u8, u8)>,
    mounted: BTreeSet<(u8, u8)>,
    nodes: Vec<NodeTruth>,
    /// Where each workload runs, as the orchestrator sees it.
    placement: Vec<Option<u8>>,
    running: Vec<Running>,
    /// Backend calls whose answer was lost, which may still land: (attach?, volume, node).
    orphans: Vec<(bool, u8, u8)>,
    inputs: u8,
    faults: u8,
    crashes: u8,
    restarts: u8,
    violation: Option<String>,
}

#[derive(Clone, Debug)]
struct State {
    env: Env,
    core: CoreView,
    /// Not compared: the absolute time, and the calls made into the current core.
    now: Duration,
    trace: Arc<Vec<Call>>,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.env.hash(state);
        self.core.hash(state);
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.env == other.env && self.core == other.core
    }
}

/// A state being stepped: the environment, a live core and the trace that built it.
struct Step<'a> {
    world: &'a World,
    env: Env,
    core: Reconciler<T>,
    now: Duration,
    trace: Vec<Call>,
}

impl Step<'_> {
    fn call(&mut self, call: Call) -> Vec<Operation<T>> {
        let ops = apply(&mut self.core, &call);
        self.trace.push(call);
        ops
    }

    fn handle(&mut self, input: Input<T>) {
        self.call(Call::Handle(input));
    }

    fn flag(&mut self, what: String) {
        if self.env.violation.is_none() {
            self.env.violation = Some(what);
        }
    }

    /// A driver pass at the next deadline: the planned operations start, each checked.
    fn poll(&mut self) {
        if let Some(due) = self.core.next_deadline() {
            self.now = self.now.max(due);
        }
        for op in self.call(Call::Poll(self.now)) {
            let desc = Op::of(&op);
            match &desc {
                Op::Attach { v, n } if *v == SINGLE => {
                    let elsewhere: Vec<u8> = (self.env.attached.iter())
                        .filter(|(av, an)| av == v && an != n)
                        .map(|(_, an)| *an)
                        .collect();
                    if !elsewhere.is_empty() {
                        self.flag(format!(
                            "I1: attach of single-node volume {v} to node {n} planned while attached to {elsewhere:?}"
                        ));
                    }
                }
                Op::Detach { v, n, forced } => self.check_i2(*v, *n, *forced, "planned"),
                _ => {}
            }
            self.env.running.push(Running {
                op: desc,
                id: op.id(),
            });
        }
    }

    fn check_i2(&mut self, v: u8, n: u8, forced: bool, when: &str) {
        if self.env.mounted.contains(&(v, n)) && !self.env.nodes[usize::from(n)].fenced {
            self.flag(format!(
                "I2: detach of volume {v} from node {n} {when} while mounted there and not fenced (forced: {forced})"
            ));
        }
    }

    fn land(&mut self, attach: bool, v: u8, n: u8) {
        if attach {
            // The backend refuses a single-node volume held by another node.
            if v != SINGLE
                || !self
                    .env
                    .attached
                    .iter()
                    .any(|(av, an)| *av == v && *an != n)
            {
                self.env.attached.insert((v, n));
            }
        } else {
            self.check_i2(v, n, false, "landed");
            self.env.attached.remove(&(v, n));
        }
    }

    fn finish(&mut self, i: usize, outcome: Outcome) {
        let Running { op, id } = self.env.running.remove(i);
        if outcome != Outcome::Ok {
            self.env.faults -= 1;
        }
        let timed_out = matches!(
            outcome,
            Outcome::TimeoutLanded | Outcome::TimeoutNever | Outcome::TimeoutLater
        );
        let answer = match op {
            Op::Attach { v, n } | Op::Detach { v, n, .. } => {
                let attach = matches!(op, Op::Attach { .. });
                match outcome {
                    Outcome::Ok | Outcome::TimeoutLanded => {
                        // The backend runs a volume's calls in order: a call of the volume
                        // still hanging lands before this one or not at all.
                        self.env.orphans.retain(|(_, ov, _)| *ov != v);
                        self.land(attach, v, n)
                    }
                    Outcome::TimeoutLater => self.env.orphans.push((attach, v, n)),
                    _ => {}
                }
                let r = match outcome {
                    Outcome::Ok => Ok(()),
                    _ => Err(timed_out),
                };
                if attach {
                    Answer::Attach(r)
                } else {
                    Answer::Detach(r)
                }
            }
            // A call still hanging counts as attached, as in a listing.
            Op::Verify { n, vs } => Answer::Verify((outcome == Outcome::Ok).then(|| {
                let listing = self.listing();
                vs.into_iter()
                    .filter(|v| listing.contains(&(*v, n)))
                    .collect()
            })),
            Op::List => Answer::List((outcome == Outcome::Ok).then(|| self.listing())),
            Op::Write { n, list, expected } => {
                let node = &mut self.env.nodes[usize::from(n)];
                if expected != Revision::from(node.revision).text() {
                    // Compare-and-set, as a store does: a stale revision is a conflict.
                    Answer::WriteConflict(node.revision)
                } else {
                    match outcome {
                        Outcome::Ok | Outcome::TimeoutLanded => {
                            node.stored = list;
                            node.revision += 1;
                            if outcome == Outcome::Ok {
                                Answer::Write(Ok(node.revision))
                            } else {
                                Answer::Write(Err(Some(true)))
                            }
                        }
                        Outcome::Conflict => {
                            node.revision += 1;
                            Answer::WriteConflict(node.revision)
                        }
                        Outcome::TimeoutNever => Answer::Write(Err(Some(true))),
                        _ => Answer::Write(Err(None)),
                    }
                }
            }
            Op::Read { n } => Answer::Read(
                (outcome == Outcome::Ok).then(|| self.env.nodes[usize::from(n)].status()),
            ),
            Op::ListStatuses => Answer::ListStatuses((outcome == Outcome::Ok).then(|| {
                (0..self.world.nodes)
                    .filter(|n| self.env.nodes[usize::from(*n)].revision > 0)
                    .map(|n| (n, self.env.nodes[usize::from(n)].status()))
                    .collect()
            })),
        };
        let now = self.now;
        self.call(Call::Finish(now, id, answer));
    }

    /// What the backend lists: what is attached, and what is still attaching (the contract of
    /// `AttachBackend::list`): calls whose answer was lost.
    fn listing(&self) -> Vec<(u8, u8)> {
        let attaching = self
            .env
            .orphans
            .iter()
            .filter(|(attach, ..)| *attach)
            .map(|(_, v, n)| (*v, *n));
        let all: BTreeSet<(u8, u8)> = self.env.attached.iter().copied().chain(attaching).collect();
        all.into_iter().collect()
    }

    /// Node agents: a live agent drops mounts no workload of its node needs, reports in use
    /// what its workloads need (before mounting), then mounts what is attached and listed in
    /// its stored status. A crashed or fenced agent changes nothing.
    fn agents(&mut self) {
        for n in 0..self.world.nodes {
            let node = &self.env.nodes[usize::from(n)];
            if node.down || node.fenced {
                continue;
            }
            let need: BTreeSet<u8> = (0..self.world.workloads)
                .filter(|w| self.env.placement[usize::from(*w)] == Some(n))
                .flat_map(|w| needs(w).iter().copied())
                .collect();
            self.env
                .mounted
                .retain(|(v, mn)| *mn != n || need.contains(v));
            let in_use: BTreeSet<u8> = (self.env.mounted.iter())
                .filter(|(_, mn)| *mn == n)
                .map(|(v, _)| *v)
                .chain(need.iter().copied())
                .collect();
            self.env.nodes[usize::from(n)].in_use = Some(in_use.into_iter().collect());
            for v in &need {
                if self.env.attached.contains(&(*v, n))
                    && self.env.nodes[usize::from(n)].stored.contains(v)
                {
                    self.env.mounted.insert((*v, n));
                }
            }
        }
    }

    /// A new core, as a restarted controller builds it from the orchestrator's view: every
    /// volume, every node (not heard from yet), every workload placed.
    fn start(&mut self) {
        self.core = Reconciler::new(self.world.config.clone());
        self.trace.clear();
        for v in self.world.volumes.clone() {
            self.handle(Input::SetVolume {
                volume: v,
                spec: spec_of(v),
            });
        }
        for n in 0..self.world.nodes {
            self.handle(Input::NodeUpdated {
                node: n,
                facts: NodeFacts::default(),
            });
            self.env.nodes[usize::from(n)].seen = facts_key(&NodeFacts::default());
        }
        for w in 0..self.world.workloads {
            if let Some(n) = self.env.placement[usize::from(w)] {
                self.handle(Input::WorkloadScheduled {
                    workload: w,
                    node: n,
                    volumes: needs(w).to_vec(),
                });
            }
        }
    }

    fn view(&self) -> CoreView {
        let core = &self.core;
        let cap = self.world.config.max_wait_for_unmount + Duration::from_secs(1);
        let mut pairs = Vec::new();
        for v in &self.world.volumes {
            for n in 0..self.world.nodes {
                let reported = core.actual().get(v, &n).is_some_and(|a| a.is_reported());
                let since = core
                    .actual()
                    .detach_requested_at(v, &n)
                    .map(|t| self.now.saturating_sub(t).min(cap));
                pairs.push((
                    core.actual().state(v, &n),
                    reported,
                    core.desired().is_desired(v, &n),
                    since,
                ));
            }
        }
        let status = (0..self.world.nodes)
            .map(|n| {
                (
                    core.status().revision(&n).map(|r| r.text().into_owned()),
                    core.status()
                        .stored(&n)
                        .map(|l| l.iter().map(|r| r.volume).collect()),
                    core.status().is_writing(&n),
                )
            })
            .collect();
        CoreView {
            recovering: core.is_recovering(),
            in_flight: core.in_flight(),
            // A deadline beyond the unmount wait is a periodic timer's: its phase would tell
            // apart states that differ only in how long ago they were reached.
            next_deadline: core
                .next_deadline()
                .map(|d| d.saturating_sub(self.now).min(FAR)),
            pairs,
            status,
        }
    }

    fn done(self) -> State {
        State {
            core: self.view(),
            env: self.env,
            now: self.now,
            trace: Arc::new(self.trace),
        }
    }
}

impl World {
    fn step(&self, s: &State) -> Step<'_> {
        let mut core = Reconciler::new(self.config.clone());
        for call in s.trace.iter() {
            apply(&mut core, call);
        }
        Step {
            world: self,
            env: s.env.clone(),
            core,
            now: s.now,
            trace: (*s.trace).clone(),
        }
    }

    fn node_up(env: &Env, n: u8) -> bool {
        let node = &env.nodes[usize::from(n)];
        !node.down && !node.fenced
    }
}

impl Model for World {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let b = &self.bounds;
        let mut step = Step {
            world: self,
            env: Env {
                nodes: vec![NodeTruth::default(); usize::from(self.nodes)],
                placement: vec![None; usize::from(self.workloads)],
                inputs: b.inputs,
                faults: b.faults,
                crashes: b.crashes,
                restarts: b.restarts,
                ..Env::default()
            },
            core: Reconciler::new(self.config.clone()),
            now: Duration::ZERO,
            trace: Vec::new(),
        };
        step.start();
        step.agents();
        vec![step.done()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let env = &s.env;
        if env.violation.is_some() {
            return;
        }
        if env.inputs > 0 {
            for w in 0..self.workloads {
                match env.placement[usize::from(w)] {
                    None => actions.extend((0..self.nodes).map(|n| Action::Schedule { w, n })),
                    Some(m) if Self::node_up(env, m) => {
                        actions.push(Action::Delete { w });
                        actions.extend(
                            (0..self.nodes)
                                .filter(|n| *n != m)
                                .map(|n| Action::Move { w, n }),
                        );
                    }
                    Some(_) => actions.push(Action::ForceDelete { w }),
                }
            }
        }
        if s.core.next_deadline.is_some() {
            actions.push(Action::Poll);
        }
        for n in 0..self.nodes {
            let node = &env.nodes[usize::from(n)];
            if node.seen != facts_key(&node.facts()) {
                actions.push(Action::Deliver { n });
            }
            if env.crashes > 0 && !node.down {
                actions.push(Action::Crash { n });
            }
            if node.down && !node.fenced {
                actions.push(Action::Fence { n });
                actions.push(Action::Recover { n });
            }
            if node.fenced {
                actions.push(Action::Unfence { n });
            }
        }
        for (i, r) in env.running.iter().enumerate() {
            for outcome in r.op.outcomes(&self.bounds, env.faults > 0) {
                actions.push(Action::Finish { i, outcome });
            }
        }
        for i in 0..env.orphans.len() {
            actions.push(Action::Land { i });
        }
        if env.restarts > 0 {
            actions.push(Action::Restart);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut step = self.step(s);
        match action {
            Action::Schedule { w, n } | Action::Move { w, n } => {
                step.env.inputs -= 1;
                step.env.placement[usize::from(w)] = Some(n);
                step.handle(Input::WorkloadScheduled {
                    workload: w,
                    node: n,
                    volumes: needs(w).to_vec(),
                });
            }
            Action::Delete { w } | Action::ForceDelete { w } => {
                step.env.inputs -= 1;
                step.env.placement[usize::from(w)] = None;
                step.handle(Input::WorkloadRemoved { workload: w });
            }
            Action::Poll => step.poll(),
            Action::Deliver { n } => {
                let facts = step.env.nodes[usize::from(n)].facts();
                step.env.nodes[usize::from(n)].seen = facts_key(&facts);
                step.handle(Input::NodeUpdated { node: n, facts });
            }
            Action::Finish { i, outcome } => step.finish(i, outcome),
            Action::Land { i } => {
                let (attach, v, n) = step.env.orphans.remove(i);
                step.land(attach, v, n);
            }
            Action::Crash { n } => {
                step.env.crashes -= 1;
                step.env.nodes[usize::from(n)].down = true;
            }
            Action::Fence { n } => {
                // Powered off: nothing is mounted any more.
                step.env.nodes[usize::from(n)].fenced = true;
                step.env.mounted.retain(|(_, mn)| *mn != n);
            }
            Action::Unfence { n } => step.env.nodes[usize::from(n)].fenced = false,
            Action::Recover { n } => step.env.nodes[usize::from(n)].down = false,
            Action::Restart => {
                step.env.restarts -= 1;
                // The running calls are lost; the backend's may still land.
                for r in std::mem::take(&mut step.env.running) {
                    match r.op {
                        Op::Attach { v, n } => step.env.orphans.push((true, v, n)),
                        Op::Detach { v, n, .. } => step.env.orphans.push((false, v, n)),
                        _ => {}
                    }
                }
                step.start();
            }
        }
        step.agents();
        if let Some(v) = single_attached_twice(&step.env) {
            step.flag(v);
        }
        Some(step.done())
    }

    fn within_boundary(&self, s: &State) -> bool {
        self.horizon.is_none_or(|h| s.now <= h)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("I1 single-node volume on one node", |_, s: &State| {
                !s.env
                    .violation
                    .as_deref()
                    .is_some_and(|v| v.starts_with("I1"))
            }),
            Property::always("I2 no detach of a mounted volume", |_, s: &State| {
                !s.env
                    .violation
                    .as_deref()
                    .is_some_and(|v| v.starts_with("I2"))
            }),
        ]
    }
}

/// I1 on the backend itself.
fn single_attached_twice(env: &Env) -> Option<String> {
    let on: Vec<u8> = (env.attached.iter())
        .filter(|(v, _)| *v == SINGLE)
        .map(|(_, n)| *n)
        .collect();
    (on.len() > 1).then(|| format!("I1: single-node volume {SINGLE} attached to nodes {on:?}"))
}

// ---- running -----------------------------------------------------------------------------------

struct Figures {
    states: usize,
    unique: usize,
    depth: usize,
    took: Duration,
}

/// Checks `world` breadth-first and prints the figures and a counterexample to each property
/// broken. On two threads; with `first`, on one, stopping at the first failure, so that its
/// path is a shortest one (two threads may finish a longer path of the same level first).
fn check(name: &str, world: World, first: bool) -> (Figures, Vec<(&'static str, Vec<String>)>) {
    let started = Instant::now();
    let properties: Vec<&'static str> = world.properties().iter().map(|p| p.name).collect();
    let mut builder = world.clone().checker().threads(2);
    if first {
        builder = builder.threads(1).finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let figures = Figures {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        took: started.elapsed(),
    };
    println!(
        "{name}: {} states ({} unique), depth {}, {:.1?}",
        figures.states, figures.unique, figures.depth, figures.took
    );
    let mut found = Vec::new();
    for p in properties {
        if let Some(path) = checker.discovery(p) {
            let lines = describe(&world, path.into_vec());
            println!("counterexample to {p} ({} steps):", lines.len());
            for line in &lines {
                println!("  {line}");
            }
            found.push((p, lines));
        }
    }
    (figures, found)
}

/// A path, one line per step: the action, with the operation it finished.
fn describe(world: &World, path: Vec<(State, Option<Action>)>) -> Vec<String> {
    let _ = world;
    let mut lines = Vec::new();
    for (i, (state, action)) in path.iter().enumerate() {
        let Some(action) = action else { continue };
        let what = match action {
            Action::Finish { i: k, outcome } => {
                format!("{:?} -> {outcome:?}", state.env.running[*k].op)
            }
            Action::Land { i: k } => format!("lands {:?}", state.env.orphans[*k]),
            other => format!("{other:?}"),
        };
        let after = path.get(i + 1).map(|(s, _)| s);
        let tail = after
            .map(|s| {
                format!(
                    "t={:?} attached={:?} mounted={:?}{}",
                    s.now,
                    s.env.attached,
                    s.env.mounted,
                    s.env
                        .violation
                        .as_ref()
                        .map(|v| format!(" VIOLATION {v}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_default();
        lines.push(format!("{:>2}. {what:<50} {tail}", lines.len() + 1));
    }
    lines
}

fn smallest(inputs: u8, faults: u8, bugs: UpstreamBugs) -> World {
    World {
        nodes: 2,
        volumes: vec![SINGLE],
        workloads: 2,
        bounds: Bounds {
            inputs,
            faults,
            timeouts: false,
            conflicts: false,
            crashes: 0,
            restarts: 0,
        },
        config: World::config(bugs),
        horizon: None,
    }
}

/// Deliverable 1, small enough for every `cargo test`: two nodes, the single-node volume, two
/// workloads; two inputs among schedule, move and delete; every operation succeeds (the
/// interleavings of passes, node reports and results are all there). I1 and I2 hold everywhere.
#[test]
fn smallest_world_keeps_i1_and_i2() {
    let (figures, found) = check(
        "smallest, 2 inputs, no fault",
        smallest(2, 0, UpstreamBugs::default()),
        false,
    );
    assert!(found.is_empty(), "{found:#?}");
    assert!(figures.unique > 100);
}

/// Deliverable 1 in full: three inputs, and one operation may fail. About 1.5 million states,
/// a minute in release (`cargo test --release --features sim --test model_check -- --ignored`).
#[test]
#[ignore = "about a minute in release"]
fn smallest_world_with_a_failure_keeps_i1_and_i2() {
    let world = smallest(3, 1, UpstreamBugs::default());
    let (_, found) = check("smallest, 3 inputs, 1 fault", world, false);
    assert!(found.is_empty(), "{found:#?}");
}

/// Deliverable 2: planted upstream bugs, each found with a shortest counterexample.
///
/// C2: an attach times out but took effect; its workload moves; upstream ignores the Uncertain
/// holder and attaches the single-node volume to the second node (I1). One workload, two
/// inputs, one fault, with timeouts.
fn c2_world(bugs: UpstreamBugs) -> World {
    let mut world = smallest(2, 1, bugs);
    world.workloads = 1;
    world.bounds.timeouts = true;
    world
}

#[test]
fn finds_c2_ignore_uncertain_holder() {
    let bugs = UpstreamBugs {
        c2_ignore_uncertain_holder: true,
        ..UpstreamBugs::default()
    };
    let (_, found) = check("c2_ignore_uncertain_holder", c2_world(bugs), true);
    assert!(
        found.iter().any(|(p, _)| p.starts_with("I1")),
        "C2 was not found"
    );
}

/// The C2 world with the correction in: 274k states, 11 s in release.
#[test]
#[ignore = "11 s in release"]
fn c2_world_corrected_keeps_i1_and_i2() {
    let (_, found) = check(
        "c2 world, corrected",
        c2_world(UpstreamBugs::default()),
        false,
    );
    assert!(found.is_empty(), "{found:#?}");
}

/// C3 (seed 004): a node crashes with the volume mounted, its workload is force-deleted;
/// upstream force-detaches after the unmount wait although the node is not fenced (I2). One
/// workload, two inputs, one crash (then fence, unfence, recover at will), no fault; explored
/// up to 2 virtual minutes.
fn c3_world(bugs: UpstreamBugs) -> World {
    let mut world = smallest(2, 0, bugs);
    world.workloads = 1;
    world.bounds.crashes = 1;
    world.horizon = Some(Duration::from_secs(120));
    world
}

#[test]
fn finds_c3_force_detach_unfenced() {
    let bugs = UpstreamBugs {
        c3_force_detach_unfenced: true,
        ..UpstreamBugs::default()
    };
    let (_, found) = check("c3_force_detach_unfenced", c3_world(bugs), true);
    assert!(
        found.iter().any(|(p, _)| p.starts_with("I2")),
        "C3 was not found"
    );
}

/// The C3 world with the correction in: 610k states, depth 564 (100 ms passes through the
/// unmount wait), 53 s in release.
#[test]
#[ignore = "a minute in release"]
fn c3_world_corrected_keeps_i1_and_i2() {
    let (_, found) = check(
        "c3 world, corrected",
        c3_world(UpstreamBugs::default()),
        false,
    );
    assert!(found.is_empty(), "{found:#?}");
}
