//! Model checks for the core: small, obviously-correct reference models of the desired and
//! actual state, and a planner harness that checks every plan of the reconciler against a
//! simulated truth. Shared by the proptest properties in `cargo test` and the `core_model`
//! fuzz target, so both explore the same histories.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arbitrary::Arbitrary;

use crate::Ids;
use crate::config::Config;
use crate::core::calls::backend::MachineState;
use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError};
use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::{NodeStatus, Revision, StoreError};
use crate::core::calls::volume::VolumeSpec;
use crate::core::input::Input;
use crate::core::operation::OpKind;
use crate::core::operation::{OpId, Operation};
use crate::core::outcome::Outcome;
use crate::core::reconciler::Reconciler;
use crate::core::state::actual::{ActualState, AttachState, NodeFacts};
use crate::core::state::desired::{DesiredState, Missing};
use crate::testkit::{Harness, Held, listed};

type T = Ids<u8, u8, u8, ()>;

const NODES: u8 = 4;
const VOLUMES: u8 = 6;

fn node(n: u8) -> u8 {
    n % NODES
}

fn volume(v: u8) -> u8 {
    v % VOLUMES
}

/// One operation on the desired and actual state structures.
#[derive(Arbitrary, Clone, Debug)]
pub enum StateOp {
    /// `DesiredState::add_node`.
    AddNode(u8),
    /// `DesiredState::remove_node`.
    RemoveNode(u8),
    /// `DesiredState::set_volume` (multi-node when true).
    SetVolume(u8, bool),
    /// `DesiredState::add_workload`.
    AddWorkload(u8, u8, Vec<u8>),
    /// `DesiredState::remove_workload`.
    RemoveWorkload(u8),
    /// `ActualState::set_attached`.
    Attached(u8, u8),
    /// `ActualState::set_uncertain`.
    Uncertain(u8, u8),
    /// `ActualState::set_detached`.
    Detached(u8, u8),
    /// `ActualState::set_withheld`.
    Withhold(u8, u8, bool),
    /// `DesiredState::unregister_volume`.
    UnregisterVolume(u8),
    /// `DesiredState::poll_pending` at this many seconds since the start (never backwards).
    PollPending(u8),
}

/// How many workloads may wait in [`check_state_ops`]: small, so that the limit is reached.
const MAX_PENDING: usize = 3;

#[derive(Default)]
struct RefModel {
    nodes: BTreeSet<u8>,
    /// Registered volumes.
    volumes: BTreeSet<u8>,
    /// Every workload known, placed or waiting: what it asked for.
    workloads: BTreeMap<u8, (u8, BTreeSet<u8>)>,
    /// (volume, node) -> (attached or uncertain, withheld)
    attachments: BTreeMap<(u8, u8), (AttachState, bool)>,
}

impl RefModel {
    /// Whether everything `w` names is known, so that it is placed.
    fn ready(&self, n: u8, vs: &BTreeSet<u8>) -> bool {
        self.nodes.contains(&n) && vs.iter().all(|v| self.volumes.contains(v))
    }

    fn placed(&self, w: u8) -> bool {
        self.workloads
            .get(&w)
            .is_some_and(|(n, vs)| self.ready(*n, vs))
    }

    fn pending(&self) -> usize {
        self.workloads.keys().filter(|w| !self.placed(**w)).count()
    }

    fn desired(&self, v: u8, n: u8) -> bool {
        !self.users(v, n).is_empty()
    }

    /// The placed workloads needing `v` on `n`, sorted.
    fn users(&self, v: u8, n: u8) -> Vec<u8> {
        self.workloads
            .iter()
            .filter(|(w, (wn, vs))| *wn == n && vs.contains(&v) && self.placed(**w))
            .map(|(w, _)| *w)
            .collect()
    }

    fn missing(&self, w: u8) -> Vec<Missing<T>> {
        let Some((n, vs)) = self.workloads.get(&w) else {
            return Vec::new();
        };
        let node = (!self.nodes.contains(n)).then_some(Missing::Node(*n));
        node.into_iter()
            .chain(
                vs.iter()
                    .filter(|v| !self.volumes.contains(v))
                    .map(|v| Missing::Volume(*v)),
            )
            .collect()
    }
}

/// Applies `ops` to [`DesiredState`] and [`ActualState`] and to a reference model, comparing
/// every observable after each step. Returns the first divergence.
///
/// The reference model of the desired state keeps every workload with what it asked for, and
/// derives the rest: a workload is placed exactly when its node and all its volumes are known,
/// and waits otherwise; at most three may start to wait. Each wait is reported once
/// by `poll_pending`, no earlier than the warning delay after the poll that saw it begin.
pub fn check_state_ops(ops: &[StateOp]) -> Result<(), String> {
    let warn_after = Duration::from_secs(30);
    let mut dsw: DesiredState<T> = DesiredState::new(&Config {
        max_pending_workloads: MAX_PENDING,
        pending_workload_warning: warn_after,
        ..Config::default()
    });
    let mut asw: ActualState<T> = ActualState::default();
    let mut m = RefModel::default();
    let mut now = Duration::ZERO;
    // Per waiting workload: when the model saw its wait begin (stamped at the next poll), and
    // whether it was reported.
    let mut waits: BTreeMap<u8, (Option<Duration>, bool)> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let before: BTreeSet<u8> = m
            .workloads
            .keys()
            .filter(|w| !m.placed(**w))
            .copied()
            .collect();
        match op.clone() {
            StateOp::AddNode(n) => {
                dsw.add_node(node(n));
                m.nodes.insert(node(n));
            }
            StateOp::RemoveNode(n) => {
                dsw.remove_node(&node(n));
                m.nodes.remove(&node(n));
            }
            StateOp::SetVolume(v, multi) => {
                let spec = if multi {
                    VolumeSpec::multi_node(())
                } else {
                    VolumeSpec::single_node(())
                };
                dsw.set_volume(volume(v), spec);
                m.volumes.insert(volume(v));
            }
            StateOp::UnregisterVolume(v) => {
                dsw.unregister_volume(&volume(v));
                m.volumes.remove(&volume(v));
            }
            StateOp::AddWorkload(w, n, vs) => {
                let (n, vs): (u8, BTreeSet<u8>) =
                    (node(n), vs.iter().take(4).map(|v| volume(*v)).collect());
                let list: Vec<u8> = vs.iter().copied().collect();
                let waits_already = m.workloads.contains_key(&w) && !m.placed(w);
                let expect_ok = m.ready(n, &vs) || waits_already || m.pending() < MAX_PENDING;
                let got = dsw.add_workload(w, n, &list);
                if got.is_ok() != expect_ok {
                    return Err(format!(
                        "step {i} {op:?}: got {got:?}, model ok={expect_ok}"
                    ));
                }
                if expect_ok {
                    m.workloads.insert(w, (n, vs));
                }
            }
            StateOp::RemoveWorkload(w) => {
                dsw.remove_workload(&w);
                m.workloads.remove(&w);
            }
            StateOp::Attached(v, n) => {
                asw.set_attached(&volume(v), &node(n), None);
                m.attachments
                    .insert((volume(v), node(n)), (AttachState::Attached, false));
            }
            StateOp::Uncertain(v, n) => {
                asw.set_uncertain(&volume(v), &node(n));
                let e = m
                    .attachments
                    .entry((volume(v), node(n)))
                    .or_insert((AttachState::Uncertain, false));
                e.0 = AttachState::Uncertain;
            }
            StateOp::Detached(v, n) => {
                // Half the volumes keep their emptied entry, as a registered one does.
                asw.set_detached(&volume(v), &node(n), v % 2 == 0);
                m.attachments.remove(&(volume(v), node(n)));
            }
            StateOp::Withhold(v, n, on) => {
                asw.set_withheld(&volume(v), &node(n), on);
                if let Some(e) = m.attachments.get_mut(&(volume(v), node(n))) {
                    e.1 = on;
                }
            }
            StateOp::PollPending(secs) => {
                now = now.max(Duration::from_secs(u64::from(secs)));
                let mut warned: Vec<u8> = dsw
                    .poll_pending(now)
                    .into_iter()
                    .map(|p| p.workload)
                    .collect();
                warned.sort();
                let mut expected = Vec::new();
                for (w, (since, reported)) in &mut waits {
                    let since = *since.get_or_insert(now);
                    if !*reported && now >= since + warn_after {
                        *reported = true;
                        expected.push(*w);
                    }
                }
                if warned != expected {
                    return Err(format!(
                        "step {i} {op:?}: warned about {warned:?}, model {expected:?}"
                    ));
                }
            }
        }
        // A wait begins when a workload starts to wait, and ends when it is placed or removed;
        // a workload that waits on, whatever it now waits for, is the same wait.
        let after: BTreeSet<u8> = m
            .workloads
            .keys()
            .filter(|w| !m.placed(**w))
            .copied()
            .collect();
        waits.retain(|w, _| after.contains(w));
        for w in after.difference(&before) {
            waits.insert(*w, (None, false));
        }
        compare(i, op, &dsw, &asw, &m, &waits)?;
    }
    Ok(())
}

fn compare(
    i: usize,
    op: &StateOp,
    dsw: &DesiredState<T>,
    asw: &ActualState<T>,
    m: &RefModel,
    waits: &BTreeMap<u8, (Option<Duration>, bool)>,
) -> Result<(), String> {
    let fail = |what: String| Err(format!("after step {i} {op:?}: {what}"));
    let mut pairs: Vec<(u8, u8)> = dsw.volumes_to_attach().map(|(v, n)| (*v, *n)).collect();
    pairs.sort();
    let mut want = Vec::new();
    for v in 0..VOLUMES {
        for n in 0..NODES {
            if m.desired(v, n) {
                want.push((v, n));
            }
            if dsw.is_desired(&v, &n) != m.desired(v, n) {
                return fail(format!("is_desired({v}, {n}) disagrees"));
            }
            let state = m
                .attachments
                .get(&(v, n))
                .map_or(AttachState::Detached, |e| e.0);
            if asw.state(&v, &n) != state {
                return fail(format!(
                    "state({v}, {n}) = {:?}, model {state:?}",
                    asw.state(&v, &n)
                ));
            }
        }
        let wanted: Vec<(u8, Vec<u8>)> = {
            let mut w: Vec<_> = dsw.wanted(&v).map(|(n, ws)| (*n, ws.to_vec())).collect();
            w.sort();
            w
        };
        let model: Vec<(u8, Vec<u8>)> = (0..NODES)
            .map(|n| (n, m.users(v, n)))
            .filter(|(_, ws)| !ws.is_empty())
            .collect();
        if wanted != model {
            return fail(format!("wanted({v}) {wanted:?}, model {model:?}"));
        }
        if dsw.is_registered(&v) != m.volumes.contains(&v) {
            return fail(format!("is_registered({v}) disagrees"));
        }
    }
    if pairs != want {
        return fail(format!("volumes_to_attach {pairs:?}, model {want:?}"));
    }
    if dsw.len() != want.len() {
        return fail(format!("len {} model {}", dsw.len(), want.len()));
    }
    for w in 0..=u8::MAX {
        let placed = dsw.placement(&w).map(|(n, vs)| (*n, vs.to_vec()));
        let model = m
            .workloads
            .get(&w)
            .filter(|_| m.placed(w))
            .map(|(n, vs)| (*n, vs.iter().copied().collect::<Vec<_>>()));
        if placed != model {
            return fail(format!("placement({w}) {placed:?}, model {model:?}"));
        }
        let pending = dsw.pending(&w).map(|p| (p.missing, p.since));
        let model = waits.get(&w).map(|(since, _)| (m.missing(w), *since));
        if pending != model {
            return fail(format!("pending({w}) {pending:?}, model {model:?}"));
        }
    }
    if dsw.pending_len() != m.pending() || dsw.pending_workloads().count() != m.pending() {
        return fail(format!(
            "pending_len {} model {}",
            dsw.pending_len(),
            m.pending()
        ));
    }
    for n in 0..NODES {
        if dsw.has_node(&n) != m.nodes.contains(&n) {
            return fail(format!("has_node({n}) disagrees"));
        }
        let report: Vec<u8> = asw.report(&n).volumes().to_vec();
        let model: Vec<u8> = m
            .attachments
            .iter()
            .filter(|((_, an), (s, withheld))| *an == n && *s == AttachState::Attached && !withheld)
            .map(|((v, _), _)| *v)
            .collect();
        if report != model {
            return fail(format!("report({n}) {report:?}, model {model:?}"));
        }
        let on: Vec<u8> = asw.volumes_on(&n).copied().collect();
        let model_on: Vec<u8> = m
            .attachments
            .keys()
            .filter(|(_, an)| *an == n)
            .map(|(v, _)| *v)
            .collect();
        if on != model_on {
            return fail(format!("volumes_on({n}) {on:?}, model {model_on:?}"));
        }
    }
    if asw.len() != m.attachments.len() {
        return fail(format!(
            "asw len {} model {}",
            asw.len(),
            m.attachments.len()
        ));
    }
    Ok(())
}

/// How a planned operation ends in [`check_planner`].
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Answer {
    /// Success.
    Ok,
    /// Failed, did nothing.
    Transient,
    /// Failed, but took effect.
    Uncertain,
    /// Store: another writer won the race; nothing was written.
    Conflict,
}

/// One input to the planner harness.
#[derive(Arbitrary, Clone, Debug)]
pub enum PlanStep {
    /// Place workload `w` on a node with up to three volumes.
    Schedule(u8, u8, Vec<u8>),
    /// Remove workload `w`.
    Remove(u8),
    /// New node facts: healthy (a crashed agent freezes), fenced (powered off), and whether the
    /// agent reports its pods' volumes in use before mounting or only what it has mounted.
    Facts(u8, bool, bool, bool),
    /// Advance virtual time by this many 10 ms and poll.
    Advance(u8),
    /// Finish the n-th running operation with an outcome.
    Finish(u8, Answer),
    /// The controller restarts: running operations are lost, and a new core starts from the
    /// orchestrator's view (nodes not heard from yet) and recovers from the store and backend.
    Restart,
}

/// The simulated truth the planner harness runs operations against.
#[derive(Default)]
struct Truth {
    attached: BTreeSet<(u8, u8)>,
    stored: BTreeMap<u8, BTreeSet<u8>>,
    mounted: BTreeSet<(u8, u8)>,
    fenced: BTreeSet<u8>,
    down: BTreeSet<u8>,
    in_use_on: BTreeMap<u8, bool>,
    last_in_use: BTreeMap<u8, Vec<u8>>,
    /// Each node's status revision in the store; a node never written is at 0.
    revisions: BTreeMap<u8, u64>,
}

impl Truth {
    /// What a fresh read of node `n` finds in the store: its list, its agent's last in-use
    /// report, its fence and health.
    fn status(&self, n: u8) -> NodeStatus<T> {
        NodeStatus {
            attached: listed(self.stored.get(&n).into_iter().flatten().copied()),
            in_use: self.last_in_use.get(&n).cloned(),
            fenced: Some(self.fenced.contains(&n)),
            healthy: Some(!self.down.contains(&n)),
            revision: Revision::from(self.revisions.get(&n).copied().unwrap_or(0)),
        }
    }

    /// Stores `list` for node `n` at a new revision.
    fn store(&mut self, n: u8, list: &ReportedVolumes<T>) -> Revision {
        self.stored
            .insert(n, list.volumes().iter().copied().collect());
        let revision = self.revisions.entry(n).or_default();
        *revision += 1;
        Revision::from(*revision)
    }

    /// Node agents: report in use what their pods need (or everything mounted), mount what is
    /// attached and listed, unmount what no pod needs. A crashed or fenced agent changes
    /// nothing and reports nothing new.
    fn agents(&mut self, core: &mut Reconciler<T>) {
        for n in 0..NODES {
            if self.fenced.contains(&n) || self.down.contains(&n) {
                let facts = NodeFacts {
                    healthy: false,
                    fenced: self.fenced.contains(&n),
                    in_use: self.last_in_use.get(&n).cloned(),
                    attach_limit: None,
                };
                update(core, n, facts);
                continue;
            }
            let needs: BTreeSet<u8> = (0..8u8)
                .filter_map(|w| core.desired().placement(&w))
                .filter(|(pn, _)| **pn == n)
                .flat_map(|(_, vs)| vs.iter().copied())
                .collect();
            self.mounted.retain(|(v, mn)| *mn != n || needs.contains(v));
            let listed = self.stored.get(&n).cloned().unwrap_or_default();
            for v in &needs {
                if self.attached.contains(&(*v, n)) && listed.contains(v) {
                    self.mounted.insert((*v, n));
                }
            }
            let report = self.in_use_on.get(&n).copied().unwrap_or(true);
            let mounted_here = self
                .mounted
                .iter()
                .filter(|(_, mn)| *mn == n)
                .map(|(v, _)| *v);
            let in_use: Vec<u8> = if report {
                needs.iter().copied().chain(mounted_here).collect()
            } else {
                // Stale or partial report: only what is mounted.
                mounted_here.collect()
            };
            self.last_in_use.insert(n, in_use.clone());
            let facts = NodeFacts {
                healthy: true,
                fenced: false,
                in_use: Some(in_use),
                attach_limit: None,
            };
            update(core, n, facts);
        }
    }
}

/// A node update, which the core never refuses.
fn update(core: &mut Reconciler<T>, node: u8, facts: NodeFacts<u8>) {
    let taken = core.handle(Input::NodeUpdated { node, facts });
    debug_assert!(taken.is_ok(), "{taken:?}");
}

fn spec_of(v: u8) -> VolumeSpec<()> {
    if v < 3 {
        VolumeSpec::single_node(())
    } else {
        VolumeSpec::multi_node(())
    }
}

/// Every workload's placement in `core`: (workload, node, volumes).
fn placements(core: &Reconciler<T>) -> Vec<(u8, u8, Vec<u8>)> {
    (0..8u8)
        .filter_map(|w| {
            core.desired()
                .placement(&w)
                .map(|(n, vs)| (w, *n, vs.to_vec()))
        })
        .collect()
}

/// A core as a controller starts it: every volume, every node (not heard from yet), and the
/// workloads in `placements`.
fn start(config: &Config, placements: &[(u8, u8, Vec<u8>)]) -> Result<Reconciler<T>, String> {
    let mut core: Reconciler<T> = Reconciler::new(config.clone());
    for v in 0..VOLUMES {
        core.handle(Input::SetVolume {
            volume: v,
            spec: spec_of(v),
        })
        .map_err(|e| e.to_string())?;
    }
    for n in 0..NODES {
        update(&mut core, n, NodeFacts::default());
    }
    for (w, n, vs) in placements {
        core.handle(Input::WorkloadScheduled {
            workload: *w,
            node: *n,
            volumes: vs.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(core)
}

/// Drives a [`Reconciler`] with `steps`, runs what it plans against a simulated truth (real
/// attachments, the store's lists, mounts made by node agents that mount only what their
/// status lists), and checks every plan: no single-node volume attached to two nodes (I1), no
/// detach of a volume mounted on an unfenced node (I2), no detach while the store still lists
/// the volume for a live node (C5). Volumes 0..3 are single-node, 3..6 multi-node.
///
/// Then no more faults and no more inputs: every node recovers, every operation succeeds, and
/// within 15 virtual minutes nothing may be left attached that no workload needs, and every
/// workload must have its volumes (no wait without a certain end: a leaked attachment or a
/// stuck workload is a violation). A restart loses the running operations, whose calls still
/// land in the backend after the new core recovered.
pub fn check_planner(steps: &[PlanStep], config: Config) -> Result<(), String> {
    let mut h = Harness::with_world(start(&config, &[])?, Truth::default());
    // The operations under way, with the time each was planned, for `check_load`.
    let mut running: Held<T> = Held::default();
    let single = |v: u8| v < 3;
    for (i, step) in steps.iter().enumerate() {
        match step.clone() {
            PlanStep::Schedule(w, n, vs) => {
                let vs: Vec<u8> = vs.iter().take(3).map(|v| volume(*v)).collect();
                h.handle(Input::WorkloadScheduled {
                    workload: w % 8,
                    node: node(n),
                    volumes: vs,
                })
                .map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Remove(w) => {
                h.handle(Input::WorkloadRemoved { workload: w % 8 })
                    .map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Facts(n, healthy, fence, report) => {
                let n = node(n);
                let truth = &mut h.world;
                if fence {
                    truth.fenced.insert(n);
                    // A fenced node is powered off: nothing is mounted any more.
                    truth.mounted.retain(|(_, mn)| *mn != n);
                } else {
                    truth.fenced.remove(&n);
                }
                if healthy {
                    truth.down.remove(&n);
                } else {
                    truth.down.insert(n);
                }
                truth.in_use_on.insert(n, report);
            }
            PlanStep::Advance(ticks) => {
                let now = h.now + Duration::from_millis(10 * u64::from(ticks));
                for op in h.poll_at(now) {
                    check_plan(&op, &h.world, &h.core, single)
                        .map_err(|e| format!("step {i} at {now:?}: {e}"))?;
                    running.hold(now, op);
                }
                check_load(&running, now, &config)
                    .map_err(|e| format!("step {i} at {now:?}: {e}"))?;
            }
            PlanStep::Finish(k, outcome) => {
                if running.is_empty() {
                    continue;
                }
                let op = running.take(usize::from(k) % running.len());
                finish(&mut h, op, outcome).map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Restart => {
                let lost = running.take_all();
                h.core = start(&config, &placements(&h.core))?;
                // The new core's first pass plans its recovery listings and nothing else.
                // The backend lists what is attached and what is still attaching (the contract
                // of `AttachBackend::list`): the calls the old controller lost are under way.
                let attaching = lost.iter().filter_map(|op| match op {
                    Operation::Attach { volume, node, .. } => Some((*volume, *node)),
                    _ => None,
                });
                let listed: BTreeSet<(u8, u8)> =
                    h.world.attached.iter().copied().chain(attaching).collect();
                let due = h
                    .core
                    .next_deadline()
                    .ok_or("a new core plans its recovery")?;
                // Polled at the deadline the new core asks for; the answers come at `now`.
                for op in h.core.poll(due.max(h.now)) {
                    let id = op.id();
                    let fed = match op {
                        Operation::ListStatuses { .. } => {
                            let truth = &h.world;
                            let statuses = truth
                                .stored
                                .keys()
                                .map(|n| (*n, truth.status(*n)))
                                .collect();
                            h.finish(id, Outcome::ListStatuses(Ok(statuses)))
                        }
                        Operation::ListAttachments { .. } => {
                            let list = listed
                                .iter()
                                .map(|(v, n)| BackendAttachment {
                                    volume: *v,
                                    node: *n,
                                    spec: spec_of(*v),
                                })
                                .collect();
                            h.finish(id, Outcome::List(Ok(list)))
                        }
                        other => {
                            return Err(format!("step {i}: {other:?} planned while recovering"));
                        }
                    };
                    fed.map_err(|e| format!("step {i}: {e}"))?;
                }
                if h.core.is_recovering() {
                    return Err(format!("step {i}: still recovering after both listings"));
                }
                // Then they land in the backend, after the new controller recovered.
                for op in lost {
                    match op {
                        Operation::Attach { volume, node, .. } => {
                            h.world.attached.insert((volume, node));
                        }
                        Operation::Detach { volume, node, .. } => {
                            h.world.attached.remove(&(volume, node));
                        }
                        _ => {}
                    }
                }
            }
        }
        h.world.agents(&mut h.core);
    }
    settle(&mut h, running)
}

/// The attach and detach calls running stay within `Config::backend_load`, each class its own:
/// those planned less than `OverdueCalls::after` before `now` within the limit, all of them
/// within the limit plus `OverdueCalls::max`. Each is held with the time it was planned.
fn check_load(running: &Held<T>, now: Duration, config: &Config) -> Result<(), String> {
    let load = config.backend_load;
    let max = load.overdue.map_or(0, |o| o.max);
    let young = |at: &Duration| {
        let after = load.overdue.map_or(Duration::MAX, |o| o.after);
        now.saturating_sub(*at) < after
    };
    for (kind, limit) in [
        (OpKind::Attach, load.max_attaches),
        (OpKind::Detach, load.max_detaches),
    ] {
        let Some(limit) = limit else { continue };
        let calls = || running.iter().filter(|(_, op)| op.kind() == kind);
        let (count, young) = (calls().count(), calls().filter(|(at, _)| young(at)).count());
        if young > limit {
            return Err(format!(
                "{young} {kind:?} calls running that are not overdue, limit {limit}"
            ));
        }
        if count > limit + max {
            return Err(format!(
                "{count} {kind:?} calls running, limit {limit} and {max} overdue"
            ));
        }
    }
    Ok(())
}

/// No more faults or inputs: every node recovers and every operation succeeds. Fails if an
/// attachment no workload needs is still there after 15 virtual minutes.
fn settle(h: &mut Harness<T, Truth>, mut running: Held<T>) -> Result<(), String> {
    let truth = &mut h.world;
    truth.fenced.clear();
    truth.down.clear();
    truth.in_use_on.clear();
    let end = h.now + Duration::from_secs(15 * 60);
    loop {
        for op in running.take_all() {
            finish(h, op, Answer::Ok)?;
        }
        h.world.agents(&mut h.core);
        let now = match h.core.next_deadline() {
            Some(due) if due <= end => h.now.max(due),
            _ => break,
        };
        // Every operation is finished at once here: none is older than this pass.
        for op in h.poll_at(now) {
            check_plan(&op, &h.world, &h.core, |v| v < 3)
                .map_err(|e| format!("settling at {now:?}: {e}"))?;
            running.hold(now, op);
        }
        check_load(&running, now, h.core.config())
            .map_err(|e| format!("settling at {now:?}: {e}"))?;
    }
    let (core, truth) = (&h.core, &h.world);
    let leaked: Vec<&(u8, u8)> = truth
        .attached
        .iter()
        .filter(|(v, n)| !core.desired().is_desired(v, n))
        .collect();
    // Every workload gets its volumes attached and listed in its node's status, unless another
    // node's workload holds the same single-node volume (Multi-Attach: one of them waits).
    let placements = placements(core);
    for (w, n, vs) in &placements {
        for v in vs {
            let contended = *v < 3
                && placements
                    .iter()
                    .any(|(_, other, ovs)| other != n && ovs.contains(v));
            let listed = truth.stored.get(n).is_some_and(|l| l.contains(v));
            let served = truth.attached.contains(&(*v, *n)) && listed;
            if !(contended || served) {
                return Err(format!(
                    "stuck: workload {w} on {n} waits for volume {v} (attached: {}, listed: {listed}, core: {:?})",
                    truth.attached.contains(&(*v, *n)),
                    core.actual().state(v, n)
                ));
            }
        }
    }
    if leaked.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "leak: {leaked:?} (volume, node) still attached after settling, nothing needs them (core: {:?})",
            leaked
                .iter()
                .map(|(v, n)| core.actual().state(v, n))
                .collect::<Vec<_>>()
        ))
    }
}

fn check_plan(
    op: &Operation<T>,
    truth: &Truth,
    core: &Reconciler<T>,
    single: impl Fn(u8) -> bool,
) -> Result<(), String> {
    match op {
        Operation::Attach { volume, node, .. } => {
            let elsewhere: Vec<_> = truth
                .attached
                .iter()
                .filter(|(v, n)| v == volume && n != node)
                .collect();
            if single(*volume) && !elsewhere.is_empty() {
                return Err(format!(
                    "I1: attach of single-node {volume} to {node} while attached to {elsewhere:?} (core: {:?})",
                    core.actual().attachments(volume)
                ));
            }
        }
        Operation::Detach {
            volume,
            node,
            force,
            ..
        } => {
            if truth.mounted.contains(&(*volume, *node)) && !truth.fenced.contains(node) {
                return Err(format!(
                    "I2: detach of {volume} mounted on unfenced {node} ({force:?})"
                ));
            }
            if truth.stored.get(node).is_some_and(|s| s.contains(volume)) {
                return Err(format!(
                    "C5: detach of {volume} still listed in {node}'s status"
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn finish(h: &mut Harness<T, Truth>, op: Operation<T>, outcome: Answer) -> Result<(), String> {
    let truth = &mut h.world;
    let backend_error = |o: Answer| match o {
        Answer::Uncertain => BackendError::uncertain("model"),
        _ => BackendError::transient("model"),
    };
    let id: OpId = op.id();
    let answer = match op {
        Operation::ListAttachments { .. } => {
            let result = match outcome {
                Answer::Ok => Ok(truth
                    .attached
                    .iter()
                    .map(|(v, n)| BackendAttachment {
                        volume: *v,
                        node: *n,
                        spec: spec_of(*v),
                    })
                    .collect()),
                o => Err(backend_error(o)),
            };
            Outcome::List(result)
        }
        Operation::Attach { volume, node, .. } => {
            if matches!(outcome, Answer::Ok | Answer::Uncertain) {
                truth.attached.insert((volume, node));
            }
            let result = match outcome {
                Answer::Ok => Ok(AttachInfo::default()),
                o => Err(backend_error(o)),
            };
            Outcome::Attach(result)
        }
        Operation::Detach { volume, node, .. } => {
            if matches!(outcome, Answer::Ok | Answer::Uncertain) {
                truth.attached.remove(&(volume, node));
            }
            let result = match outcome {
                Answer::Ok => Ok(()),
                o => Err(backend_error(o)),
            };
            Outcome::Detach(result)
        }
        Operation::CheckMachine { node, .. } => {
            // The model's machines are off exactly while fenced (powered off).
            let state = if truth.fenced.contains(&node) {
                MachineState::Off
            } else {
                MachineState::Running
            };
            let result = match outcome {
                Answer::Ok => Ok(state),
                o => Err(backend_error(o)),
            };
            Outcome::CheckMachine(result)
        }
        Operation::Verify { node, volumes, .. } => {
            let still = volumes
                .into_iter()
                .map(|(v, _)| v)
                .filter(|v| truth.attached.contains(&(*v, node)))
                .collect();
            Outcome::Verify(Ok(still))
        }
        Operation::WriteStatus {
            node,
            attached: list,
            expected,
            ..
        } => {
            let current = truth.status(node).revision;
            let result = match outcome {
                // Compare-and-set, as a store does: a stale revision is a conflict.
                _ if expected != current => Err(StoreError::conflict(current)),
                Answer::Ok => Ok(truth.store(node, &list)),
                Answer::Uncertain => {
                    // The write landed but the answer was lost.
                    truth.store(node, &list);
                    Err(StoreError::uncertain("timeout"))
                }
                Answer::Transient => Err(StoreError::transient("model")),
                // Another writer won the race: the node's revision moved on.
                Answer::Conflict => {
                    let stored = ReportedVolumes::from(truth.status(node).attached);
                    Err(StoreError::conflict(truth.store(node, &stored)))
                }
            };
            Outcome::WriteStatus(result.map(Into::into))
        }
        Operation::ReadStatus { node, .. } => {
            let result = match outcome {
                Answer::Ok | Answer::Conflict => Ok(truth.status(node)),
                _ => Err(StoreError::transient("model")),
            };
            Outcome::ReadStatus(result)
        }
        Operation::ListStatuses { .. } => {
            let result = match outcome {
                Answer::Ok | Answer::Conflict => Ok(truth
                    .stored
                    .keys()
                    .map(|n| (*n, truth.status(*n)))
                    .collect()),
                _ => Err(StoreError::transient("model")),
            };
            Outcome::ListStatuses(result)
        }
    };
    h.finish(id, answer).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state_op() -> impl Strategy<Value = StateOp> {
        let id = 0u8..8;
        prop_oneof![
            id.clone().prop_map(StateOp::AddNode),
            id.clone().prop_map(StateOp::RemoveNode),
            (id.clone(), any::<bool>()).prop_map(|(v, m)| StateOp::SetVolume(v, m)),
            (
                id.clone(),
                id.clone(),
                proptest::collection::vec(0u8..8, 0..4)
            )
                .prop_map(|(w, n, vs)| StateOp::AddWorkload(w, n, vs)),
            id.clone().prop_map(StateOp::RemoveWorkload),
            (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Attached(v, n)),
            (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Uncertain(v, n)),
            (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Detached(v, n)),
            (id.clone(), id.clone(), any::<bool>())
                .prop_map(|(v, n, b)| StateOp::Withhold(v, n, b)),
            id.prop_map(StateOp::UnregisterVolume),
            any::<u8>().prop_map(StateOp::PollPending),
        ]
    }

    fn outcome() -> impl Strategy<Value = Answer> {
        prop_oneof![
            6 => Just(Answer::Ok),
            2 => Just(Answer::Transient),
            2 => Just(Answer::Uncertain),
            1 => Just(Answer::Conflict),
        ]
    }

    fn plan_step() -> impl Strategy<Value = PlanStep> {
        prop_oneof![
            3 => (0u8..8, 0u8..4, proptest::collection::vec(0u8..6, 0..3))
                .prop_map(|(w, n, vs)| PlanStep::Schedule(w, n, vs)),
            2 => (0u8..8).prop_map(PlanStep::Remove),
            1 => (0u8..4, proptest::bool::weighted(0.8), proptest::bool::weighted(0.1), any::<bool>())
                .prop_map(|(n, h, f, r)| PlanStep::Facts(n, h, f, r)),
            5 => (1u8..40).prop_map(PlanStep::Advance),
            6 => (any::<u8>(), outcome()).prop_map(|(k, o)| PlanStep::Finish(k, o)),
            1 => Just(PlanStep::Restart),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

        #[test]
        fn desired_and_actual_state_match_the_reference(ops in proptest::collection::vec(state_op(), 0..80)) {
            prop_assert_eq!(check_state_ops(&ops), Ok(()));
        }

        #[test]
        fn planner_keeps_i1_i2_c5_and_settles(steps in proptest::collection::vec(plan_step(), 0..200)) {
            prop_assert_eq!(check_planner(&steps, Config::default()), Ok(()));
        }

        /// Small backend load limits, a slow bucket, and calls overdue after one to three
        /// seconds: never more calls of a class running younger than that than its limit, nor
        /// more in all than the limit plus the overdue bound, and everything still settles (no
        /// queue stalls with free capacity).
        #[test]
        fn planner_under_backend_load_keeps_its_limits_and_settles(
            steps in proptest::collection::vec(plan_step(), 0..200),
            attaches in 1usize..3,
            detaches in 1usize..3,
            rate in proptest::option::of((1u64..20, 1u32..3)),
            overdue in proptest::option::of((1u64..4, 1usize..3)),
        ) {
            let config = Config {
                backend_load: crate::config::BackendLoad {
                    max_attaches: Some(attaches),
                    max_detaches: Some(detaches),
                    rate: rate.map(|(every, burst)| crate::config::RateLimit {
                        every: Duration::from_millis(100 * every),
                        burst,
                    }),
                    overdue: overdue.map(|(after, max)| crate::config::OverdueCalls {
                        after: Duration::from_secs(after),
                        max,
                    }),
                },
                ..Config::default()
            };
            prop_assert_eq!(check_planner(&steps, config), Ok(()));
        }
    }

    /// The planner property catches a planted bug: with C1, C2, C4 or C5 reverted, some history
    /// breaks I1, C5, or leaves a workload stuck or an attachment leaked after settling.
    /// Searching a fixed number of generated histories shows the property bites.
    #[test]
    fn planner_property_finds_planted_bugs() {
        use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
        for bugs in [
            crate::config::UpstreamBugs {
                c5_detach_before_status_ack: true,
                ..Default::default()
            },
            crate::config::UpstreamBugs {
                c2_ignore_uncertain_holder: true,
                ..Default::default()
            },
            crate::config::UpstreamBugs {
                c1_lose_report_on_failed_detach: true,
                ..Default::default()
            },
            crate::config::UpstreamBugs {
                c4_sticky_assumed_mount: true,
                ..Default::default()
            },
        ] {
            let config = Config {
                upstream_bugs: bugs,
                ..Config::default()
            };
            let mut runner = TestRunner::new_with_rng(
                PtConfig {
                    cases: 2000,
                    failure_persistence: None,
                    ..PtConfig::default()
                },
                TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
            );
            let result = runner.run(&proptest::collection::vec(plan_step(), 0..200), |steps| {
                prop_assert_eq!(check_planner(&steps, config.clone()), Ok(()));
                Ok(())
            });
            assert!(result.is_err(), "planted {bugs:?} was not found");
        }
    }
}
