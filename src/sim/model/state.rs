//! The desired and actual state structures checked against a reference model: any sequence
//! of operations on both must leave them agreeing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arbitrary::Arbitrary;

use super::{NODES, T, VOLUMES, node, volume};
use crate::config::Config;
use crate::core::calls::volume::VolumeSpec;
use crate::core::state::actual::{ActualState, AttachState};
use crate::core::state::desired::{DesiredState, Missing};

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
